// SPDX-License-Identifier: Apache-2.0
//
// The task queues of a function as its queue server serves them
// (spyre_task.h): one queue per core group of the card. A turn copies CBs out
// of the queues into per-queue pending lists, taking one only while its
// completion has room in the CQ, so no core ever waits to post, and hands
// them to the card's cores (CardCores), whose idle workers take them one per
// core, validate and run them and post their completions in the order they
// finish. The lane's own thread runs tasks itself on a lent core
// (CardCores::RunOneTask): a lone task, a chain's next link, starts without
// waking a worker (a long one only on a function of one queue: with more,
// the lane keeps serving their doorbells). How many workers a turn wakes
// depends on how long the queue's recent tasks ran: short ones (under
// kShortTaskNs, less than a wake-up costs) run on the lane, with one helper
// when the batch holds a task not known to be short (a program not seen
// lately: the helper runs the rest while it runs), so a batch of them costs
// one wake-up at most, not one per task, and their completions are posted
// in groups; longer ones go to a worker each. Within a run of short tasks
// the lane leaves to a worker a task whose program ran long the last two times
// (ProgramTimes): a queue of short tasks is no promise about its next one,
// and a long task on the lane holds every queue's doorbells until it ends. A
// task that names earlier tasks of its queue (after) waits in TaskWaits
// until they end; whoever ran the last of them takes it next, on the same
// core.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "execution/card_cores.hpp"
#include "execution/device_memory.hpp"
#include "execution/host_link.hpp"
#include "execution/program_executor.hpp"
#include "execution/queue_geometry.hpp"
#include "execution/queue_lane.hpp"
#include "execution/queue_pair.hpp"
#include "execution/run_time_hints.hpp"
#include "execution/task_waits.hpp"
#include "pci/register_file.hpp"
#include "pci/shm_object.hpp"
#include "spyre/uapi/spyre_task.h"

namespace spyre::mockdev {

class TaskQueues final : public QueueKind, public TaskSource {
public:
    // One queue per core group of `cores`. `memory` is the function's window,
    // `watchdog_ms` the card's bound on one task; `lane` serves these queues:
    // its aborting() stops running tasks (ABORTED).
    TaskQueues(RegisterFile& regs, ShmObject& bar4, const TaskGeometry& geometry,
               const std::atomic<uint32_t>& watchdog_ms, DeviceMemory memory, CardCores& cores, HostLink& host_link,
               const QueueLane& lane);

    uint32_t queues() const { return queues_; }
    uint32_t group_cores(uint32_t queue) const { return cores_.group_cores(queue); }
    uint32_t halted_mask() const;
    spyre_task_doorbell* doorbell() const { return db_; }

    // QueueKind: the lane's turn.
    bool Submitted() const override;
    Turn Serve(std::unique_lock<std::mutex>& exec, CycleClock& clock, Clock::time_point& now) override;
    void Started() override;   // the cores take tasks from here
    void Stopping() override;  // no longer; tasks running end first
    // Running tasks (told to stop by the lane) have posted their completions
    // when Hold returns; no task starts until Resume.
    void Hold() override;
    void Resume() override;
    // Every queue empty (positions zero, rings zeroed, tasks not yet run
    // dropped), none halted.
    void Clear() override;
    // Spins only while its queues' tasks are short (a chain of them: the
    // lane's own latency is the link's) and no task runs on the card's
    // cores (workers, other lanes' lent runs), which need the CPU more; on a
    // card of several functions, or beside several cards, a lane that spun
    // after long tasks took the CPU their cores compute on.
    bool PollYields() const override;

    // TaskSource: the card's workers pull tasks through these.
    bool Take(uint32_t queue, CoreTask& out) override;
    void Run(const CoreTask& task, unsigned core) noexcept override;

private:
    using Taken = QueuedTask;
    void Halt(uint32_t queue);
    // Under the watchdog counted from `start`.
    uint16_t Execute(const spyre_cb& cb, unsigned core, Budget::Clock::time_point start);
    // Tasks taken in this turn, `taken[q]` of queue q: announced to the
    // cores, the first run here on a lent core. `unknown[q]`: some of queue
    // q's may run long (KnownShort).
    void HandOut(const std::array<uint32_t, SPYRE_TQ_MAX_QUEUES>& taken,
                 const std::array<bool, SPYRE_TQ_MAX_QUEUES>& unknown);
    // Whether `task` runs in less than kShortTaskNs as far as the lane can
    // tell: a NOP, a task that completes without running, a program that
    // ran short the last time.
    bool KnownShort(const Taken& task) const;
    // Runs queue `q`'s pending tasks on the lane while they stay short;
    // announces what is left to the workers when one runs long or the lane
    // must stop.
    void RunShortTasks(uint32_t q);
    // A task that ran: its completion (position, status, run time and
    // core in it) and its queue.
    struct EndedTask {
        spyre_cqe cqe;
        uint32_t queue;
    };
    // Posts the completions of `ended` with one lock, one interrupt and one
    // add per counter, releases the tasks that waited for them; the number
    // released.
    size_t PostCompletions(std::span<const EndedTask> ended);
    // A lane's run of short tasks posts their completions in groups, not
    // one by one: each locked instruction waits for the store of the CQE
    // before it to leave the CPU, and the driver polls those lines (the
    // lane's unlocks were 30% of its time in a run of empty tasks). A
    // group is posted once kMaxHeld tasks or kHoldNs have passed since its
    // first ended, when the task that ended was the last one waiting (a
    // chain's next link waits for it), and when the run stops: a lone
    // task's is not held.
    bool HoldCompletion(const EndedTask& ended);  // true: post the group now
    size_t PostLaneCompletions();                 // the held ones; the number of tasks they released
    static constexpr size_t kMaxHeld = 32;
    static constexpr uint64_t kHoldNs = 2'000;
    bool ShortTasks(uint32_t q) const { return queue_times_[q].Short(); }
    size_t Pending(uint32_t q);


    RegisterFile& regs_;
    const std::atomic<uint32_t>& watchdog_ms_;
    CardCores& cores_;
    HostLink& host_link_;
    const QueueLane& lane_;
    spyre_task_doorbell* const db_;
    const uint32_t queues_;
    // Every queue of the page, served or not: a reset clears them all.
    std::vector<std::unique_ptr<QueuePair>> pairs_;
    // Each core's private state: its copy of the program it runs.
    std::vector<std::unique_ptr<ProgramExecutor>> per_core_;

    std::mutex mutex_;  // guards pending_, each pair's CQ side, running_, accepting_
    std::condition_variable idle_;  // running_ dropped to 0
    std::array<std::deque<Taken>, SPYRE_TQ_MAX_QUEUES> pending_;  // taken from the SQ, free to go to a core
    std::vector<TaskWaits> waits_;  // per queue: taken tasks that wait for earlier ones (after)
    unsigned running_ = 0;
    std::array<QueueRunTime, SPYRE_TQ_MAX_QUEUES> queue_times_;  // hints for HandOut
    ProgramTimes program_times_;
    // The lane's own (its run of short tasks): completions not yet posted,
    // and whether its last Take emptied its queue's pending tasks.
    std::vector<EndedTask> held_;
    bool lane_took_last_ = false;
    bool accepting_ = true;  // false while held or stopped: no task is handed out
    std::atomic<bool> registered_{false};
};

}  // namespace spyre::mockdev
