// SPDX-License-Identifier: Apache-2.0
// ScopeStack (seed 004): the open scopes, innermost last. A scope begun when
// the next task's sequence number (TaskRing::head_seq) was `begin` owns the
// tasks [begin, head) when it ends.
// It holds a reference on those of them with implicit outputs (seed 004:
// fanout = consumers + scope depth), so nested scopes release each
// reference once; tasks without implicit outputs are not held, so a scope
// of any length streams through the task ring. What failed in a scope is
// counted here as it happens, because its tasks' slots may be reused by the
// time it ends. Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "orchestration/task_ring.hpp"

namespace spyre::orchestration {

struct ScopeRecord {
    int64_t begin = 0;       // its first task's sequence number
    int32_t failed = 0;      // its tasks that failed so far
    int32_t skipped = 0;     // and that were skipped
    int32_t first_task = -1;  // the first of those, and why
    int32_t first_kernel = -1;
    dependency::Root first_root;  // never null once first_task is set
    bool ends_after_inner = false;  // its owner let go of it while inner scopes were open
    uint32_t serial = 0;  // which scope of the runtime it is: a scope ended and one begun at its depth differ
};

class ScopeStack {
public:
    void Push(int64_t begin_seq, uint32_t serial) { scopes_.push_back({.begin = begin_seq, .serial = serial}); }
    // The innermost scope, or nullopt with no scope open.
    std::optional<ScopeRecord> Pop() {
        if (scopes_.empty()) return std::nullopt;
        const ScopeRecord r = scopes_.back();
        scopes_.pop_back();
        return r;
    }
    int32_t depth() const noexcept { return int32_t(scopes_.size()); }
    // The serial of the scope open at `depth` (1: the outermost).
    uint32_t SerialAt(int32_t depth) const { return scopes_.at(size_t(depth - 1)).serial; }
    // The scope open at `depth` (1: the outermost) ends once those inside it have.
    void EndAfterInner(int32_t depth) { scopes_.at(size_t(depth - 1)).ends_after_inner = true; }
    // Whether the innermost open scope is one that waits for that.
    bool InnermostEndsNow() const noexcept { return !scopes_.empty() && scopes_.back().ends_after_inner; }
    // The outermost open scope's first sequence number (what holds the oldest tasks).
    std::optional<int64_t> outermost() const {
        if (scopes_.empty()) return std::nullopt;
        return scopes_.front().begin;
    }
    // Task `task_id` (sequence number `seq`) failed (or was skipped): every
    // open scope it belongs to (those begun at or before it) counts it.
    void NoteFailure(int64_t seq, int32_t task_id, int32_t kernel_id, bool skipped, const dependency::Root& root) {
        for (ScopeRecord& s : scopes_) {
            if (s.begin > seq) break;  // begins rise from outer to inner
            ++(skipped ? s.skipped : s.failed);
            if (s.first_task < 0) {
                s.first_task = task_id;
                s.first_kernel = kernel_id;
                s.first_root = root;
            }
        }
    }

private:
    std::vector<ScopeRecord> scopes_;
};

}  // namespace spyre::orchestration
