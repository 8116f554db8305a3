// SPDX-License-Identifier: Apache-2.0
// ScopeStack (seed 004): the task range of each open scope. A scope begun
// when the next task id was `begin` owns [begin, head) when it ends; each
// task holds one reference per scope open at its submission (its depth), so
// nested ranges release every reference exactly once. Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace spyre::orchestration {

class ScopeStack {
public:
    void Push(int32_t begin_task) { begins_.push_back(begin_task); }
    // The innermost scope's first task id, or nullopt with no scope open.
    std::optional<int32_t> Pop() {
        if (begins_.empty()) return std::nullopt;
        const int32_t b = begins_.back();
        begins_.pop_back();
        return b;
    }
    int32_t depth() const noexcept { return int32_t(begins_.size()); }
    // The outermost open scope's first task (what holds the oldest tasks).
    std::optional<int32_t> outermost() const {
        if (begins_.empty()) return std::nullopt;
        return begins_.front();
    }

private:
    std::vector<int32_t> begins_;
};

}  // namespace spyre::orchestration
