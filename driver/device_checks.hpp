// SPDX-License-Identifier: Apache-2.0
//
// What the driver accepts from the device, as pure functions of the structs
// and register values it hands over. The device (a daemon we do not trust to
// be bug-free, or a hostile one) publishes region info through an ioctl,
// ring geometry in registers, and completion records in shared memory; the
// driver uses none of it before one of these checks has passed, so a bad
// value becomes a ProtocolError naming the field, never a wild pointer.
// Pure (no I/O, no state) so that tests/fuzz/device_input_fuzz.cpp can drive
// them with arbitrary bytes.
#pragma once

#include <cstdint>
#include <string>

#include "spyre/error.hpp"
#include "spyre/mock/spyre_mock.h"
#include "spyre/uapi/spyre.h"

namespace spyre::driver::checks {

// The device's contract `version` (major << 16 | minor) must have this
// driver's major: a major version changes the queue formats.
void CheckContractVersion(uint32_t version, const ErrorContext& ctx);

// GET_REGION_INFO's answer for region `index` must describe that region.
void CheckRegionInfo(const spyre_region_info& ri, uint32_t index, const ErrorContext& ctx);

// A region the mock lets the driver map: an object's name (relative to
// SPYRE_MOCK_SHM_DIR) and the window of it.
struct MappableRegion {
    std::string shm_name;
    uint64_t shm_offset = 0;
    uint64_t mmap_size = 0;
};

// The mock transport's answer for region `index`, beside the region's info
// `ri`: both must describe that region, the region be mappable (else
// Unsupported), the answer name a shared-memory object ("dir/object": two
// components, neither empty, "." nor "..", NUL-terminated inside the field,
// so the path stays inside SPYRE_MOCK_SHM_DIR) and give a page-aligned,
// non-empty window no larger than the region that does not wrap around.
MappableRegion CheckMockRegion(const spyre_region_info& ri, const spyre_mock_region_shm& shm, uint32_t index,
                               const ErrorContext& ctx);

// A queue's geometry registers (spyre_regs.h), as read: the CB ring's, or
// the ones all task queues share (TQ_*: sq_offset is TQ_OFFSET, where queue
// 0's block starts; cq_offset TQ_CQ_OFFSET, inside a block; cb_size
// TQ_DESC_SIZE). DeviceQueue also keeps here which register holds each.
struct QueueRegisters {
    uint32_t db_offset = 0, sq_offset = 0, cq_offset = 0;
    uint32_t sq_entries = 0, cq_entries = 0;
    uint32_t cb_size = 0, cqe_size = 0;
};
using RingRegisters = QueueRegisters;

// The doorbell page lies page-aligned inside the `bar4_size` bytes mapped.
bool DoorbellOffsetOk(uint32_t db_offset, uint64_t bar4_size) noexcept;
void CheckDoorbellOffset(uint32_t db_offset, uint64_t bar4_size, const ErrorContext& ctx);

// The geometry describes this contract's CB and CQE sizes, power-of-two rings
// with CQ >= SQ, each array aligned and inside the `bar4_size` bytes mapped,
// and no two of doorbell page, SQ and CQ overlapping.
void CheckRingGeometry(const RingRegisters& regs, uint64_t bar4_size, const ErrorContext& ctx);

// The task queue geometry registers (spyre_regs.h, TQ_*), as read: what
// every queue shares, how many queues and how far apart their blocks lie.
struct TaskRegisters {
    QueueRegisters rings;
    uint32_t queues = 0, stride = 0;
};

// This contract's CB and CQE sizes (a task queue's entries), at most
// SPYRE_TQ_MAX_QUEUES queues, power-of-two rings, the task doorbell page and
// every queue's block (SQ, then CQ inside the stride) aligned, inside the
// `bar4_size` bytes mapped and disjoint.
void CheckTaskGeometry(const TaskRegisters& regs, uint64_t bar4_size, const ErrorContext& ctx);

// Completion `cq_pos` must be for the oldest CB in flight, which starts at
// ring position `oldest_sq_pos` (completions come in ring order).
void CheckCompletion(const spyre_cqe& cqe, uint32_t cq_pos, uint32_t oldest_sq_pos, const ErrorContext& ctx);

}  // namespace spyre::driver::checks
