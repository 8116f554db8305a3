// SPDX-License-Identifier: Apache-2.0
#include "orchestration/scope_stack.hpp"

#include <gtest/gtest.h>

namespace spyre::orchestration {
namespace {

TEST(ScopeStack, PushPopNested) {
    ScopeStack s;
    EXPECT_EQ(s.depth(), 0);
    EXPECT_FALSE(s.Pop());
    s.Push(0);
    s.Push(5);
    EXPECT_EQ(s.depth(), 2);
    EXPECT_EQ(s.outermost(), 0);
    EXPECT_EQ(s.Pop(), 5);
    EXPECT_EQ(s.Pop(), 0);
    EXPECT_FALSE(s.outermost());
}

}  // namespace
}  // namespace spyre::orchestration
