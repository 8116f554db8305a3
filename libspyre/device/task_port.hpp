// SPDX-License-Identifier: Apache-2.0
// Internal: TaskPort, a device's task queues (one per core group,
// uapi/spyre_task.h) served for one user, the orchestration runtime, by the
// threads that call it. Whoever calls drives:
//   - Kick (any thread, never waits) sends what the user has ready, and
//     reaps what has finished on every kReapEveryKicks-th kick or once the
//     queues are half full. A thread that finds another one driving leaves
//     it a note, and that one looks again before it lets go.
//   - Drive (a thread that waits for tasks: pto_wait, a stalled submit) does
//     the same, and between passes waits as the Device's wait mode says
//     (SchedulerOptions): looks again for a while, then sleeps on the
//     completion interrupt (Adaptive), looks only (Poll), or sleeps at once
//     (Blocking).
// The port has no thread. It registers with its Device, whose one thread
// (the scheduler's, stream/scheduler_core.hpp) steps in through Backstop
// only when tasks are in flight, no caller waits and nobody drove for a
// tick, so a task whose producer finishes while the user's threads are busy
// elsewhere still starts; otherwise it stays out of the way. The user says
// what to send and hears what finished through TaskPortClient, which the
// port calls with its drive lock held: one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "spyre/common/eventcount.hpp"
#include "spyre/common/inbox.hpp"
#include "spyre/device/device.hpp"
#include "spyre/driver/task_queue.hpp"
#include "spyre/driver_options.hpp"
#include "spyre/error.hpp"

namespace spyre {

class DeviceCore;

// One task queue (core group) as a fill sees it.
struct QueueRoom {
    uint32_t free = 0;           // CBs it takes now
    uint32_t next_position = 0;  // the submission position of the first CB sent to it now
    uint32_t after_window = 0;   // a task names only tasks less than this many positions back
};

class TaskPortClient {
public:
    virtual ~TaskPortClient() = default;
    // Appends the tasks to send now (CBs, driver::TaskCb) to the queues the
    // client picks: per_queue[i] for the port's i-th queue, at most
    // rooms[i].free (a task that waits on the card for others of its queue,
    // driver::After, goes to theirs). After Failed, every room is 0: the
    // client fails what it has instead.
    virtual void FillQueues(std::span<std::vector<spyre_cb>> per_queue, std::span<const QueueRoom> rooms) = 0;

    // Completions, in the order the tasks finished.
    virtual void Finished(std::span<const spyre_cqe> done) = 0;
    // The queues failed (the device is gone, or a queue halted): what is in
    // flight never completes. Called once; nothing is sent afterwards.
    virtual void Failed(const Error& error) = 0;
};

class TaskPort {
public:
    // Takes task queues `groups` of `device` (none: all of them) for
    // `client`, which outlives the port. Throws InvalidArgument for a group
    // the device does not have or one named twice, Busy while another user
    // holds one. Registers with the device's thread (Backstop).
    TaskPort(const Device& device, std::vector<uint32_t> groups, TaskPortClient& client);
    // Leaves the device's thread. The client has waited for its tasks (Drive).
    ~TaskPort();
    TaskPort(const TaskPort&) = delete;
    TaskPort& operator=(const TaskPort&) = delete;

    // Tasks that can be in flight at once, over all the groups taken.
    uint32_t capacity() const noexcept { return capacity_; }
    uint32_t in_flight() const noexcept { return in_flight_.load(std::memory_order_acquire); }

    // Sends what the client has ready, if no other thread is driving (that
    // one then looks again), and reaps what finished on every
    // kReapEveryKicks-th kick or once half the capacity is in flight. Each
    // reap reads completion lines the device is writing (a cache-line
    // transfer between CPUs per look): a reap on every submit cost a
    // submitter of empty tasks a fifth of its time. Never waits.
    void Kick() noexcept;
    static constexpr uint32_t kReapEveryKicks = 16;
    // Drives until `word` (a futex word of this process, an EventCount's)
    // no longer holds `expected`, or nothing is left in flight; the driver's
    // sleep on the completion interrupt also ends when the word moves. False
    // at once when nothing is in flight: the caller waits elsewhere. Also
    // ends at `until` (a waiter with a deadline), and such a waiter does
    // not wait for the drive lock: false when another thread drives.
    bool Drive(const std::atomic<uint32_t>& word, uint32_t expected,
               std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());

    // On the calling thread, for its lifetime: the thread waits for the
    // tasks it submits here (Drive) before it blocks on anything else, as a
    // Worker's chip call does (its function, then WaitAll). A Kick that
    // leaves tasks unattended then does not wake the device's thread, which
    // cost a context switch and a futex system call per chip call (a fifth
    // of the L3 throughput on a host of two CPUs). The wake is owed, not
    // dropped: paid by a later Kick once kOwedWakeAfter has passed (a
    // function that computes on the host between submits), and at the
    // scope's end if tasks are still unattended. Scopes nest.
    class CallerDrivesScope {
    public:
        CallerDrivesScope() noexcept;
        ~CallerDrivesScope();
        CallerDrivesScope(const CallerDrivesScope&) = delete;
        CallerDrivesScope& operator=(const CallerDrivesScope&) = delete;

    private:
        friend class TaskPort;
        CallerDrivesScope* outer_;
        std::vector<std::shared_ptr<DeviceCore>> owed_;  // devices whose thread was not woken
        std::chrono::steady_clock::time_point owed_since_{};
    };
    static constexpr std::chrono::milliseconds kOwedWakeAfter{1};

    // For the device's thread. Tasks in flight and no caller waits for them.
    bool Unattended() const noexcept {
        return in_flight_.load(std::memory_order_seq_cst) != 0 && waiters_.load(std::memory_order_seq_cst) == 0;
    }
    // If Unattended and nobody drove since the last Backstop call (a caller
    // that waits right after its submit drives alone): drives, as Drive
    // does, until a caller comes to wait, nothing is left in flight, `word`
    // no longer holds `expected` (the device's thread has work of its own)
    // or `until`. Whether it drove. Never waits for the drive lock.
    bool Backstop(const std::atomic<uint32_t>& word, uint32_t expected, std::chrono::steady_clock::time_point until);

private:
    // Drive lock held: send, reap and report until nothing moves. Whether
    // anything moved.
    bool Pass(bool reap = true);  // `reap`: ReapDone too (Kick skips it mostly)
    bool SendReady();  // what the client has, spread over the groups; whether any went
    bool ReapDone();   // reaps, reports, and counts what is left in flight; whether any came
    using FutexWord = driver::FutexWord;
    // Drive lock held: sleeps until a completion may be ready, a caller of
    // the port calls (CallDriver), done() (looked at while polling) or
    // `caller`'s word moves (in the sleep), up to `max`.
    void WaitForCompletion(const FutexWord* caller, const std::function<bool()>& done, std::chrono::microseconds max);
    // Drive lock held: one pass; whether it moved anything, the port
    // failed, nothing is left in flight or done() holds (a looker stops).
    bool PassMoved(const std::function<bool()>& done);
    // Drive lock held: passes, spinning for up to spin_ns_ (while waits are
    // short; adapts spin_ns_, task_port.cpp), then yielding for a while
    // (Adaptive); whether anything moved (or done()).
    bool LookForProgress(const std::function<bool()>& done);
    // Drive lock held: passes, spinning, until anything moved (or done()) or
    // for `max`, then checks the device's health (Poll).
    void PollForProgress(const std::function<bool()>& done, std::chrono::microseconds max);
    // Asks the thread driving the port to look again, waking it from its
    // sleep on the interrupt.
    void CallDriver() noexcept;
    void Fail(const Error& e);
    // The reset that explains `e` (DeviceLost), when it is a ProtocolError
    // and a queue was reset; else `e`.
    Error ExplainedByAReset(const Error& e) const;
    // Releases the drive lock, then takes it again for notes left meanwhile.
    void Unlock();
    // Until `caller`'s word moves (if given), stop(), or nothing is in flight.
    void DriveLocked(const FutexWord* caller, const std::function<bool()>& stop);
    // Tasks left in flight with nobody to reap them: tells the device's
    // thread, which wakes only if it sleeps longer than a tick.
    void TellDeviceIfUnattended() noexcept;

    TaskPortClient& client_;
    std::shared_ptr<DeviceCore> device_;  // its thread serves the port (Backstop)
    std::string pci_;
    std::vector<std::unique_ptr<driver::TaskQueue>> queues_;
    std::vector<driver::TaskQueue*> raw_;  // for WaitAny
    uint32_t capacity_ = 0;
    std::vector<QueueRoom> rooms_;    // Pass's scratch
    std::vector<std::vector<spyre_cb>> per_queue_;
    std::vector<spyre_cqe> done_;
    bool failed_ = false;
    driver::WaitMode wait_mode_ = driver::WaitMode::Adaptive;  // the Device's (SchedulerOptions)
    uint32_t spin_max_ns_ = 20'000;  // SchedulerOptions::spin: spin_ns_ grows to this
    uint32_t spin_ns_ = 2'000;  // LookForProgress's current spin
    uint64_t wait_ns_ = 0;      // how long WaitForCompletion lately took (moving average)
    uint32_t kicks_since_reap_ = 0;

    std::mutex mu_;                        // the drive lock: the members above
    ParkingNote note_;                     // a Kick found the lock taken
    EventCount called_;                    // CallDriver: the driver's sleep on the interrupt ends
    std::atomic<uint32_t> in_flight_{0};   // sent and not reaped; written under mu_
    std::atomic<int> waiters_{0};          // callers in Drive
    std::atomic<uint64_t> passes_{0};      // Pass calls (mu_ held): Backstop sees who drove
    uint64_t backstop_seen_passes_ = 0;    // passes_ at the last Backstop call (under the device's ports lock)
    std::atomic<bool> stopping_{false};
};

}  // namespace spyre
