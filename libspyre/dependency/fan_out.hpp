// SPDX-License-Identifier: Apache-2.0
// Fan-in and fan-out with poisoning: the part of the dependency engine that
// releases tasks. The orchestration runtime runs it over task-ring slots,
// the host level over host tasks; each embeds a Gate in its task.
//
// A task waits for its producers that have not finished (its fan-in). When
// one finishes, each of its consumers counts it off (Release), and the last
// one to finish makes the consumer ready. A producer that did not finish
// well (it failed, or was skipped itself) poisons the consumers that read
// what it writes: they inherit its root, the failure behind it, and are
// skipped when ready instead of run. A consumer that only follows it (it
// writes over what the producer wrote, or writes what it read) still runs:
// its own bytes are whole, and whether it is skipped must not depend on
// whether the failure came before or after it was submitted (a failure
// met after its task is gone is kept by the caller's hazard map for
// readers only). A task keeps the first root it meets: the first failure
// wins. A task submitted after its producer finished meets it at once
// (Meet): nothing to wait for, but it may inherit that producer's root.
//
// The root is a shared spyre::TaskFailureInfo: failures are rare, a task
// that does not fail carries a null pointer, and nothing is allocated for
// it. A value, not the failed task: that task may be gone by the time its
// consumers are skipped. Not thread-safe: callers hold their own lock.
#pragma once

#include <cstdint>
#include <memory>

#include "spyre/dependency/task_failure.hpp"

namespace spyre::dependency {

// The failure behind a failed or skipped task (null: none).
using Root = std::shared_ptr<const TaskFailureInfo>;

// What stands between a task and its start.
struct Gate {
    int32_t fanin_remaining = 0;  // producers not finished yet
    Root root;  // the failure it is skipped for; its own once it failed
};

// `root` inherits `failure` (null: nothing to inherit) unless it has one
// already: the first failure wins.
inline void Inherit(Root& root, const Root& failure) {
    if (failure && !root) [[unlikely]]
        root = failure;
}

// A new task (`task`) meets one of its producers. One that has `finished`
// passes on its root (null when it finished well) when `reads_its_writes()`
// (asked only then); one that has not is waited for: returns true, and the
// caller files the task among that producer's consumers.
template <typename ReadsItsWrites>
bool Meet(Gate& task, const Gate& producer, bool finished, ReadsItsWrites&& reads_its_writes) {
    if (finished) {
        if (producer.root && reads_its_writes()) [[unlikely]]
            Inherit(task.root, producer.root);
        return false;
    }
    ++task.fanin_remaining;
    return true;
}

// A producer finished, with `root` (null when it finished well). Each of
// its `consumers` inherits the root when `reads_its_writes(consumer)`
// (asked only for a root) and counts the producer off; `ready` is called
// with each whose last producer it was (the caller starts it, or skips it
// when its gate has a root). `task(c)` is the task a consumer handle names
// (it has a Gate `gate`).
template <typename Consumers, typename TaskOf, typename Ready, typename ReadsItsWrites>
void Release(const Root& root, const Consumers& consumers, TaskOf&& task, Ready&& ready,
             ReadsItsWrites&& reads_its_writes) {
    for (const auto& c : consumers) {
        auto& consumer = task(c);
        if (root && reads_its_writes(consumer)) [[unlikely]]
            Inherit(consumer.gate.root, root);
        if (--consumer.gate.fanin_remaining == 0) ready(consumer);
    }
}

}  // namespace spyre::dependency
