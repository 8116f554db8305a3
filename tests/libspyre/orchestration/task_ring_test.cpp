// SPDX-License-Identifier: Apache-2.0
// TaskRing: ids, slot reuse only past CONSUMED tasks, in order.
#include "orchestration/task_ring.hpp"

#include <gtest/gtest.h>

#include <climits>

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

// pto.h's task ids are int32_t: past 2^31 submissions (minutes at full
// rate) they wrap, at a multiple of the ring's size, so an id keeps its slot
// and a live id still names one task. Before, the 2^31st Allocate overflowed
// a signed int (ids went negative and slots were shared).
TEST(TaskRing, IdsWrapAtAMultipleOfTheCapacityAndKeepTheirSlots) {
    TaskRing ring(3, int64_t(INT32_MAX) - 3);
    const int32_t period = ring.period();
    EXPECT_EQ(period, INT32_MAX / 3 * 3);
    EXPECT_EQ(ring.SeqOf(5), -1);  // never submitted
    const int32_t a = *ring.Allocate();
    const int32_t b = *ring.Allocate();
    const int32_t c = *ring.Allocate();
    EXPECT_EQ(a, period - 2);
    EXPECT_EQ(b, period - 1);
    EXPECT_EQ(c, 0);  // wrapped, not negative
    EXPECT_FALSE(ring.Allocate());
    EXPECT_EQ(ring.SeqOf(c), int64_t(INT32_MAX) - 1);
    EXPECT_EQ(&ring.Get(c), &ring.AtSeq(ring.SeqOf(c)));
    EXPECT_NE(&ring.Get(a), &ring.Get(c));  // three live tasks, three slots
    EXPECT_NE(&ring.Get(b), &ring.Get(c));
    EXPECT_TRUE(ring.IsLive(a) && ring.IsLive(b) && ring.IsLive(c));
    EXPECT_FALSE(ring.IsLive(1));
    EXPECT_FALSE(ring.IsLive(period - 3));
    EXPECT_FALSE(ring.IsLive(-1));
    EXPECT_FALSE(ring.IsLive(period));
    ring.Get(a).state = TaskState::Consumed;
    ring.Get(b).state = TaskState::Consumed;
    EXPECT_EQ(ring.Reclaim(), 2);
    EXPECT_EQ(ring.tail(), c);
    EXPECT_FALSE(ring.IsLive(a));
    EXPECT_TRUE(ring.IsLive(c));
    EXPECT_EQ(*ring.Allocate(), 1);
    EXPECT_EQ(*ring.Allocate(), 2);
    EXPECT_EQ(ring.head(), 3);
    EXPECT_EQ(ring.live(), 3);
    EXPECT_EQ(ring.Get(2).task_id, 2);
    ring.Unallocate();  // across nothing: back to 2
    EXPECT_EQ(ring.head(), 2);
    EXPECT_EQ(ring.SeqOf(a), int64_t(INT32_MAX) - 3);  // reclaimed, but it was submitted
}

TEST(TaskRing, UnallocateStepsBackOverTheWrap) {
    TaskRing ring(2, int64_t(INT32_MAX / 2 * 2) - 1);
    EXPECT_EQ(*ring.Allocate(), ring.period() - 1);
    EXPECT_EQ(*ring.Allocate(), 0);
    ring.Unallocate();
    EXPECT_EQ(ring.head(), 0);
    EXPECT_FALSE(ring.IsLive(0));
    EXPECT_EQ(*ring.Allocate(), 0);
    EXPECT_TRUE(ring.IsLive(0));
}

TEST(TaskRing, RejectsEmptyRing) { EXPECT_SPYRE_ERROR(TaskRing(0), InvalidArgument, "at least 1"); }

}  // namespace
}  // namespace spyre::orchestration
