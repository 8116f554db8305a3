// SPDX-License-Identifier: Apache-2.0
// Internal: which stream's turn comes next (SchedulerPolicy). Pure
// bookkeeping over StreamState, no device: tests drive it directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "spyre/stream/scheduler.hpp"
#include "stream/stream_state.hpp"

namespace spyre::detail {

class TurnPolicy {
public:
    TurnPolicy(SchedulerPolicy policy, uint32_t quantum, uint32_t aging_turns)
        : policy_(policy), quantum_(quantum), aging_(aging_turns ? aging_turns : 1) {}

    // The order in which the streams get a turn this round. RoundRobin: a
    // rotation that starts one stream later each round. Priority: by
    // priority minus aging (skipped_turns / aging_turns), ties in rotation
    // order. DrainOneFirst: the stream being drained first, then the rest
    // in rotation from the one after it; a drained stream is followed by
    // the next stream with work after it, so every stream with work
    // becomes current in turn.
    // Valid until the next call; a lone stream's order is `active` itself.
    std::span<StreamState* const> Order(std::span<StreamState* const> active);
    // Ring CBs the stream may take this turn (the drained stream: no limit).
    size_t Quantum(const StreamState* s) const;
    // After a turn: a ready stream passed over ages by one turn (Priority).
    static void EndTurn(StreamState& s, bool took) { s.skipped_turns = took ? 0 : s.skipped_turns + 1; }
    // The stream leaves the scheduler.
    void Forget(const StreamState* s) {
        if (drain_current_ == s) drain_current_ = nullptr;
    }
    // Priority after aging (lower runs first).
    int64_t EffectivePriority(const StreamState& s) const {
        return int64_t(s.priority) - int64_t(s.skipped_turns / aging_);
    }

private:
    const SchedulerPolicy policy_;
    const uint32_t quantum_;
    const uint32_t aging_;
    size_t cursor_ = 0;
    StreamState* drain_current_ = nullptr;
    std::vector<StreamState*> order_;
};

}  // namespace spyre::detail
