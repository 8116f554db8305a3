// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/device_queue.hpp"

#include <algorithm>

#include "completion_wait.hpp"
#include "device_checks.hpp"

using namespace std::chrono;

namespace spyre::driver {

using detail::Word;

namespace {

// Which register publishes each field of a queue's geometry.
constexpr checks::QueueRegisters kRingRegisters{
    SPYRE_REG_DB_OFFSET, SPYRE_REG_SQ_OFFSET,  SPYRE_REG_CQ_OFFSET, SPYRE_REG_SQ_ENTRIES,
    SPYRE_REG_CQ_ENTRIES, SPYRE_REG_CB_SIZE,   SPYRE_REG_CQE_SIZE};
constexpr checks::QueueRegisters kTaskRegisters{
    SPYRE_REG_TQ_DB_OFFSET, SPYRE_REG_TQ_OFFSET, SPYRE_REG_TQ_CQ_OFFSET, SPYRE_REG_TQ_SQ_ENTRIES,
    SPYRE_REG_TQ_CQ_ENTRIES, SPYRE_REG_TQ_DESC_SIZE, SPYRE_REG_TQ_CQE_SIZE};

checks::QueueRegisters ReadGeometry(const Function& fn, const checks::QueueRegisters& at) {
    return {.db_offset = fn.Read32(at.db_offset), .sq_offset = fn.Read32(at.sq_offset),
            .cq_offset = fn.Read32(at.cq_offset), .sq_entries = fn.Read32(at.sq_entries),
            .cq_entries = fn.Read32(at.cq_entries), .cb_size = fn.Read32(at.cb_size),
            .cqe_size = fn.Read32(at.cqe_size)};
}

}  // namespace

std::string QueueId::Name() const { return task ? "task queue " + std::to_string(group) : "the CB ring"; }

DeviceQueue::DeviceQueue(Function& function, QueueId id) : fn_(function), id_(id) {
    const ErrorContext ctx = Context();
    const checks::QueueRegisters geo = ReadGeometry(fn_, id.task ? kTaskRegisters : kRingRegisters);
    uint8_t* const bar4 = fn_.bar4();
    // Refuse geometry this driver cannot use rather than corrupt memory:
    // checked against the bytes actually mapped, not the contract's BAR4
    // size, before any pointer is formed.
    if (!id.task) {
        checks::CheckRingGeometry(geo, fn_.bar4_size(), ctx);
        sq_ = reinterpret_cast<spyre_cb*>(bar4 + geo.sq_offset);
        cq_ = reinterpret_cast<const spyre_cqe*>(bar4 + geo.cq_offset);
        auto* db = reinterpret_cast<spyre_doorbell_page*>(bar4 + geo.db_offset);
        sq_tail_word_ = &db->sq_tail;
        sq_head_word_ = &db->sq_head;
        cq_head_word_ = &db->cq_head;
        cq_tail_word_ = &db->cq_tail;
        device_sleeping_ = &db->device_sleeping;
        wake_word_ = &db->sq_tail;
        irq_waiters_ = &db->irq_waiters;
        irq_seq_ = &db->irq_seq;
        device_state_ = &db->device_state;
        halt_reg_ = SPYRE_REG_STATUS;
        halt_mask_ = SPYRE_STATUS_HALTED;
        publish_every_ = std::max(1u, geo.cq_entries / 4);
    } else {
        const checks::TaskRegisters tasks{
            .rings = geo, .queues = fn_.Read32(SPYRE_REG_TQ_COUNT), .stride = fn_.Read32(SPYRE_REG_TQ_STRIDE)};
        checks::CheckTaskGeometry(tasks, fn_.bar4_size(), ctx);
        if (id.group >= tasks.queues)
            throw Error(ErrorKind::InvalidArgument,
                        "task queue " + std::to_string(id.group) + " does not exist: the device has " +
                            std::to_string(tasks.queues) + " (one per core group)",
                        ErrorContext{.device = fn_.pci_address(), .reg = "TQ_COUNT", .offset = SPYRE_REG_TQ_COUNT});
        uint8_t* const block = bar4 + geo.sq_offset + size_t(id.group) * tasks.stride;
        sq_ = reinterpret_cast<spyre_cb*>(block);
        cq_ = reinterpret_cast<const spyre_cqe*>(block + geo.cq_offset);
        auto* db = reinterpret_cast<spyre_task_doorbell*>(bar4 + geo.db_offset);
        spyre_task_queue_words& words = db->queue[id.group];
        sq_tail_word_ = &words.sq_tail;
        sq_head_word_ = &words.sq_head;
        cq_head_word_ = &words.cq_head;
        cq_tail_word_ = &words.cq_tail;
        device_sleeping_ = &db->device_sleeping;
        wake_word_ = &db->wake_seq;
        irq_waiters_ = &db->irq_waiters;
        irq_seq_ = &db->irq_seq;
        // Whether the device lives is said once per function, in the CB
        // ring's doorbell page.
        const uint32_t ring_db = fn_.Read32(SPYRE_REG_DB_OFFSET);
        checks::CheckDoorbellOffset(ring_db, fn_.bar4_size(), ctx);
        device_state_ = &reinterpret_cast<spyre_doorbell_page*>(bar4 + ring_db)->device_state;
        halt_reg_ = SPYRE_REG_TQ_HALTED;
        halt_mask_ = 1u << id.group;
        publish_every_ = 1;  // the device takes a task only while its completion has room
    }
    sq_entries_ = geo.sq_entries;
    cq_entries_ = geo.cq_entries;
    resets_ = fn_.Read64(SPYRE_REG_CNT_RESETS);  // Attach takes it again
}

void DeviceQueue::Attach() {
    resets_ = fn_.Read64(SPYRE_REG_CNT_RESETS);
    sq_tail_ = Word(*sq_tail_word_).load(std::memory_order_acquire);
    woken_to_ = sq_tail_;
    cq_head_ = Word(*cq_head_word_).load(std::memory_order_acquire);
    cq_end_ = cq_head_;
    cq_published_ = cq_head_;
}

bool DeviceQueue::DeviceIdle() const noexcept {
    const uint32_t cq_head = Word(*cq_head_word_).load(std::memory_order_acquire);
    return Word(*sq_tail_word_).load(std::memory_order_acquire) == cq_head &&
           Word(*cq_tail_word_).load(std::memory_order_acquire) == cq_head;
}

bool DeviceQueue::Halted() const { return (fn_.Read32(halt_reg_) & halt_mask_) != 0; }

void DeviceQueue::PublishHead() noexcept {
    if (cq_head_ == cq_published_) return;
    Word(*cq_head_word_).store(cq_head_, std::memory_order_release);
    cq_published_ = cq_head_;
}

void DeviceQueue::CheckHealth() const {
    fn_.CheckAlive();
    CheckNotReset();
    if (Halted())
        throw Error(ErrorKind::DeviceError,
                    "the device halted " + id_.Name() + "; reset the function to recover",
                    ErrorContext{.device = fn_.pci_address(),
                                 .reg = id_.task ? "TQ_HALTED" : "STATUS",
                                 .offset = halt_reg_,
                                 .device_code = fn_.Read32(SPYRE_REG_ERR_CODE)});
}

void DeviceQueue::CheckNotReset() const {
    // A reset by another path (the reset file, SPYRE_IOC_RESET, the PF's
    // holder) empties the queue under us: its work never completes, and
    // every waiter hung (found probing from outside).
    if (const uint64_t resets = fn_.Read64(SPYRE_REG_CNT_RESETS); resets != resets_)
        throw Error(ErrorKind::DeviceLost,
                    "function " + fn_.pci_address() + " was reset while " + id_.Name() +
                        " was in use (CNT_RESETS " + std::to_string(resets_) + " -> " + std::to_string(resets) +
                        "): the work queued and running there was dropped; close the device and open it again",
                    ErrorContext{.device = fn_.pci_address(), .reg = "CNT_RESETS", .offset = SPYRE_REG_CNT_RESETS});
}

void DeviceQueue::BlockOnInterrupt(steady_clock::time_point deadline) const {
    detail::BlockOnInterrupt(interrupt(), [this] { return CompletionsReady(); }, [this] { CheckHealth(); }, deadline);
}

Error DeviceQueue::TooManyAwaited(size_t min_count) const {
    return Error(ErrorKind::InvalidArgument,
                 "waiting for " + std::to_string(min_count) + " completions with only " + std::to_string(InFlight()) +
                     (id_.task ? " tasks" : " CBs") + " in flight on " + id_.Name(),
                 Context());
}

Error DeviceQueue::TimedOut(nanoseconds timeout) const {
    return Error(ErrorKind::Timeout,
                 "no completion within " + std::to_string(duration_cast<milliseconds>(timeout).count()) + " ms (" +
                     std::to_string(InFlight()) + (id_.task ? " tasks" : " CBs") + " in flight on " + id_.Name() + ")",
                 Context());
}

}  // namespace spyre::driver
