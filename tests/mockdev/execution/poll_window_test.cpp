// SPDX-License-Identifier: Apache-2.0
// How long a queue lane polls for work before it sleeps
// (execution/poll_window.hpp): the whole budget while looking pays off,
// nothing once kMissesToClose looks in a row found nothing, the whole budget
// again as soon as work comes within it.
#include <gtest/gtest.h>

#include <chrono>

#include "execution/poll_window.hpp"

using namespace spyre::mockdev;
using namespace std::chrono_literals;

TEST(PollWindow, LooksTheWholeBudgetUntilEnoughLooksInARowFoundNothing) {
    PollWindow w(50us);
    EXPECT_EQ(w.budget(), 50us);
    EXPECT_EQ(w.window(), 50us);
    for (uint32_t i = 1; i < PollWindow::kMissesToClose; ++i) {
        w.WorkCame(51us);
        EXPECT_EQ(w.window(), 50us) << "after " << i << " misses";
    }
    w.WorkCame(10ms);
    EXPECT_EQ(w.window(), 0ns);
    w.WorkCame(10ms);  // stays closed
    EXPECT_EQ(w.window(), 0ns);
}

TEST(PollWindow, WorkWithinTheBudgetReopensItAndStartsTheCountAgain) {
    PollWindow w(50us);
    for (uint32_t i = 0; i < PollWindow::kMissesToClose; ++i) w.WorkCame(1ms);
    ASSERT_EQ(w.window(), 0ns);
    w.WorkCame(50us);  // as long as the budget: a look would have caught it
    EXPECT_EQ(w.window(), 50us);
    // Bursts far apart: a short spell between long ones keeps it open.
    for (int round = 0; round < 10; ++round) {
        for (uint32_t i = 1; i < PollWindow::kMissesToClose; ++i) w.WorkCame(1ms);
        w.WorkCame(2us);
        EXPECT_EQ(w.window(), 50us);
    }
}

TEST(PollWindow, AZeroBudgetNeverLooks) {
    PollWindow w;
    EXPECT_EQ(w.window(), 0ns);
    w.WorkCame(0ns);
    EXPECT_EQ(w.window(), 0ns);
}
