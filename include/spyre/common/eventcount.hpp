// SPDX-License-Identifier: Apache-2.0
// EventCount: the one way a thread of this process sleeps until another
// thread has made progress (a task completed, a job posted, ring space
// freed, a stream's op done). A sequence word on a private futex, a count
// of armed waiters and a flag that a wake went out since the last arm.
//
// The protocol, for a condition `ready()` that producers make true:
//   waiter:   key = Arm(); if (ready()) Disarm(); else Wait(key, timeout);
//             (then look at ready() again: a wait may return spuriously)
//   producer: make ready() true; Notify();
// Arm and Notify are sequentially consistent (a Dekker pair): a producer
// that finds no armed waiter made its change before the waiter's look,
// which sees it; one that finds a waiter moves the sequence, so the wait
// returns at once if it has not started. A producer pays a system call
// only while someone is armed, and only the first producer after an arm
// pays: later ones find the flag set, and every waiter armed before that
// wake was woken by it (a wake wakes all). A waiter that comes back arms
// again, which clears the flag.
//
// Header-only, over futex.hpp, so every layer (streams, the dependency
// engine, the orchestration runtime, the host level) uses the same one.
#pragma once

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <mutex>

#include "spyre/common/futex.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

class EventCount {
public:
    using Key = uint32_t;

    // ---- waiter side
    // Counts the caller in and returns the key its Wait compares against.
    Key Arm() noexcept {
        const Key key = seq_.load(std::memory_order_seq_cst);
        notified_.store(false, std::memory_order_seq_cst);
        waiters_.fetch_add(1, std::memory_order_seq_cst);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        return key;
    }
    // Counts the caller out without sleeping (its condition held).
    void Disarm() noexcept { waiters_.fetch_sub(1, std::memory_order_seq_cst); }
    // Sleeps unless a Notify came since `key` was taken (at most `timeout`),
    // then counts the caller out. True when the sequence moved.
    bool Wait(Key key, std::chrono::nanoseconds timeout) noexcept {
        if (seq_.load(std::memory_order_seq_cst) == key) FutexWait(&seq_, key, timeout, FutexScope::Private);
        Disarm();
        return seq_.load(std::memory_order_relaxed) != key;
    }
    // Arm, look, wait: returns on a Notify, a timeout or spuriously, so
    // callers loop on their condition.
    template <typename Ready>
    void SleepUnless(Ready&& ready, std::chrono::nanoseconds timeout) {
        const Key key = Arm();
        if (ready())
            Disarm();
        else
            Wait(key, timeout);
    }

    // SleepUnless for a condition guarded by `lock`'s mutex (held on entry
    // and on return): lets it go while asleep, and looks under it after
    // arming, so a producer that changes the state under the mutex and
    // notifies (under it or after it) is never missed.
    template <typename Mutex, typename Ready>
    void SleepUnlocked(std::unique_lock<Mutex>& lock, Ready&& ready, std::chrono::nanoseconds timeout) {
        Mutex& mu = *lock.mutex();
        lock.unlock();
        SleepUnless(
            [&] {
                std::lock_guard look(mu);
                return ready();
            },
            timeout);
        lock.lock();
    }

    // ---- producer side (after the condition changed)
    // Wakes every armed waiter, if any and none was woken since the last arm.
    void Notify() noexcept {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        NotifyAfterSeqCstUpdate();
    }
    // Notify for a producer whose change was itself a sequentially
    // consistent store or read-modify-write: that operation already orders
    // the change before the look at the waiters (one total order over both),
    // so the fence Notify pays is not needed. The hot producers (a stream
    // enqueue, a DMA completion) publish that way; the fence was most of
    // an enqueue's cost while the scheduler drains.
    void NotifyAfterSeqCstUpdate() noexcept {
        if (waiters_.load(std::memory_order_seq_cst) == 0) return;
        if (notified_.exchange(true, std::memory_order_seq_cst)) return;
        Bump();
    }
    // Moves the sequence and wakes whoever sleeps, armed or not (shutdown,
    // or a key taken with Current before arming).
    void NotifyAll() noexcept {
        notified_.store(true, std::memory_order_seq_cst);
        Bump();
    }

    // ---- for waiters that sleep elsewhere on this word
    bool Armed() const noexcept { return waiters_.load(std::memory_order_seq_cst) != 0; }
    // The key as of now, without arming: a key taken before a last look for
    // work and waited on after arming makes any wake in between count.
    Key Current() const noexcept { return seq_.load(std::memory_order_seq_cst); }
    // The futex word itself (a driver wait that sleeps on it and on a
    // device word at once).
    const std::atomic<uint32_t>& word() const noexcept { return seq_; }

private:
    void Bump() noexcept {
        seq_.fetch_add(1, std::memory_order_seq_cst);
        FutexWake(&seq_, FutexScope::Private, INT_MAX);
    }

    std::atomic<uint32_t> seq_{0};
    std::atomic<uint32_t> waiters_{0};
    std::atomic<bool> notified_{false};
};

}  // namespace spyre
SPYRE_API_END
