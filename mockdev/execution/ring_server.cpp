// SPDX-License-Identifier: Apache-2.0
#include "execution/ring_server.hpp"

#include <pthread.h>
#include <signal.h>

#include <climits>
#include <cstring>
#include <ctime>

#include "execution/completion_irq.hpp"
#include "execution/cqe_post.hpp"
#include "execution/server_thread.hpp"
#include "spyre/common/device_clock.hpp"
#include "spyre/common/futex.hpp"

namespace spyre::mockdev {

namespace {

using namespace std::chrono_literals;

// How often, and how long, Kick re-wakes a server that has not acknowledged.
constexpr auto kKickRetry = 20us;
constexpr auto kKickLimit = 1s;

// Idle polls between two looks at the clock (for the --poll-us deadline).
constexpr uint32_t kPollsPerClockRead = 16;


}  // namespace

RingServer::RingServer(RegisterFile& regs, ShmObject& ring, const RingGeometry& geometry, CbExecutor& executor,
                       HostLink& host_link, std::chrono::microseconds poll)
    : regs_(regs),
      ring_(ring),
      geo_(geometry),
      executor_(executor),
      host_link_(host_link),
      abort_cb_([this] { return stopping_.load() || abort_batch_.load(); }),
      poll_(poll),
      db_(reinterpret_cast<spyre_doorbell_page*>(ring.data() + geometry.db_offset)),
      sq_(ring.data() + geometry.sq_offset),
      cq_(ring.data() + geometry.cq_offset) {}

RingServer::~RingServer() { Stop(); }

void RingServer::Start(const std::string& name) {
    running_.store(true);
    thread_ = StartServerThread(name, [this] { Run(); });
}

void RingServer::Stop() {
    if (!thread_.joinable()) return;
    stopping_.store(true);
    Kick();
    thread_.join();
    running_.store(false);
}

void RingServer::Doorbell() { FutexWake(&db_->sq_tail); }

void RingServer::SetRingEnabled(bool enabled) {
    ring_enabled_.store(enabled, std::memory_order_release);
    if (enabled) {
        regs_.SetBits32(SPYRE_REG_STATUS, SPYRE_STATUS_RING_ENABLED);
        Kick();  // CBs may already be waiting in the ring
    } else {
        regs_.ClearBits32(SPYRE_REG_STATUS, SPYRE_STATUS_RING_ENABLED);
    }
}

RingServer::Paused::Paused(RingServer& server) : ring_server_(server) {
    ring_server_.abort_batch_.store(true);
    lock_ = std::unique_lock(ring_server_.exec_mutex_);
    // Out of its futex sleep, to park on exec_mutex_ instead. A server never
    // started (a test harness's card) has no thread to wait for.
    ring_server_.pause_.Begin([&] { ring_server_.Kick(); },
                              [&] { return ring_server_.stopping_.load() || !ring_server_.running_.load(); });
    ring_server_.abort_batch_.store(false);
}

RingServer::Paused::~Paused() {
    ring_server_.pause_.End();
    lock_.unlock();
    ring_server_.Kick();  // a ring enabled while paused may hold work
}

void RingServer::ClearRing(const Paused&) {
    ring_enabled_.store(false);
    halted_.store(false);
    cancel_next_ = false;  // a linked chain does not survive a reset
    streams_failed_ = 0;   // nor a failed ring stream (InitRegisters zeroes its register)
    SharedWord(db_->sq_tail).store(0);
    SharedWord(db_->cq_head).store(0);
    SharedWord(db_->sq_head).store(0);
    SharedWord(db_->cq_tail).store(0);
    ring_.Zero(geo_.sq_offset, uint64_t(geo_.sq_entries) * geo_.cb_size);
    ring_.Zero(geo_.cq_offset, uint64_t(geo_.cq_entries) * geo_.cqe_size);
}

bool RingServer::RaiseIrq() { return RaiseCompletionIrq(db_->irq_seq, db_->irq_waiters); }

void RingServer::Kick() {
    const uint32_t kick = kicks_.fetch_add(1) + 1;
    const auto deadline = Clock::now() + kKickLimit;
    for (;;) {
        FutexWake(&db_->sq_tail);
        const uint32_t seen = std::atomic_ref<uint32_t>(kicks_seen_).load();
        // Done once the server has seen the kick, or is awake (it will look
        // again before it sleeps). Otherwise it may have slept through the
        // wake: wait for its acknowledgement, waking it again meanwhile.
        if (!running_.load() || int32_t(seen - kick) >= 0 || SharedWord(db_->device_sleeping).load() == 0 ||
            Clock::now() > deadline)
            return;
        FutexWait(&kicks_seen_, seen, kKickRetry, FutexScope::Private);
    }
}

bool RingServer::HasWork(uint32_t sq_tail) const {
    return ring_enabled() && !halted() && sq_tail != SharedWord(db_->sq_head).load(std::memory_order_relaxed);
}

void RingServer::Run() {
    auto last_work = clock_.Now();
    uint32_t idle_polls = 0;
    for (;;) {
        const uint32_t kicks = kicks_.load();
        if (std::atomic_ref<uint32_t> seen(kicks_seen_); seen.load() != kicks) {
            seen.store(kicks);
            FutexWake(&kicks_seen_, INT_MAX, FutexScope::Private);  // kicks are rare: no cost when polling
        }
        if (stopping_.load()) return;
        if (pause_.requested()) {
            pause_.Park(exec_mutex_);
            continue;
        }
        if (HasWork(SharedWord(db_->sq_tail).load(std::memory_order_acquire))) {
            last_work = ServeBatch();
            idle_polls = 0;
        } else if (poll_.count() != 0 && (++idle_polls % kPollsPerClockRead != 0 || clock_.Now() - last_work < poll_)) {
            // A clock read costs as much as several polls: look at it now and
            // then, so a new CB is seen sooner (the poll period is
            // microseconds).
            CpuRelax();
        } else if (Sleep(kicks)) {
            last_work = clock_.Now();  // woken: poll again; timed out: straight back to sleep
        }
    }
}

// Returns false if the sleep timed out: nothing happened for a while.
bool RingServer::Sleep(uint32_t kicks_seen) {
    regs_.SetBits32(SPYRE_REG_STATUS, SPYRE_STATUS_SLEEPING);
    SharedWord(db_->device_sleeping).store(1);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // publish sleeping before the last look at sq_tail
    const uint32_t tail = SharedWord(db_->sq_tail).load();
    const bool must_stay = kicks_.load() != kicks_seen || stopping_.load() || HasWork(tail);
    const bool woken = must_stay || FutexWait(&db_->sq_tail, tail, kServerSleepTimeout);
    SharedWord(db_->device_sleeping).store(0);
    regs_.ClearBits32(SPYRE_REG_STATUS, SPYRE_STATUS_SLEEPING);
    if (!must_stay && woken) regs_.Add64(SPYRE_REG_CNT_WAKEUPS, 1);
    return woken;
}

bool RingServer::LeaveBatch() const { return stopping_.load() || abort_batch_.load() || !ring_enabled(); }

bool RingServer::WaitForCqSpace(uint32_t cq_tail, uint32_t sq_head) {
    for (;;) {
        const uint32_t cq_head = SharedWord(db_->cq_head).load(std::memory_order_acquire);
        if (!spyre_ring_valid(cq_head, cq_tail, geo_.cq_entries)) {
            Halt(sq_head);  // the driver claims completions never posted: a driver bug
            return false;
        }
        if (spyre_ring_free(cq_head, cq_tail, geo_.cq_entries) != 0) return true;
        if (LeaveBatch()) return false;
        std::this_thread::sleep_for(kCqFullRetry);
    }
}

void RingServer::Halt(uint32_t sq_head) {
    halted_.store(true);
    regs_.LatchError(ErrorRecord{SPYRE_ERR_RING_OVERFLOW, 0, sq_head, 0, 0});
    regs_.SetBits32(SPYRE_REG_STATUS, SPYRE_STATUS_HALTED);
}

RingServer::Clock::time_point RingServer::ServeBatch() {
    // One clock read for the batch and one per CB (its completion time, which
    // is also when the next CB starts), on the cycle clock: at 33 ns each in a
    // VM, kernel clock reads were most of a NOP's time on the device.
    const auto started = clock_.Now();
    const auto lock = pause_.Enter(exec_mutex_);
    if (!lock || LeaveBatch() || halted()) return started;
    uint32_t head = SharedWord(db_->sq_head).load(std::memory_order_relaxed);
    const uint32_t tail = SharedWord(db_->sq_tail).load(std::memory_order_acquire);
    regs_.Store32(SPYRE_REG_SQ_TAIL, tail);
    if (tail == head) return started;
    host_link_.Observed();
    regs_.Count64(SPYRE_REG_CNT_DOORBELLS, 1);
    if (!spyre_ring_valid(head, tail, geo_.sq_entries)) {
        Halt(head);
        return started;
    }

    regs_.SetBits32(SPYRE_REG_STATUS, SPYRE_STATUS_BUSY);
    auto now = started;
    uint32_t cq_tail = SharedWord(db_->cq_tail).load(std::memory_order_relaxed);
    while (head != tail && !LeaveBatch()) {
        // The driver may scribble on the slots at any time: work on private
        // copies of the CB and its payload.
        spyre_cb cb;
        std::memcpy(&cb, Slot(head), sizeof cb);
        if (!WaitForCqSpace(cq_tail, head)) break;

        // Framing (spyre_cb.h): a slot count the ring cannot hold consumes
        // just this slot, so the device never reads past what was published.
        const bool framed = cb.slots >= 1 && cb.slots <= SPYRE_CB_MAX_SLOTS && cb.slots <= tail - head;
        const uint32_t used = framed ? cb.slots : 1u;
        // Ring streams: a CB whose stream has failed is cancelled like a
        // LINK successor; RESTART forgets the failure first.
        const uint64_t stream_bit =
            (cb.flags & SPYRE_CB_F_STREAM) && cb.stream < SPYRE_RING_STREAMS ? 1ull << cb.stream : 0;
        const uint64_t streams_failed_before = streams_failed_;
        if (cb.flags & SPYRE_CB_F_STREAM_RESTART) streams_failed_ &= ~stream_bit;
        const bool cancelled = cancel_next_ || (streams_failed_ & stream_bit) != 0;
        CbOutcome outcome;
        if (cancelled) {
            outcome = Fail(SPYRE_ERR_CANCELED);  // the previous CB was linked and failed: not even validated
        } else if (!framed) {
            outcome = Fail(SPYRE_ERR_BAD_SLOT_COUNT);
        } else {
            const size_t payload_bytes = size_t(used - 1) * SPYRE_CB_SLOT_BYTES;
            for (uint32_t i = 1; i < used; ++i)
                std::memcpy(payload_.data() + size_t(i - 1) * SPYRE_CB_SLOT_BYTES, Slot(head + i), SPYRE_CB_SLOT_BYTES);
            outcome = executor_.Execute(cb, std::span<const uint8_t>(payload_.data(), payload_bytes), abort_cb_, now);
        }
        // LINK: a failed (or cancelled) linked CB cancels its successor, also
        // one that arrives with a later doorbell.
        cancel_next_ = (cb.flags & SPYRE_CB_F_LINK) != 0 && outcome.status != SPYRE_ERR_NONE;
        if (outcome.status != SPYRE_ERR_NONE) streams_failed_ |= stream_bit;
        if (streams_failed_ != streams_failed_before) regs_.Store64(SPYRE_REG_RING_STREAMS_FAILED, streams_failed_);
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
        now = clock_.Now();
        PostCqe(cb, outcome, head, cq_tail, now);
        head += used;
        ++cq_tail;
        SharedWord(db_->sq_head).store(head, std::memory_order_release);
        SharedWord(db_->cq_tail).store(cq_tail, std::memory_order_release);
        regs_.Store32(SPYRE_REG_SQ_HEAD, head);
        regs_.Store32(SPYRE_REG_CQ_TAIL, cq_tail);
        if (RaiseIrq()) regs_.Add64(SPYRE_REG_CNT_IRQS, 1);
    }
    regs_.ClearBits32(SPYRE_REG_STATUS, SPYRE_STATUS_BUSY);
    regs_.Count64(SPYRE_REG_CNT_BUSY_NS,
                uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(now - started).count()));
    return now;
}

const uint8_t* RingServer::Slot(uint32_t pos) const {
    return sq_ + size_t(spyre_ring_slot(pos, geo_.sq_entries)) * geo_.cb_size;
}

void RingServer::PostCqe(const spyre_cb& cb, const CbOutcome& outcome, uint32_t sq_pos, uint32_t cq_tail,
                         Clock::time_point completed) {
    spyre_cqe cqe{};
    cqe.user_data = cb.user_data;
    cqe.result = outcome.result;
    cqe.timestamp_ns = DeviceClockNs(completed);
    cqe.sq_pos = sq_pos;
    cqe.status = outcome.status;
    cqe.opcode = cb.opcode;
    mockdev::PostCqe(cq_, geo_.cq_entries, geo_.cqe_size, cq_tail, cqe, host_link_);
}

}  // namespace spyre::mockdev
