// SPDX-License-Identifier: Apache-2.0
//
// A queue lane's clock: the CPU's cycle counter, scaled to the device
// clock (CLOCK_MONOTONIC, spyre/common/device_clock.hpp) and kept on it.
// A NOP reads the clock twice on its way to the completion (batch start, CB
// completion); clock_gettime costs about 33 ns in this project's VMs and
// rdtsc 13. The kernel clock stays the reference: a reading more than
// kMaxDrift after the last kernel reading is a kernel reading (Resync),
// which re-anchors the counter to it, and the scale is measured between
// kernel readings, never assumed.
#pragma once

#include <chrono>
#include <cstdint>
#include <climits>
#include <string_view>

namespace spyre::mockdev {

class CycleClock {
public:
    using Clock = std::chrono::steady_clock;

    // At most this long between two kernel-clock readings: bounds how far a
    // scaled reading strays (NTP may slew the kernel clock by 500 ppm: 50 ns).
    static constexpr std::chrono::microseconds kMaxDrift{100};
    // The scale is first measured over this span; the kernel clock serves until then.
    static constexpr std::chrono::milliseconds kFirstScaleSpan{1};
    // A kernel reading at most kCheckSpan after the anchor that the scaled
    // counter misses by more than kMaxError is a miss; kMaxMisses of them turn
    // the counter off for good. Within 1 ms the scale's own error is tens of
    // ns and an NTP slew of the kernel clock (at most 500 ppm) 0.5 us.
    static constexpr std::chrono::milliseconds kCheckSpan{1};
    static constexpr std::chrono::microseconds kMaxError{1};
    static constexpr uint32_t kMaxMisses = 3;

    // Where the counter comes from: the CPU's (rdtsc); tests give their own.
    using CounterFn = uint64_t (*)() noexcept;
    static uint64_t CpuCycles() noexcept;

    // use_cycles: false reads the kernel clock every time (no usable counter).
    explicit CycleClock(bool use_cycles = CyclesTrackTheKernelClock(), CounterFn counter = CpuCycles) noexcept
        : use_cycles_(use_cycles), counter_(counter) {}

    // Never earlier than the previous reading of this clock. One thread only.
    Clock::time_point Now() noexcept;
    // Reads the kernel clock and re-anchors the counter to it.
    Clock::time_point Resync() noexcept;

    bool scaled() const noexcept { return ns_per_cycle_ != 0; }  // readings come from the counter
    bool counter_trusted() const noexcept { return use_cycles_; }  // false once a check failed

    // x86-64 whose kernel clock runs on the TSC: scaling the counter is sound
    // (CountersAreSound with this machine's clock source and CPU flags).
    static bool CyclesTrackTheKernelClock() noexcept;
    // The kernel's clock source is the TSC itself (the kernel checked that it
    // is invariant and in step across CPUs), or kvm-clock, the hypervisor's
    // scaling of the TSC, on a CPU whose TSC is invariant (constant_tsc and
    // nonstop_tsc among `cpu_flags`, /proc/cpuinfo's list): kvm-clock is read
    // in user space only while the host keeps the vCPUs' counters in step,
    // and readings more than kMaxDrift apart still go to the kernel.
    static bool CountersAreSound(std::string_view clock_source, std::string_view cpu_flags) noexcept;

private:
    Clock::time_point Monotonic(int64_t ns) noexcept;

    // A kernel reading anchors the counter only if the counter readings
    // around it are at most this many times the closest pair seen, and only
    // after this many pairs have been seen.
    static constexpr uint64_t kTightPairs = 3;
    static constexpr uint32_t kWarmUpPairs = 16;

    bool use_cycles_;
    const CounterFn counter_;
    uint64_t min_pair_cycles_ = UINT64_MAX;
    uint32_t pairs_seen_ = 0;
    uint32_t misses_ = 0;
    uint64_t first_cycles_ = 0;  // the first kernel reading: the scale is measured from it
    int64_t first_ns_ = 0;
    uint64_t anchor_cycles_ = 0;  // the latest kernel reading
    int64_t anchor_ns_ = 0;
    uint64_t max_cycles_ = 0;  // kMaxDrift in cycles
    double ns_per_cycle_ = 0;  // 0 until measured
    int64_t last_ns_ = 0;
};

}  // namespace spyre::mockdev
