// SPDX-License-Identifier: Apache-2.0
#include "orchestration/buffer_tracker.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace spyre::orchestration {
namespace {

TEST(BufferTracker, RegisterFindAndWriters) {
    std::vector<uint8_t> mem(4096);
    BufferTracker t;
    BufferInfo& a = t.Register(mem.data(), 1024, 1);
    t.Register(mem.data() + 2048, 512, 2);
    EXPECT_EQ(t.Find(mem.data() + 100, 10), &a);
    EXPECT_EQ(t.FindBase(mem.data()), &a);
    EXPECT_EQ(t.FindBase(mem.data() + 1), nullptr);
    EXPECT_EQ(t.Find(mem.data() + 1500), nullptr);  // between buffers
    bool partial = false;
    EXPECT_EQ(t.Find(mem.data() + 1000, 100, &partial), nullptr);
    EXPECT_TRUE(partial);
    t.AddWriter(a, 3);
    t.AddWriter(a, 4);
    EXPECT_EQ(a.writer_count, 2);
    EXPECT_EQ(a.writer_task_ids, (std::vector<int32_t>{3, 4}));
}

TEST(BufferTracker, ReclaimableOnlyWhenFreedAndUnreferenced) {
    std::vector<uint8_t> mem(256);
    BufferTracker t;
    BufferInfo& a = t.Register(mem.data(), 256, 1);
    a.live_refs = 1;
    EXPECT_FALSE(BufferTracker::Reclaimable(a));
    a.free_requested = true;
    EXPECT_FALSE(BufferTracker::Reclaimable(a));  // pto_free does not reclaim at once
    a.live_refs = 0;
    EXPECT_TRUE(BufferTracker::Reclaimable(a));
    t.Erase(mem.data());
    EXPECT_EQ(t.size(), 0u);
}

}  // namespace
}  // namespace spyre::orchestration
