// SPDX-License-Identifier: Apache-2.0
// OpQueue without a device: order per producer, groups kept whole, the
// spill into the overflow list and back, across ring wraps and under
// several producers racing one consumer.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "spyre/error.hpp"
#include "stream/op_queue.hpp"

using namespace spyre;
using namespace spyre::detail;

namespace {

QueuedOp Op(uint64_t value) {
    QueuedOp op;
    op.value = value;
    return op;
}

std::vector<uint64_t> Values(const std::deque<QueuedOp>& ops) {
    std::vector<uint64_t> out;
    for (const QueuedOp& op : ops) out.push_back(op.value);
    return out;
}

void PushOne(OpQueue& q, uint64_t value) {
    QueuedOp op = Op(value);
    q.Push(std::span(&op, 1));
}

}  // namespace

TEST(OpQueue, CapacityMustBeAPowerOfTwo) {
    try {
        OpQueue q(12);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("power of two"), std::string::npos) << e.what();
    }
    EXPECT_THROW(OpQueue(0), Error);
}

TEST(OpQueue, OneProducerKeepsItsOrderAcrossManyWraps) {
    OpQueue q(8);
    std::deque<QueuedOp> out;
    EXPECT_FALSE(q.Pending());
    uint64_t next = 0;
    for (int round = 0; round < 1000; ++round) {
        const int n = 1 + round % 7;  // never more than fits
        for (int i = 0; i < n; ++i) PushOne(q, next++);
        EXPECT_TRUE(q.Pending());
        EXPECT_EQ(q.Drain(out), size_t(n));
        EXPECT_FALSE(q.Pending());
    }
    ASSERT_EQ(out.size(), next);
    for (uint64_t i = 0; i < next; ++i) ASSERT_EQ(out[i].value, i);
}

TEST(OpQueue, AFullRingSpillsAndEverythingComesOutInOrder) {
    OpQueue q(4);
    for (uint64_t i = 0; i < 10; ++i) PushOne(q, i);  // 4 in the ring, 6 spilled
    std::deque<QueuedOp> out;
    EXPECT_EQ(q.Drain(out), 10u);
    EXPECT_EQ(Values(out), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
    EXPECT_FALSE(q.Pending());
    // Spilled and drained: the ring takes pushes again, still in order.
    out.clear();
    for (uint64_t i = 10; i < 13; ++i) PushOne(q, i);
    EXPECT_EQ(q.Drain(out), 3u);
    EXPECT_EQ(Values(out), (std::vector<uint64_t>{10, 11, 12}));
}

TEST(OpQueue, AGroupLargerThanTheRingStaysWhole) {
    OpQueue q(4);
    PushOne(q, 100);
    std::vector<QueuedOp> group;
    for (uint64_t i = 0; i < 9; ++i) group.push_back(Op(i));
    q.Push(group);
    PushOne(q, 200);
    std::deque<QueuedOp> out;
    EXPECT_EQ(q.Drain(out), 11u);
    EXPECT_EQ(Values(out), (std::vector<uint64_t>{100, 0, 1, 2, 3, 4, 5, 6, 7, 8, 200}));
}

TEST(OpQueue, DrainedOpsHoldNothingInTheRing) {
    OpQueue q(4);
    auto owned = std::make_shared<int>(7);
    for (int i = 0; i < 6; ++i) {  // through the ring and the overflow
        QueuedOp op = Op(i);
        op.keep_alive = owned;
        op.callback = [owned] {};
        q.Push(std::span(&op, 1));
    }
    {
        std::deque<QueuedOp> out;
        q.Drain(out);
        EXPECT_EQ(out.size(), 6u);
    }
    EXPECT_EQ(owned.use_count(), 1);  // only the test holds it now
}

// Four producers push groups of three, one consumer drains meanwhile; a
// small ring makes them wrap, spill and come back many times.
TEST(OpQueue, RacingProducersKeepTheirOrderAndTheirGroupsWhole) {
    constexpr int kProducers = 4;
    constexpr uint64_t kGroups = 20000;
    constexpr int kGroupSize = 3;
    OpQueue q(16);
    std::atomic<int> running{kProducers};
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p)
        producers.emplace_back([&, p] {
            for (uint64_t g = 0; g < kGroups; ++g) {
                std::vector<QueuedOp> group;
                for (int i = 0; i < kGroupSize; ++i) group.push_back(Op((uint64_t(p) << 48) | (g * kGroupSize + i)));
                if (g % 5 == 0)
                    q.Push(std::span(group).first(1)), q.Push(std::span(group).subspan(1));
                else
                    q.Push(group);
            }
            running.fetch_sub(1);
        });
    std::deque<QueuedOp> out;
    while (running.load() > 0 || q.Pending()) q.Drain(out);
    for (auto& t : producers) t.join();
    q.Drain(out);

    ASSERT_EQ(out.size(), kProducers * kGroups * kGroupSize);
    std::map<uint64_t, uint64_t> next;  // producer -> next value expected
    for (size_t i = 0; i < out.size(); ++i) {
        const uint64_t p = out[i].value >> 48, v = out[i].value & ((uint64_t(1) << 48) - 1);
        ASSERT_EQ(v, next[p]) << "producer " << p << " out of order at " << i;
        next[p] = v + 1;
        // A whole group (pushed as one) arrives with nothing between.
        if (v % kGroupSize == 0 && (v / kGroupSize) % 5 != 0) {
            for (int k = 1; k < kGroupSize; ++k) ASSERT_EQ(out[i + k].value, out[i].value + k) << "group split at " << i;
        }
    }
}

// A producer publishes a group's slots one by one. Drain took the published
// part of a group being pushed, and that part went down as a chain of its
// own: another stream's CBs then went between it and the rest (two streams
// of one loaded plan computed with each other's addresses). Each Drain
// now ends at a group's end.
TEST(OpQueue, DrainTakesOnlyWholeGroups) {
    constexpr uint64_t kGroups = 50000;
    constexpr int kGroupSize = 3;
    OpQueue q(64);
    std::atomic<bool> done{false};
    std::thread producer([&] {
        for (uint64_t g = 0; g < kGroups; ++g) {
            std::vector<QueuedOp> group;
            for (int i = 0; i < kGroupSize; ++i) {
                group.push_back(Op(g * kGroupSize + i));
                group.back().link = i + 1 < kGroupSize;  // as Scheduler::Queue marks a group
            }
            q.Push(group);
        }
        done.store(true);
    });
    std::deque<QueuedOp> out;
    uint64_t drained = 0, partial = 0;
    while (!done.load() || q.Pending()) {
        out.clear();
        if (q.Drain(out) == 0) continue;
        drained += out.size();
        if (out.back().link) ++partial;
    }
    producer.join();
    EXPECT_EQ(partial, 0u) << "drains that ended inside a group";
    EXPECT_EQ(drained, kGroups * kGroupSize);
}
