// SPDX-License-Identifier: Apache-2.0
// Executor: what runs the ready tasks of one worker type. The task graph puts
// ready tasks on the executor's ReadyQueue; the executor runs them however
// it likes (host threads, a device task queue: batch the queue into one
// Submit, reap completions out of order) and reports each as (task id,
// status) through the CompletionSink. Status 0 is success; anything else is
// the device error code of a failed task.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>

#include "dependency/run_cost.hpp"
#include "orchestration/program_slots.hpp"
#include "orchestration/ready_queue.hpp"
#include "orchestration/task_ring.hpp"

namespace spyre::orchestration {

using dependency::RunCost;

// What a kernel id stands for: a host function, a device program, or both.
struct KernelEntry {
    int32_t kernel_id = -1;
    pto_host_fn host_fn = nullptr;
    void* user_data = nullptr;
    // C++ host kernels (Orchestrator::RegisterHostKernel).
    std::function<uint32_t(void* const*, const uint64_t*, int32_t)> host_callable;
    uint64_t program_address = 0;  // function-relative; 0 = none
    uint64_t program_bytes = 0;    // its image's size: no task may write there
    bool has_program = false;
    ProgramSlots slots;  // of its device program: checked at submit (count -1: unknown)
    mutable RunCost host_cost;  // its host runs so far
};

// Where and when a task ran, for the trace (given only while one records).
struct TaskTiming {
    uint32_t track = 0;            // trace::detail::NamedTrack of the worker or core
    const char* category = "task";  // "task" (a host worker) or "device" (a core)
    uint64_t start_ns = 0;
    uint64_t end_ns = 0;
    uint64_t sent_ns = 0;    // when the host sent it to the device (0: host task)
    uint64_t reaped_ns = 0;  // when the host saw the device's completion
};

// The status of a device task that never completed because the device is
// gone (DeviceLost: a dead daemon, a removed function), as opposed to one
// the device itself aborted (SPYRE_ERR_ABORTED: a function reset).
inline constexpr uint32_t kDeviceLostStatus = 0xfffffffeu;

class CompletionSink {
public:
    virtual ~CompletionSink() = default;
    // The device is gone: tasks completed with kDeviceLostStatus from here
    // on fail as DeviceLost, saying `why` (the driver's message).
    virtual void OnDeviceLost(const std::string& why) { (void)why; }
    // Thread-safe; may be called from any thread, in any order. `timing`
    // (null when no trace records, or the task did not run) places the
    // task on the timeline.
    virtual void OnTaskComplete(int32_t task_id, uint32_t status, const TaskTiming* timing = nullptr) = 0;
    // Several at once (no timing): an executor that reaps completions in
    // batches reports them with one call, so the sink takes its lock once.
    struct Done {
        int32_t task_id;
        uint32_t status;
    };
    virtual void OnTasksComplete(std::span<const Done> done) {
        for (const Done& d : done) OnTaskComplete(d.task_id, d.status);
    }
};

class Executor {
public:
    virtual ~Executor() = default;
    virtual const char* name() const noexcept = 0;
    // Whether this executor can run `kernel` (checked at submission).
    virtual bool CanRun(const KernelEntry& kernel) const noexcept = 0;
    // Starts serving `queue`; both outlive Stop().
    virtual void Start(ReadyQueue& queue, CompletionSink& sink) = 0;
    // Called after queue.Close(); returns once no task is running.
    virtual void Stop() = 0;

    // An executor without threads of its own (the device's task queues) is
    // driven by the runtime's threads: kicked after tasks were pushed to its
    // queue (never waits), and driven by a thread that waits for tasks
    // until `word` (the waiter's EventCount word) no longer holds
    // `expected`, it has nothing in flight (false at once when it has
    // none: the thread waits elsewhere) or `until` has come.
    virtual bool driven() const noexcept { return false; }
    // Whether a task may be pushed before its producers finished, when they
    // are all this executor's and pushed already (at most
    // TaskDescriptor::kMaxAfter): the executor orders it after them itself
    // (the device's task queues wait on the card, driver::After) and
    // completes it with SPYRE_ERR_DEPENDENCY_FAILED, without running it,
    // when one of them failed.
    virtual bool OrdersAfterProducers() const noexcept { return false; }
    virtual void Kick() noexcept {}
    // For a thread of the runtime that waits inside a task (a kernel's
    // submission stalled on full rings): runs one task of `queue` on the
    // calling thread and reports it to `sink`; false when none is queued or
    // this executor runs no task on a caller's thread (the device's).
    virtual bool RunOneQueued(ReadyQueue& /*queue*/, CompletionSink& /*sink*/) { return false; }
    virtual bool Drive(const std::atomic<uint32_t>& /*word*/, uint32_t /*expected*/,
                       std::chrono::steady_clock::time_point /*until*/) {
        return false;
    }
};

}  // namespace spyre::orchestration
