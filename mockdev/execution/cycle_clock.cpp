// SPDX-License-Identifier: Apache-2.0
#include "execution/cycle_clock.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace spyre::mockdev {

namespace {

int64_t SinceEpochNs(CycleClock::Clock::time_point t) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

uint64_t CycleClock::CpuCycles() noexcept {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return 0;
#endif
}

bool CycleClock::CountersAreSound(std::string_view clock_source, std::string_view cpu_flags) noexcept {
    if (clock_source == "tsc") return true;
    if (clock_source != "kvm-clock") return false;
    auto has = [&](std::string_view flag) {
        for (size_t at = 0; (at = cpu_flags.find(flag, at)) != std::string_view::npos; at += flag.size()) {
            const bool starts = at == 0 || cpu_flags[at - 1] == ' ';
            const size_t end = at + flag.size();
            if (starts && (end == cpu_flags.size() || cpu_flags[end] == ' ' || cpu_flags[end] == '\n')) return true;
        }
        return false;
    };
    return has("constant_tsc") && has("nonstop_tsc");
}

bool CycleClock::CyclesTrackTheKernelClock() noexcept {
#if defined(__x86_64__)
    try {
        std::ifstream source("/sys/devices/system/clocksource/clocksource0/current_clocksource");
        std::string name;
        if (!(source >> name)) return false;
        std::ifstream cpuinfo("/proc/cpuinfo");
        std::string line;
        while (std::getline(cpuinfo, line))
            if (line.rfind("flags", 0) == 0) {
                const size_t colon = line.find(':');
                return CountersAreSound(name, colon == std::string::npos ? "" : std::string_view(line).substr(colon + 1));
            }
        return CountersAreSound(name, "");
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
    const uint64_t before = counter_();
    const int64_t ns = SinceEpochNs(Clock::now());
    const uint64_t pair = counter_() - before;
    min_pair_cycles_ = std::min(min_pair_cycles_, pair);
    // The first pairs only tell how close a pair can be: a process's first
    // clock reads are slow (page faults), and the first anchor is the base
    // of the scale.
    if (pairs_seen_ < kWarmUpPairs) {
        ++pairs_seen_;
        return Monotonic(ns);
    }
    if (pair > kTightPairs * min_pair_cycles_) return Monotonic(ns);
    const uint64_t cycles = before + pair / 2;
    if (scaled() && ns - anchor_ns_ <= std::chrono::nanoseconds(kCheckSpan).count()) {
        // What the counter says against what the kernel says: counters out of
        // step across CPUs (the thread moved) or a changed rate show here.
        // After kMaxMisses such misses the kernel clock serves for good.
        const auto predicted = anchor_ns_ + int64_t(double(int64_t(cycles - anchor_cycles_)) * ns_per_cycle_);
        if (std::abs(predicted - ns) > std::chrono::nanoseconds(kMaxError).count() && ++misses_ >= kMaxMisses) {
            use_cycles_ = false;
            ns_per_cycle_ = 0;
            return Monotonic(ns);
        }
    }
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
    const uint64_t since = counter_() - anchor_cycles_;
    if (since > max_cycles_) return Resync();
    return Monotonic(anchor_ns_ + int64_t(double(since) * ns_per_cycle_));
}

}  // namespace spyre::mockdev
