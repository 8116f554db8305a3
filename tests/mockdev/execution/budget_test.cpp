// SPDX-License-Identifier: Apache-2.0
// A CB's budget (execution/budget.hpp): the watchdog deadline and an abort
// request, the abort reported first.
#include <gtest/gtest.h>

#include <chrono>

#include "execution/budget.hpp"
#include "spyre/uapi/spyre_errors.h"

using namespace spyre::mockdev;
using namespace std::chrono_literals;

namespace {
Budget Forever() { return Budget(Budget::Clock::now(), 1h); }
}  // namespace

TEST(Budget, ReportsAbortBeforeTheWatchdog) {
    EXPECT_EQ(Forever().Check(), SPYRE_ERR_NONE);
    EXPECT_EQ(Budget(Budget::Clock::now(), -1ms).Check(), SPYRE_ERR_WATCHDOG);
    EXPECT_EQ(Budget(Budget::Clock::now(), -1ms, [] { return true; }).Check(), SPYRE_ERR_ABORTED);
    EXPECT_EQ(Forever().Until(Budget::Clock::now() - 1ms).Check(), SPYRE_ERR_WATCHDOG);
}

// A LAUNCH's watchdog runs from when it has the cores: the same bound from a
// later start, and no deadline at all while it waits for them.
TEST(Budget, RestartsFromALaterStartAndWaitsWithoutADeadline) {
    const Budget spent(Budget::Clock::now() - 1h, 1s);
    EXPECT_EQ(spent.Check(), SPYRE_ERR_WATCHDOG);
    EXPECT_EQ(spent.AbortOnly().Check(), SPYRE_ERR_NONE);
    const Budget::Clock::time_point now = Budget::Clock::now();
    EXPECT_EQ(spent.From(now).deadline(), now + 1s);
    EXPECT_EQ(Budget(now, 1s, [] { return true; }).AbortOnly().Check(), SPYRE_ERR_ABORTED);
}
