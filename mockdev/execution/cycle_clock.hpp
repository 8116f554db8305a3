// SPDX-License-Identifier: Apache-2.0
//
// The ring server's clock: the CPU's cycle counter, scaled to the device
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

namespace spyre::mockdev {

class CycleClock {
public:
    using Clock = std::chrono::steady_clock;

    // At most this long between two kernel-clock readings: bounds how far a
    // scaled reading strays (NTP may slew the kernel clock by 500 ppm: 50 ns).
    static constexpr std::chrono::microseconds kMaxDrift{100};
    // The scale is first measured over this span; the kernel clock serves until then.
    static constexpr std::chrono::milliseconds kFirstScaleSpan{1};

    // use_cycles: false reads the kernel clock every time (no usable counter).
    explicit CycleClock(bool use_cycles = CyclesTrackTheKernelClock()) noexcept : use_cycles_(use_cycles) {}

    // Never earlier than the previous reading of this clock. One thread only.
    Clock::time_point Now() noexcept;
    // Reads the kernel clock and re-anchors the counter to it.
    Clock::time_point Resync() noexcept;

    bool scaled() const noexcept { return ns_per_cycle_ != 0; }  // readings come from the counter

    // x86-64 with the kernel's own clock on the TSC: the counter is invariant
    // and synchronised across CPUs (the kernel checked), so scaling it is sound.
    static bool CyclesTrackTheKernelClock() noexcept;

private:
    Clock::time_point Monotonic(int64_t ns) noexcept;

    // A kernel reading anchors the counter only if the counter readings
    // around it are at most this many times the closest pair seen.
    static constexpr uint64_t kTightPairs = 3;

    const bool use_cycles_;
    uint64_t min_pair_cycles_ = UINT64_MAX;
    uint64_t first_cycles_ = 0;  // the first kernel reading: the scale is measured from it
    int64_t first_ns_ = 0;
    uint64_t anchor_cycles_ = 0;  // the latest kernel reading
    int64_t anchor_ns_ = 0;
    uint64_t max_cycles_ = 0;  // kMaxDrift in cycles
    double ns_per_cycle_ = 0;  // 0 until measured
    int64_t last_ns_ = 0;
};

}  // namespace spyre::mockdev
