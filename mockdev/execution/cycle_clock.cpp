// SPDX-License-Identifier: Apache-2.0
#include "execution/cycle_clock.hpp"

#include <algorithm>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace spyre::mockdev {

namespace {

uint64_t ReadCycles() noexcept {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return 0;
#endif
}

int64_t SinceEpochNs(CycleClock::Clock::time_point t) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

bool CycleClock::CyclesTrackTheKernelClock() noexcept {
#if defined(__x86_64__)
    try {
        std::ifstream source("/sys/devices/system/clocksource/clocksource0/current_clocksource");
        std::string name;
        return source >> name && name == "tsc";
    } catch (...) {
        return false;
    }
#else
    return false;
#endif
}

CycleClock::Clock::time_point CycleClock::Monotonic(int64_t ns) noexcept {
    last_ns_ = std::max(last_ns_, ns);
    return Clock::time_point(std::chrono::nanoseconds(last_ns_));
}

CycleClock::Clock::time_point CycleClock::Resync() noexcept {
    if (!use_cycles_) return Monotonic(SinceEpochNs(Clock::now()));
    // The kernel reading between two counter readings: a pair stretched by a
    // preemption (a VM's vCPU descheduled) would anchor the counter to a
    // time microseconds off, so it only gives the time.
    const uint64_t before = ReadCycles();
    const int64_t ns = SinceEpochNs(Clock::now());
    const uint64_t pair = ReadCycles() - before;
    min_pair_cycles_ = std::min(min_pair_cycles_, pair);
    if (pair > kTightPairs * min_pair_cycles_) return Monotonic(ns);
    const uint64_t cycles = before + pair / 2;
    if (first_cycles_ == 0) {
        first_cycles_ = cycles;
        first_ns_ = ns;
    } else if (cycles > first_cycles_ && ns - first_ns_ >= std::chrono::nanoseconds(kFirstScaleSpan).count()) {
        // Over the whole span since the first reading: the pairs' own jitter
        // (tens of ns) shrinks against it as it grows.
        ns_per_cycle_ = double(ns - first_ns_) / double(cycles - first_cycles_);
        max_cycles_ = uint64_t(double(std::chrono::nanoseconds(kMaxDrift).count()) / ns_per_cycle_);
    }
    anchor_cycles_ = cycles;
    anchor_ns_ = ns;
    return Monotonic(ns);
}

CycleClock::Clock::time_point CycleClock::Now() noexcept {
    if (ns_per_cycle_ == 0) return Resync();
    // A counter behind the anchor (another CPU's, not in step) wraps the
    // difference to a huge value: it takes the kernel clock too.
    const uint64_t since = ReadCycles() - anchor_cycles_;
    if (since > max_cycles_) return Resync();
    return Monotonic(anchor_ns_ + int64_t(double(since) * ns_per_cycle_));
}

}  // namespace spyre::mockdev
