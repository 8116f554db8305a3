// SPDX-License-Identifier: Apache-2.0
// ReadyQueue: the ready tasks of one worker type, in the order they became
// ready, for the executor that serves that type. A mutex and a condition
// variable: pushes come from the engine (under its own lock, so they are
// already serialised) and pops from a few worker threads that sleep when
// idle, which a lock-free queue would have to rebuild with a futex anyway.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace spyre::orchestration {

struct TaskDescriptor;

// What an executor receives: the task's descriptor, stable (and its
// parameters unchanged) until the executor reports the task complete.
struct ReadyTask {
    int32_t task_id;
    const TaskDescriptor* task;
};

class ReadyQueue {
public:
    // `name` names its depth counter in a trace ("<device> ready queue (host)").
    explicit ReadyQueue(std::string name = "ready queue") : name_(std::move(name)) {}

    void Push(ReadyTask t);
    // Waits for at least one task and moves up to `max` into `out`; false
    // once the queue is closed and empty.
    bool PopBatch(std::vector<ReadyTask>& out, size_t max);
    // Moves up to `max` ready tasks into `out` without waiting; returns how
    // many (an executor that also waits for completions polls with it).
    size_t TryPopBatch(std::vector<ReadyTask>& out, size_t max);
    // Wakes every waiter; PopBatch drains what is left and then returns false.
    void Close();
    size_t size() const;

private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<ReadyTask> q_;
    bool closed_ = false;
    std::string name_;
    uint32_t trace_track_ = 0;  // of recording trace_recording_
    uint64_t trace_recording_ = 0;
    void TraceDepth();  // under mu_, while a trace records
};

}  // namespace spyre::orchestration
