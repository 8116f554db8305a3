// SPDX-License-Identifier: Apache-2.0
// CpuWorker: the host CPU executor. Worker threads pop ready tasks and call
// the kernel's host function with the task's parameter addresses and sizes;
// the return value is the task's status. The threads are a JobThreads pool
// (the engine's, which the host level uses too), each running one worker
// loop from Start until the ready queue is closed.
#pragma once

#include <memory>
#include <string>

#include "dependency/job_threads.hpp"
#include "orchestration/executor.hpp"

namespace spyre::orchestration {

// The status of a task whose host kernel threw (what it threw is in the
// task's `thrown`); a kernel that returns this value without throwing is
// only a kernel returning a code.
inline constexpr uint32_t kHostKernelThrew = 0xffffffffu;

class CpuWorker final : public Executor {
public:
    // `device` names the worker's trace tracks ("<device> host worker N").
    CpuWorker(unsigned threads, std::string device);
    ~CpuWorker() override;
    const char* name() const noexcept override { return "host"; }
    bool CanRun(const KernelEntry& kernel) const noexcept override {
        return kernel.host_fn != nullptr || bool(kernel.host_callable);
    }
    void Start(ReadyQueue& queue, CompletionSink& sink) override;
    void Stop() override;
    bool RunOneQueued(ReadyQueue& queue, CompletionSink& sink) override;
    unsigned threads() const noexcept { return threads_; }

    // Runs one task's kernel on this thread; returns its status (what the
    // kernel returned, or kHostKernelThrew with `task.thrown` set).
    static uint32_t Run(const TaskDescriptor& task);
    // The same, and records how long it took in the kernel's host_cost.
    static uint32_t RunTimed(const TaskDescriptor& task);

    // The runtime (its CompletionSink) whose task this thread is running,
    // or null: a kernel that waits for every task of its own runtime would
    // wait for itself. Set for a worker thread's life, and by a
    // RunningTaskOf around a task run on the submitting thread.
    static const CompletionSink* RunningTaskOf() noexcept;
    // The tasks whose kernels this thread is in, innermost first (a kernel
    // run on the submitting thread may submit a task that runs there too),
    // or null. A submission from one of them that waits for the task ring
    // or the heap ring to drain past it would wait for itself.
    struct TaskFrame {
        const TaskDescriptor* task;
        const TaskFrame* outer;
    };
    static const TaskFrame* RunningTasks() noexcept;
    class RunningTask {
    public:
        explicit RunningTask(const CompletionSink* sink) noexcept;
        ~RunningTask();
        RunningTask(const RunningTask&) = delete;
        RunningTask& operator=(const RunningTask&) = delete;

    private:
        const CompletionSink* outer_;
    };

private:
    // One pool thread's loop: pops and runs until the queue is closed.
    void Serve(ReadyQueue& queue, CompletionSink& sink);
    // A thread's track in a trace, named once per recording.
    struct Track {
        std::string name;
        uint32_t id = 0;          // of `recording`
        uint64_t recording = 0;
    };
    // Runs `t` and reports it (its span on `track` while a trace records).
    void RunAndReport(const ReadyTask& t, CompletionSink& sink, Track& track);

    unsigned threads_;
    std::string device_;
    std::unique_ptr<dependency::JobThreads> pool_;
};

}  // namespace spyre::orchestration
