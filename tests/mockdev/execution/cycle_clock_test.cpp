// SPDX-License-Identifier: Apache-2.0
// A queue lane's cycle clock (execution/cycle_clock.hpp): scaled readings
// stay on the kernel's CLOCK_MONOTONIC and never go backwards.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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

// The CPUs this thread may run on.
std::vector<int> AllowedCpus() {
    cpu_set_t set;
    std::vector<int> cpus;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &set)) cpus.push_back(c);
    return cpus;
}

void PinTo(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

// The clock is kept by one thread, which the kernel may move between CPUs:
// the test moves it every 2000 reads, so a counter out of step across CPUs
// shows (the server thread of a daemon is not pinned either).
TEST(CycleClock, ReadingsStayWithinHalfAMicrosecondOfTheKernelClockOnEveryCpu) {
    const std::vector<int> cpus = AllowedCpus();
    ASSERT_FALSE(cpus.empty());
    CycleClock clock;
    WarmUp(clock);
    // Long enough for many re-anchorings (every CycleClock::kMaxDrift).
    const auto end = Clock::now() + 300ms;
    long reads = 0;
    size_t next_cpu = 0;
    while (Clock::now() < end) {
        if (reads % 2000 == 0) PinTo(cpus[next_cpu++ % cpus.size()]);
        const auto before = Clock::now();
        const auto t = clock.Now();
        const auto after = Clock::now();
        ++reads;
        ASSERT_GE(t, before - 500ns) << "after " << reads << " reads";
        ASSERT_LE(t, after + 500ns) << "after " << reads << " reads";
    }
    cpu_set_t all;  // give the thread its CPUs back
    CPU_ZERO(&all);
    for (int c : cpus) CPU_SET(c, &all);
    sched_setaffinity(0, sizeof all, &all);
    // Where the machine says its counter is sound, it was used, and no check failed.
    EXPECT_EQ(clock.counter_trusted(), CycleClock::CyclesTrackTheKernelClock());
}

TEST(CycleClock, CountersAreSoundOnTheTscOrOnKvmClockOverAnInvariantTsc) {
    const char* invariant = "fpu vme tsc msr constant_tsc rep_good nopl nonstop_tsc cpuid";
    EXPECT_TRUE(CycleClock::CountersAreSound("tsc", ""));
    EXPECT_TRUE(CycleClock::CountersAreSound("kvm-clock", invariant));
    EXPECT_TRUE(CycleClock::CountersAreSound("kvm-clock", "constant_tsc nonstop_tsc"));
    EXPECT_FALSE(CycleClock::CountersAreSound("kvm-clock", "fpu tsc constant_tsc cpuid"));  // stops in deep sleep
    EXPECT_FALSE(CycleClock::CountersAreSound("kvm-clock", "fpu tsc nonstop_tsc"));          // rate follows frequency
    EXPECT_FALSE(CycleClock::CountersAreSound("kvm-clock", "xconstant_tsc nonstop_tsc_y"));  // whole words only
    EXPECT_FALSE(CycleClock::CountersAreSound("hpet", invariant));
    EXPECT_FALSE(CycleClock::CountersAreSound("acpi_pm", invariant));
    EXPECT_FALSE(CycleClock::CountersAreSound("", invariant));
}

// A counter that runs at a steady rate on "CPU 0" and 50 us ahead on "CPU
// 1" (counters out of step, a thread that moves between them): within
// kMaxDrift of an anchor taken on the other CPU a reading would be 50 us off.
// The clock finds the mismatch at a re-anchoring, stops trusting the counter,
// and every reading after is the kernel's.
std::atomic<uint64_t> g_fake_cpu{0};
uint64_t FakeCounter() noexcept {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    return uint64_t(ns) * 3 + g_fake_cpu.load() * 150'000;  // 3 "cycles" a nanosecond
}

TEST(CycleClock, ACounterOutOfStepAcrossCpusIsDroppedForGood) {
    g_fake_cpu = 0;
    CycleClock clock(true, FakeCounter);
    WarmUp(clock);
    ASSERT_TRUE(clock.scaled());
    for (int i = 0; i < 1000; ++i) clock.Now();
    ASSERT_TRUE(clock.counter_trusted());
    const auto give_up = Clock::now() + 50ms;
    for (long i = 0; clock.counter_trusted() && Clock::now() < give_up; ++i) {
        if (i % 64 == 0) g_fake_cpu = 1 - g_fake_cpu;  // the thread moves
        clock.Now();
    }
    EXPECT_FALSE(clock.counter_trusted());
    EXPECT_FALSE(clock.scaled());
    for (int i = 0; i < 10'000; ++i) {
        if (i % 64 == 0) g_fake_cpu = 1 - g_fake_cpu;
        const auto before = Clock::now();
        const auto t = clock.Now();
        const auto after = Clock::now();
        // The kernel's reading (after the last one from the counter, which
        // may have been up to 50 us ahead: readings never go back).
        ASSERT_LE(before - 1us, t);
        ASSERT_LE(t, after + 51us);
    }
    // Later readings are the kernel's own.
    std::this_thread::sleep_for(100us);
    const auto before = Clock::now();
    const auto t = clock.Now();
    EXPECT_LE(before, t);
    EXPECT_LE(t, Clock::now());
    g_fake_cpu = 0;
}

// A process's first clock reads are slow (page faults, cold caches): here the
// first pairs of counter readings around a kernel reading are stretched by
// 100 us. They must not become the anchor the scale is measured from (its
// error would then look like a counter out of step and cost the counter).
std::atomic<int> g_stretched_reads{0};
uint64_t SlowStartCounter() noexcept {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    const int n = g_stretched_reads.fetch_add(1);
    return uint64_t(ns) * 3 + (n < 8 && n % 2 == 1 ? 300'000 : 0);  // the second reading of each early pair is late
}

TEST(CycleClock, StretchedFirstPairsDoNotCostTheCounter) {
    g_stretched_reads = 0;
    CycleClock clock(true, SlowStartCounter);
    WarmUp(clock);
    ASSERT_TRUE(clock.scaled());
    const auto end = Clock::now() + 50ms;
    while (Clock::now() < end) {
        const auto before = Clock::now();
        const auto t = clock.Now();
        const auto after = Clock::now();
        ASSERT_LE(before - 500ns, t);
        ASSERT_LE(t, after + 500ns);
    }
    EXPECT_TRUE(clock.counter_trusted());
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
