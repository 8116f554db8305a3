// SPDX-License-Identifier: Apache-2.0
#include "execution/task_queues.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <span>

#include "execution/completion_irq.hpp"
#include "execution/task_executor.hpp"
#include "log.hpp"
#include "spyre/common/device_clock.hpp"

namespace spyre::mockdev {

namespace {
// The TaskQueues whose run of short tasks the calling thread (a lane) is in:
// Take leaves a task known to be long to a worker then.
thread_local const TaskQueues* tl_short_run = nullptr;
}  // namespace

TaskQueues::TaskQueues(RegisterFile& regs, ShmObject& bar4, const TaskGeometry& geometry,
                       const std::atomic<uint32_t>& watchdog_ms, DeviceMemory memory, CardCores& cores,
                       HostLink& host_link, const QueueLane& lane)
    : regs_(regs),
      watchdog_ms_(watchdog_ms),
      cores_(cores),
      host_link_(host_link),
      lane_(lane),
      db_(reinterpret_cast<spyre_task_doorbell*>(bar4.data() + geometry.db_offset)),
      queues_(std::min(cores.groups(), SPYRE_TQ_MAX_QUEUES)) {
    for (uint32_t q = 0; q < SPYRE_TQ_MAX_QUEUES; ++q) {
        pairs_.push_back(std::make_unique<QueuePair>(bar4, TaskLayout(geometry, q)));
        waits_.emplace_back(TaskLayout(geometry, q).sq_entries);
    }
    for (unsigned i = 0; i < cores.workers(); ++i) per_core_.push_back(std::make_unique<ProgramExecutor>(memory, cores));
    held_.reserve(kMaxHeld);  // Run, which holds them, may not throw
}

uint32_t TaskQueues::halted_mask() const {
    uint32_t mask = 0;
    for (uint32_t q = 0; q < queues_; ++q)
        if (pairs_[q]->halted()) mask |= 1u << q;
    return mask;
}

void TaskQueues::Started() {
    cores_.AddTaskSource(this);
    registered_.store(true);
}

void TaskQueues::Stopping() {
    if (registered_.exchange(false)) cores_.RemoveTaskSource(this);  // no worker takes a new task
    Hold();  // tasks on cores end within one chunk (the lane is aborting)
}

void TaskQueues::Hold() {
    std::unique_lock lock(mutex_);
    accepting_ = false;
    idle_.wait(lock, [&] { return running_ == 0; });
}

void TaskQueues::Resume() {
    {
        std::lock_guard lock(mutex_);
        accepting_ = !lane_.stopping();
    }
    cores_.NotifyTasks();  // tasks taken before the pause wait for a worker
}

void TaskQueues::Clear() {
    std::lock_guard lock(mutex_);
    for (auto& pending : pending_) pending.clear();
    for (auto& waits : waits_) waits.Clear();
    for (auto& pair : pairs_) pair->Clear();
    // The next owner's tasks start from power-on, not from how long the
    // last owner's ran.
    for (QueueRunTime& times : queue_times_) times.Clear();
    program_times_.Clear();
    regs_.Store32(SPYRE_REG_TQ_HALTED, 0);
}

bool TaskQueues::Submitted() const {
    for (uint32_t q = 0; q < queues_; ++q)
        if (pairs_[q]->Submitted()) return true;
    return false;
}

void TaskQueues::Halt(uint32_t queue) {
    pairs_[queue]->Halt(regs_);
    regs_.Store32(SPYRE_REG_TQ_HALTED, halted_mask());
}

QueueKind::Turn TaskQueues::Serve(std::unique_lock<std::mutex>& exec, CycleClock& clock, Clock::time_point& now) {
    std::array<uint32_t, SPYRE_TQ_MAX_QUEUES> taken{};
    std::array<bool, SPYRE_TQ_MAX_QUEUES> unknown{};
    bool any = false, held_back = false;
    for (uint32_t q = 0; q < queues_; ++q) {
        QueuePair& pair = *pairs_[q];
        if (pair.halted()) continue;
        const uint32_t tail = pair.tail();
        const uint32_t head = pair.head();
        if (tail == head) continue;
        host_link_.Observed();
        if (!pair.TailValid(tail)) {
            Halt(q);
            continue;
        }
        std::unique_lock lock(mutex_);
        // Every CB taken owes a CQE until the driver reaps it: take only
        // what the CQ can answer.
        const std::optional<uint32_t> room = pair.CqRoom(head);
        if (!room) {
            lock.unlock();
            Halt(q);  // the driver claims completions never posted
            continue;
        }
        const uint32_t n = std::min(tail - head, *room);
        if (n == 0) {
            held_back = true;
            continue;
        }
        uint32_t ready = 0;
        for (uint32_t i = 0; i < n; ++i) {
            Taken t{{}, head + i};
            pair.Copy(head + i, &t.cb);
            if (waits_[q].Admit(t)) {
                unknown[q] = unknown[q] || !KnownShort(t);
                pending_[q].push_back(t);
                ++ready;
            }
        }
        lock.unlock();
        pair.Consume(n);
        regs_.Add64(SPYRE_REG_CNT_TASK_DOORBELLS, 1);
        taken[q] = ready;
        any = true;
    }
    if (!any) return held_back ? Turn::HeldBack : Turn::Idle;
    exec.unlock();  // a pause need not wait for the lent run: it waits for running tasks anyway
    HandOut(taken, unknown);
    now = clock.Now();
    return Turn::Served;
}

bool TaskQueues::KnownShort(const Taken& task) const {
    return task.cb.opcode != SPYRE_OP_TASK || task.verdict != SPYRE_ERR_NONE ||
           program_times_.RanShort(task.cb.u.task.program_addr);
}

void TaskQueues::HandOut(const std::array<uint32_t, SPYRE_TQ_MAX_QUEUES>& taken,
                         const std::array<bool, SPYRE_TQ_MAX_QUEUES>& unknown) {
    // Long tasks: a worker each; on a function of one queue the first runs
    // here (a lone task starts without a wake-up), but with several queues
    // the lane goes back to their doorbells: a long task here would hold
    // them until it ended. Short ones run here.
    int own = -1;
    for (uint32_t q = 0; q < queues_; ++q) {
        if (taken[q] == 0) continue;
        const bool first = own < 0 && (queues_ == 1 || ShortTasks(q));
        if (first) own = int(q);
        const uint32_t handed = taken[q] - (first ? 1 : 0);
        // A helper for short tasks only when the lane has two or more to run
        // after its first and one of them may run long: it bounds what that
        // task holds up. Known short ones run faster on the lane alone than
        // with a helper trading the queue's lock with it (on these 2-CPU
        // VMs an empty task's whole path took 4-23% less).
        const uint32_t helpers = handed >= 2 && unknown[q] ? 1 : 0;
        cores_.NotifyTasks(q, ShortTasks(q) ? helpers : handed);
    }
    if (own < 0) return;
    for (uint32_t q = uint32_t(own); q < queues_; ++q) {
        if (taken[q] == 0) continue;
        if (ShortTasks(q)) {
            RunShortTasks(q);
        } else if (int(q) == own) {
            if (lane_.aborting() || lane_.pause_requested() || !cores_.RunOneTask(q, *this)) {
                cores_.NotifyTasks(q, 1);  // no idle core, or the card is held: a worker takes it
                continue;
            }
            // Tasks still waiting after the lent run: announced again, so
            // none depends on a notice its worker may have slept through.
            if (const size_t left = Pending(q)) cores_.NotifyTasks(q, uint32_t(left));
        }
    }
}

void TaskQueues::RunShortTasks(uint32_t q) {
    tl_short_run = this;
    for (;;) {
        while (!lane_.aborting() && !lane_.pause_requested() && ShortTasks(q)) {
            // None left, no idle core, the card is held, or the next one's program ran long.
            if (!cores_.RunOneTask(q, *this)) break;
        }
        // The tasks its held completions release (a chain's next link) are
        // the run's too.
        if (PostLaneCompletions() == 0 || lane_.aborting() || lane_.pause_requested() || !ShortTasks(q)) break;
    }
    tl_short_run = nullptr;
    // A task ran long, or the lane must stop: the workers take the rest.
    if (const size_t left = Pending(q)) cores_.NotifyTasks(q, uint32_t(left));
}

bool TaskQueues::PollYields() const {
    if (cores_.tasks_running() != 0) return true;
    for (uint32_t q = 0; q < queues_; ++q)
        if (!ShortTasks(q)) return true;
    return false;
}

size_t TaskQueues::Pending(uint32_t q) {
    std::lock_guard lock(mutex_);
    return pending_[q].size();
}

bool TaskQueues::Take(uint32_t queue, CoreTask& out) {
    std::lock_guard lock(mutex_);
    if (!accepting_ || queue >= queues_ || pending_[queue].empty()) return false;
    const Taken& next = pending_[queue].front();
    if (tl_short_run == this && next.cb.opcode == SPYRE_OP_TASK && next.verdict == SPYRE_ERR_NONE &&
        program_times_.RanLong(next.cb.u.task.program_addr))
        return false;
    out.source = this;
    out.queue = queue;
    out.cb = pending_[queue].front().cb;
    out.sq_pos = pending_[queue].front().sq_pos;
    out.verdict = pending_[queue].front().verdict;
    out.taken = Budget::Clock::now();
    pending_[queue].pop_front();
    if (tl_short_run == this) lane_took_last_ = pending_[queue].empty();
    ++running_;
    return true;
}

uint16_t TaskQueues::Execute(const spyre_cb& cb, unsigned core, Budget::Clock::time_point start) {
    const Budget budget(start, std::chrono::milliseconds(watchdog_ms_.load(std::memory_order_relaxed)),
                        [this] { return lane_.aborting(); });
    return ExecuteTaskCb(*per_core_.at(core), cb, budget);
}

void TaskQueues::Run(const CoreTask& task, unsigned core) noexcept {
    uint16_t status = SPYRE_ERR_INTERNAL;
    // The take's clock read is the watchdog's start and the CQE's (the
    // device clock is the monotonic clock): clock reads were 7% of the
    // lane's samples in a chain of empty tasks.
    const Budget::Clock::time_point start = task.taken;
    const uint64_t start_ns = DeviceClockNs(start);
    try {
        status = task.verdict != SPYRE_ERR_NONE ? task.verdict : Execute(task.cb, core, start);
    } catch (const std::exception& e) {
        LOG_ERROR("task fault (user_data %llu): %s", static_cast<unsigned long long>(task.cb.user_data), e.what());
    } catch (...) {
    }
    const uint64_t end_ns = DeviceClockNs();
    const uint64_t run_ns = end_ns - start_ns;
    if (task.cb.opcode == SPYRE_OP_TASK && task.verdict == SPYRE_ERR_NONE)
        program_times_.Record(task.cb.u.task.program_addr, run_ns);
    queue_times_[task.queue].Add(run_ns);
    const EndedTask ended{
        MakeCqe(task.cb, task.sq_pos, status, spyre_task_result(run_ns, uint16_t(core)), end_ns),
        task.queue};
    if (tl_short_run != this) {
        PostCompletions({&ended, 1});
        return;
    }
    // The last task waiting is posted at once: a chain's next link waits for it.
    if (HoldCompletion(ended) || lane_took_last_) PostLaneCompletions();
}

bool TaskQueues::HoldCompletion(const EndedTask& ended) {
    held_.push_back(ended);
    return held_.size() >= kMaxHeld || ended.cqe.timestamp_ns - held_.front().cqe.timestamp_ns >= kHoldNs;
}

size_t TaskQueues::PostLaneCompletions() {
    if (held_.empty()) return 0;
    const size_t released = PostCompletions(held_);
    held_.clear();
    return released;
}

size_t TaskQueues::PostCompletions(std::span<const EndedTask> ended) {
    // Counted before they are posted, and running_ dropped last: when Hold
    // returns (a reset next), what ran is posted and counted, and nothing
    // of it reaches the next owner's counters.
    uint64_t done = 0, errors = 0, watchdog = 0, busy_ns = 0;
    for (const EndedTask& e : ended) {
        (e.cqe.status == SPYRE_ERR_NONE ? done : errors) += 1;
        watchdog += e.cqe.status == SPYRE_ERR_WATCHDOG;
        busy_ns += spyre_task_result_run_ns(e.cqe.result);
    }
    if (done) regs_.Add64(SPYRE_REG_CNT_TASKS_DONE, done);
    if (errors) regs_.Add64(SPYRE_REG_CNT_TASK_ERRORS, errors);
    regs_.Add64(SPYRE_REG_CNT_TASK_BUSY_NS, busy_ns);
    if (watchdog) regs_.Add64(SPYRE_REG_CNT_WATCHDOG, watchdog);
    std::array<size_t, SPYRE_TQ_MAX_QUEUES> released{};
    {
        std::lock_guard lock(mutex_);
        for (const EndedTask& e : ended) {
            pairs_[e.queue]->Post(e.cqe, host_link_);
            released[e.queue] += waits_[e.queue].Ended(e.cqe.sq_pos, e.cqe.status, pending_[e.queue]);
        }
    }
    SignalCompletion(db_->irq_seq, db_->irq_waiters, regs_);
    // Tasks that waited for these: the core that ran them takes the first
    // next (its worker, or the lane's run of short tasks, looks again); more
    // wake others.
    size_t released_all = 0;
    for (uint32_t q = 0; q < queues_; ++q) {
        released_all += released[q];
        if (released[q] > 1) cores_.NotifyTasks(q, uint32_t(released[q] - 1));
    }
    std::lock_guard lock(mutex_);
    running_ -= unsigned(ended.size());
    if (running_ == 0) idle_.notify_all();
    return released_all;
}

}  // namespace spyre::mockdev
