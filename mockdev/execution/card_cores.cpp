// SPDX-License-Identifier: Apache-2.0
#include "execution/card_cores.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <utility>

#include "spyre/common/futex.hpp"
#include "pci/shm_guard.hpp"

namespace spyre::mockdev {

namespace {
constexpr unsigned kCardCores = 32;
// How often a LAUNCH waiting for the card looks at its budget (a reset's
// abort, the watchdog); its turn itself comes by notification.
constexpr auto kBudgetCheck = std::chrono::milliseconds(1);
}  // namespace

struct CardCores::Job {
    size_t chunks;
    const Budget& budget;
    const std::function<uint16_t(size_t)>& body;
    std::atomic<size_t> next{0};
    std::atomic<uint16_t> verdict{SPYRE_ERR_NONE};
    std::mutex error_mutex;
    std::exception_ptr error;
};

unsigned CardCores::DefaultWorkers() {
    return std::clamp(std::thread::hardware_concurrency(), 1u, kCardCores);
}

CardCores::CardCores(unsigned workers, std::chrono::microseconds linger) : linger_(linger) {
    workers = std::max(workers, 1u);
    core_state_.assign(workers, CoreState::Idle);
    missed_.assign(workers, false);
    group_wake_ = std::make_unique<GroupWake[]>((workers + SPYRE_TQ_DEFAULT_GROUP_CORES - 1) / SPYRE_TQ_DEFAULT_GROUP_CORES);
    // Signals belong to the FUSE loop's thread, as for the queue servers;
    // faults to the thread that faults (shm_guard.hpp).
    sigset_t all, old;
    sigfillset(&all);
    KeepFaultSignals(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (unsigned i = 0; i < workers; ++i) {
        threads_.emplace_back([this, i] { Work(i); });
        pthread_setname_np(threads_.back().native_handle(), ("spyre-core" + std::to_string(i)).substr(0, 15).c_str());
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

CardCores::~CardCores() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    WakeAllWorkers();
    for (auto& t : threads_) t.join();
}

bool CardCores::TryTake() {
    if (tasks_turn_.load(std::memory_order_seq_cst)) return false;  // workers held back by the last program first
    bool free = false;
    if (!card_busy_.compare_exchange_strong(free, true, std::memory_order_seq_cst)) return false;
    // A worker that saw the card free may be taking a task: it started
    // before this turn. Once it has, no task starts until Release.
    while (taking_.load(std::memory_order_seq_cst) != 0) CpuRelax();
    return true;
}

bool CardCores::MayTakeTask() {
    taking_.fetch_add(1, std::memory_order_seq_cst);
    if (!card_busy_.load(std::memory_order_seq_cst)) return true;  // taking_ stays up until the take
    taking_.fetch_sub(1, std::memory_order_seq_cst);
    return false;
}

CardCores::Turn CardCores::Acquire(const Budget& budget, uint16_t& status) {
    status = SPYRE_ERR_NONE;
    // No one in line and the card free: take it without the line's lock.
    bool waited = false;
    if (queued_.load(std::memory_order_seq_cst) != 0 || !TryTake()) {
        if (!WaitForTurn(budget, status)) return Turn();
        waited = true;
    }
    Turn turn(this, waited);
    // Tasks that started before this turn may still run on the cores (no new
    // one starts now); the program has the cores once they have ended.
    if (tasks_running_.load(std::memory_order_seq_cst) != 0) {
        if (!WaitForTasks(budget, status)) return Turn();  // `turn` hands the card on
        turn.waited_ = true;
    }
    return turn;
}

bool CardCores::WaitForTurn(const Budget& budget, uint16_t& status) {
    std::unique_lock lock(turn_mutex_);
    const uint64_t ticket = next_ticket_++;
    waiting_.push_back(ticket);
    queued_.fetch_add(1, std::memory_order_seq_cst);
    for (;;) {
        if (waiting_.front() == ticket && TryTake()) {
            waiting_.pop_front();
            queued_.fetch_sub(1, std::memory_order_seq_cst);
            return true;
        }
        if ((status = budget.Check()) != SPYRE_ERR_NONE) {
            waiting_.erase(std::find(waiting_.begin(), waiting_.end(), ticket));
            queued_.fetch_sub(1, std::memory_order_seq_cst);
            turn_cv_.notify_all();  // the next in line may be first now
            return false;
        }
        turn_cv_.wait_for(lock, kBudgetCheck);
    }
}

bool CardCores::WaitForTasks(const Budget& budget, uint16_t& status) {
    std::unique_lock lock(mutex_);
    while (tasks_running_.load(std::memory_order_seq_cst) != 0) {
        if ((status = budget.Check()) != SPYRE_ERR_NONE) return false;
        tasks_done_.wait_for(lock, kBudgetCheck);
    }
    return true;
}

unsigned CardCores::waiting() {
    std::lock_guard lock(turn_mutex_);
    return unsigned(waiting_.size());
}

void CardCores::Release() {
    // Workers this program held back from tasks look before the next program
    // takes the card (one that slips in before this store only delays them
    // by its own run: they are still counted at its Release).
    if (held_workers_.load(std::memory_order_seq_cst) != 0) tasks_turn_.store(true, std::memory_order_seq_cst);
    // Dekker with Acquire's slow path (queued_, then TryTake) and with a
    // worker held back (held_back_, then card_busy_): each side stores, then
    // loads the other's word, so one of the two sees the other.
    card_busy_.store(false, std::memory_order_seq_cst);
    if (queued_.load(std::memory_order_seq_cst) != 0) {
        std::lock_guard lock(turn_mutex_);  // a waiter between its look and its wait holds it
        turn_cv_.notify_all();
    }
    // Only when tasks waited for the program: waking every worker after each
    // launch cost an empty Launch+Synchronize 5-15x (docs/streams.md).
    // Looked at before it is taken (the store above is the full fence the
    // Dekker pair needs): a launch pays a locked exchange only when a worker
    // waits.
    if (held_back_.load(std::memory_order_seq_cst) && held_back_.exchange(false, std::memory_order_seq_cst)) {
        std::lock_guard lock(mutex_);
        WakeAllWorkers();
    }
}

unsigned CardCores::groups() const {
    return (workers() + SPYRE_TQ_DEFAULT_GROUP_CORES - 1) / SPYRE_TQ_DEFAULT_GROUP_CORES;
}

unsigned CardCores::group_cores(unsigned group) const {
    const unsigned first = group * SPYRE_TQ_DEFAULT_GROUP_CORES;
    return first >= workers() ? 0 : std::min(SPYRE_TQ_DEFAULT_GROUP_CORES, workers() - first);
}

void CardCores::AddTaskSource(TaskSource* source) {
    std::lock_guard lock(mutex_);
    sources_.push_back(source);
}

void CardCores::RemoveTaskSource(TaskSource* source) {
    std::lock_guard lock(mutex_);
    sources_.erase(std::remove(sources_.begin(), sources_.end(), source), sources_.end());
}

void CardCores::WakeAllWorkers() {
    for (unsigned g = 0; g < groups(); ++g) {
        group_wake_[g].poke.fetch_add(1, std::memory_order_release);
        group_wake_[g].cv.notify_all();
    }
}

unsigned CardCores::lingering(unsigned group) {
    std::lock_guard lock(mutex_);
    return group < groups() ? group_wake_[group].lingering : 0;
}

void CardCores::Linger(GroupWake& wake, std::unique_lock<std::mutex>& lock) {
    ++wake.lingering;
    const uint64_t poke = wake.poke.load(std::memory_order_relaxed);  // bumped under mutex_: none missed
    lock.unlock();
    // Yield, not spin: on a host with few CPUs the thread that brings the
    // next task (the task lane, the driver) needs the CPU.
    const auto until = std::chrono::steady_clock::now() + linger_;
    while (wake.poke.load(std::memory_order_acquire) == poke && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
    lock.lock();
    --wake.lingering;
}

void CardCores::NotifyTasks(uint32_t group, uint32_t count) {
    if (group >= groups() || count == 0) return;  // no core serves that queue
    GroupWake& wake = group_wake_[group];
    unsigned lingering;
    {
        std::lock_guard lock(mutex_);
        ++wake.task_seq;
        wake.poke.fetch_add(1, std::memory_order_release);
        // A lingering worker sees the poke, or (once it stops lingering,
        // under mutex_) the new task_seq: it takes a task without a wake.
        lingering = wake.lingering;
    }
    // A worker that finishes a task looks for the next one before it
    // sleeps, so one woken worker per new task (at most the group) is enough.
    const uint32_t wakes = std::min(count, group_cores(group));
    for (uint32_t i = lingering; i < wakes; ++i) {
        wake.cv.notify_one();
        wakes_sent_.fetch_add(1, std::memory_order_relaxed);
    }
}

void CardCores::NotifyTasks() {
    {
        std::lock_guard lock(mutex_);
        for (unsigned g = 0; g < groups(); ++g) ++group_wake_[g].task_seq;
    }  // WakeAllWorkers pokes lingering workers too
    WakeAllWorkers();
}

bool CardCores::RunOneTask(uint32_t group, TaskSource& source) {
    if (group >= groups()) return false;
    GroupWake& wake = group_wake_[group];
    CoreTask task;
    unsigned core = group * SPYRE_TQ_DEFAULT_GROUP_CORES;
    {
        std::lock_guard lock(mutex_);
        if (stopping_) return false;
        // From the core after the last one lent: a run of tasks on the lane
        // spreads over the group's cores, as a worker per task would.
        const unsigned size = group_cores(group);
        unsigned i = 0;
        while (i < size && core_state_[core + (wake.next_lent + i) % size] != CoreState::Idle) ++i;
        if (i == size || !MayTakeTask()) return false;  // taking_ is raised only when it may
        core += (wake.next_lent + i) % size;
        wake.next_lent = (wake.next_lent + i + 1) % size;
        const bool got = source.Take(group, task);
        if (got) {
            tasks_running_.fetch_add(1, std::memory_order_seq_cst);
            core_state_[core] = CoreState::Lent;
        }
        taking_.fetch_sub(1, std::memory_order_seq_cst);
        if (!got) return false;
    }
    task.source->Run(task, core);
    std::lock_guard lock(mutex_);
    core_state_[core] = CoreState::Idle;
    if (tasks_running_.fetch_sub(1, std::memory_order_seq_cst) == 1) tasks_done_.notify_all();
    // The core's worker was woken (or spared a wake while it lingered) for
    // a task while the core was lent, and went back to sleep: whoever of
    // the group wakes now takes it.
    if (missed_[core]) {
        missed_[core] = false;
        wake.cv.notify_all();
    }
    return true;
}

bool CardCores::TakeTask(unsigned group, CoreTask& out) {
    const size_t n = sources_.size();
    for (size_t i = 0; i < n; ++i) {
        const size_t at = (next_source_ + i) % n;
        if (sources_[at]->Take(group, out)) {
            next_source_ = (at + 1) % n;  // the next worker starts at the next function
            return true;
        }
    }
    return false;
}

CardCores::Turn::~Turn() {
    if (cores_) cores_->Release();
}

void CardCores::RunChunks(Job& job) {
    for (;;) {
        if (job.verdict.load(std::memory_order_relaxed) != SPYRE_ERR_NONE) return;
        const size_t i = job.next.fetch_add(1, std::memory_order_relaxed);
        if (i >= job.chunks) return;
        uint16_t status = job.budget.Check();
        if (status == SPYRE_ERR_NONE) {
            try {
                status = job.body(i);
            } catch (...) {
                std::lock_guard lock(job.error_mutex);
                if (!job.error) job.error = std::current_exception();
                status = SPYRE_ERR_INTERNAL;
            }
        }
        if (status != SPYRE_ERR_NONE) {
            uint16_t none = SPYRE_ERR_NONE;
            job.verdict.compare_exchange_strong(none, status);
        }
    }
}

uint16_t CardCores::ParallelFor(size_t chunks, const Budget& budget, const std::function<uint16_t(size_t)>& body) {
    Job job{chunks, budget, body};
    if (chunks <= 1) {
        RunChunks(job);  // not worth waking the workers
    } else {
        std::unique_lock lock(mutex_);
        job_ = &job;
        ++generation_;
        busy_ = workers();
        WakeAllWorkers();
        done_.wait(lock, [&] { return busy_ == 0; });
        job_ = nullptr;
    }
    if (job.error) std::rethrow_exception(job.error);
    return job.verdict.load();
}

void CardCores::Work(unsigned core) {
    const unsigned group = core / SPYRE_TQ_DEFAULT_GROUP_CORES;
    GroupWake& wake = group_wake_[group];
    uint64_t seen = 0;
    uint64_t tasks_seen = 0;
    bool look = false;  // look for a task without a new notification (after running one)
    bool held = false;  // counted in held_workers_: wanted a task while a program held the card
    bool ran = false;   // ran a task since it last lingered
    std::unique_lock lock(mutex_);
    for (;;) {
        // Nothing to do right now, after a task: look a little longer
        // before sleeping (bounded per group, so idle cores cost no CPU).
        if (ran && !look && !stopping_ && generation_ == seen && wake.task_seq == tasks_seen && linger_.count() > 0 &&
            wake.lingering < kMaxLingering) {
            ran = false;
            Linger(wake, lock);
        }
        wake.cv.wait(lock, [&] {
            if (stopping_ || generation_ != seen) return true;
            const bool wants_task = look || wake.task_seq != tasks_seen;
            if (core_state_[core] == CoreState::Lent) {
                // A wake (or a spared linger) for a task, which this core
                // cannot take: passed on, once per lend, to another worker
                // of the group (they share the condition, so the wake may
                // have been meant for one of them), and RunOneTask wakes
                // the group when it gives the core back.
                if (wants_task && !missed_[core]) {
                    missed_[core] = true;
                    wake.cv.notify_one();
                }
                return false;
            }
            if (!wants_task) return false;
            if (MayTakeTask()) return true;
            if (!held) {
                held = true;
                held_workers_.fetch_add(1, std::memory_order_seq_cst);
            }
            held_back_.store(true, std::memory_order_seq_cst);  // Release wakes us...
            return MayTakeTask();                               // ...unless it released meanwhile
        });
        if (stopping_) return;
        if (generation_ != seen) {  // a program's op comes first
            seen = generation_;
            Job& job = *job_;
            lock.unlock();
            RunChunks(job);
            lock.lock();
            if (--busy_ == 0) done_.notify_one();
            continue;
        }
        tasks_seen = wake.task_seq;
        CoreTask task;
        const bool notified = !look;
        look = TakeTask(group, task);
        if (notified && !look) fruitless_wakeups_.fetch_add(1, std::memory_order_relaxed);
        if (look) {
            tasks_running_.fetch_add(1, std::memory_order_seq_cst);
            core_state_[core] = CoreState::Running;
        }
        taking_.fetch_sub(1, std::memory_order_seq_cst);  // raised by MayTakeTask
        // This worker has looked: the last of those held back ends the tasks' turn.
        const bool turn_over = held && held_workers_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
                               tasks_turn_.exchange(false, std::memory_order_seq_cst);
        held = false;
        lock.unlock();
        if (turn_over) {
            std::lock_guard turn_lock(turn_mutex_);  // a program between its look and its wait holds it
            turn_cv_.notify_all();
        }
        if (look) {
            task.source->Run(task, core);
            ran = true;
        }
        lock.lock();
        if (look) core_state_[core] = CoreState::Idle;
        if (look && tasks_running_.fetch_sub(1, std::memory_order_seq_cst) == 1) tasks_done_.notify_all();
    }
}

}  // namespace spyre::mockdev
