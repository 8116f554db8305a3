// SPDX-License-Identifier: Apache-2.0
// A function's memory window (execution/device_memory.hpp): every span the
// device model hands out lies inside it, whatever the address arithmetic.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "execution/device_memory.hpp"

using namespace spyre::mockdev;

TEST(DeviceMemory, SpanStaysInsideTheWindow) {
    std::vector<uint8_t> bytes(4096);
    const DeviceMemory mem(bytes.data(), bytes.size());
    EXPECT_EQ(mem.Span(0, 4096)->data(), bytes.data());
    EXPECT_EQ(mem.Span(4095, 1)->size(), 1u);
    EXPECT_TRUE(mem.Span(4096, 0));  // empty, at the end
    EXPECT_FALSE(mem.Span(4096, 1));
    EXPECT_FALSE(mem.Span(4097, 0));
    EXPECT_FALSE(mem.Span(1, 4096));
    EXPECT_FALSE(mem.Span(8, UINT64_MAX));      // addr + len wraps
    EXPECT_FALSE(mem.Span(UINT64_MAX, 2));
}
