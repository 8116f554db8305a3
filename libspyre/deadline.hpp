// SPDX-License-Identifier: Apache-2.0
// The deadline of a timed wait (RunHandle::WaitFor, Orchestrator::WaitAllFor):
// `timeout` from now, saturated, so a timeout too long for the clock
// (nanoseconds::max(): "for good") is time_point::max(), which the waits
// read as no deadline, rather than an overflow into the past. A negative
// timeout is now: the wait looks once.
#pragma once

#include <algorithm>
#include <chrono>

namespace spyre {

inline std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::nanoseconds timeout) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point now = Clock::now();
    if (timeout >= Clock::time_point::max() - now) return Clock::time_point::max();
    return now + std::max(timeout, std::chrono::nanoseconds(0));
}

}  // namespace spyre
