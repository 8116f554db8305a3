// SPDX-License-Identifier: Apache-2.0
// The bound of benchmarks and examples (examples/support/hang_watchdog.hpp):
// a run that stops making progress is ended with exit code 124 and a message
// naming the program and the phase; progress restarts the bound; a finished
// run is left alone.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <thread>

#include "hang_watchdog.hpp"

using spyre::support::HangWatchdog;
using namespace std::chrono_literals;

TEST(HangWatchdogDeathTest, AHangIsReportedAndEndsTheProcess) {
    ::unsetenv("SPYRE_HANG_TIMEOUT_S");
    EXPECT_EXIT(
        {
            HangWatchdog watchdog("some_bench", 1s, "the first benchmark");
            watchdog.Phase("the benchmark after baseline/memcpy");
            std::this_thread::sleep_for(30s);
        },
        ::testing::ExitedWithCode(HangWatchdog::kExitCode),
        "some_bench: HUNG: no progress for 1s in phase \"the benchmark after baseline/memcpy\"");
}

TEST(HangWatchdogDeathTest, TheEnvironmentOverridesTheBound) {
    EXPECT_EXIT(
        {
            ::setenv("SPYRE_HANG_TIMEOUT_S", "1", 1);
            HangWatchdog watchdog("some_example", 600s);
            std::this_thread::sleep_for(30s);
        },
        ::testing::ExitedWithCode(HangWatchdog::kExitCode), "some_example: HUNG: no progress for 1s in phase \"start\"");
}

TEST(HangWatchdog, ProgressRestartsTheBound) {
    ::unsetenv("SPYRE_HANG_TIMEOUT_S");
    const auto t0 = std::chrono::steady_clock::now();
    {
        HangWatchdog watchdog("steady", 1s);
        for (int i = 0; i < 6; ++i) {
            std::this_thread::sleep_for(400ms);  // 2.4 s in all, never 1 s without progress
            watchdog.Phase("step " + std::to_string(i));
        }
    }
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 2400ms);  // still alive: the bound never ran out
}

TEST(HangWatchdog, ZeroDisablesIt) {
    ::setenv("SPYRE_HANG_TIMEOUT_S", "0", 1);
    HangWatchdog watchdog("disabled", 1s);
    EXPECT_EQ(watchdog.bound().count(), 0);
    std::this_thread::sleep_for(1500ms);
    ::unsetenv("SPYRE_HANG_TIMEOUT_S");
}
