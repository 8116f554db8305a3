// SPDX-License-Identifier: Apache-2.0
// HeapRing: bump allocation, wrap-around, and a tail that advances only over
// released blocks, in allocation order.
#include "orchestration/heap_ring.hpp"

#include <gtest/gtest.h>

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
    auto f = ring.Allocate(512, 7);  // an empty ring starts over
    ASSERT_TRUE(f);
    EXPECT_EQ(f->offset, 0u);
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
