// SPDX-License-Identifier: Apache-2.0
// The run-time hints a task lane chooses by (execution/run_time_hints.hpp):
// a short task whose thread was preempted measures long once, and must not
// make its queue or its program look long. On a 2-CPU host that happened
// many times a second, and each time the lane woke a worker per pending
// task (up to a group of 8) for a queue of empty tasks.
#include <gtest/gtest.h>

#include "execution/run_time_hints.hpp"

using namespace spyre::mockdev;

namespace {
constexpr uint64_t kEmptyNs = 150;      // an empty task's run
constexpr uint64_t kPreemptedNs = 4'000'000;  // the same task, its thread preempted for a time slice
constexpr uint64_t kProgram = 0x10000, kOther = 0x20000;
}  // namespace

TEST(QueueRunTime, StartsShort) {
    QueueRunTime q;
    EXPECT_TRUE(q.Short());
}

TEST(QueueRunTime, OneLongRunAmongShortOnesLeavesTheQueueShort) {
    QueueRunTime q;
    for (int i = 0; i < 8; ++i) q.Add(kEmptyNs);
    q.Add(kPreemptedNs);
    EXPECT_TRUE(q.Short()) << "one preempted task made a queue of empty tasks look long";
    q.Add(kEmptyNs);
    EXPECT_TRUE(q.Short());
}

TEST(QueueRunTime, LongRunsInARowMakeTheQueueLongAndShortOnesBringItBack) {
    QueueRunTime q;
    q.Add(kEmptyNs);
    q.Add(kPreemptedNs);
    q.Add(kPreemptedNs);
    EXPECT_FALSE(q.Short()) << "a queue whose tasks now run long still looks short";
    int shorts = 0;
    while (!q.Short() && shorts < 64) {
        q.Add(kEmptyNs);
        ++shorts;
    }
    EXPECT_TRUE(q.Short()) << "64 short tasks did not make the queue short again";
    EXPECT_GE(shorts, 2) << "one short task made a queue of long ones look short";
}

TEST(QueueRunTime, ClearIsPowerOn) {
    QueueRunTime q;
    for (int i = 0; i < 4; ++i) q.Add(kPreemptedNs);
    ASSERT_FALSE(q.Short());
    q.Clear();
    EXPECT_TRUE(q.Short());
    q.Add(kPreemptedNs);
    EXPECT_TRUE(q.Short()) << "the last owner's long task counted against the next owner's first";
}

// A program's runs, one at a time, and what it counts as after each: not
// seen is neither short nor long; one long run after short ones makes it
// neither (not long: it may have been preempted); two in a row make it long;
// a short run makes it short again.
TEST(ProgramTimes, LongOnlyAfterTwoLongRunsInARow) {
    struct Step {
        uint64_t run_ns;
        bool is_short, is_long;
        const char* why;
    };
    const Step steps[] = {
        {kEmptyNs, true, false, "an empty run"},
        {kPreemptedNs, false, false, "one preempted run after short ones"},
        {kEmptyNs, true, false, "short again"},
        {kPreemptedNs, false, false, "the first of two long runs"},
        {kPreemptedNs, false, true, "the second long run in a row"},
        {kPreemptedNs, false, true, "a third"},
        {kEmptyNs, true, false, "short again after long ones"},
    };
    ProgramTimes t;
    EXPECT_FALSE(t.RanShort(kProgram)) << "not seen yet";
    EXPECT_FALSE(t.RanLong(kProgram)) << "not seen yet";
    for (const Step& step : steps) {
        t.Record(kProgram, step.run_ns);
        EXPECT_EQ(t.RanShort(kProgram), step.is_short) << step.why;
        EXPECT_EQ(t.RanLong(kProgram), step.is_long) << step.why;
    }
}

TEST(ProgramTimes, ProgramsAreKeptApartAndClearForgetsThem) {
    ProgramTimes t;
    t.Record(kProgram, kPreemptedNs);
    t.Record(kProgram, kPreemptedNs);
    t.Record(kOther, kEmptyNs);
    EXPECT_TRUE(t.RanLong(kProgram));
    EXPECT_TRUE(t.RanShort(kOther));
    t.Clear();
    EXPECT_FALSE(t.RanLong(kProgram));
    EXPECT_FALSE(t.RanShort(kOther));
}
