// SPDX-License-Identifier: Apache-2.0
#include "stream/op_queue.hpp"

#include <sys/mman.h>

#include <bit>

#include "spyre/error.hpp"

namespace spyre::detail {

OpQueue::OpQueue(size_t capacity) : mask_(capacity - 1) {
    if (capacity == 0 || !std::has_single_bit(capacity))
        throw Error(ErrorKind::InvalidArgument, "op queue capacity " + std::to_string(capacity) +
                                                    " is not a power of two");
    void* mem = mmap(nullptr, capacity * sizeof(Slot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) throw Error(ErrorKind::OutOfMemory, "op queue of " + std::to_string(capacity) + " slots");
    slots_ = static_cast<Slot*>(mem);  // zero: every slot free for lap 0
}

OpQueue::~OpQueue() {
    // Ops never drained still own what they hold. A queue with none is not
    // looked at: the look touched its first page, a fault apiece for the
    // streams destroyed unused (4,000 cost the next op 50 ms).
    if (Pending()) {
        std::deque<QueuedOp> rest;
        Drain(rest);
    }
    munmap(slots_, capacity() * sizeof(Slot));
}

void OpQueue::Push(std::span<QueuedOp> ops) {
    if (ops.empty()) return;
    if (!spilled_.load(std::memory_order_acquire) && TryReserve(ops)) return;
    Spill(ops);
}

bool OpQueue::TryReserve(std::span<QueuedOp> ops) {
    const uint64_t n = ops.size();
    if (n > capacity()) return false;
    uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
        // The consumer frees slots in order: if the run's last slot is free
        // for this lap, so are the ones before it.
        const uint64_t last = pos + n - 1;
        const uint64_t seq = slots_[last & mask_].seq.load(std::memory_order_acquire);
        const auto lag = int64_t(seq - LapOf(last));
        if (lag == 0) {
            // seq_cst: the fence that orders this push before the caller's
            // look at the scheduler's sleep flags (see the header).
            if (tail_.compare_exchange_weak(pos, pos + n, std::memory_order_seq_cst, std::memory_order_relaxed))
                break;
        } else if (lag < 0) {
            // Not taken yet by the consumer: full, unless the tail moved on.
            const uint64_t now = tail_.load(std::memory_order_relaxed);
            if (now == pos) return false;
            pos = now;
        } else {
            pos = tail_.load(std::memory_order_relaxed);  // another producer took it
        }
    }
    for (uint64_t i = 0; i < n; ++i) {
        Slot& slot = slots_[(pos + i) & mask_];
        new (slot.storage) QueuedOp(std::move(ops[i]));
        slot.seq.store(LapOf(pos + i) + 1, std::memory_order_release);
    }
    return true;
}

void OpQueue::Spill(std::span<QueuedOp> ops) {
    std::lock_guard lock(overflow_mu_);
    for (QueuedOp& op : ops) overflow_.push_back(std::move(op));
    spilled_.store(true, std::memory_order_seq_cst);
}

size_t OpQueue::Drain(std::deque<QueuedOp>& out) {
    size_t taken = 0;
    // Whole groups only. A producer publishes a group's slots one by one;
    // the first ops of a group taken without its last would go down as a
    // chain of their own, and another stream's CBs could then go between
    // them and the rest (two streams of one loaded plan: one's correction
    // patched the shared program under the other's compute).
    for (uint64_t end = head_;;) {
        Slot& slot = slots_[end & mask_];
        if (slot.seq.load(std::memory_order_acquire) != LapOf(end) + 1) break;
        ++end;
        if (slot.op()->link) continue;  // the group goes on
        for (; head_ != end; ++head_, ++taken) {
            Slot& whole = slots_[head_ & mask_];
            out.push_back(std::move(*whole.op()));
            whole.op()->~QueuedOp();
            whole.seq.store(LapOf(head_) + capacity(), std::memory_order_release);
        }
    }
    // The overflow follows everything reserved in the ring before it: take
    // it only once the ring is empty up to the tail, as the tail stands
    // under the lock. A producer that reserved in the ring and then spilled
    // did both before it took the lock; a look before the lock could miss
    // its reservation and take its later op from the overflow first.
    if (spilled_.load(std::memory_order_acquire) && head_ == tail_.load(std::memory_order_acquire)) {
        std::lock_guard lock(overflow_mu_);
        if (head_ != tail_.load(std::memory_order_acquire)) return taken;
        for (QueuedOp& op : overflow_) out.push_back(std::move(op));
        taken += overflow_.size();
        overflow_.clear();
        spilled_.store(false, std::memory_order_release);
    }
    return taken;
}

bool OpQueue::Pending() const {
    return tail_.load(std::memory_order_seq_cst) != head_ || spilled_.load(std::memory_order_seq_cst);
}

}  // namespace spyre::detail
