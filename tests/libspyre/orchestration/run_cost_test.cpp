// SPDX-License-Identifier: Apache-2.0
// RunCost (dependency/run_cost.hpp, as the orchestration runtime's
// executor.hpp names it): the average of a kernel's host runs that decides
// whether its ready tasks run on the submitting thread.
#include <gtest/gtest.h>

#include "orchestration/executor.hpp"

namespace spyre::orchestration {
namespace {

TEST(RunCost, UnknownUntilARunIsMeasured) {
    RunCost c;
    EXPECT_FALSE(c.Cheap());
    c.Record(100);
    EXPECT_TRUE(c.Cheap());  // the first measurement is the average
}

TEST(RunCost, AKernelSlowerThanTheBoundIsNotCheap) {
    RunCost c;
    c.Record(RunCost::kDefaultCheapNs);  // not under the bound
    EXPECT_FALSE(c.Cheap());
    RunCost d;
    d.Record(200'000);
    EXPECT_FALSE(d.Cheap());
}

TEST(RunCost, OneStretchedRunDoesNotMakeACheapKernelSlow) {
    RunCost c;
    for (int i = 0; i < 20; ++i) c.Record(100);
    c.Record(5'000'000);  // a preempted run: counted as four times the bound
    EXPECT_TRUE(c.Cheap());
}

TEST(RunCost, AKernelThatTurnsSlowIsNoLongerCheapAfterTwoMeasuredRuns) {
    RunCost c;
    for (int i = 0; i < 20; ++i) c.Record(100);
    c.Record(50'000);
    c.Record(50'000);
    EXPECT_FALSE(c.Cheap());
    for (int i = 0; i < 40; ++i) c.Record(100);  // and cheap again once it is
    EXPECT_TRUE(c.Cheap());
}

TEST(RunCost, TheBoundIsTheTaskGraphsOption) {
    RunCost c;
    c.SetCheapBelow(1'000'000);
    c.Record(200'000);
    EXPECT_TRUE(c.Cheap());
    RunCost copy = c;  // kernels are registered by value
    EXPECT_TRUE(copy.Cheap());
    c.SetCheapBelow(0);  // at least 1 ns: nothing measured is cheap
    EXPECT_FALSE(c.Cheap());
}

}  // namespace
}  // namespace spyre::orchestration
