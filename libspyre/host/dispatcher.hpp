// SPDX-License-Identifier: Apache-2.0
// The level-3 dispatcher: takes each task as the host orchestration function
// submits it, finds its dependencies (RegionTracker, across the runs in
// flight), starts it once ready (chip tasks on the device Place picks, as
// many device threads as the device runs chip tasks at once; SubWorkers on
// the pool), and on each completion releases consumers, or skips them when
// the task failed, frees what finished well (its TaskRecord stays), and
// ends the run once the function returned and its tasks finished. A run
// holds at most its window of unfinished tasks: the submitter waits for
// room without the lock. Everything under one lock; devices and
// SubWorkers run outside it, and neither a submitter nor the thread that ran
// a task waits for that lock: each parks its task (ParkingInbox) for whoever
// holds the lock, which files or applies it when it takes the lock and
// again after it releases it.
// Waiters sleep on their run's futex word, never on the lock.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "host_task.hpp"
#include "dependency/job_threads.hpp"
#include "forked.hpp"
#include "placement.hpp"
#include "region_tracker.hpp"
#include "residency.hpp"
#include "spyre/common/adaptive_mutex.hpp"
#include "spyre/common/inbox.hpp"
#include "spyre/host/chip_executor.hpp"
#include "spyre/host/worker.hpp"

namespace spyre::host {

class LocalChipExecutor;
class RemoteChipExecutor;

// Inside a catch block: the kind, cause and device code of the exception in
// flight into `f` (a spyre::Error keeps its kind; any other exception is
// TaskFailed with its what()), and `f` as its own root (the record of the
// task that failed).
void SetCause(TaskFailureInfo& f);

class Dispatcher {
public:
    Dispatcher(std::vector<std::unique_ptr<ChipExecutor>> executors, const DistributedConfig& config);
    ~Dispatcher();
    // Waits for the runs in flight, stops the threads, closes the executors.
    void Shutdown();

    // A run whose host orchestration function is about to run, in flight
    // from now on (its window set).
    std::shared_ptr<RunState> Begin(std::unique_ptr<RunState> run);
    // Takes `task` of `run` (not sealed): waits while the run has its
    // window of unfinished tasks, then parks it for the lock's holder (this
    // thread when the lock is free), which files its accesses and starts it
    // once what it depends on has finished. Every later use of the lock
    // files it first.
    void Submit(RunState& run, std::unique_ptr<HostTask> task);
    // A task to fill and Submit: one that finished before, emptied, when
    // the calling thread's `spares` or the dispatcher has one. A submitter
    // allocating each task that a device thread frees would make every
    // allocation take malloc's slow path (a free goes to the freeing
    // thread's cache).
    std::unique_ptr<HostTask> NewTask(std::vector<std::unique_ptr<HostTask>>& spares);
    // The host orchestration function returned, or threw (`failure`): the
    // run ends once the tasks it submitted have finished.
    void Seal(RunState& run, std::optional<TaskFailureInfo> failure);
    // The run's outputs, or HostRunError; `progress` (when set) on this
    // thread. InvalidArgument when called from the run's own SubWorker,
    // chip function or orchestration function (it would wait for itself).
    std::vector<HostTensor> Wait(RunState& run, const ProgressCallback& progress = {});
    bool Done(RunState& run);
    // For a pool thread waiting on `awaited` (SleepOrHelp), about a job
    // queued on its pool: whether to leave `task` there. A chip task of
    // another run whose device's slots this thread's calls all hold (a chip
    // function waiting on a nested run) could only fail on this thread: it
    // waits for the call to end, unless something waits for it (the
    // awaited run may): left queued, both runs would hang; run, it fails.
    bool LeaveToItsLane(const HostTask& task, const RunState& awaited);
    // Applies what other threads parked while LeaveToItsLane held the
    // lock (they left it to the holder).
    void ApplyParked();
    // Chip calls of this dispatcher that wait for a nested run. While the
    // calling thread waits (SleepOrHelp), the devices of the chip calls it
    // runs count it (`marked` says which, for EndNestedWait): a device whose
    // every slot is held by such a call is blocked. Placement avoids
    // blocked devices; a waiting thread never waits for a slot itself
    // (LeaveToItsLane, RunChip), and moves the awaited run's chip tasks
    // queued on a blocked device to one that is not, or fails them where
    // every device they may run on is blocked (SweepStuckChipTasksOf): no
    // slot there can free before one of the awaited runs ends, so they
    // would wait for each other for good (found probing from outside:
    // chip functions whose nested runs' tasks were queued on each other's
    // devices).
    struct NestedWait {
        size_t devices[8];
        size_t count = 0;
    };
    void BeginNestedWait(NestedWait& marked);
    void EndNestedWait(const NestedWait& marked);
    bool AllDevicesBlocked() const noexcept;
    // The chip tasks of `run` queued on blocked devices: moved to a device
    // that is not, or failed (InvalidArgument, on the calling thread) when
    // none they may run on is; whether it did either.
    bool SweepStuckChipTasksOf(RunState& run);
    // Waits up to `timeout` for the run to end; whether it did. Checks the
    // caller as Wait does, and does not take the run's outputs.
    bool WaitFor(RunState& run, std::chrono::nanoseconds timeout);
    // InvalidArgument when the calling thread runs a task or the
    // orchestration function of `run`, or a task `run` depends on (a wait
    // there would wait for itself).
    void CheckNotPartOf(const RunState& run);
    // Whether the calling thread runs a task (SubWorker or chip function)
    // of `run`. Compares addresses only: `run` may have ended.
    static bool CallerRunsATaskOf(const RunState& run) noexcept;
    // The task (SubWorker or chip function) the calling thread runs, unless
    // it runs `run`'s orchestration function inside that task (a nested
    // run); null when it runs none. Compares addresses only.
    static const HostTask* CallerTaskOutside(const RunState& run) noexcept;
    // While a thread running tasks or orchestration functions of this
    // dispatcher waits for a run: that wait, filed so that a wait closing
    // a cycle of them (two SubWorkers, each waiting for the other's run,
    // on threads of their own; or through a task that reads what a waiting
    // task's consumer writes) is refused instead of hanging them for good
    // (found probing from outside). InvalidArgument naming both waits.
    // Checked when a wait begins only: a submission adds edges out of its
    // own run, which nothing can wait for before its function returns.
    //
    // A wait for room in a run's window (a submit over it, `for_room`) is
    // filed too, from a thread that runs tasks: it ends once one task of the
    // window finishes, not the run. Both kinds are also checked task by
    // task (StuckWhile): a wait is refused when what it waits for cannot
    // finish while it and the waits filed last (a nested run over a task's
    // bytes, more tasks than its window, waiting for room that only tasks
    // waiting for that task could make, on another thread: found probing
    // from outside).
    class AwaitingRun {
    public:
        AwaitingRun(Dispatcher& dispatcher, const RunState& run, bool for_room = false);
        ~AwaitingRun();
        AwaitingRun(const AwaitingRun&) = delete;
        AwaitingRun& operator=(const AwaitingRun&) = delete;

    private:
        friend class Dispatcher;
        // Under the dispatcher's lock: the runs that cannot end before this
        // wait does.
        std::unordered_set<const RunState*> RunsItBlocks() const;
        Dispatcher& dispatcher_;
        const RunState* awaited_;
        std::vector<const RunState*> blocked_;  // cannot end before this wait does
        // The tasks its thread runs: their consumers' runs (through the
        // tensors they share) cannot end before this wait does either.
        std::vector<const HostTask*> tasks_;
        // Those tasks and the tasks that lent them bytes (HeldUpByCaller):
        // none of them, nor their consumers, can finish before this wait ends.
        std::vector<const HostTask*> holds_up_;
        std::string waiter_;                    // "task 'x' of run 'y'", for the message
        bool for_room_ = false;
        bool filed_ = false;
    };
    // Every task of the run, in submission order (waits for its end).
    std::vector<TaskRecord> Report(RunState& run);
    // Marks the calling thread as running `run`'s orchestration function
    // while it lives (Wait refuses to wait on that run from it).
    class Submitting {
    public:
        Submitting(const Dispatcher& dispatcher, const RunState& run);
        ~Submitting();
        Submitting(const Submitting&) = delete;
        Submitting& operator=(const Submitting&) = delete;

        const Dispatcher& dispatcher;
        const RunState& run;
        const Submitting* const previous;  // the orchestration function this one runs inside, or null
        const int depth;  // of the thread's tasks and orchestration functions, this one included
    };
    // Whether the calling thread runs a task (SubWorker or chip function)
    // or an orchestration function of this dispatcher, nested ones
    // included, or lets go of what a finished task held (FreeingHere):
    // destroying the Worker from there would wait for itself.
    bool CallerIsPartOf() const noexcept;
    // Whether the calling thread holds the lock to let go of what a
    // finished task held of the caller's (its tensors, a SubWorker's
    // closure): a RunHandle dropped there must not wait for its run (a
    // wrapped tensor's owner or a closure may hold the last one; they
    // hung the Worker for good: found probing from outside).
    bool FreeingHere() const noexcept;
    // The dispatcher's threads stay with the process that created it: in a
    // child forked since, every call of the Worker and its RunHandles is
    // InvalidArgument (`call` names it), and nothing waits for them.
    void CheckSameProcess(const char* call) const {
        made_in_.Check(call, "Worker", "create the Worker again in the child");
    }
    bool ForkedAway() const noexcept { return made_in_.ForkedAway(); }
    // The Worker is freed on a thread of its own: its local devices are
    // being closed (LocalChipExecutor::MarkClosing).
    void MarkDevicesClosing() noexcept;

    size_t device_count() const { return executors_.size(); }
    ChipExecutor& executor(size_t device) { return *executors_.at(device); }
    unsigned room(size_t device) const { return room_.at(device); }
    Worker::DeviceStats Stats(size_t device);
    Worker::Held HeldNow();

private:
    using Graveyard = std::vector<std::shared_ptr<RunState>>;
    // mu_ held while it lives: taken with the parked outcomes applied,
    // released with those parked meanwhile applied and ended runs freed.
    class Lock;
    void Unlock();       // mu_ held; posts to_post_ after releasing it
    void ApplyInbox();   // mu_ held: files the submissions, then applies the outcomes
    void File(HostTask* task);  // mu_ held: a submitted task's dependencies; starts it when ready
    void Park(HostTask& task);  // the task's outcome is set
    // Whether `run` ended within a short look, applying what device threads
    // parked meanwhile (they leave it to the looker and go on) and running
    // the run's tasks queued where a pool has a thread's room (a sleeping
    // device thread would take a wake-up to start them).
    bool LookForEnd(RunState& run);
    bool MayRunOneOf() const noexcept;  // lock-free: some pool has a job queued and room
    bool RunOneOf(RunState& run);       // one queued task of `run` on this thread
    void ApplyIfParked();  // the protocol of a thread that parked, for a looker that leaves
    std::vector<HostTensor> WaitReporting(RunState& run, const ProgressCallback& progress);  // Wait checked `run`
    void MakeReady(HostTask* task);
    void Finish(HostTask* task, HostTask::State state, TaskFailureInfo failure);
    void MarkLost(size_t device);  // mu_ held
    void EndRun(RunState& run);  // mu_ held: sealed, nothing unfinished
    void WaitForRoom(RunState& run);
    // mu_ held: the unfinished tasks that cannot finish while `wait` lasts:
    // those its thread holds up and their consumers, and, for each wait
    // filed that could then never end, those its thread holds up and their
    // consumers, until no more are added. Per run, how many; `through`
    // names, for the message, a filed wait that added some (or null).
    std::unordered_map<const RunState*, size_t> StuckWhile(const AwaitingRun& wait, const AwaitingRun** through) const;
    // Whether `wait` could never end with `stuck` tasks stuck: a run with
    // one of them never ends; a window full of them never has room.
    static bool NeverEnds(const AwaitingRun& wait, const std::unordered_map<const RunState*, size_t>& stuck);
    void SleepUntilDone(RunState& run);  // checks the caller is not part of `run` first
    std::vector<TaskRecord> RecordsOf(const RunState& run) const;  // mu_ held, the run ended
    void RunChip(HostTask* task);
    // A chip task the calling thread took from its own device's queue while
    // its chip calls hold every slot there (it waits for a nested run): to
    // the best device that is not blocked; false when none is.
    bool MoveToAnotherDevice(HostTask* task);
    // mu_ held: the device Place picks for `task` (placement_ filled from
    // the dispatcher's state), with `excluded` counted as blocked.
    size_t PlaceLocked(const HostTask& task, std::optional<size_t> excluded);
    bool Blocked(size_t device) const noexcept {
        return waiting_[device].load(std::memory_order_acquire) >= room_[device];
    }
    dependency::JobThreads::Job ChipJob(HostTask* task);  // RunChip(task), as its device's threads take it
    // After Submit released the lock: runs the chip tasks of its run that
    // it made ready and that are cheaper to run than to hand to a device
    // thread (a function that submits nothing), on this thread while the
    // device has a thread's room; posts the others.
    void RunCheapHere();
    // Counts `t`'s accesses on its storages' claims (StorageClaims), before
    // it is filed; InvalidArgument, naming the argument, when a task of
    // another Worker in flight conflicts with one (nothing counted then).
    void Claim(HostTask& t, const RunState& run);
    void ReleaseClaims(HostTask& t) noexcept;  // a finished task's, or a refused one's
    void RunSub(HostTask* task);
    void Free(HostTask* task);  // mu_ held: kept in spare_, or deleted

    static constexpr size_t kSpareTasks = 256;
    std::vector<std::unique_ptr<HostTask>> spare_;  // finished tasks for NewTask, under mu_

    AdaptiveMutex mu_;  // short sections, a submitter and device threads on other cores
    // Tasks submitted and tasks that ran, parked for whoever holds mu_
    // (a task is in one at a time: submitted, then, once run, finished).
    ParkingInbox<HostTask, &HostTask::inbox_next> submissions_;
    ParkingInbox<HostTask, &HostTask::inbox_next> inbox_;
    struct Parked {  // both, as ApplyParkedAfterUnlock looks at them
        const Dispatcher& d;
        bool Empty() const noexcept { return d.submissions_.Empty() && d.inbox_.Empty(); }
    };
    Parked parked_{*this};
    std::atomic<int> lookers_{0};  // waiters in LookForEnd
    RegionTracker tracker_;
    Residency residency_;
    std::vector<std::unique_ptr<ChipExecutor>> executors_;
    std::vector<LocalChipExecutor*> local_;  // executors_[d] when it is local, else null
    std::vector<RemoteChipExecutor*> remote_executors_;  // executors_[d] when it is remote, else null
    std::vector<std::string> device_names_;  // Describe() of each executor, for the trace
    std::vector<uint32_t> load_;
    std::vector<uint32_t> room_;  // Concurrency() of each executor
    // Chip calls per device whose thread waits for a nested run, and all of
    // them (placement looks at the devices only while some wait).
    std::unique_ptr<std::atomic<uint32_t>[]> waiting_;
    std::atomic<uint32_t> waiting_total_{0};
    std::vector<bool> remote_;
    // Devices a chip call found lost (DeviceLost): gone for good, with every
    // device lost alongside (the same remote rank's). Placement avoids them;
    // under mu_. A lost rank's devices took every later free-placed task
    // there, so run after run failed with live devices idle (found probing
    // from outside).
    std::vector<bool> lost_;
    std::vector<int64_t> lost_together_;  // per device: its rank, or -1 - device for a local one
    bool any_lost_ = false;
    bool any_remote_ = false;  // a device of another rank: placement checks that a task fits its calls
    PlacementInput placement_;  // reused: no allocation per task
    std::unique_ptr<DeviceCosts> costs_;  // what placement learns of each device's speed
    std::vector<Worker::DeviceStats> stats_;
    std::vector<std::unique_ptr<dependency::JobThreads>> lanes_;
    std::unique_ptr<dependency::JobThreads> sub_workers_;
    // Tasks made ready under the lock, handed to their threads once it is
    // released (one hand-over per thread pool): lanes_ by index, then the pool.
    std::vector<std::vector<dependency::JobThreads::Job>> to_post_;
    int block_dim_ = 1;
    uint32_t cheap_chip_task_ns_ = 0;  // DistributedConfig's; 0: none runs on its submitter
    size_t rotate_ = 0;
    std::vector<HostTask*> producers_;  // Submit's scratch: no allocation per task
    // Each local chip function's runs (HostTask::cost), under mu_; nodes
    // stay where they are, so a task keeps a pointer to its function's.
    std::unordered_map<const ChipRegistry::Entry*, dependency::RunCost> chip_costs_;
    // Tasks finished since Residency last dropped the ranges of tensors
    // nobody holds: a long run creating tensors sweeps as it goes.
    size_t since_sweep_ = 0;
    // Runs mostly end in the order they began: a deque, whose front goes in O(1).
    std::deque<std::shared_ptr<RunState>> in_flight_;
    Graveyard finished_;  // released outside the lock: a run may end deep inside Finish
    // Failures whose run is in flight (RunState::roots), and the skipped
    // tasks of runs that ended before the run of their failure: kept in the
    // hazard map, by root, so later readers of what they did not write are
    // still skipped while that failure's run goes on (a nested run's task,
    // skipped for its caller's failure, ended first and took the failure's
    // trace with it: the caller's later reader read the failed bytes).
    std::unordered_set<const TaskFailureInfo*> live_roots_;
    std::vector<const AwaitingRun*> run_waits_;  // under mu_
    std::unordered_multimap<const TaskFailureInfo*, HostTask*> retired_;
    detail::MadeInProcess made_in_;
};

}  // namespace spyre::host
