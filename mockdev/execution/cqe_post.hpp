// SPDX-License-Identifier: Apache-2.0
//
// Posting one completion record, as every queue of the device does
// (spyre_cb.h, "CQE phase"): the record's first 31 bytes, then its phase byte
// with a release store, so a driver that sees this lap's phase at its
// cq_head may read the rest. The caller publishes cq_tail afterwards.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "execution/host_link.hpp"
#include "spyre/uapi/spyre_cb.h"
#include "spyre/uapi/spyre_regs.h"

namespace spyre::mockdev {

// Writes `cqe` (its phase field ignored) into the slot of position `cq_pos`
// of the CQ at `cq` (`entries` slots, a power of two, `stride` bytes apart).
inline void PostCqe(uint8_t* cq, uint32_t entries, uint32_t stride, uint32_t cq_pos, const spyre_cqe& cqe,
                    HostLink& host_link) {
    uint8_t* slot = cq + size_t(spyre_ring_slot(cq_pos, entries)) * stride;
    std::memcpy(slot, &cqe, SPYRE_CQE_PHASE_OFFSET);
    host_link.Published();
    std::atomic_ref<uint8_t>(slot[SPYRE_CQE_PHASE_OFFSET]).store(spyre_cqe_phase(cq_pos, entries),
                                                                 std::memory_order_release);
}

}  // namespace spyre::mockdev
