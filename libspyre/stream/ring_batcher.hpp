// SPDX-License-Identifier: Apache-2.0
// Internal: ring batching. Takes a stream's turn off the head of its queue
// as ring CBs: consecutive ready ops under one doorbell, LINKed so a failure
// cancels the rest of the turn on the device; a group (a chain of linked
// ops) never split unless it is larger than the whole budget, and then no
// other stream's CBs go between its parts (split()). No device: tests look
// at the CBs it builds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "spyre/uapi/spyre_cb.h"
#include "stream/completion.hpp"
#include "stream/stream_state.hpp"

namespace spyre::detail {

class RingBatcher {
public:
    // `inline_max`: the largest copy carried in the ring (0: none).
    explicit RingBatcher(size_t inline_max) : inline_max_(inline_max) {}

    // What the ring can still take in this batch.
    struct Budget {
        size_t cbs;    // CBs (max_ring_inflight minus those in flight)
        size_t slots;  // ring slots (a CB plus an inline copy's payload)
        bool ring_idle;  // nothing in flight: an oversize chain may be split
        uint64_t trace_ns = 0;  // while a trace records: when this batch goes down (0 otherwise)
    };

    // Ring work, or an event op ordered with it (settled on the host once the
    // stream's ring work before it is done); not the thread's host work.
    bool IsRingOp(const QueuedOp& op) const;
    // The stream's head is a ring op that may go now.
    bool Ready(const StreamState& s) const;
    static size_t SlotsFor(const QueuedOp& op);

    // Appends up to `quantum` CBs of `s` to `batch` (its records to
    // `records`), in the stream's ring stream, ending early at a chain that
    // does not fit or an op not ready. Returns the CBs taken.
    size_t TakeTurn(StreamState& s, size_t quantum, Budget& budget, std::vector<spyre_cb>& batch,
                    RingRecords& records);

    uint64_t inline_copies() const { return inline_copies_; }

    // The stream whose chain went down in part (larger than the budget):
    // until its rest follows, no other stream's CBs may go between, or they
    // would run inside its group (e.g. overwrite a correction table the
    // group's launch reads). Null when no chain is split.
    const StreamState* split() const { return split_; }
    // Forgets a split chain whose stream will not go on with it (faulted, gone).
    void ForgetSplit() { split_ = nullptr; }

private:
    size_t ChainSlots(const StreamState& s, size_t* cbs) const;
    void Append(StreamState& s, std::vector<spyre_cb>& batch, RingRecords& records, uint64_t trace_ns);

    const size_t inline_max_;
    uint64_t next_user_data_ = 1;
    uint64_t inline_copies_ = 0;
    const StreamState* split_ = nullptr;
};

}  // namespace spyre::detail
