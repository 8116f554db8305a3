// SPDX-License-Identifier: Apache-2.0
// The one spin of a waiter above the driver (the stream scheduler's caller,
// a task port's waiter, a host-level pool thread out of jobs): look at
// `ready`, pausing the CPU between looks for a while, then yielding it
// between looks for a while more, then give up (the caller sleeps). The
// driver's own queue wait (driver/completion_wait.hpp) interleaves the same
// spin with health checks and the interrupt.
//
// The clock is read once per kSpinsPerClockRead pauses, the first time after
// that many (a read costs as much as several looks, and most waits end
// sooner): both phases count from that first read. While yielding, every
// look reads it (a yield is a system call, dearer than a read).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>

#include "spyre/common/futex.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

struct SpinLimits {
    static constexpr std::chrono::nanoseconds kForever = std::chrono::nanoseconds::max();
    std::chrono::nanoseconds pause = kForever;  // pausing between looks this long (kForever: until ready; 0: none)
    std::chrono::nanoseconds yield{0};          // then yielding between looks this much longer
    uint32_t pauses_per_look = 1;               // a look that costs more (shared memory) is made less often
};

struct SpinOutcome {
    bool ready = false;   // false: the limits ran out first
    uint64_t yields = 0;  // yields made (the callers' wait counters)
};

template <typename Ready>
SpinOutcome SpinFor(Ready&& ready, const SpinLimits& limits) {
    using Clock = std::chrono::steady_clock;
    if (ready()) return {true, 0};
    Clock::time_point yield_end;
    if (limits.pause.count() == 0) {
        yield_end = Clock::now() + limits.yield;
    } else {
        const uint32_t per_look = std::max<uint32_t>(limits.pauses_per_look, 1);
        const uint32_t looks_per_read = std::max<uint32_t>(kSpinsPerClockRead / per_look, 1);
        std::optional<Clock::time_point> pause_end;
        for (uint32_t looks = 1;; ++looks) {
            for (uint32_t i = 0; i < per_look; ++i) CpuRelax();
            if (ready()) return {true, 0};
            if (limits.pause == SpinLimits::kForever || looks % looks_per_read != 0) continue;
            const Clock::time_point now = Clock::now();
            if (!pause_end) {
                pause_end = now + limits.pause;
            } else if (now >= *pause_end) {
                yield_end = *pause_end + limits.yield;
                break;
            }
        }
    }
    SpinOutcome out;
    while (limits.yield.count() > 0 && Clock::now() < yield_end) {
        std::this_thread::yield();
        ++out.yields;
        if (ready()) {
            out.ready = true;
            return out;
        }
    }
    return out;
}

}  // namespace spyre
SPYRE_API_END
