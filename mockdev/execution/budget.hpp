// SPDX-License-Identifier: Apache-2.0
//
// How long one CB or task may still run. The watchdog gives each a deadline
// (WATCHDOG_MS after it starts running) and the server may ask a running one
// to stop (function reset, shutdown). Kernels ask Check() between chunks of
// work, so nothing can keep the device past its bound or block a reset.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>

#include "spyre/uapi/spyre_errors.h"

namespace spyre::mockdev {

class Budget {
public:
    using Clock = std::chrono::steady_clock;

    // `bound` from `start` on, or sooner if `aborted` says so.
    Budget(Clock::time_point start, Clock::duration bound, std::function<bool()> aborted = {})
        : deadline_(start + bound), bound_(bound), aborted_(std::move(aborted)) {}

    // SPYRE_ERR_NONE while the CB may go on, else why it must stop:
    // SPYRE_ERR_ABORTED (the server asked) or SPYRE_ERR_WATCHDOG.
    uint16_t Check() const {
        if (aborted_ && aborted_()) return SPYRE_ERR_ABORTED;
        return Clock::now() >= deadline_ ? SPYRE_ERR_WATCHDOG : SPYRE_ERR_NONE;
    }

    Clock::time_point deadline() const { return deadline_; }

    // The same budget ending no later than `deadline` (SEM_WAIT's own timeout).
    Budget Until(Clock::time_point deadline) const {
        Budget b = *this;
        b.deadline_ = std::min(deadline_, deadline);
        return b;
    }
    // The same bound counted from `start`: a LAUNCH's watchdog runs from when
    // it has the cores, not from when it asked for them.
    Budget From(Clock::time_point start) const { return Budget(start, bound_, aborted_); }
    // Only the abort, no deadline: a LAUNCH waiting for the cores, a wait
    // that arbitration bounds (card_cores.hpp).
    Budget AbortOnly() const {
        Budget b = *this;
        b.deadline_ = Clock::time_point::max();
        return b;
    }

private:
    Clock::time_point deadline_;
    Clock::duration bound_;
    std::function<bool()> aborted_;
};

}  // namespace spyre::mockdev
