// SPDX-License-Identifier: Apache-2.0
//
// The compute cores of one card: a pool of worker threads shared by all of
// the card's functions. The card runs one program at a time, as the real
// hardware does: a LAUNCH holds the card for its whole run (Acquire) and
// splits each op into chunks that the workers take in turn (ParallelFor).
// Between chunks the workers ask the CB's budget whether to go on, so a
// watchdog expiry or a reset stops a kernel within one chunk.
//
// Functions take turns in the order they asked (FIFO): each function's
// server asks for one program at a time, so a function that floods the card
// waits behind every other function that is waiting, and no function holds
// the card for longer than one program, itself bounded by the card's
// watchdog. That bound is on the program's run: its watchdog starts when it
// has the cores, so the wait for its turn (bounded by the turns ahead) never
// eats it.
//
// Tasks (spyre_task.h) run between programs, one per worker: the workers are
// split into core groups of SPYRE_TQ_DEFAULT_GROUP_CORES, and an idle worker
// of group g takes the next task of queue g from the task sources (one per
// function) in turn, so a function flooding its queues gets one task in
// every round and cannot starve another. While a program holds the card no
// worker starts a task; a program has the cores once the tasks running on
// them have ended (each bounded by the watchdog), and when it ends, workers
// that waited for it to take a task do so before the next program takes the
// card. Programs and rounds of tasks alternate: neither kind starves the
// other.
//
// A worker that has just run a task lingers (yields, up to `linger`) before
// it sleeps, one per group at a time: a task that comes in the meantime (the
// next link of a chain) is taken without a wake-up, which costs a context
// switch and, on a host with few CPUs, a wait for the scheduler.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "execution/budget.hpp"
#include "spyre/uapi/spyre_task.h"

namespace spyre::mockdev {

class TaskSource;

// One CB taken from a source's task queue, run by one worker.
struct CoreTask {
    TaskSource* source = nullptr;
    uint32_t queue = 0;
    uint32_t sq_pos = 0;  // its submission position, echoed in its CQE
    spyre_cb cb{};
    uint16_t verdict = 0;  // not NONE: completes with this without running (TaskWaits)
    // When a core took it, under the cores' lock: its start, so starts
    // keep the order the cores took tasks in even when the host preempts a
    // worker between the take and the run.
    Budget::Clock::time_point taken{};
};

// A function's task queues as the workers see them.
class TaskSource {
public:
    virtual ~TaskSource() = default;
    // Takes the next task of `queue`, if any (the cores' lock is held: quick).
    virtual bool Take(uint32_t queue, CoreTask& out) = 0;
    // Runs a task Take handed out on worker `core` and posts its completion.
    virtual void Run(const CoreTask& task, unsigned core) noexcept = 0;
};

class CardCores {
public:
    // Default pool size: the card's 32 cores, or fewer if the machine has fewer.
    static unsigned DefaultWorkers();

    // How long a worker that ran a task looks for the next before it sleeps.
    static constexpr std::chrono::microseconds kDefaultLinger{50};
    // At most this many workers of a group linger at once.
    static constexpr unsigned kMaxLingering = 1;

    explicit CardCores(unsigned workers, std::chrono::microseconds linger = kDefaultLinger);
    ~CardCores();

    CardCores(const CardCores&) = delete;
    CardCores& operator=(const CardCores&) = delete;

    unsigned workers() const { return unsigned(threads_.size()); }
    // Core groups: workers [g * 8, g * 8 + 8) form group g, which runs the
    // tasks of every function's queue g.
    unsigned groups() const;
    unsigned group_cores(unsigned group) const;

    // Task sources (functions) the workers serve. Remove returns once no
    // worker can take a new task from `source`; tasks already taken are the
    // source's to wait for.
    void AddTaskSource(TaskSource* source);
    void RemoveTaskSource(TaskSource* source);
    // `count` new tasks wait in queue `group`: wake that many idle workers
    // of the group (not every worker of the card: on a host with few CPUs
    // each needless wake-up costs a context switch per task).
    void NotifyTasks(uint32_t group, uint32_t count);
    // Tasks may wait in any queue (a source resumed): every worker looks.
    void NotifyTasks();
    // Runs one task of `source`'s queue `group` on the calling thread (a
    // task lane), on an idle core of the group lent for the run: a lone
    // task (the next link of a chain) then starts without waking a worker,
    // a hand-over that costs more than a short task on a host with few
    // CPUs. False when no core of the group is idle, a program holds the
    // card, or the source has no task for it.
    bool RunOneTask(uint32_t group, TaskSource& source);

    // The card, held for one program; handed to the next waiter on destruction.
    class Turn {
    public:
        Turn() = default;
        Turn(CardCores* cores, bool waited) : cores_(cores), waited_(waited) {}
        Turn(Turn&& o) noexcept : cores_(std::exchange(o.cores_, nullptr)), waited_(o.waited_) {}
        Turn& operator=(Turn&&) = delete;
        ~Turn();
        explicit operator bool() const { return cores_ != nullptr; }
        // The cores were not free at once: the program's watchdog starts now.
        bool waited() const { return waited_; }

    private:
        friend class CardCores;
        CardCores* cores_ = nullptr;
        bool waited_ = false;
    };

    // Takes the card for one program, after every program that asked
    // earlier and the tasks that waited for the last one, and returns once
    // the tasks still running on the cores have ended: the program then has
    // every core. Waits no longer than `budget` allows (a LAUNCH passes one
    // with only its abort): then the returned turn is empty and `status`
    // says why.
    Turn Acquire(const Budget& budget, uint16_t& status);
    // Programs waiting for the card now (for tests and dumps).
    unsigned waiting();
    // Times a worker woke for new tasks and found none to take (for tests).
    uint64_t fruitless_wakeups() const { return fruitless_wakeups_.load(std::memory_order_relaxed); }
    // Wake-ups NotifyTasks(group, count) sent (for tests).
    uint64_t wakes_sent() const { return wakes_sent_.load(std::memory_order_relaxed); }
    // Workers of `group` lingering now (for tests).
    unsigned lingering(unsigned group);
    // Whether a program holds the card now (for tests).
    bool card_held() const { return card_busy_.load(std::memory_order_seq_cst); }
    // Tasks running on the cores now, on workers or lent.
    unsigned tasks_running() const { return tasks_running_.load(std::memory_order_relaxed); }
    // Workers waiting to take a task while a program holds the card (for tests).
    unsigned tasks_waiting() const { return held_workers_.load(); }

    // Runs body(i) for every i in [0, chunks) on the workers and returns once
    // all have finished. A chunk returns SPYRE_ERR_NONE or a fault; the first
    // fault, or the budget running out, stops the rest. Returns that code or
    // SPYRE_ERR_NONE. An exception from a chunk is rethrown here.
    uint16_t ParallelFor(size_t chunks, const Budget& budget, const std::function<uint16_t(size_t)>& body);

    // Scratch memory of the program holding the card, kept between programs
    // so large kernels do not fault in fresh pages on every launch.
    static constexpr size_t kScratchSlots = 3;
    std::vector<float>& Scratch(size_t slot) { return scratch_[slot]; }

private:
    struct Job;
    void Work(unsigned core);
    bool TakeTask(unsigned group, CoreTask& out);  // mutex_ held
    static void RunChunks(Job& job);

    // Takes the card if free and no tasks' turn is due, then waits for
    // workers already taking a task.
    bool TryTake();
    // Acquire's line: waits for the ticket's turn.
    bool WaitForTurn(const Budget& budget, uint16_t& status);
    // With the card held: waits for the tasks running on the cores to end.
    bool WaitForTasks(const Budget& budget, uint16_t& status);
    // A worker may take a task: the card is free. Leaves taking_ raised
    // (the caller lowers it once it took one, or found none).
    bool MayTakeTask();  // mutex_ held
    void Release();

    // Held for one program at a time. Taken without a lock when no one is
    // in line; waiters queue by ticket under turn_mutex_.
    std::atomic<bool> card_busy_{false};
    std::atomic<unsigned> queued_{0};  // tickets in waiting_
    std::mutex turn_mutex_;            // guards waiting_, next_ticket_
    std::condition_variable turn_cv_;
    std::deque<uint64_t> waiting_;  // tickets, oldest first
    uint64_t next_ticket_ = 0;
    std::mutex mutex_;  // guards job_, generation_, busy_, stopping_, each group's task_seq
    // One wake-up per core group: a group's workers sleep on its own
    // condition, so new tasks wake only workers that can take them.
    struct GroupWake {
        std::condition_variable cv;
        uint64_t task_seq = 0;          // bumped by NotifyTasks
        unsigned lingering = 0;         // workers looking before they sleep (NotifyTasks spares their wakes)
        std::atomic<uint64_t> poke{0};  // bumped (under mutex_) whenever the group's workers should look
        unsigned next_lent = 0;         // where RunOneTask looks for an idle core first
    };
    // A worker that ran a task looks (yielding) for up to linger_ before it
    // sleeps, until its group is poked.
    void Linger(GroupWake& wake, std::unique_lock<std::mutex>& lock);
    std::unique_ptr<GroupWake[]> group_wake_;
    void WakeAllWorkers();  // a program's op, a release or stopping: every worker looks
    std::condition_variable done_;
    Job* job_ = nullptr;
    uint64_t generation_ = 0;
    unsigned busy_ = 0;  // workers still on the current job
    bool stopping_ = false;
    // A worker wanted a task while the card was held (no task starts
    // meanwhile): Release wakes them.
    std::atomic<bool> held_back_{false};
    // Workers held back that have not looked for a task since (changed under
    // mutex_). Release gives them a turn (tasks_turn_): the next program
    // takes the card only once each has looked, so a function flooding the
    // card with programs cannot starve the tasks.
    std::atomic<unsigned> held_workers_{0};
    std::atomic<bool> tasks_turn_{false};
    // Tasks on the workers now (changed under mutex_): a program that took
    // the card waits for them (tasks_done_) before it runs.
    std::atomic<unsigned> tasks_running_{0};
    std::condition_variable tasks_done_;
    // Workers between their look at card_busy_ and taking a task (Dekker
    // with TryTake: one of the two sees the other).
    std::atomic<unsigned> taking_{0};
    std::atomic<uint64_t> fruitless_wakeups_{0};
    std::atomic<uint64_t> wakes_sent_{0};
    // What each core does (under mutex_): a lent core's worker takes no
    // task until RunOneTask gives it back.
    enum class CoreState : uint8_t { Idle, Running, Lent };
    std::vector<CoreState> core_state_;
    std::vector<bool> missed_;  // a lent core's worker wanted a task (under mutex_)
    const std::chrono::microseconds linger_;
    std::vector<TaskSource*> sources_;  // guarded by mutex_
    size_t next_source_ = 0;           // round robin between functions
    std::vector<std::thread> threads_;
    std::array<std::vector<float>, kScratchSlots> scratch_;
};

}  // namespace spyre::mockdev
