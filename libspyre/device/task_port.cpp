// SPDX-License-Identifier: Apache-2.0
#include "device/task_port.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include "device/device_core.hpp"
#include "device/device_internals.hpp"
#include "spyre/common/log.hpp"
#include "spyre/common/spin.hpp"
#include "stream/scheduler_core.hpp"

namespace spyre {

namespace {

// How a driving waiter waits follows the Device's wait mode
// (SchedulerOptions::wait_mode): Poll spins and never sleeps, Blocking
// sleeps on the completion interrupt at once, Adaptive spins, yields, then
// sleeps, as below.
//
// How long an adaptive waiter looks for completions, yielding, before it
// sleeps on the completion interrupt. Yield, not spin: on a host with few
// CPUs the device's threads (a mock's server and cores) need the CPU a
// spinning waiter holds, and a short task's completion comes sooner when
// they get it.
constexpr auto kYieldPoll = std::chrono::microseconds(50);
// Before it yields, the waiter spins for a while that adapts (spin_ns_):
// doubled (up to the Device's SchedulerOptions::spin, spin_max_ns_) each
// time the spin saw progress, halved (down to kSpinMinNs) each time it ran
// out. On a quiet host a short task's
// completion comes within the spin, and a yield (a system call that may give
// the CPU away) would cost the whole hop; on a loaded one completions come
// late, the spin shrinks to almost nothing and the waiter yields as before.
constexpr uint32_t kSpinMinNs = 500;
// A pass reads the rings in shared memory: a spinning waiter pauses this
// often between two.
constexpr uint32_t kPausesPerLook = 8;
// The spin only while waits lately took less than this on average (short
// tasks): a waiter that spins through long ones holds a CPU the device's
// threads (a mock's cores) would compute on.
constexpr uint64_t kSpinWhileWaitsUnderNs = 20'000;
// A sleep on the interrupt ends after this long at the latest (the health
// checks run then); a caller of the port ends it sooner (CallDriver). A
// polling waiter looks at the device's health as often.
constexpr auto kInterruptSleep = std::chrono::microseconds(500);

// The port a thread is driving (its drive lock held): a Kick from inside the
// client's callbacks leaves a note instead of locking again.
thread_local const TaskPort* tl_driving = nullptr;
// The innermost TaskPort::CallerDrivesScope of this thread.
thread_local TaskPort::CallerDrivesScope* tl_caller_drives = nullptr;

}  // namespace

TaskPort::TaskPort(const Device& device, std::vector<uint32_t> groups, TaskPortClient& client)
    : client_(client), device_(DeviceInternals::Core(device)), pci_(device.pci_address()) {
    const SchedulerOptions& waits = device_->sched->options();
    wait_mode_ = waits.wait_mode;
    spin_max_ns_ = uint32_t(waits.spin.count());  // 0 to 1 s (SchedulerCore refuses others)
    spin_ns_ = std::min(spin_ns_, spin_max_ns_);
    const uint32_t have = DeviceInternals::TaskTopology(device).queues();
    if (groups.empty())
        for (uint32_t q = 0; q < have; ++q) groups.push_back(q);
    for (size_t i = 0; i < groups.size(); ++i) {
        if (groups[i] >= have)
            throw Error(ErrorKind::InvalidArgument, "task queue " + std::to_string(groups[i]) + " does not exist on " +
                                                        pci_ + ", which has " + std::to_string(have));
        for (size_t j = 0; j < i; ++j)
            if (groups[j] == groups[i])
                throw Error(ErrorKind::InvalidArgument, "task queue " + std::to_string(groups[i]) + " named twice");
    }
    for (uint32_t g : groups) {
        queues_.push_back(DeviceInternals::TakeTaskQueue(device, g));
        raw_.push_back(queues_.back().get());
        capacity_ += queues_.back()->capacity();
    }
    per_queue_.resize(queues_.size());
    done_.resize(capacity_);
    device_->sched->AttachPort(*this);
}

TaskPort::~TaskPort() {
    // A Backstop under way ends at once (stopping_, the call), and the
    // device's thread never looks at the port again.
    stopping_.store(true, std::memory_order_seq_cst);
    CallDriver();
    device_->sched->DetachPort(*this);
}

Error TaskPort::ExplainedByAReset(const Error& e) const {
    // A reset empties the queues and renumbers their positions: what looks
    // like the device breaking the protocol is the reset.
    if (e.kind() == ErrorKind::ProtocolError) {
        try {
            for (const driver::TaskQueue* q : raw_) q->CheckNotReset();
        } catch (const Error& reset) {
            return reset;
        }
    }
    return e;
}

void TaskPort::Fail(const Error& e) {
    SPYRE_LOG_WARN("task queues of %s: %s (their tasks fail from here)", pci_.c_str(), e.what());
    failed_ = true;
    in_flight_.store(0, std::memory_order_release);
    client_.Failed(e);
}

bool TaskPort::SendReady() {
    rooms_.resize(raw_.size());
    for (size_t q = 0; q < raw_.size(); ++q)
        rooms_[q] = failed_ ? QueueRoom{} : QueueRoom{raw_[q]->Free(), raw_[q]->NextPosition(), raw_[q]->AfterWindow()};
    for (auto& d : per_queue_) d.clear();
    client_.FillQueues(per_queue_, rooms_);  // after a failure, the client fails what it has
    if (failed_) return false;
    // One doorbell per group.
    uint64_t sent = 0, doorbells = 0;
    for (size_t q = 0; q < raw_.size(); ++q) {
        if (per_queue_[q].empty()) continue;
        if (raw_[q]->Submit(per_queue_[q]) != per_queue_[q].size())
            throw Error(ErrorKind::Internal, "task port: a queue took fewer tasks than it had room for");
        sent += per_queue_[q].size();
        ++doorbells;
    }
    if (doorbells) {
        device_->sched->CountTasks(sent, doorbells, 0);
        in_flight_.store(in_flight_.load(std::memory_order_relaxed) + uint32_t(sent), std::memory_order_release);
    }
    return doorbells != 0;
}

bool TaskPort::ReapDone() {
    if (failed_) return false;
    kicks_since_reap_ = 0;
    size_t n = 0;
    for (driver::TaskQueue* q : raw_) n += q->Reap(std::span(done_).subspan(n));
    uint32_t flying = 0;
    for (driver::TaskQueue* q : raw_) flying += q->InFlight();
    in_flight_.store(flying, std::memory_order_release);
    if (n == 0) return false;
    device_->sched->CountTasks(0, 0, n);
    client_.Finished(std::span(done_.data(), n));
    return true;
}

bool TaskPort::Pass(bool reap) {
    passes_.store(passes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // mu_ held
    bool moved = false;
    for (;;) {
        note_.Take();
        bool step = false;
        try {
            step = SendReady();
            if (reap) step |= ReapDone();
        } catch (const Error& e) {
            Fail(ExplainedByAReset(e));
            step = true;
        }
        moved |= step;
        if (!step && note_.Empty()) return moved;
    }
}

void TaskPort::Unlock() {
    tl_driving = nullptr;
    mu_.unlock();
    // A Kick that found the lock taken left its note before it tried: the
    // look after the unlock sees it.
    ApplyParkedAfterUnlock(mu_, note_, [this] {
        tl_driving = this;
        Pass();
        tl_driving = nullptr;
    });
}

void TaskPort::Kick() noexcept {
    note_.Leave();
    if (tl_driving == this) return;  // inside a callback: the pass looks again
    if (!mu_.try_lock()) {
        CallDriver();  // it may sleep on the interrupt: the note must end that sleep
        return;
    }
    tl_driving = this;
    const bool reap = ++kicks_since_reap_ >= kReapEveryKicks ||
                      in_flight_.load(std::memory_order_relaxed) * 2 >= capacity_;
    Pass(reap);
    Unlock();
    TellDeviceIfUnattended();
}

void TaskPort::CallDriver() noexcept {
    // The driver arms before its last look at the note and sleeps on the
    // EventCount's word with that key: a call after the arm moves the word.
    called_.Notify();
}

void TaskPort::TellDeviceIfUnattended() noexcept {
    // The device's thread looks at its ports every tick while one is
    // unattended; only a thread in a longer sleep needs a wake for that (a
    // wake on every submit cost a context switch per task on a host of two
    // CPUs, and a waiter that comes right after its submit drives alone).
    if (!Unattended()) return;
    CallerDrivesScope* scope = tl_caller_drives;
    if (!scope) return device_->sched->PortUnattended();
    const auto now = std::chrono::steady_clock::now();
    if (scope->owed_.empty()) scope->owed_since_ = now;
    if (std::find(scope->owed_.begin(), scope->owed_.end(), device_) == scope->owed_.end()) {
        try {
            scope->owed_.push_back(device_);
        } catch (...) {
            return device_->sched->PortUnattended();  // no memory to owe it: pay now
        }
    }
    if (now - scope->owed_since_ < kOwedWakeAfter) return;
    // The caller has been away from its wait for a while: pay.
    for (const auto& d : scope->owed_) d->sched->PortUnattended();
    scope->owed_.clear();
}

TaskPort::CallerDrivesScope::CallerDrivesScope() noexcept : outer_(tl_caller_drives) { tl_caller_drives = this; }

TaskPort::CallerDrivesScope::~CallerDrivesScope() {
    tl_caller_drives = outer_;
    // Whatever is still unattended gets the device's thread now. A port
    // being driven or attached meanwhile (PortsUnattended finds its lock
    // taken) has a caller of its own.
    for (const auto& d : owed_) d->sched->PortsMayBeUnattended();
}

bool TaskPort::PassMoved(const std::function<bool()>& done) {
    return Pass() || failed_ || in_flight_.load(std::memory_order_relaxed) == 0 || done();
}

bool TaskPort::LookForProgress(const std::function<bool()>& done) {
    const bool spin = wait_ns_ < kSpinWhileWaitsUnderNs && spin_max_ns_ != 0;
    const SpinOutcome seen = SpinFor([&] { return PassMoved(done); },
                                     {spin ? std::chrono::nanoseconds(spin_ns_) : std::chrono::nanoseconds(0),
                                      kYieldPoll, kPausesPerLook});
    if (spin) {
        if (seen.ready && seen.yields == 0)
            spin_ns_ = std::min(spin_max_ns_, spin_ns_ * 2);
        else
            spin_ns_ = std::max(std::min(kSpinMinNs, spin_max_ns_), spin_ns_ / 2);
    }
    device_->sched->CountTaskWaits(0, seen.yields);
    return seen.ready;
}

void TaskPort::PollForProgress(const std::function<bool()>& done, std::chrono::microseconds max) {
    if (SpinFor([&] { return PassMoved(done); }, {max, {}, kPausesPerLook}).ready) return;
    // The health checks a sleep would have made: a sleep of no time.
    driver::TaskQueue::WaitAnyOr(raw_, {}, std::chrono::nanoseconds(0));
}

void TaskPort::WaitForCompletion(const FutexWord* caller, const std::function<bool()>& done,
                                 std::chrono::microseconds max) {
    const auto start = std::chrono::steady_clock::now();
    struct Learn {
        uint64_t& wait_ns;
        std::chrono::steady_clock::time_point start;
        ~Learn() {
            const auto took = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::steady_clock::now() - start).count());
            wait_ns = (wait_ns * 3 + took) / 4;
        }
    } learn{wait_ns_, start};
    // Poll: look only. Adaptive: look (spinning, then yielding), then sleep
    // on the interrupt. Blocking: sleep at once.
    if (wait_mode_ == driver::WaitMode::Poll) return PollForProgress(done, max);
    if (wait_mode_ == driver::WaitMode::Adaptive && LookForProgress(done)) return;
    // One sleep for the device's completions, a caller of the port (a kick
    // that found it busy, a waiter that wants to drive) and the driver's own
    // caller (what it waits for may have come).
    const EventCount::Key called = called_.Arm();
    struct Disarm {
        EventCount& ec;
        ~Disarm() { ec.Disarm(); }
    } disarm{called_};
    if (!note_.Empty()) return;
    driver::FutexWord words[2] = {{&called_.word(), called}, {}};
    const size_t n = caller ? 2 : 1;
    if (caller) words[1] = *caller;
    device_->sched->CountTaskWaits(1, 0);
    driver::TaskQueue::WaitAnyOr(raw_, std::span(words, n), max);
}

void TaskPort::DriveLocked(const FutexWord* caller, const std::function<bool()>& stop) {
    const std::function<bool()> done = [&] {
        return (caller && caller->word->load(std::memory_order_relaxed) != caller->expected) || stop();
    };
    for (;;) {
        Pass();
        if (failed_ || in_flight_.load(std::memory_order_relaxed) == 0 || done()) return;
        try {
            WaitForCompletion(caller, done, kInterruptSleep);
        } catch (const Error& e) {
            Fail(e);
        }
    }
}

bool TaskPort::Drive(const std::atomic<uint32_t>& word, uint32_t expected, std::chrono::steady_clock::time_point until) {
    if (in_flight_.load(std::memory_order_acquire) == 0) {
        Kick();  // what is ready goes first
        if (in_flight_.load(std::memory_order_acquire) == 0) return false;
    }
    const bool deadline = until != std::chrono::steady_clock::time_point::max();
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    CallDriver();  // the port's thread, if it drives, gives way
    if (deadline && !mu_.try_lock()) {
        // Another waiter drives, and may until all is done: a waiter with a
        // deadline sleeps on its word instead (the caller's fallback), which
        // that driver's completions move.
        waiters_.fetch_sub(1, std::memory_order_seq_cst);
        return false;
    }
    {
        if (!deadline) mu_.lock();
        tl_driving = this;
        const FutexWord caller{&word, expected};
        DriveLocked(&caller, [deadline, until] { return deadline && std::chrono::steady_clock::now() >= until; });
        Unlock();
    }
    waiters_.fetch_sub(1, std::memory_order_seq_cst);
    TellDeviceIfUnattended();
    return true;
}

bool TaskPort::Backstop(const std::atomic<uint32_t>& word, uint32_t expected,
                        std::chrono::steady_clock::time_point until) {
    const uint64_t passes = passes_.load(std::memory_order_relaxed);
    const bool quiet = passes == backstop_seen_passes_;
    backstop_seen_passes_ = passes;
    if (!quiet || !Unattended() || stopping_.load(std::memory_order_seq_cst) || !mu_.try_lock()) return false;
    tl_driving = this;
    const FutexWord caller{&word, expected};
    DriveLocked(&caller, [this, until] {
        return waiters_.load(std::memory_order_relaxed) != 0 || stopping_.load(std::memory_order_relaxed) ||
               std::chrono::steady_clock::now() >= until;
    });
    Unlock();
    backstop_seen_passes_ = passes_.load(std::memory_order_relaxed);
    return true;
}

}  // namespace spyre
