// SPDX-License-Identifier: Apache-2.0
#include "execution/task_server.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

#include "execution/completion_irq.hpp"
#include "execution/cqe_post.hpp"
#include "execution/server_thread.hpp"
#include "execution/task_executor.hpp"
#include "log.hpp"
#include "spyre/common/device_clock.hpp"
#include "spyre/common/futex.hpp"

namespace spyre::mockdev {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

}  // namespace

TaskServer::TaskServer(RegisterFile& regs, ShmObject& ring, const TaskGeometry& geometry,
                       const std::atomic<uint32_t>& watchdog_ms, DeviceMemory memory, CardCores& cores,
                       HostLink& host_link, std::chrono::microseconds poll)
    : regs_(regs),
      ring_(ring),
      geo_(geometry),
      watchdog_ms_(watchdog_ms),
      cores_(cores),
      host_link_(host_link),
      poll_(poll),
      base_(ring.data()),
      db_(reinterpret_cast<spyre_task_doorbell*>(ring.data() + geometry.db_offset)),
      queues_(std::min(cores.groups(), SPYRE_TQ_MAX_QUEUES)) {
    for (unsigned i = 0; i < cores.workers(); ++i) per_core_.push_back(std::make_unique<ProgramExecutor>(memory, cores));
}

TaskServer::~TaskServer() { Stop(); }

void TaskServer::Start(const std::string& name) {
    started_.store(true);
    thread_ = StartServerThread(name, [this] { Loop(); });
    cores_.AddTaskSource(this);
    registered_.store(true);
}

void TaskServer::Stop() {
    if (registered_.exchange(false)) cores_.RemoveTaskSource(this);  // no worker takes a new task
    stopping_.store(true);
    abort_.store(true);
    {
        std::unique_lock lock(mutex_);
        accepting_ = false;
        idle_.wait(lock, [&] { return running_ == 0; });  // tasks on cores end within one chunk
    }
    if (!thread_.joinable()) return;
    WakeServer();
    thread_.join();
}

void TaskServer::WakeServer() {
    SharedWord(db_->wake_seq).fetch_add(1);
    FutexWake(&db_->wake_seq);
}

void TaskServer::Doorbell() { WakeServer(); }

TaskServer::Paused::Paused(TaskServer& server) : server_(server) {
    server_.abort_.store(true);  // running tasks stop at their next budget check
    lock_ = std::unique_lock(server_.exec_mutex_);
    // Out of its futex sleep, to park on exec_mutex_ instead: the page it
    // sleeps on may be replaced while paused (a change of owner). A server
    // never started (a test harness's card) has no thread to wait for.
    server_.pause_.Begin([&] { server_.WakeServer(); },
                         [&] { return server_.stopping_.load() || !server_.started_.load(); });
    std::unique_lock lock(server_.mutex_);
    server_.accepting_ = false;
    server_.idle_.wait(lock, [&] { return server_.running_ == 0; });
}

TaskServer::Paused::~Paused() {
    {
        std::lock_guard lock(server_.mutex_);
        server_.accepting_ = !server_.stopping_.load();
        server_.abort_.store(server_.stopping_.load());
    }
    server_.pause_.End();
    lock_.unlock();
    server_.WakeServer();
    server_.cores_.NotifyTasks();
}

void TaskServer::ClearQueues(const Paused&) {
    std::lock_guard lock(mutex_);
    for (uint32_t q = 0; q < SPYRE_TQ_MAX_QUEUES; ++q) {
        q_[q] = Queue{};
        spyre_task_queue_words& w = Words(q);
        SharedWord(w.sq_tail).store(0);
        SharedWord(w.cq_head).store(0);
        SharedWord(w.sq_head).store(0);
        SharedWord(w.cq_tail).store(0);
    }
    for (uint32_t q = 0; q < queues_; ++q)
        ring_.Zero(geo_.offset + uint64_t(q) * geo_.stride, geo_.stride);
    halted_.store(0);
    regs_.Store32(SPYRE_REG_TQ_HALTED, 0);
}

bool TaskServer::RaiseIrq() { return RaiseCompletionIrq(db_->irq_seq, db_->irq_waiters); }

bool TaskServer::Submitted() const {
    for (uint32_t q = 0; q < queues_; ++q)
        if (!(halted_.load() & (1u << q)) && SharedWord(Words(q).sq_tail).load(std::memory_order_relaxed) != q_[q].sq_head)
            return true;
    return false;
}

void TaskServer::Loop() {
    auto last_work = Clock::now();
    for (;;) {
        if (stopping_.load()) return;
        if (pause_.requested()) {
            pause_.Park(exec_mutex_);
            continue;
        }
        const uint32_t wake = SharedWord(db_->wake_seq).load(std::memory_order_acquire);
        if (Intake()) {
            last_work = Clock::now();
            continue;
        }
        if (Submitted()) {
            std::this_thread::sleep_for(kCqFullRetry);  // held back by a full CQ: the driver must reap
            continue;
        }
        if (Clock::now() - last_work < poll_) {
            // Yield, not a bare spin: the cores this server just handed
            // tasks to are threads too, and on a host with few CPUs a
            // spinning server keeps them (and the driver) off the CPU for
            // the whole poll budget.
            std::this_thread::yield();
            continue;
        }
        // Sleep (spyre_task.h): publish it, fence, look at every sq_tail once more.
        SharedWord(db_->device_sleeping).store(1);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (!Submitted() && !stopping_.load() && !pause_.requested() && FutexWait(&db_->wake_seq, wake, kServerSleepTimeout))
            regs_.Add64(SPYRE_REG_CNT_WAKEUPS, 1);
        SharedWord(db_->device_sleeping).store(0);
        last_work = Clock::now();
    }
}

void TaskServer::Halt(uint32_t queue, uint32_t sq_head) {
    const uint32_t mask = halted_.fetch_or(1u << queue) | (1u << queue);
    regs_.Store32(SPYRE_REG_TQ_HALTED, mask);
    regs_.LatchError(ErrorRecord{SPYRE_ERR_RING_OVERFLOW, 0, sq_head, 0, 0});
}

bool TaskServer::Intake() {
    auto exec = pause_.Enter(exec_mutex_);
    if (!exec || pause_.requested() || stopping_.load()) return false;
    std::array<uint32_t, SPYRE_TQ_MAX_QUEUES> taken{};
    for (uint32_t q = 0; q < queues_; ++q) {
        if (halted_.load() & (1u << q)) continue;
        spyre_task_queue_words& w = Words(q);
        Queue& queue = q_[q];
        const uint32_t tail = SharedWord(w.sq_tail).load(std::memory_order_acquire);
        uint32_t head = queue.sq_head;
        if (tail == head) continue;
        host_link_.Observed();
        if (!spyre_ring_valid(head, tail, geo_.sq_entries)) {
            Halt(q, head);
            continue;
        }
        const uint32_t cq_head = SharedWord(w.cq_head).load(std::memory_order_acquire);
        uint32_t cq_tail;
        {
            std::lock_guard lock(mutex_);
            cq_tail = queue.cq_tail;
        }
        if (!spyre_ring_valid(cq_head, cq_tail, geo_.cq_entries)) {
            Halt(q, head);  // the driver claims completions never posted
            continue;
        }
        // Completions owed: taken and not yet reaped. Take only what the CQ can answer.
        const uint32_t owed = head - cq_head;
        const uint32_t room = owed >= geo_.cq_entries ? 0 : geo_.cq_entries - owed;
        const uint32_t n = std::min(tail - head, room);
        if (n == 0) continue;
        const uint8_t* sq = Block(q);
        {
            std::lock_guard lock(mutex_);
            for (uint32_t i = 0; i < n; ++i) {
                // A private copy: the driver may scribble on the slot at any time.
                Queue::Taken t{{}, head + i};
                std::memcpy(&t.cb, sq + size_t(spyre_ring_slot(head + i, geo_.sq_entries)) * geo_.desc_size, sizeof t.cb);
                queue.pending.push_back(t);
            }
        }
        head += n;
        queue.sq_head = head;
        SharedWord(w.sq_head).store(head, std::memory_order_release);
        regs_.Add64(SPYRE_REG_CNT_TASK_DOORBELLS, 1);
        taken[q] = n;
    }
    exec.unlock();
    // The first queue's first task runs on this thread (CardCores::RunOneTask):
    // a lone task, a chain's next link, starts without a worker's wake-up.
    int own = -1;
    for (uint32_t q = 0; q < queues_; ++q) {
        if (taken[q] == 0) continue;
        const bool first = own < 0;
        if (first) own = int(q);
        cores_.NotifyTasks(q, taken[q] - (first ? 1 : 0));
    }
    if (own < 0) return false;
    if (pause_.requested() || stopping_.load() || !cores_.RunOneTask(uint32_t(own), *this)) {
        cores_.NotifyTasks(uint32_t(own), 1);  // no idle core, or the card is held: a worker takes it
        return true;
    }
    // Tasks of this queue still waiting after the lent run: announced
    // again, so none depends on a notice its worker may have slept through.
    size_t left = 0;
    {
        std::lock_guard lock(mutex_);
        left = q_[uint32_t(own)].pending.size();
    }
    if (left != 0) cores_.NotifyTasks(uint32_t(own), uint32_t(left));
    return true;
}

bool TaskServer::Take(uint32_t queue, CoreTask& out) {
    std::lock_guard lock(mutex_);
    if (!accepting_ || queue >= queues_ || q_[queue].pending.empty()) return false;
    out.source = this;
    out.queue = queue;
    out.cb = q_[queue].pending.front().cb;
    out.sq_pos = q_[queue].pending.front().sq_pos;
    q_[queue].pending.pop_front();
    ++running_;
    return true;
}

uint16_t TaskServer::Execute(const spyre_cb& cb, unsigned core) {
    const Budget budget(Clock::now(), std::chrono::milliseconds(watchdog_ms_.load(std::memory_order_relaxed)),
                        [this] { return abort_.load(std::memory_order_relaxed); });
    return ExecuteTaskCb(*per_core_.at(core), cb, budget);
}

void TaskServer::Run(const CoreTask& task, unsigned core) noexcept {
    uint16_t status = SPYRE_ERR_INTERNAL;
    const uint64_t start_ns = DeviceClockNs();
    try {
        status = Execute(task.cb, core);
    } catch (const std::exception& e) {
        LOG_ERROR("task fault (user_data %llu): %s", static_cast<unsigned long long>(task.cb.user_data), e.what());
    } catch (...) {
    }
    const uint64_t end_ns = DeviceClockNs();
    regs_.Add64(status == SPYRE_ERR_NONE ? SPYRE_REG_CNT_TASKS_DONE : SPYRE_REG_CNT_TASK_ERRORS, 1);
    regs_.Add64(SPYRE_REG_CNT_TASK_BUSY_NS, end_ns - start_ns);
    if (status == SPYRE_ERR_WATCHDOG) regs_.Add64(SPYRE_REG_CNT_WATCHDOG, 1);
    spyre_cqe cqe{};
    cqe.user_data = task.cb.user_data;
    cqe.result = spyre_task_result(end_ns - start_ns, uint16_t(core));
    cqe.timestamp_ns = end_ns;
    cqe.sq_pos = task.sq_pos;
    cqe.status = status;
    cqe.opcode = task.cb.opcode;
    {
        std::lock_guard lock(mutex_);
        Queue& queue = q_[task.queue];
        PostCqe(Block(task.queue) + geo_.cq_offset, geo_.cq_entries, geo_.cqe_size, queue.cq_tail, cqe, host_link_);
        ++queue.cq_tail;
        SharedWord(Words(task.queue).cq_tail).store(queue.cq_tail, std::memory_order_release);
    }
    if (RaiseIrq()) regs_.Add64(SPYRE_REG_CNT_IRQS, 1);
    std::lock_guard lock(mutex_);
    if (--running_ == 0) idle_.notify_all();
}

}  // namespace spyre::mockdev
