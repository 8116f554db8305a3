/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spyre hardware contract: device error codes.
 *
 * Reported in spyre_cqe.status and latched in SPYRE_REG_ERR_CODE.
 */
#ifndef SPYRE_UAPI_SPYRE_ERRORS_H
#define SPYRE_UAPI_SPYRE_ERRORS_H

#include <stdint.h>

#define SPYRE_ERR_NONE              0x00u
#define SPYRE_ERR_INVALID_OPCODE    0x01u /* opcode unknown to the contract */
#define SPYRE_ERR_UNSUPPORTED       0x02u /* opcode known, not executed by this device */
#define SPYRE_ERR_RESERVED_NONZERO  0x03u /* a reserved field or flag is set */
#define SPYRE_ERR_BAD_SLOT_COUNT    0x04u /* slots is 0, too large, or wrong for the opcode */
#define SPYRE_ERR_ADDR_RANGE        0x05u /* an address lies outside the function's memory */
#define SPYRE_ERR_MISALIGNED        0x06u /* an address or size breaks an alignment rule */
#define SPYRE_ERR_RING_OVERFLOW     0x07u /* sq_tail ran more than SQ_ENTRIES ahead of sq_head */
#define SPYRE_ERR_WRONG_QUEUE       0x08u /* 3.0: opcode of the other queue kind (TASK on the ring, not TASK/NOP on a task queue) */
#define SPYRE_ERR_BAD_DEPENDENCY    0x09u /* 3.1: a task's after list is too long or names no earlier task of its queue */
#define SPYRE_ERR_PROGRAM_MAGIC     0x10u /* program binary: bad magic */
#define SPYRE_ERR_PROGRAM_VERSION   0x11u
#define SPYRE_ERR_PROGRAM_CHECKSUM  0x12u
#define SPYRE_ERR_PROGRAM_FORMAT    0x13u /* truncated or inconsistent program */
#define SPYRE_ERR_UNKNOWN_OP        0x14u /* program contains an unknown op */
#define SPYRE_ERR_SHAPE             0x15u /* shape overflow or mismatch */
#define SPYRE_ERR_RELOCATION        0x16u /* bad relocation slot */
#define SPYRE_ERR_OVERLAP           0x17u /* 3.2: an op's output overlaps an input it reads other elements of */
#define SPYRE_ERR_WATCHDOG          0x20u /* the CB ran past the watchdog bound */
#define SPYRE_ERR_ABORTED           0x21u /* the CB was dropped by a function reset */
#define SPYRE_ERR_CANCELED          0x22u /* not executed: the previous CB carried LINK and failed */
#define SPYRE_ERR_DEPENDENCY_FAILED 0x23u /* 3.1: not executed: a task it waited for (after) did not succeed */
#define SPYRE_ERR_INTERNAL          0x3Fu /* device model fault; the device keeps running */

#ifdef __cplusplus
/* Name of a device error code, for messages and register dumps. */
inline const char* spyre_error_name(uint32_t code) noexcept {
    switch (code) {
    case SPYRE_ERR_NONE: return "NONE";
    case SPYRE_ERR_INVALID_OPCODE: return "INVALID_OPCODE";
    case SPYRE_ERR_UNSUPPORTED: return "UNSUPPORTED";
    case SPYRE_ERR_RESERVED_NONZERO: return "RESERVED_NONZERO";
    case SPYRE_ERR_BAD_SLOT_COUNT: return "BAD_SLOT_COUNT";
    case SPYRE_ERR_ADDR_RANGE: return "ADDR_RANGE";
    case SPYRE_ERR_MISALIGNED: return "MISALIGNED";
    case SPYRE_ERR_RING_OVERFLOW: return "RING_OVERFLOW";
    case SPYRE_ERR_WRONG_QUEUE: return "WRONG_QUEUE";
    case SPYRE_ERR_BAD_DEPENDENCY: return "BAD_DEPENDENCY";
    case SPYRE_ERR_PROGRAM_MAGIC: return "PROGRAM_MAGIC";
    case SPYRE_ERR_PROGRAM_VERSION: return "PROGRAM_VERSION";
    case SPYRE_ERR_PROGRAM_CHECKSUM: return "PROGRAM_CHECKSUM";
    case SPYRE_ERR_PROGRAM_FORMAT: return "PROGRAM_FORMAT";
    case SPYRE_ERR_UNKNOWN_OP: return "UNKNOWN_OP";
    case SPYRE_ERR_SHAPE: return "SHAPE";
    case SPYRE_ERR_RELOCATION: return "RELOCATION";
    case SPYRE_ERR_OVERLAP: return "OVERLAP";
    case SPYRE_ERR_WATCHDOG: return "WATCHDOG";
    case SPYRE_ERR_ABORTED: return "ABORTED";
    case SPYRE_ERR_CANCELED: return "CANCELED";
    case SPYRE_ERR_DEPENDENCY_FAILED: return "DEPENDENCY_FAILED";
    case SPYRE_ERR_INTERNAL: return "INTERNAL";
    default: return "UNKNOWN";
    }
}
#endif

#endif /* SPYRE_UAPI_SPYRE_ERRORS_H */
