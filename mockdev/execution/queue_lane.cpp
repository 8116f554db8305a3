// SPDX-License-Identifier: Apache-2.0
#include "execution/queue_lane.hpp"

#include <pthread.h>
#include <signal.h>

#include <climits>
#include <utility>

#include "spyre/common/futex.hpp"
#include "pci/shm_guard.hpp"

namespace spyre::mockdev {

namespace {

using namespace std::chrono_literals;

// How often, and how long, Kick re-wakes a lane that has not acknowledged.
constexpr auto kKickRetry = 20us;
constexpr auto kKickLimit = 1s;

// Idle polls between two looks at the clock (for the --poll-us deadline).
constexpr uint32_t kPollsPerClockRead = 16;

// Starts `body` on a thread named `name` (15 characters kept) with every
// signal but a fault's blocked from its first instruction on: signals belong
// to the FUSE loop's thread, faults to the thread that faults (shm_guard.hpp).
template <typename Body>
std::thread StartLaneThread(const std::string& name, Body&& body) {
    sigset_t all, old;
    sigfillset(&all);
    KeepFaultSignals(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    std::thread thread(std::forward<Body>(body));
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    pthread_setname_np(thread.native_handle(), name.substr(0, 15).c_str());
    return thread;
}

}  // namespace

QueueLane::QueueLane(RegisterFile& regs, QueueKind& kind, LaneWords words, uint32_t sleeping_status,
                     std::chrono::microseconds poll)
    : regs_(regs),
      kind_(kind),
      words_(words),
      sleeping_status_(sleeping_status),
      window_(poll) {}

QueueLane::~QueueLane() { Stop(); }

void QueueLane::Start(const std::string& name) {
    running_.store(true);
    thread_ = StartLaneThread(name, [this] { Run(); });
    kind_.Started();
}

void QueueLane::Stop() {
    stopping_.store(true);  // work running now stops early (aborting())
    kind_.Stopping();
    if (!thread_.joinable()) return;
    Kick();
    thread_.join();
    running_.store(false);
}

void QueueLane::Doorbell() {
    if (words_.wake_is_sequence) SharedWord(*words_.wake).fetch_add(1);  // a sleep's compare now fails
    FutexWake(words_.wake);
}

void QueueLane::Kick() {
    const uint32_t kick = kicks_.fetch_add(1) + 1;
    const auto deadline = Clock::now() + kKickLimit;
    for (;;) {
        FutexWake(words_.wake);
        const uint32_t seen = std::atomic_ref<uint32_t>(kicks_seen_).load();
        // Done once the lane has seen the kick, or is awake (it will look
        // again before it sleeps). Otherwise it may have slept through the
        // wake: wait for its acknowledgement, waking it again meanwhile.
        if (!running_.load() || int32_t(seen - kick) >= 0 || SharedWord(*words_.sleeping).load() == 0 ||
            Clock::now() > deadline)
            return;
        FutexWait(&kicks_seen_, seen, kKickRetry, FutexScope::Private);
    }
}

QueueLane::Paused::Paused(QueueLane& lane) : lane_(lane) {
    lane_.abort_.store(true);  // a running turn stops at its next check
    lock_ = std::unique_lock(lane_.exec_mutex_);
    // Out of its futex sleep, to park on exec_mutex_ instead. A lane never
    // started (a fuzz target's card) has no thread to wait for.
    lane_.pause_.Begin([&] { lane_.Kick(); }, [&] { return lane_.stopping_.load() || !lane_.running_.load(); });
    lane_.kind_.Hold();  // still aborting: what runs without the lane (tasks on the cores) stops too
    lane_.abort_.store(false);
}

QueueLane::Paused::~Paused() {
    lane_.kind_.Resume();
    lane_.pause_.End();
    lock_.unlock();
    lane_.Kick();  // work may have come meanwhile (a ring enabled while paused)
}

QueueKind::Turn QueueLane::Serve(Clock::time_point& now) {
    auto exec = pause_.Enter(exec_mutex_);
    if (!exec || aborting() || pause_.requested()) return QueueKind::Turn::Idle;  // round to Park
    if (!serving()) return QueueKind::Turn::Idle;
    return kind_.Serve(exec, clock_, now);
}

void QueueLane::Run() {
    auto last_work = clock_.Now();  // the poll's start: the last work's end, or a wake
    auto work_ended = last_work;
    bool idle = false;  // looked and found nothing since work_ended
    uint32_t idle_polls = 0;
    bool held_back = false;  // the last turn found the CQ full
    auto held_back_since = last_work;
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
        if (serving() && kind_.Submitted()) {
            if (idle) {
                idle = false;
                window_.WorkCame(clock_.Now() - work_ended);
            }
            const QueueKind::Turn turn = Serve(last_work);
            if (turn == QueueKind::Turn::Served) {
                idle_polls = 0;
                work_ended = last_work;
                continue;
            }
            if (turn == QueueKind::Turn::HeldBack) {
                // The driver must reap first. It usually does within
                // microseconds (it returns the CQ head every few
                // completions): look again, yielding, before napping; a nap
                // per full CQ cost the stream overlap benchmark 18%.
                if (!held_back) held_back_since = clock_.Now();
                held_back = true;
                if (clock_.Now() - held_back_since < kCqFullRetry)
                    std::this_thread::yield();
                else
                    std::this_thread::sleep_for(kCqFullRetry);
                continue;
            }
            held_back = false;
        }
        idle = true;
        const auto window = window_.window();
        if (window.count() != 0 && (++idle_polls % kPollsPerClockRead != 0 || clock_.Now() - last_work < window)) {
            // A clock read costs as much as several polls: look at it now and
            // then, so a new CB is seen sooner (the poll period is
            // microseconds). A task lane whose cores run tasks yields
            // instead of spinning: the cores are threads too, and on a host
            // with few CPUs a spinning lane keeps them (and the driver) off
            // the CPU for the whole poll budget.
            if (kind_.PollYields())
                std::this_thread::yield();
            else
                CpuRelax();
        } else if (Sleep(kicks)) {
            last_work = clock_.Now();  // woken: poll again; timed out: straight back to sleep
        }
    }
}

// Returns false if the sleep timed out: nothing happened for a while.
bool QueueLane::Sleep(uint32_t kicks_seen) {
    if (sleeping_status_ != 0) regs_.SetBits32(SPYRE_REG_STATUS, sleeping_status_);
    SharedWord(*words_.sleeping).store(1);
    // Publish sleeping before the last look: a driver that stores after it
    // sees device_sleeping and wakes us; one that stored before is seen here.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const uint32_t wake = SharedWord(*words_.wake).load();
    const bool must_stay = kicks_.load() != kicks_seen || stopping_.load() || pause_.requested() ||
                           (serving() && kind_.Submitted());
    const bool woken = must_stay || FutexWait(words_.wake, wake, kServerSleepTimeout);
    SharedWord(*words_.sleeping).store(0);
    if (sleeping_status_ != 0) regs_.ClearBits32(SPYRE_REG_STATUS, sleeping_status_);
    if (!must_stay && woken) regs_.Add64(SPYRE_REG_CNT_WAKEUPS, 1);
    return woken;
}

}  // namespace spyre::mockdev
