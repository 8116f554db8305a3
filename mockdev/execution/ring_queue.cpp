// SPDX-License-Identifier: Apache-2.0
#include "execution/ring_queue.hpp"

#include <chrono>
#include <span>

#include "execution/completion_irq.hpp"
#include "spyre/common/device_clock.hpp"

namespace spyre::mockdev {

RingQueue::RingQueue(RegisterFile& regs, ShmObject& bar4, const RingGeometry& geometry, CbExecutor& executor,
                     HostLink& host_link, const QueueLane& lane)
    : regs_(regs),
      executor_(executor),
      host_link_(host_link),
      lane_(lane),
      aborted_([this] { return lane_.aborting(); }),
      db_(reinterpret_cast<spyre_doorbell_page*>(bar4.data() + geometry.db_offset)),
      pair_(bar4, RingLayout(geometry)) {}

void RingQueue::SetEnabled(bool enabled) {
    enabled_.store(enabled, std::memory_order_release);
    if (enabled)
        regs_.SetBits32(SPYRE_REG_STATUS, SPYRE_STATUS_RING_ENABLED);
    else
        regs_.ClearBits32(SPYRE_REG_STATUS, SPYRE_STATUS_RING_ENABLED);
}

void RingQueue::Clear() {
    enabled_.store(false);
    cancel_next_ = false;  // a linked chain does not survive a reset
    streams_failed_ = 0;   // nor a failed ring stream (InitRegisters zeroes its register)
    pair_.Clear();
}

void RingQueue::Halt() {
    pair_.Halt(regs_);
    regs_.SetBits32(SPYRE_REG_STATUS, SPYRE_STATUS_HALTED);
}

QueueKind::Turn RingQueue::Serve(std::unique_lock<std::mutex>&, CycleClock& clock, Clock::time_point& now) {
    // One clock read for the batch and one per CB (its completion time, which
    // is also when the next CB starts), on the cycle clock: at 33 ns each in a
    // VM, kernel clock reads were most of a NOP's time on the device.
    const auto started = clock.Now();
    now = started;
    if (LeaveBatch() || halted()) return Turn::Idle;
    uint32_t head = pair_.head();
    const uint32_t tail = pair_.tail();
    regs_.Store32(SPYRE_REG_SQ_TAIL, tail);
    if (tail == head) return Turn::Idle;
    host_link_.Observed();
    // Every CB owes a CQE: take CBs only while the CQ has room for theirs.
    std::optional<uint32_t> room = pair_.CqRoom(pair_.cq_tail());
    if (!room || !pair_.TailValid(tail)) {
        Halt();  // the driver published an impossible sq_tail or cq_head: a driver bug
        return Turn::Idle;
    }
    if (*room == 0) return Turn::HeldBack;
    regs_.Count64(SPYRE_REG_CNT_DOORBELLS, 1);

    regs_.SetBits32(SPYRE_REG_STATUS, SPYRE_STATUS_BUSY);
    while (head != tail && !LeaveBatch()) {
        if (*room == 0) {
            room = pair_.CqRoom(pair_.cq_tail());
            if (!room) Halt();
            if (!room || *room == 0) break;  // held back: the lane comes back
        }
        // A private copy: the driver may scribble on the slots at any time.
        spyre_cb cb;
        pair_.Copy(head, &cb);
        // Framing (spyre_cb.h): a slot count the ring cannot hold consumes
        // just this slot, so the device never reads past what was published.
        const bool framed = cb.slots >= 1 && cb.slots <= SPYRE_CB_MAX_SLOTS && cb.slots <= tail - head;
        const uint32_t used = framed ? cb.slots : 1u;
        bool cancelled = false;
        const CbOutcome outcome = Run(cb, head, framed ? used : 0, now, cancelled);
        if (outcome.status == SPYRE_ERR_NONE) {
            regs_.Count64(SPYRE_REG_CNT_CB_DONE, 1);
        } else {
            // A cancellation is a consequence, not a fault: the first real
            // fault stays latched.
            if (!cancelled)
                regs_.LatchError(ErrorRecord{outcome.status, cb.opcode, head, outcome.fault_addr, cb.user_data});
            regs_.Count64(SPYRE_REG_CNT_CB_ERRORS, 1);
            if (outcome.status == SPYRE_ERR_WATCHDOG) regs_.Add64(SPYRE_REG_CNT_WATCHDOG, 1);
        }
        now = clock.Now();
        pair_.Consume(used);
        pair_.Post(MakeCqe(cb, head, outcome.status, outcome.result, DeviceClockNs(now)), host_link_);
        head += used;
        --*room;
        regs_.Store32(SPYRE_REG_SQ_HEAD, head);
        regs_.Store32(SPYRE_REG_CQ_TAIL, pair_.cq_tail());
        SignalCompletion(db_->irq_seq, db_->irq_waiters, regs_);
    }
    regs_.ClearBits32(SPYRE_REG_STATUS, SPYRE_STATUS_BUSY);
    regs_.Count64(SPYRE_REG_CNT_BUSY_NS,
                  uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(now - started).count()));
    return Turn::Served;
}

// `framed_slots` is 0 when the CB's slot count does not fit what was published.
CbOutcome RingQueue::Run(const spyre_cb& cb, uint32_t head, uint32_t framed_slots, Clock::time_point started,
                         bool& cancelled) {
    // Ring streams: a CB whose stream has failed is cancelled like a LINK
    // successor; RESTART forgets the failure first.
    const uint64_t stream_bit =
        (cb.flags & SPYRE_CB_F_STREAM) && cb.stream < SPYRE_RING_STREAMS ? 1ull << cb.stream : 0;
    const uint64_t streams_failed_before = streams_failed_;
    if (cb.flags & SPYRE_CB_F_STREAM_RESTART) streams_failed_ &= ~stream_bit;
    cancelled = cancel_next_ || (streams_failed_ & stream_bit) != 0;
    CbOutcome outcome;
    if (cancelled) {
        outcome = Fail(SPYRE_ERR_CANCELED);  // the previous CB was linked and failed: not even validated
    } else if (framed_slots == 0) {
        outcome = Fail(SPYRE_ERR_BAD_SLOT_COUNT);
    } else {
        const size_t payload_bytes = size_t(framed_slots - 1) * SPYRE_CB_SLOT_BYTES;
        for (uint32_t i = 1; i < framed_slots; ++i)
            pair_.Copy(head + i, payload_.data() + size_t(i - 1) * SPYRE_CB_SLOT_BYTES, SPYRE_CB_SLOT_BYTES);
        outcome = executor_.Execute(cb, std::span<const uint8_t>(payload_.data(), payload_bytes), aborted_, started);
    }
    // LINK: a failed (or cancelled) linked CB cancels its successor, also
    // one that arrives with a later doorbell.
    cancel_next_ = (cb.flags & SPYRE_CB_F_LINK) != 0 && outcome.status != SPYRE_ERR_NONE;
    if (outcome.status != SPYRE_ERR_NONE) streams_failed_ |= stream_bit;
    if (streams_failed_ != streams_failed_before) regs_.Store64(SPYRE_REG_RING_STREAMS_FAILED, streams_failed_);
    return outcome;
}

}  // namespace spyre::mockdev
