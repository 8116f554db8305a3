// SPDX-License-Identifier: Apache-2.0
//
// How long one CB may still run. The watchdog gives every CB a deadline
// (WATCHDOG_MS after it starts) and the server may ask a running CB to stop
// (function reset, shutdown). Kernels ask Check() between chunks of work, so
// no CB can keep the device past its bound or block a reset.
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

    explicit Budget(Clock::time_point deadline, std::function<bool()> aborted = {})
        : deadline_(deadline), aborted_(std::move(aborted)) {}

    // SPYRE_ERR_NONE while the CB may go on, else why it must stop:
    // SPYRE_ERR_ABORTED (the server asked) or SPYRE_ERR_WATCHDOG.
    uint16_t Check() const {
        if (aborted_ && aborted_()) return SPYRE_ERR_ABORTED;
        return Clock::now() >= deadline_ ? SPYRE_ERR_WATCHDOG : SPYRE_ERR_NONE;
    }

    Clock::time_point deadline() const { return deadline_; }

    // The same budget ending no later than `deadline` (SEM_WAIT's own timeout).
    Budget Until(Clock::time_point deadline) const { return Budget(std::min(deadline_, deadline), aborted_); }

private:
    Clock::time_point deadline_;
    std::function<bool()> aborted_;
};

}  // namespace spyre::mockdev
