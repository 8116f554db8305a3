// SPDX-License-Identifier: Apache-2.0
//
// The field checks of one CB, made before it runs, by whichever queue took
// it: the CB ring's executor and the task queues refuse a CB for the same
// reasons in the same order (spyre_cb.h, spyre_task.h). What the CB points
// at (programs, buffers) is checked by the executor of its opcode.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>

#include "spyre/uapi/spyre_cb.h"
#include "spyre/uapi/spyre_errors.h"

namespace spyre::mockdev {

// The kind of queue a CB was taken from.
enum class CbQueue { Ring, Task };

inline bool IsContractOpcode(uint8_t op) {
    switch (op) {
    case SPYRE_OP_NOP:
    case SPYRE_OP_LAUNCH:
    case SPYRE_OP_CORRECT:
    case SPYRE_OP_COPY:
    case SPYRE_OP_COPY_INLINE:
    case SPYRE_OP_SEM_WRITE:
    case SPYRE_OP_SEM_WAIT:
    case SPYRE_OP_TASK: return true;
    default: return false;
    }
}

// A task queue runs TASK and NOP; the ring everything but TASK.
inline bool OpcodeFitsQueue(uint8_t op, CbQueue queue) {
    return queue == CbQueue::Task ? op == SPYRE_OP_TASK || op == SPYRE_OP_NOP : op != SPYRE_OP_TASK;
}

// Payload words from `first` on are reserved for this opcode.
inline bool ReservedArgsZero(const spyre_cb& cb, size_t first) {
    return std::all_of(std::begin(cb.u.args) + first, std::end(cb.u.args), [](uint64_t a) { return a == 0; });
}

// Header checks common to every opcode, in contract order: a known opcode,
// one this queue runs, reserved flags and stream, then the slot count.
// `payload_bytes` is what the queue framed after the CB: a task queue frames
// none (one slot per CB), so there slots must be 1. Only COPY_INLINE carries
// a payload; its slot count follows from its size. Flags on a task queue:
// none defined (LINK and ring streams order a ring).
inline uint16_t ValidateCbHeader(const spyre_cb& cb, size_t payload_bytes, CbQueue queue) {
    if (!IsContractOpcode(cb.opcode)) return SPYRE_ERR_INVALID_OPCODE;
    if (!OpcodeFitsQueue(cb.opcode, queue)) return SPYRE_ERR_WRONG_QUEUE;
    const uint32_t defined = queue == CbQueue::Ring ? SPYRE_CB_F_DEFINED : 0u;
    if ((cb.flags & ~defined) != 0) return SPYRE_ERR_RESERVED_NONZERO;
    // A ring stream number only with F_STREAM, and RESTART only beside it.
    if ((cb.flags & SPYRE_CB_F_STREAM) ? cb.stream >= SPYRE_RING_STREAMS
                                       : (cb.stream != 0 || (cb.flags & SPYRE_CB_F_STREAM_RESTART) != 0))
        return SPYRE_ERR_RESERVED_NONZERO;
    if (cb.slots == 0 || cb.slots > SPYRE_CB_MAX_SLOTS ||
        payload_bytes != size_t(cb.slots - 1) * SPYRE_CB_SLOT_BYTES)
        return SPYRE_ERR_BAD_SLOT_COUNT;
    if (cb.opcode != SPYRE_OP_COPY_INLINE) return cb.slots == 1 ? SPYRE_ERR_NONE : SPYRE_ERR_BAD_SLOT_COUNT;
    const uint64_t size = cb.u.copy.size;
    if (size == 0 || size > SPYRE_CB_INLINE_MAX_BYTES || cb.slots != SPYRE_CB_INLINE_SLOTS(size))
        return SPYRE_ERR_BAD_SLOT_COUNT;
    return SPYRE_ERR_NONE;
}

}  // namespace spyre::mockdev
