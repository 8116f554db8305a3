// SPDX-License-Identifier: Apache-2.0
// ReadyQueue: the ready tasks of one worker type, in the order they became
// ready, for the executor that serves that type. Pushes come from the task graph
// (under its own lock, so they are already serialised) and pops from a few
// worker threads that sleep when idle.
//
// Two implementations, chosen per runtime (OrchestratorOptions::ready_queues),
// because seed 004 asks for lock-free ready queues and a lock is faster on
// some machines and DAGs: a mutex-guarded deque, and a bounded lock-free
// ring (Vyukov's sequence per cell) whose idle poppers spin briefly. Idle
// poppers of both sleep on an EventCount. bench/orchestration_bench runs both on the same
// DAGs; docs/orchestration.md has the figures and which is the default.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "spyre/common/eventcount.hpp"
#include "spyre/orchestration/orchestrator.hpp"

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
    explicit ReadyQueue(std::string name) : name_(std::move(name)) {}
    virtual ~ReadyQueue() = default;
    virtual void Push(ReadyTask t) = 0;
    // Waits for at least one task and moves up to `max` into `out`; false
    // once the queue is closed and empty.
    virtual bool PopBatch(std::vector<ReadyTask>& out, size_t max) = 0;
    // Moves up to `max` ready tasks into `out` without waiting; returns how
    // many (an executor that also waits for completions polls with it).
    virtual size_t TryPopBatch(std::vector<ReadyTask>& out, size_t max) = 0;
    // Wakes every waiter; PopBatch drains what is left and then returns false.
    virtual void Close() = 0;
    virtual size_t size() const = 0;

protected:
    // While a trace records: the queue's depth as a counter sample.
    void TraceDepth(size_t depth);

private:
    const std::string name_;
    std::mutex trace_mu_;       // pushers and poppers may sample at once (lock-free queue)
    uint32_t trace_track_ = 0;  // of recording trace_recording_
    uint64_t trace_recording_ = 0;
};

// `capacity`: the most tasks that can be ready at once (the task ring's size).
std::unique_ptr<ReadyQueue> MakeReadyQueue(ReadyQueueKind kind, size_t capacity, std::string name);

class LockedReadyQueue final : public ReadyQueue {
public:
    using ReadyQueue::ReadyQueue;
    void Push(ReadyTask t) override;
    bool PopBatch(std::vector<ReadyTask>& out, size_t max) override;
    size_t TryPopBatch(std::vector<ReadyTask>& out, size_t max) override;
    void Close() override;
    size_t size() const override;

private:
    mutable std::mutex mu_;
    std::deque<ReadyTask> q_;
    bool closed_ = false;
    EventCount wake_;
};

class LockFreeReadyQueue final : public ReadyQueue {
public:
    LockFreeReadyQueue(size_t capacity, std::string name);
    void Push(ReadyTask t) override;
    bool PopBatch(std::vector<ReadyTask>& out, size_t max) override;
    size_t TryPopBatch(std::vector<ReadyTask>& out, size_t max) override;
    void Close() override;
    size_t size() const override;

private:
    struct Cell {
        std::atomic<uint64_t> seq;
        ReadyTask task;
    };
    bool TryPop(ReadyTask& out);

    std::unique_ptr<Cell[]> cells_;
    const uint64_t mask_;
    alignas(64) std::atomic<uint64_t> tail_{0};  // next position to fill (the task graph)
    alignas(64) std::atomic<uint64_t> head_{0};  // next position to take (the workers)
    alignas(64) EventCount wake_;
    std::atomic<bool> closed_{false};
};

}  // namespace spyre::orchestration
