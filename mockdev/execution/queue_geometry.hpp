// SPDX-License-Identifier: Apache-2.0
//
// Where a function's queues live in BAR4: the geometry the device publishes
// in its registers for the CB ring (spyre_regs.h) and the task queues
// (spyre_task.h), and each queue's place as a QueuePair sees it.
#pragma once

#include <cstdint>

#include "execution/queue_pair.hpp"
#include "spyre/uapi/spyre_cb.h"
#include "spyre/uapi/spyre_regs.h"
#include "spyre/uapi/spyre_task.h"

namespace spyre::mockdev {

// Ring layout inside BAR4, published in the geometry registers.
struct RingGeometry {
    uint32_t db_offset = SPYRE_DEFAULT_DB_OFFSET;
    uint32_t sq_offset = SPYRE_DEFAULT_SQ_OFFSET;
    uint32_t sq_entries = SPYRE_DEFAULT_SQ_ENTRIES;
    uint32_t cb_size = sizeof(spyre_cb);
    uint32_t cq_offset = SPYRE_DEFAULT_CQ_OFFSET;
    uint32_t cq_entries = SPYRE_DEFAULT_CQ_ENTRIES;
    uint32_t cqe_size = sizeof(spyre_cqe);
};

// Task queue layout inside BAR4, published in the TQ_* registers.
struct TaskGeometry {
    uint32_t db_offset = SPYRE_DEFAULT_TQ_DB_OFFSET;
    uint32_t offset = SPYRE_DEFAULT_TQ_OFFSET;
    uint32_t stride = SPYRE_DEFAULT_TQ_STRIDE;
    uint32_t sq_entries = SPYRE_DEFAULT_TQ_SQ_ENTRIES;
    uint32_t desc_size = sizeof(spyre_cb);
    uint32_t cq_offset = SPYRE_DEFAULT_TQ_CQ_OFFSET;
    uint32_t cq_entries = SPYRE_DEFAULT_TQ_CQ_ENTRIES;
    uint32_t cqe_size = sizeof(spyre_cqe);
};

// The CB ring as a queue pair.
inline QueueLayout RingLayout(const RingGeometry& g) {
    return QueueLayout{g.db_offset + SPYRE_DB_SQ_TAIL, g.db_offset + SPYRE_DB_CQ_HEAD, g.db_offset + SPYRE_DB_SQ_HEAD,
                       g.db_offset + SPYRE_DB_CQ_TAIL, g.sq_offset, g.sq_entries, g.cb_size, g.cq_offset,
                       g.cq_entries, g.cqe_size};
}

// Task queue `q` as a queue pair.
inline QueueLayout TaskLayout(const TaskGeometry& g, uint32_t q) {
    const uint64_t block = g.offset + uint64_t(q) * g.stride;
    return QueueLayout{g.db_offset + SPYRE_TDB_SQ_TAIL(q), g.db_offset + SPYRE_TDB_CQ_HEAD(q),
                       g.db_offset + SPYRE_TDB_SQ_HEAD(q), g.db_offset + SPYRE_TDB_CQ_TAIL(q), block, g.sq_entries,
                       g.desc_size, block + g.cq_offset, g.cq_entries, g.cqe_size};
}

}  // namespace spyre::mockdev
