// SPDX-License-Identifier: Apache-2.0
// CompletionWord: a private futex word a waiter sleeps on until a producer
// says the condition it waits for may hold now. The producer pays a system
// call only while someone sleeps (the waiter count), and a waiter that
// counted itself in before it looked at its condition cannot miss a wake
// (both sides sequentially consistent: a Dekker pair). Streams and events
// wait on one for their ops, the host-level scheduler's callers for their
// runs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "spyre/common/futex.hpp"

namespace spyre {

struct CompletionWord {
    std::atomic<uint32_t> seq{0};
    std::atomic<uint32_t> waiters{0};

    // Producer side: call after the condition changed.
    void Notify() noexcept {
        if (waiters.load(std::memory_order_seq_cst) == 0) return;
        seq.fetch_add(1, std::memory_order_seq_cst);
        FutexWake(&seq, FutexScope::Private);
    }

    // Waiter side: sleeps at most `timeout` unless `done()` holds; returns
    // on a Notify, a timeout or spuriously, so callers loop on their
    // condition.
    template <typename Done>
    void SleepUnless(Done&& done, std::chrono::nanoseconds timeout) {
        waiters.fetch_add(1, std::memory_order_seq_cst);
        const uint32_t seen = seq.load(std::memory_order_seq_cst);
        if (!done()) FutexWait(&seq, seen, timeout, FutexScope::Private);
        waiters.fetch_sub(1, std::memory_order_seq_cst);
    }
};

}  // namespace spyre
