// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/task_queue.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "completion_wait.hpp"
#include "device_checks.hpp"
#include "spyre/common/futex.hpp"
#include "spyre/error.hpp"

using namespace std::chrono;

namespace spyre::driver {

using detail::Word;

uint32_t TaskTopology::cores() const noexcept {
    uint32_t n = 0;
    for (uint32_t c : group_cores) n += c;
    return n;
}

TaskTopology ReadTaskTopology(const Function& fn) {
    const uint32_t queues = fn.Read32(SPYRE_REG_TQ_COUNT);
    if (queues > SPYRE_TQ_MAX_QUEUES)
        throw Error(ErrorKind::ProtocolError,
                    "device publishes " + std::to_string(queues) + " task queues, the contract allows " +
                        std::to_string(SPYRE_TQ_MAX_QUEUES),
                    ErrorContext{.device = fn.pci_address(), .reg = "TQ_COUNT", .offset = SPYRE_REG_TQ_COUNT});
    TaskTopology t;
    for (uint32_t q = 0; q < queues; ++q) {
        const uint32_t cores = fn.Read32(SPYRE_REG_TQ_GROUP_CORES(q));
        if (cores == 0)
            throw Error(ErrorKind::ProtocolError, "task queue " + std::to_string(q) + "'s core group has no cores",
                        ErrorContext{.device = fn.pci_address(), .reg = "TQ" + std::to_string(q) + "_CORES",
                                     .offset = SPYRE_REG_TQ_GROUP_CORES(q)});
        t.group_cores.push_back(cores);
    }
    return t;
}

TaskQueue::TaskQueue(Function& function, uint32_t group) : fn_(function), group_(group) {
    const ErrorContext ctx{.device = fn_.pci_address()};
    const checks::TaskRegisters geo{
        .queues = fn_.Read32(SPYRE_REG_TQ_COUNT),
        .db_offset = fn_.Read32(SPYRE_REG_TQ_DB_OFFSET),
        .offset = fn_.Read32(SPYRE_REG_TQ_OFFSET),
        .stride = fn_.Read32(SPYRE_REG_TQ_STRIDE),
        .sq_entries = fn_.Read32(SPYRE_REG_TQ_SQ_ENTRIES),
        .desc_size = fn_.Read32(SPYRE_REG_TQ_DESC_SIZE),
        .cq_offset = fn_.Read32(SPYRE_REG_TQ_CQ_OFFSET),
        .cq_entries = fn_.Read32(SPYRE_REG_TQ_CQ_ENTRIES),
        .cqe_size = fn_.Read32(SPYRE_REG_TQ_CQE_SIZE),
    };
    // Checked against the bytes actually mapped before any pointer is formed.
    checks::CheckTaskGeometry(geo, fn_.bar4_size(), ctx);
    if (group >= geo.queues)
        throw Error(ErrorKind::InvalidArgument,
                    "task queue " + std::to_string(group) + " does not exist: the device has " +
                        std::to_string(geo.queues) + " (one per core group)",
                    ErrorContext{.device = fn_.pci_address(), .reg = "TQ_COUNT", .offset = SPYRE_REG_TQ_COUNT});
    cores_ = ReadTaskTopology(fn_).group_cores.at(group);
    sq_entries_ = geo.sq_entries;
    cq_entries_ = geo.cq_entries;
    // The device takes a CB only while its completion has room.
    capacity_ = std::min(sq_entries_, cq_entries_);
    uint8_t* block = fn_.bar4() + geo.offset + size_t(group) * geo.stride;
    db_ = reinterpret_cast<spyre_task_doorbell*>(fn_.bar4() + geo.db_offset);
    words_ = &db_->queue[group];
    sq_ = reinterpret_cast<spyre_cb*>(block);
    cq_ = reinterpret_cast<const spyre_cqe*>(block + geo.cq_offset);

    fn_.CheckAlive();
    sq_tail_ = Word(words_->sq_tail).load(std::memory_order_acquire);
    cq_head_ = Word(words_->cq_head).load(std::memory_order_acquire);
    const uint32_t cq_tail = Word(words_->cq_tail).load(std::memory_order_acquire);
    if (sq_tail_ != cq_head_ || cq_tail != cq_head_ || (fn_.Read32(SPYRE_REG_TQ_HALTED) & (1u << group)))
        throw Error(ErrorKind::Busy,
                    "task queue " + std::to_string(group) + " is not idle (" + std::to_string(sq_tail_ - cq_head_) +
                        " tasks submitted and not reaped, or halted): reset the function first",
                    ErrorContext{.device = fn_.pci_address()});
    if (!fn_.HoldTaskQueue(group))
        throw Error(ErrorKind::Busy, "task queue " + std::to_string(group) + " is held by another TaskQueue of this process",
                    ErrorContext{.device = fn_.pci_address()});
}

TaskQueue::~TaskQueue() { fn_.ReleaseTaskQueue(group_); }

size_t TaskQueue::Submit(std::span<const spyre_cb> tasks) {
    fn_.CheckAliveThrottled();
    const size_t n = std::min<size_t>(tasks.size(), Free());
    if (n == 0) return 0;
    detail::CopyToRing(sq_, sq_entries_, sq_tail_, tasks.first(n));
    Word(words_->sq_tail).store(sq_tail_, std::memory_order_release);
    // Pairs with the device's fence between setting device_sleeping and
    // re-reading every sq_tail (spyre_task.h).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (Word(db_->device_sleeping).load(std::memory_order_relaxed)) {
        Word(db_->wake_seq).fetch_add(1, std::memory_order_release);
        FutexWake(&db_->wake_seq, 1);
    }
    return n;
}

// As CommandRing's: the phase of the CQE at cq_head, never more looked for
// than tasks are in flight. cq_tail is for the device's interrupt waiters.
bool TaskQueue::CompletionsReady() const noexcept {
    return InFlight() != 0 && detail::CqePosted(cq_, cq_entries_, cq_head_);
}

size_t TaskQueue::Reap(std::span<spyre_cqe> out) {
    size_t n = 0;
    while (n < out.size() && CompletionsReady()) {
        out[n++] = detail::ReadCqe(cq_, cq_entries_, cq_head_);
        ++cq_head_;
    }
    if (n) Word(words_->cq_head).store(cq_head_, std::memory_order_release);
    return n;
}

void TaskQueue::CheckHealth() const {
    fn_.CheckAlive();
    if (fn_.Read32(SPYRE_REG_TQ_HALTED) & (1u << group_))
        throw Error(ErrorKind::DeviceError,
                    "the device halted task queue " + std::to_string(group_) + "; reset the function to recover",
                    ErrorContext{.device = fn_.pci_address(), .reg = "TQ_HALTED", .offset = SPYRE_REG_TQ_HALTED,
                                 .device_code = fn_.Read32(SPYRE_REG_ERR_CODE)});
}

size_t TaskQueue::Wait(std::span<spyre_cqe> out, size_t min_count, const WaitOptions& options) {
    min_count = std::min(min_count, out.size());
    if (min_count > InFlight())
        throw Error(ErrorKind::InvalidArgument, "waiting for " + std::to_string(min_count) + " task completions with only " +
                                                    std::to_string(InFlight()) + " tasks in flight",
                    ErrorContext{.device = fn_.pci_address()});
    return detail::WaitForCompletions(
        min_count, options, [this] { return CompletionsReady(); }, [&](size_t done) { return Reap(out.subspan(done)); },
        [this] { CheckHealth(); },
        [this](steady_clock::time_point deadline) {
            detail::BlockOnInterrupt(db_->irq_waiters, db_->irq_seq, [this] { return CompletionsReady(); },
                                     [this] { CheckHealth(); }, deadline);
        },
        [&] {
            return Error(ErrorKind::Timeout,
                         "no task completion within " +
                             std::to_string(duration_cast<milliseconds>(options.timeout).count()) + " ms (" +
                             std::to_string(InFlight()) + " tasks in flight on queue " + std::to_string(group_) + ")",
                         ErrorContext{.device = fn_.pci_address()});
        });
}

void TaskQueue::WaitAny(std::span<TaskQueue* const> queues, const WaitOptions& options) {
    if (queues.empty()) throw Error(ErrorKind::InvalidArgument, "waiting for task completions on no queue");
    TaskQueue& first = *queues.front();
    uint32_t in_flight = 0;
    for (TaskQueue* q : queues) {
        if (&q->fn_ != &first.fn_)
            throw Error(ErrorKind::InvalidArgument, "waiting on task queues of two functions (" +
                                                        first.fn_.pci_address() + ", " + q->fn_.pci_address() + ") at once",
                        ErrorContext{.device = first.fn_.pci_address()});
        in_flight += q->InFlight();
    }
    if (in_flight == 0)
        throw Error(ErrorKind::InvalidArgument, "waiting for task completions with no task in flight",
                    ErrorContext{.device = first.fn_.pci_address()});
    auto ready = [&] {
        for (TaskQueue* q : queues)
            if (q->CompletionsReady()) return true;
        return false;
    };
    auto health = [&] {
        for (TaskQueue* q : queues) q->CheckHealth();
    };
    detail::WaitForCompletions(
        1, options, ready, [&](size_t) { return ready() ? size_t{1} : size_t{0}; }, health,
        [&](steady_clock::time_point deadline) {
            detail::BlockOnInterrupt(first.db_->irq_waiters, first.db_->irq_seq, ready, health, deadline);
        },
        [&] {
            return Error(ErrorKind::Timeout,
                         "no task completion within " +
                             std::to_string(duration_cast<milliseconds>(options.timeout).count()) + " ms (" +
                             std::to_string(in_flight) + " tasks in flight on " + std::to_string(queues.size()) +
                             " queues)",
                         ErrorContext{.device = first.fn_.pci_address()});
        });
}

}  // namespace spyre::driver
