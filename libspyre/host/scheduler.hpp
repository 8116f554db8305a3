// SPDX-License-Identifier: Apache-2.0
// The level-3 scheduler: takes a recorded run, finds its dependencies
// (RegionTracker, across the runs in flight), starts ready tasks (chip tasks
// on the device Place picks, as many device threads as the device runs
// chip tasks at once; SubWorkers on the pool), and on each completion releases consumers, or skips them when the
// task failed, until the run ends. Everything under one lock; devices and
// SubWorkers run outside it, and the thread that ran a task never waits for
// that lock: it parks the outcome (ParkingInbox) for whoever holds the lock,
// which applies it when it takes the lock and again after it releases it.
// Waiters sleep on their run's futex word, never on the lock.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host_task.hpp"
#include "job_threads.hpp"
#include "placement.hpp"
#include "region_tracker.hpp"
#include "residency.hpp"
#include "spyre/common/inbox.hpp"
#include "spyre/host/chip_executor.hpp"
#include "spyre/host/worker.hpp"

namespace spyre::host {

// Inside a catch block: the kind, cause and device code of the exception in
// flight into `f` (a spyre::Error keeps its kind; any other exception is
// TaskFailed with its what()).
void SetCause(TaskFailureInfo& f);

class Scheduler {
public:
    Scheduler(std::vector<std::unique_ptr<ChipExecutor>> executors, const DistributedConfig& config);
    ~Scheduler();
    // Waits for the runs in flight, stops the threads, closes the executors.
    void Shutdown();

    std::shared_ptr<RunState> Start(std::unique_ptr<RunState> run);
    // A run whose host orchestration function threw (`failure`): ended, its
    // recorded tasks skipped without running or touching the dependency
    // tracking (they impose nothing on later runs); Wait throws.
    static std::shared_ptr<RunState> Fail(std::unique_ptr<RunState> run, TaskFailureInfo failure);
    // The run's outputs, or HostRunError; `progress` (when set) on this thread.
    std::vector<HostTensor> Wait(RunState& run, const ProgressCallback& progress = {});
    bool Done(RunState& run);

    size_t device_count() const { return executors_.size(); }
    ChipExecutor& executor(size_t device) { return *executors_.at(device); }
    unsigned room(size_t device) const { return room_.at(device); }
    Worker::DeviceStats Stats(size_t device);

private:
    using Graveyard = std::vector<std::shared_ptr<RunState>>;
    // mu_ held while it lives: taken with the parked outcomes applied,
    // released with those parked meanwhile applied and ended runs freed.
    class Lock;
    void Unlock();       // mu_ held; posts to_post_ after releasing it
    void ApplyInbox();   // mu_ held
    void Park(HostTask& task);  // the task's outcome is set
    std::vector<HostTensor> WaitReporting(RunState& run, const ProgressCallback& progress);
    void MakeReady(HostTask* task);
    void Finish(HostTask* task, HostTask::State state, TaskFailureInfo failure);
    void RunChip(HostTask* task);
    void RunSub(HostTask* task);

    std::mutex mu_;
    ParkingInbox<HostTask, &HostTask::inbox_next> inbox_;
    RegionTracker tracker_;
    Residency residency_;
    std::vector<std::unique_ptr<ChipExecutor>> executors_;
    std::vector<std::string> device_names_;  // Describe() of each executor, for the trace
    std::vector<uint32_t> load_;
    std::vector<uint32_t> room_;  // Concurrency() of each executor
    std::vector<bool> remote_;
    PlacementInput placement_;  // reused: no allocation per task
    std::unique_ptr<DeviceCosts> costs_;  // what placement learns of each device's speed
    std::vector<Worker::DeviceStats> stats_;
    std::vector<std::unique_ptr<JobThreads>> lanes_;
    std::unique_ptr<JobThreads> sub_workers_;
    // Tasks made ready under the lock, handed to their threads once it is
    // released (one hand-over per thread pool): lanes_ by index, then the pool.
    std::vector<std::vector<JobThreads::Job>> to_post_;
    int block_dim_ = 1;
    size_t rotate_ = 0;
    std::vector<std::shared_ptr<RunState>> in_flight_;
    Graveyard finished_;  // released outside the lock: a run may end deep inside Finish
};

}  // namespace spyre::host
