// SPDX-License-Identifier: Apache-2.0
// The ring server's cycle clock (execution/cycle_clock.hpp): scaled readings
// stay on the kernel's CLOCK_MONOTONIC and never go backwards.
#include <gtest/gtest.h>

#include <chrono>

#include "execution/cycle_clock.hpp"

using spyre::mockdev::CycleClock;
using Clock = CycleClock::Clock;
using namespace std::chrono_literals;

namespace {

// Reads until the scale has been measured (CycleClock::kFirstScaleSpan), or
// 50 ms have passed without it.
void WarmUp(CycleClock& clock) {
    const auto give_up = Clock::now() + 50ms;
    while (!clock.scaled() && Clock::now() < give_up) clock.Now();
}

}  // namespace

TEST(CycleClock, ScalesTheCounterOnlyWhereTheKernelClockRunsOnIt) {
    CycleClock clock;
    WarmUp(clock);
    EXPECT_EQ(clock.scaled(), CycleClock::CyclesTrackTheKernelClock());
}

TEST(CycleClock, ReadingsStayWithinHalfAMicrosecondOfTheKernelClock) {
    CycleClock clock;
    WarmUp(clock);
    // Long enough for many re-anchorings (every CycleClock::kMaxDrift).
    const auto end = Clock::now() + 300ms;
    long reads = 0;
    while (Clock::now() < end) {
        const auto before = Clock::now();
        const auto t = clock.Now();
        const auto after = Clock::now();
        ++reads;
        ASSERT_GE(t, before - 500ns) << "after " << reads << " reads";
        ASSERT_LE(t, after + 500ns) << "after " << reads << " reads";
    }
}

TEST(CycleClock, NeverGoesBackwardsAcrossResyncs) {
    CycleClock clock;
    WarmUp(clock);
    auto previous = clock.Now();
    for (int i = 0; i < 2'000'000; ++i) {
        const auto t = i % 97 == 0 ? clock.Resync() : clock.Now();
        ASSERT_GE(t, previous) << "reading " << i;
        previous = t;
    }
}

TEST(CycleClock, WithoutACounterEveryReadingIsTheKernelClock) {
    CycleClock clock(false);
    WarmUp(clock);
    EXPECT_FALSE(clock.scaled());
    for (int i = 0; i < 10'000; ++i) {
        const auto before = Clock::now();
        const auto t = clock.Now();
        const auto after = Clock::now();
        ASSERT_LE(before, t);
        ASSERT_LE(t, after);
    }
}
