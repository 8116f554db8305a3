// SPDX-License-Identifier: Apache-2.0
// HeapRing: bump allocation, wrap-around, and a tail that advances only over
// released blocks, in allocation order.
#include "orchestration/heap_ring.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace spyre::orchestration {
namespace {

TEST(HeapRing, BumpsAndAligns) {
    std::vector<uint8_t> mem(1024);
    HeapRing ring(mem.data(), mem.size());
    auto a = ring.Allocate(1, 7);
    auto b = ring.Allocate(200, 8);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->offset, 0u);
    EXPECT_EQ(b->offset, 128u);  // 1 byte takes one 128-byte granule
    EXPECT_EQ(ring.head(), 128u + 256u);
    EXPECT_EQ(ring.used(), 384u);
    EXPECT_EQ(ring.OldestOwner(), 7u);
}

TEST(HeapRing, RefusesWhatCanNeverFit) {
    std::vector<uint8_t> mem(512);
    HeapRing ring(mem.data(), mem.size());
    EXPECT_FALSE(ring.Allocate(0, 0));
    EXPECT_FALSE(ring.Allocate(513, 0));
    EXPECT_TRUE(ring.Allocate(512, 0));
    EXPECT_FALSE(ring.Allocate(1, 0));  // full
}

TEST(HeapRing, TailAdvancesOnlyOverReleasedBlocksInOrder) {
    std::vector<uint8_t> mem(512);
    HeapRing ring(mem.data(), mem.size());
    auto a = ring.Allocate(128, 1), b = ring.Allocate(128, 2), c = ring.Allocate(128, 3), d = ring.Allocate(128, 4);
    ASSERT_TRUE(a && b && c && d);
    ring.Release(b->seq);  // out of order: the tail stays at a
    EXPECT_EQ(ring.tail(), 0u);
    EXPECT_FALSE(ring.Allocate(128, 5));  // b's bytes are not reusable yet
    ring.Release(a->seq);  // now a and b go
    EXPECT_EQ(ring.tail(), 256u);
    auto e = ring.Allocate(256, 5);  // wraps to the start
    ASSERT_TRUE(e);
    EXPECT_EQ(e->offset, 0u);
    EXPECT_FALSE(ring.Allocate(128, 6));
    ring.Release(c->seq);
    ring.Release(d->seq);
    EXPECT_EQ(ring.tail(), 0u);  // e is the oldest live block
    EXPECT_EQ(ring.OldestOwner(), 5u);
    ring.Release(e->seq);
    EXPECT_EQ(ring.used(), 0u);
    EXPECT_EQ(ring.live_blocks(), 0u);
    auto f = ring.Allocate(128, 7);  // an empty ring goes on from its head: e's address comes back last
    ASSERT_TRUE(f);
    EXPECT_EQ(f->offset, 256u);
    ring.Release(f->seq);
    auto g = ring.Allocate(512, 8);  // what does not fit before the end starts over
    ASSERT_TRUE(g);
    EXPECT_EQ(g->offset, 0u);
}

TEST(HeapRing, WrapSkipsTheTooSmallEnd) {
    std::vector<uint8_t> mem(640);
    HeapRing ring(mem.data(), mem.size());
    auto a = ring.Allocate(256, 1), b = ring.Allocate(256, 2);
    ring.Release(a->seq);
    // 128 bytes left at the end, 256 free at the start: 256 wraps.
    auto c = ring.Allocate(256, 3);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->offset, 0u);
    EXPECT_FALSE(ring.Allocate(128, 4));  // [256, 512) is b, the end is past head
    ring.Release(b->seq);
    auto d = ring.Allocate(384, 4);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->offset, 256u);
    ring.Release(c->seq);
    ring.Release(d->seq);
}

// FitsAfter answers what two Allocates in a row would do, without doing
// them (the task graph keeps room for a depth-0 hold's next task with it):
// checked against the Allocates themselves on a copy of the ring, over
// random allocations and out-of-order releases.
TEST(HeapRing, FitsAfterAgreesWithAllocatingTwice) {
    std::vector<uint8_t> mem(2048);
    HeapRing ring(mem.data(), mem.size());
    std::mt19937 rng(7);
    std::vector<uint64_t> live;
    int checked = 0, fit = 0;
    for (int step = 0; step < 4000; ++step) {
        const uint64_t x = 1 + rng() % 700, y = rng() % 3 == 0 ? 0 : 1 + rng() % 700;
        if (ring.live_blocks() > 0) {
            HeapRing copy = ring;
            const bool both = copy.Allocate(x, 0) && (y == 0 || copy.Allocate(y, 0));
            ASSERT_EQ(ring.FitsAfter(x, y), both) << "step " << step << ": " << x << " then " << y;
            ++checked, fit += both;
        }
        if (rng() % 2 == 0 || live.empty()) {
            if (auto b = ring.Allocate(1 + rng() % 500, 1)) live.push_back(b->seq);
        } else {
            const size_t i = rng() % live.size();
            ring.Release(live[i]);
            live.erase(live.begin() + std::ptrdiff_t(i));
        }
    }
    EXPECT_GT(checked, 3000);
    EXPECT_GT(fit, 100);               // both answers were met
    EXPECT_GT(checked - fit, 100);
}

// More blocks live than the ring's bookkeeping first had room for (it
// grows), released out of order while more are allocated: live blocks never
// overlap, and owners and the tail stay right across the growth.
TEST(HeapRing, ManyLiveBlocksOutOfOrderNeverOverlap) {
    std::vector<uint8_t> mem(1 << 16);  // 512 blocks of 128 bytes
    HeapRing ring(mem.data(), mem.size());
    std::mt19937 rng(3);
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> live;  // seq -> offset, bytes
    size_t most_live = 0;
    for (int step = 0; step < 20000; ++step) {
        if (live.size() < 300 && (live.empty() || rng() % 3 != 0)) {
            const uint64_t bytes = 128 * (1 + rng() % 2);
            auto b = ring.Allocate(bytes, uint64_t(step));
            if (!b) continue;  // full until the tail moves
            for (const auto& [seq, other] : live)
                ASSERT_TRUE(b->offset + bytes <= other.first || other.first + other.second <= b->offset)
                    << "step " << step << ": block at " << b->offset << " overlaps seq " << seq;
            live.emplace(b->seq, std::pair{b->offset, bytes});
        } else {
            auto it = std::next(live.begin(), long(rng() % live.size()));
            ring.Release(it->first);
            live.erase(it);
        }
        most_live = std::max(most_live, live.size());
        ASSERT_EQ(ring.live_blocks(), live.size());
        if (!live.empty()) {
            ASSERT_EQ(ring.tail(), live.begin()->second.first) << "step " << step;  // the oldest
        }
    }
    EXPECT_GT(most_live, 64u);  // past the bookkeeping's first size
}

TEST(HeapRing, ReleaseOfUnknownOrRepeatedSeqIsHarmless) {
    std::vector<uint8_t> mem(256);
    HeapRing ring(mem.data(), mem.size());
    auto a = ring.Allocate(128, 1);
    ring.Release(a->seq + 5);
    ring.Release(a->seq);
    ring.Release(a->seq);
    EXPECT_EQ(ring.live_blocks(), 0u);
}

}  // namespace
}  // namespace spyre::orchestration
