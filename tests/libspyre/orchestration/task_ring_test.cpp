// SPDX-License-Identifier: Apache-2.0
// TaskRing: ids, slot reuse only past CONSUMED tasks, in order.
#include "orchestration/task_ring.hpp"

#include <gtest/gtest.h>

#include "mock_fixture.hpp"

namespace spyre::orchestration {
namespace {

TEST(TaskRing, AllocatesUntilFullThenReclaimsConsumedInOrder) {
    TaskRing ring(3);
    EXPECT_EQ(*ring.Allocate(), 0);
    EXPECT_EQ(*ring.Allocate(), 1);
    EXPECT_EQ(*ring.Allocate(), 2);
    EXPECT_FALSE(ring.Allocate());
    ring.Get(1).state = TaskState::Consumed;
    EXPECT_EQ(ring.Reclaim(), 0);  // task 0 holds the tail
    ring.Get(0).state = TaskState::Completed;
    EXPECT_EQ(ring.Reclaim(), 0);
    ring.Get(0).state = TaskState::Consumed;
    EXPECT_EQ(ring.Reclaim(), 2);
    EXPECT_EQ(ring.tail(), 2);
    EXPECT_FALSE(ring.IsLive(1));
    EXPECT_TRUE(ring.IsLive(2));
    const int32_t id = *ring.Allocate();
    EXPECT_EQ(id, 3);
    EXPECT_EQ(&ring.Get(3), &ring.Get(0));  // slot reused
    EXPECT_EQ(ring.Get(3).task_id, 3);
    EXPECT_EQ(ring.Get(3).state.load(), TaskState::Pending);
}

TEST(TaskRing, ResetClearsBookkeeping) {
    TaskRing ring(1);
    const int32_t a = *ring.Allocate();
    TaskDescriptor& t = ring.Get(a);
    t.fanout.push_back(9);
    t.fanout_count = 4;
    t.gate.root = std::make_shared<const TaskFailureInfo>();
    t.state = TaskState::Consumed;
    ring.Reclaim();
    const int32_t b = *ring.Allocate();
    EXPECT_TRUE(ring.Get(b).fanout.empty());
    EXPECT_EQ(ring.Get(b).fanout_count, 0);
    EXPECT_EQ(ring.Get(b).gate.root, nullptr);
}

TEST(TaskRing, UnallocateGivesTheSlotBack) {
    TaskRing ring(1);
    EXPECT_EQ(*ring.Allocate(), 0);
    ring.Unallocate();
    EXPECT_EQ(*ring.Allocate(), 0);
}

TEST(TaskRing, RejectsEmptyRing) { EXPECT_SPYRE_ERROR(TaskRing(0), InvalidArgument, "at least 1"); }

}  // namespace
}  // namespace spyre::orchestration
