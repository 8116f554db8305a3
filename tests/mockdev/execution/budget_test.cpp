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
Budget Forever() { return Budget(Budget::Clock::now() + 1h); }
}  // namespace

TEST(Budget, ReportsAbortBeforeTheWatchdog) {
    EXPECT_EQ(Forever().Check(), SPYRE_ERR_NONE);
    EXPECT_EQ(Budget(Budget::Clock::now() - 1ms).Check(), SPYRE_ERR_WATCHDOG);
    EXPECT_EQ(Budget(Budget::Clock::now() - 1ms, [] { return true; }).Check(), SPYRE_ERR_ABORTED);
    EXPECT_EQ(Forever().Until(Budget::Clock::now() - 1ms).Check(), SPYRE_ERR_WATCHDOG);
}
