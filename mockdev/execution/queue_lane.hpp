// SPDX-License-Identifier: Apache-2.0
//
// One thread of a function's queue server: it watches one doorbell page the
// way the doorbell protocol describes (spyre_regs.h for the CB ring,
// spyre_task.h for the task queues) and serves one kind of queue. It polls
// after the last work (for up to --poll-us, as long as polling pays off:
// PollWindow), then publishes that it sleeps and parks
// on the page's futex word, so an idle device costs no CPU and a busy one
// never needs a syscall to be woken. What a turn does with the CBs it finds
// is the queue kind's (QueueKind); the loop, the sleep, the kicks, the pause
// and the stop are the same for every kind.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "execution/cycle_clock.hpp"
#include "execution/poll_window.hpp"
#include "execution/server_pause.hpp"
#include "pci/register_file.hpp"

namespace spyre::mockdev {

// Bound on one futex sleep of a lane: a lost wake-up (a driver that
// skipped the device_sleeping check) costs at most this much latency.
inline constexpr std::chrono::seconds kServerSleepTimeout{1};
// How often work held back by a full CQ is looked at again: the driver frees
// CQ space by writing cq_head, which wakes nobody.
inline constexpr std::chrono::microseconds kCqFullRetry{50};

// What differs between the CB ring and the task queues: what a lane's turn
// does with the CBs it finds.
class QueueKind {
public:
    using Clock = CycleClock::Clock;
    enum class Turn {
        Idle,      // nothing was taken
        Served,    // CBs were taken (and, on the ring, run)
        HeldBack,  // CBs wait, but their CQ is full: the driver must reap first
    };
    virtual ~QueueKind() = default;

    // New CBs wait on a queue that is served: a cheap look, no lock, made
    // while polling and as the last look before a sleep.
    virtual bool Submitted() const = 0;
    // Takes what was submitted and runs it (the ring) or hands it to the
    // cores (tasks). `exec` is held: a pause waits for it; work a pause need
    // not wait for may run after releasing it. `now` is the lane's last clock
    // reading; the turn leaves in it when it ended.
    virtual Turn Serve(std::unique_lock<std::mutex>& exec, CycleClock& clock, Clock::time_point& now) = 0;
    // The lane's thread runs; it is stopping (aborting() holds already):
    // once Stopping returns nothing of the kind runs.
    virtual void Started() {}
    virtual void Stopping() {}
    // A pause: the lane has parked. Once this returns nothing of the kind
    // runs until Resume.
    virtual void Hold() {}
    virtual void Resume() {}
    // While paused: power-on state.
    virtual void Clear() = 0;
    // Whether the lane, polling for new CBs, should yield the CPU between
    // looks rather than spin: threads of the kind's own (cores running
    // tasks) need it on a host with few CPUs.
    virtual bool PollYields() const { return false; }
};

// The words of the doorbell page a lane watches.
struct LaneWords {
    uint32_t* wake;         // what a driver futex-wakes the device on: sq_tail (the ring), wake_seq (tasks)
    bool wake_is_sequence;  // the device may bump it too (wake_seq); sq_tail belongs to the driver
    uint32_t* sleeping;     // device_sleeping
};

class QueueLane {
public:
    using Clock = CycleClock::Clock;

    // `sleeping_status`: the STATUS bit mirroring the sleep (0: none).
    QueueLane(RegisterFile& regs, QueueKind& kind, LaneWords words, uint32_t sleeping_status,
              std::chrono::microseconds poll);
    ~QueueLane();

    QueueLane(const QueueLane&) = delete;
    QueueLane& operator=(const QueueLane&) = delete;

    void Start(const std::string& name);
    void Stop();  // idempotent; returns once the thread has exited

    // A trapped write changed the doorbell: wake the lane if it sleeps.
    void Doorbell();
    // An internal event (enable, resume, stop) changed no doorbell word, so
    // a wake-up could slip in between the lane's last look and its futex
    // wait. The lane acknowledges each kick; Kick re-wakes it until it has.
    void Kick();

    // Whether the lane serves its queues at all: a function nobody holds
    // runs nothing (docs/security.md), whatever its doorbells say; CBs and
    // tasks submitted meanwhile stay where they are, untaken. Off until the
    // function's first holder. Changed only while paused (QueueServer::
    // SetServing), so no turn runs across a change.
    void SetServing(bool serving) { serving_.store(serving); }
    bool serving() const { return serving_.load(); }

    // Work of this lane must stop early (ABORTED): a pause or a stop.
    bool aborting() const { return abort_.load(std::memory_order_relaxed) || stopping_.load(std::memory_order_relaxed); }
    bool stopping() const { return stopping_.load(); }
    bool pause_requested() const { return pause_.requested(); }
    // How long the lane polls after its work now (for tests): PollWindow.
    std::chrono::nanoseconds poll_window() const { return window_.window(); }

    // Holds the lane: a running turn is told to stop (aborting()), the lane
    // parks and its kind holds (QueueKind::Hold); nothing is served until
    // the object goes. A paused lane waits on the daemon's own lock, never on
    // a futex in the doorbell page, so the pages can be replaced under it
    // (a change of owner).
    class Paused {
    public:
        explicit Paused(QueueLane& lane);
        ~Paused();
        Paused(const Paused&) = delete;
        Paused& operator=(const Paused&) = delete;

    private:
        QueueLane& lane_;
        std::unique_lock<std::mutex> lock_;
    };

private:
    void Run();
    QueueKind::Turn Serve(Clock::time_point& now);
    bool Sleep(uint32_t kicks_seen);

    RegisterFile& regs_;
    QueueKind& kind_;
    const LaneWords words_;
    const uint32_t sleeping_status_;
    PollWindow window_;  // WorkCame: the lane's thread's only

    CycleClock clock_;       // the lane's thread's only
    std::mutex exec_mutex_;  // held for a turn; a pause takes it
    ServerPause pause_;
    std::atomic<bool> stopping_{false};
    std::atomic<bool> abort_{false};
    std::atomic<bool> running_{false};  // a thread to wait for (a fuzz target's card starts none)
    std::atomic<bool> serving_{false};
    std::atomic<uint32_t> kicks_{0};
    uint32_t kicks_seen_ = 0;  // private futex word: the lane acknowledges kicks here
    std::thread thread_;
};

}  // namespace spyre::mockdev
