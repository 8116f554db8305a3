// SPDX-License-Identifier: Apache-2.0
// One queue of a function — a submission ring of spyre_cb and a completion
// ring of spyre_cqe in BAR4 — driven the one way this driver drives a queue.
// The CB ring (CommandRing) and each core group's task queue (TaskQueue) are
// this class over different registers and doorbell words (spyre_regs.h,
// spyre_task.h). It owns all they do alike: reading and validating the
// geometry the device publishes, copying CBs into the SQ and ringing the
// doorbell once per batch (waking the device only when it sleeps), reading
// completions by their phase and returning the CQ head, the health checks
// (device lost, queue halted), the waits (poll, adaptive, blocking on the
// completion interrupt) and the positions. What differs stays in the class
// over it: the CB ring's slot records and in-order check, its reset and
// enable; a task queue's idle check, hold and group.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>

#include "spyre/driver/function.hpp"
#include "spyre/driver_options.hpp"
#include "spyre/error.hpp"
#include "spyre/export.h"
#include "spyre/uapi/spyre.h"

SPYRE_API_BEGIN

namespace spyre::driver {

struct WaitOptions {
    WaitMode mode = WaitMode::Adaptive;
    std::chrono::nanoseconds spin{std::chrono::microseconds(20)};  // Adaptive: spin budget
    std::chrono::nanoseconds timeout{std::chrono::seconds(30)};
};

// A futex word of the caller's process and the value a sleeper expects in
// it: a sleep on the completion interrupt also ends when the word moves.
struct FutexWord {
    const std::atomic<uint32_t>* word;
    uint32_t expected;
};

// Which queue of a function: its CB ring, or the task queue of core group
// `group` (one per group, spyre_task.h).
struct QueueId {
    bool task = false;
    uint32_t group = 0;
    static QueueId Ring() noexcept { return {}; }
    static QueueId Task(uint32_t group) noexcept { return {true, group}; }
    // "the CB ring", "task queue 2": how messages name the queue.
    SPYRE_INTERNAL std::string Name() const;
};

// Not thread-safe, as the classes over it: one thread submits and reaps
// (CompletionPosted excepted). Its out-of-line members are libspyre's own
// (SPYRE_INTERNAL: not exported, and called directly, not through the PLT,
// on the submit and wait paths); it sits in an installed header only because
// CommandRing and TaskQueue hold it by value and read it inline. Apps use
// those two.
class DeviceQueue {
public:
    // Reads the geometry the device publishes for queue `id`, checks it
    // against the bytes of BAR4 actually mapped before forming any pointer,
    // and locates the queue; takes no position yet (Attach). Throws
    // ProtocolError for geometry this driver cannot use, InvalidArgument for
    // a task queue the device does not have. The function must outlive the
    // queue.
    SPYRE_INTERNAL DeviceQueue(Function& function, QueueId id);
    DeviceQueue(const DeviceQueue&) = delete;
    DeviceQueue& operator=(const DeviceQueue&) = delete;

    // Takes the positions in the device's words as this queue's own, with
    // nothing in flight: on a fresh (reset) queue, or one found DeviceIdle;
    // and the function's reset count, which CheckHealth watches.
    SPYRE_INTERNAL void Attach();
    // True when the device's words show nothing submitted and not reaped,
    // and no completion posted and not reaped.
    SPYRE_INTERNAL bool DeviceIdle() const noexcept;
    // True when the device halted this queue (until a function reset).
    SPYRE_INTERNAL bool Halted() const;

    Function& function() const noexcept { return fn_; }
    QueueId id() const noexcept { return id_; }
    uint32_t sq_entries() const noexcept { return sq_entries_; }
    uint32_t cq_entries() const noexcept { return cq_entries_; }
    uint32_t sq_tail() const noexcept { return sq_tail_; }  // slots submitted
    uint32_t cq_head() const noexcept { return cq_head_; }  // completions reaped
    // The completion position after every one owed: where the next CB
    // submitted will complete.
    uint32_t cq_end() const noexcept { return cq_end_; }
    // Completions owed: CBs submitted and not yet reaped.
    uint32_t InFlight() const noexcept { return cq_end_ - cq_head_; }

    // Every kCallsPerProbe calls (a submission, or a reap that found
    // nothing), the function's throttled look at its daemon: a daemon
    // killed without a word (SIGKILL) writes no GONE, and a loop that only
    // submits and reaps went on for good, told nothing (found probing from
    // outside); it gets DeviceLost now within kCallsPerProbe calls and
    // Function::kProbePeriod. So does a function reset under the queue
    // (CheckNotReset). A counter's increment on the fast path.
    static constexpr uint32_t kCallsPerProbe = 256;
    void ProbeNowAndThen() {
        if (++since_probe_ < kCallsPerProbe) [[likely]]
            return;
        since_probe_ = 0;
        fn_.CheckAliveThrottled();
        CheckNotReset();
    }

    // Copies `slots` into the SQ (the caller has checked they fit: a CB ring
    // CB may take several slots), counts `cbs` more completions owed,
    // publishes sq_tail and wakes the device only if it sleeps (one doorbell
    // for the batch). Throws DeviceLost if the device is gone. Defined in
    // the driver's device_queue_submit.hpp, inline in the Submit of the
    // classes over it.
    SPYRE_INTERNAL inline void Submit(std::span<const spyre_cb> slots, uint32_t cbs);

    // True when the CQE slot of completion position `cq_pos` holds that
    // position's record: its phase byte (written last by the device with a
    // release store) shows the position's lap. Reads that one byte, so any
    // thread may ask.
    bool CompletionPosted(uint32_t cq_pos) const noexcept {
        auto& phase = const_cast<uint8_t&>(cq_[spyre_ring_slot(cq_pos, cq_entries_)].phase);
        return std::atomic_ref<uint8_t>(phase).load(std::memory_order_acquire) == spyre_cqe_phase(cq_pos, cq_entries_);
    }
    // True when the oldest completion owed is posted; never looks for more
    // than are owed. (cq_tail is for the device's interrupt waiters: one
    // phase byte is one cache-line transfer where cq_tail and the CQE took two.)
    bool CompletionsReady() const noexcept { return InFlight() != 0 && CompletionPosted(cq_head_); }
    // A private copy of the completion at cq_head, once CompletionsReady():
    // the device may rewrite the slot (its next lap) while the caller looks.
    spyre_cqe Peek() const noexcept {
        spyre_cqe e;
        std::memcpy(&e, &cq_[spyre_ring_slot(cq_head_, cq_entries_)], sizeof e);
        return e;
    }
    // Moves past the completion Peek returned.
    void Pop() noexcept { ++cq_head_; }
    // After a reap: returns the CQ head to the device once publish_every
    // completions have gone since it last saw it (every one on a task queue).
    void ReturnHead() noexcept {
        if (cq_head_ - cq_published_ >= publish_every_) PublishHead();
    }
    // Returns the CQ head to the device now.
    SPYRE_INTERNAL void PublishHead() noexcept;

    // Throws DeviceLost (the device is gone, or the function was reset
    // since Attach: the reset dropped this queue's work and positions, so
    // nothing in flight will complete) or DeviceError (it halted this queue).
    SPYRE_INTERNAL void CheckHealth() const;
    // DeviceLost when the function was reset since Attach.
    SPYRE_INTERNAL void CheckNotReset() const;
    // Before a completion that may end work a reset dropped (ABORTED, or
    // one out of order) is handed out: returns the head, then DeviceLost
    // if the function was reset, so the reset is said as itself.
    void ExplainedByAReset() {
        PublishHead();
        CheckNotReset();
    }
    // Sleeps on the completion interrupt until CompletionsReady() or
    // `deadline`, checking health whenever a sleep ends with nothing ready.
    SPYRE_INTERNAL void BlockOnInterrupt(std::chrono::steady_clock::time_point deadline) const;
    // Sleeps until a completion is ready, `*word` (a futex word private to
    // this process) no longer holds `expected`, or `timeout` passes
    // (futex_waitv; short sleeps where the kernel lacks it). Throws like
    // CheckHealth.
    SPYRE_INTERNAL void WaitCompletionOr(const std::atomic<uint32_t>& word, uint32_t expected,
                                         std::chrono::nanoseconds timeout) const;

    // The completion interrupt words, shared by the function's queues of a
    // kind (the task queues wait on one interrupt).
    struct Interrupt {
        uint32_t& waiters;
        uint32_t& seq;
    };
    Interrupt interrupt() const noexcept { return {*irq_waiters_, *irq_seq_}; }
    // Sleeps on `irq` until ready(), one of `words` (futex words of the
    // caller's process) no longer holds what the caller expects in it, or
    // `timeout` passes (futex_waitv; a short nap where the kernel lacks
    // it). Looks at nothing else: the caller looks at its conditions and
    // the device's health after.
    SPYRE_INTERNAL static void SleepOnInterruptOr(Interrupt irq, const std::function<bool()>& ready,
                                                  std::span<const FutexWord> words, std::chrono::nanoseconds timeout);

    // The errors of a wait: InvalidArgument for more completions than are
    // owed, Timeout naming the queue and what it has in flight.
    SPYRE_INTERNAL Error TooManyAwaited(size_t min_count) const;
    SPYRE_INTERNAL Error TimedOut(std::chrono::nanoseconds timeout) const;
    // Not a designated initializer: an app's -Wextra -Werror (without our
    // -Wno-missing-field-initializers) refused this header.
    ErrorContext Context() const {
        ErrorContext context;
        context.device = fn_.pci_address();
        return context;
    }

private:
    Function& fn_;
    QueueId id_;
    spyre_cb* sq_ = nullptr;
    const spyre_cqe* cq_ = nullptr;
    uint32_t sq_entries_ = 0;
    uint32_t cq_entries_ = 0;
    // The device's words of this queue (its doorbell page).
    uint32_t* sq_tail_word_ = nullptr;          // driver -> device
    uint32_t* cq_head_word_ = nullptr;          // driver -> device
    uint32_t* cq_tail_word_ = nullptr;          // device -> driver
    uint32_t* sq_head_word_ = nullptr;          // device -> driver
    uint32_t* device_sleeping_ = nullptr;       // device -> driver
    // What the sleeping device futex-waits on: sq_tail itself (the CB ring)
    // or a wake sequence the driver bumps first (task queues).
    uint32_t* wake_word_ = nullptr;
    uint32_t* irq_waiters_ = nullptr;
    uint32_t* irq_seq_ = nullptr;
    uint32_t* device_state_ = nullptr;          // device -> driver, in the function's doorbell page: SPYRE_DEVSTATE_*
    uint32_t halt_reg_ = 0, halt_mask_ = 0;     // the register and bit that say this queue halted
    uint64_t resets_ = 0;                       // CNT_RESETS when attached
    uint32_t sq_tail_ = 0;       // our producer position (slots)
    // sq_tail_ as published with the last wake of the device. Until the
    // device's sq_head reaches it, that wake is still on its way (a device
    // does not sleep while CBs wait in a queue it serves): no other is due.
    uint32_t woken_to_ = 0;
    uint32_t cq_head_ = 0;       // our consumer position
    uint32_t cq_end_ = 0;        // cq_head_ + completions owed
    // cq_head as the device last saw it. Published every publish_every_
    // completions on the CB ring, not after each reap: the store makes the
    // device's copy of the line stale, and the next locked instruction of
    // this thread (the runtime's completion of an op) then waits for that
    // transfer.
    uint32_t cq_published_ = 0;
    uint32_t publish_every_ = 1;
    // Submissions and empty reaps since the daemon itself was last looked
    // at (ProbeNowAndThen).
    uint32_t since_probe_ = 0;
};

}  // namespace spyre::driver
SPYRE_API_END
