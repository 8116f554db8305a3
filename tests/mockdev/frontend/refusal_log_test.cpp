// SPDX-License-Identifier: Apache-2.0
// RefusalLog: the daemon logs refused accesses in bursts of 20 lines and 10
// a second after, and says how many it left out with the next line.
#include "frontend/refusal_log.hpp"

#include <gtest/gtest.h>

namespace spyre::mockdev {
namespace {

using namespace std::chrono_literals;

TEST(RefusalLog, LogsABurstThenTenASecondAndCountsTheRest) {
    RefusalLog log;
    const RefusalLog::Clock::time_point t0{};
    uint64_t left_out = 99;
    for (int i = 0; i < 20; ++i) {
        ASSERT_TRUE(log.Admit(t0, &left_out)) << i;
        EXPECT_EQ(left_out, 0u);
    }
    for (int i = 0; i < 1000; ++i) EXPECT_FALSE(log.Admit(t0 + 1ms, &left_out));
    // A tenth of a second later one line, saying what it left out.
    EXPECT_TRUE(log.Admit(t0 + 101ms, &left_out));
    EXPECT_EQ(left_out, 1000u);
    EXPECT_FALSE(log.Admit(t0 + 102ms, &left_out));
    // A second later, ten lines, the first of them counting the one before.
    int logged = 0;
    for (int i = 0; i < 50; ++i) logged += log.Admit(t0 + 1101ms, &left_out) ? 1 : 0;
    EXPECT_EQ(logged, 10);
    // After a long quiet, a full burst again, not more.
    logged = 0;
    for (int i = 0; i < 50; ++i) logged += log.Admit(t0 + 60s, &left_out) ? 1 : 0;
    EXPECT_EQ(logged, 20);
}

// A clock read that goes back (threads read it before taking the lock)
// adds nothing.
TEST(RefusalLog, AnEarlierTimeAddsNoLines) {
    RefusalLog log;
    const RefusalLog::Clock::time_point t0 = RefusalLog::Clock::time_point{} + 10s;
    uint64_t left_out = 0;
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(log.Admit(t0, &left_out));
    EXPECT_FALSE(log.Admit(t0 - 5s, &left_out));
    EXPECT_FALSE(log.Admit(t0, &left_out));
}

}  // namespace
}  // namespace spyre::mockdev
