// SPDX-License-Identifier: Apache-2.0
//
// The queue server of one function: a thread that serves the submission ring
// in BAR4 the way the doorbell-page protocol describes (spyre_regs.h). It
// polls sq_tail for --poll-us after the last work, then publishes that it
// sleeps and parks on a shared futex on sq_tail, so an idle device costs no CPU
// and a busy one never needs a syscall to be woken.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "execution/cb_executor.hpp"
#include "execution/cycle_clock.hpp"
#include "execution/host_link.hpp"
#include "execution/server_pause.hpp"
#include "pci/register_file.hpp"
#include "pci/shm_object.hpp"
#include "spyre/uapi/spyre_cb.h"
#include "spyre/uapi/spyre_regs.h"

namespace spyre::mockdev {

// Ring layout inside BAR4, published in the geometry registers.
struct RingGeometry {
    uint32_t db_offset = SPYRE_DEFAULT_DB_OFFSET;
    uint32_t sq_offset = SPYRE_DEFAULT_SQ_OFFSET;
    uint32_t sq_entries = SPYRE_DEFAULT_SQ_ENTRIES;
    uint32_t cb_size = sizeof(spyre_cb);
    uint32_t cq_offset = SPYRE_DEFAULT_CQ_OFFSET;
    uint32_t cq_entries = SPYRE_DEFAULT_CQ_ENTRIES;
    uint32_t cqe_size = sizeof(spyre_cqe);
};

class RingServer {
public:
    using Clock = std::chrono::steady_clock;

    // `host_link` is the card's: the server acts on doorbells and posts
    // completions through it (host_link.hpp).
    RingServer(RegisterFile& regs, ShmObject& ring, const RingGeometry& geometry, CbExecutor& executor,
               HostLink& host_link, std::chrono::microseconds poll);
    ~RingServer();

    RingServer(const RingServer&) = delete;
    RingServer& operator=(const RingServer&) = delete;

    void Start(const std::string& name);
    void Stop();  // idempotent; returns once the thread has exited

    // A trapped write changed sq_tail: wake the server if it sleeps.
    void Doorbell();

    void SetRingEnabled(bool enabled);
    bool ring_enabled() const { return ring_enabled_.load(std::memory_order_acquire); }
    bool halted() const { return halted_.load(std::memory_order_acquire); }

    // Holds the server paused; resumes it on destruction.
    class Paused {
    public:
        explicit Paused(RingServer& server);
        ~Paused();
        Paused(const Paused&) = delete;
        Paused& operator=(const Paused&) = delete;

    private:
        RingServer& ring_server_;
        std::unique_lock<std::mutex> lock_;
    };

    // Takes the ring from the server: a running CB stops early (ABORTED), the
    // batch ends there (or at its CQ-full wait) and the server serves nothing
    // until the returned object goes. A paused server waits on the daemon's
    // own lock, never on a futex in the ring, so the ring's pages can be
    // replaced under it (Function::Close).
    [[nodiscard]] Paused Pause() { return Paused(*this); }

    // While paused: power-on ring state. Ring disabled, not halted, ring
    // indices zero, SQ and CQ memory zero. irq_waiters and device_sleeping are
    // left alone: they count live waiters and the server's own sleep.
    void ClearRing(const Paused& paused);

    // The completion "interrupt": bump irq_seq and wake its futex waiters.
    // Returns true if a waiter was registered.
    bool RaiseIrq();

    spyre_doorbell_page* doorbell() const { return db_; }

private:
    void Run();
    bool HasWork(uint32_t sq_tail) const;
    bool Sleep(uint32_t kicks_seen);
    // Serves the CBs published so far; returns the last clock reading (when
    // the batch ended).
    Clock::time_point ServeBatch();
    bool LeaveBatch() const;
    bool WaitForCqSpace(uint32_t cq_tail, uint32_t sq_head);
    void Halt(uint32_t sq_head);
    const uint8_t* Slot(uint32_t pos) const;  // the SQ slot of a ring position
    void PostCqe(const spyre_cb& cb, const CbOutcome& outcome, uint32_t sq_pos, uint32_t cq_tail,
                 Clock::time_point completed);
    // Internal events (enable, stop) change no doorbell word, so a wake-up
    // could slip in between the server's last check and its futex wait. The
    // server acknowledges each kick; Kick re-wakes it until it has.
    void Kick();

    RegisterFile& regs_;
    ShmObject& ring_;
    const RingGeometry geo_;
    CbExecutor& executor_;
    HostLink& host_link_;
    const std::function<bool()> abort_cb_;  // tells a running CB to stop (reset, shutdown)
    const std::chrono::microseconds poll_;
    spyre_doorbell_page* const db_;
    uint8_t* const sq_;
    uint8_t* const cq_;

    CycleClock clock_;  // the server thread's only
    std::mutex exec_mutex_;  // held while serving a batch; Pause takes it
    // Guarded by exec_mutex_: the last CB carried LINK and failed, so the
    // next one is cancelled (spyre_cb.h, "Linked CBs").
    bool cancel_next_ = false;
    // Guarded by exec_mutex_: bit n, ring stream n failed (spyre_cb.h, "Ring
    // streams"); mirrored in RING_STREAMS_FAILED.
    uint64_t streams_failed_ = 0;
    std::array<uint8_t, SPYRE_CB_INLINE_MAX_BYTES> payload_{};  // inline payload of the CB being served
    std::atomic<bool> stopping_{false};
    std::atomic<bool> abort_batch_{false};
    ServerPause pause_;
    std::atomic<bool> ring_enabled_{false};
    std::atomic<bool> halted_{false};
    std::atomic<bool> running_{false};
    std::atomic<uint32_t> kicks_{0};
    uint32_t kicks_seen_ = 0;  // private futex word: the server acknowledges kicks here
    std::thread thread_;
};

}  // namespace spyre::mockdev
