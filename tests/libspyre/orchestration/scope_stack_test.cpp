// SPDX-License-Identifier: Apache-2.0
#include "orchestration/scope_stack.hpp"

#include <gtest/gtest.h>

#include <climits>

namespace spyre::orchestration {
namespace {

dependency::Root Failure(int32_t task, int32_t kernel, uint32_t code) {
    return std::make_shared<const TaskFailureInfo>(
        TaskFailureInfo{.task_id = uint64_t(task), .device_code = code, .kernel_id = kernel});
}

TEST(ScopeStack, PushPopNested) {
    ScopeStack s;
    EXPECT_EQ(s.depth(), 0);
    EXPECT_FALSE(s.Pop());
    s.Push(0, 1);
    s.Push(5, 2);
    EXPECT_EQ(s.depth(), 2);
    EXPECT_EQ(s.outermost(), 0);
    EXPECT_EQ(s.SerialAt(1), 1u);
    EXPECT_EQ(s.SerialAt(2), 2u);
    EXPECT_EQ(s.Pop()->begin, 5);
    EXPECT_EQ(s.Pop()->begin, 0);
    EXPECT_FALSE(s.outermost());
}

TEST(ScopeStack, AFailureCountsInEveryOpenScopeItBelongsTo) {
    ScopeStack s;
    s.Push(0, 1);
    s.Push(5, 2);
    const dependency::Root root = Failure(3, 7, 42);
    // Scopes hold sequence numbers: a task is in a scope by its sequence
    // number, whatever its (wrapping) id; here the ids are the numbers.
    s.NoteFailure(3, 3, 7, false, root);  // submitted before the inner scope began
    s.NoteFailure(6, 6, 8, true, root);   // in both
    s.NoteFailure(9, 9, 9, false, Failure(9, 9, 1));
    const ScopeRecord inner = *s.Pop();
    EXPECT_EQ(inner.failed, 1);
    EXPECT_EQ(inner.skipped, 1);
    EXPECT_EQ(inner.first_task, 6);
    EXPECT_EQ(inner.first_root->task_id, 3u);
    const ScopeRecord outer = *s.Pop();
    EXPECT_EQ(outer.failed, 2);
    EXPECT_EQ(outer.skipped, 1);
    EXPECT_EQ(outer.first_task, 3);
    EXPECT_EQ(outer.first_root->device_code, 42u);
}

// A scope begun just before the task ids wrapped: a task after the wrap
// (a small id, a larger sequence number) is still in it.
TEST(ScopeStack, ATaskPastTheIdWrapBelongsToTheScopeBegunBeforeIt) {
    ScopeStack s;
    const int64_t begin = int64_t(INT32_MAX) - 1;
    s.Push(begin, 1);
    s.NoteFailure(begin + 2, 1, 7, false, Failure(1, 7, 5));
    const ScopeRecord scope = *s.Pop();
    EXPECT_EQ(scope.failed, 1);
    EXPECT_EQ(scope.first_task, 1);
}

}  // namespace
}  // namespace spyre::orchestration
