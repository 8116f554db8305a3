// SPDX-License-Identifier: Apache-2.0
//
// How DeviceQueue (the CB ring, the task queues) waits for a device's
// completions: poll, spin then block, or block on the completion interrupt, checking the device's health
// meanwhile. The interrupt protocol is the same for every queue
// (spyre_regs.h, spyre_task.h): a waiter counts itself in irq_waiters, reads
// irq_seq, checks for completions once more and only then futex-waits on
// irq_seq. Templates, so the queue's checks inline into the spin.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>

#include "spyre/common/futex.hpp"
#include "spyre/driver/device_queue.hpp"
#include "spyre/uapi/spyre_cb.h"
#include "spyre/uapi/spyre_regs.h"

namespace spyre::driver::detail {

// A word the device shares with the driver (doorbells, ring indices), seen
// atomically: the device is another process, so plain loads would race.
template <typename T>
std::atomic_ref<T> Word(T& t) {
    return std::atomic_ref<T>(t);
}

// How often a spinning or sleeping waiter checks that the device still lives.
inline constexpr std::chrono::milliseconds kHealthPeriod{100};

// Sleeps on the interrupt until ready() or `deadline`; calls health() (which
// throws for a dead or halted device) whenever a sleep ends with nothing ready.
template <typename Ready, typename Health>
void BlockOnInterrupt(DeviceQueue::Interrupt irq, Ready&& ready, Health&& health,
                      std::chrono::steady_clock::time_point deadline) {
    uint32_t& irq_waiters = irq.waiters;
    uint32_t& irq_seq = irq.seq;
    // Announce the waiter before the last check so the device's wake cannot
    // slip between our check and our sleep.
    std::atomic_ref<uint32_t>(irq_waiters).fetch_add(1, std::memory_order_seq_cst);
    struct Disarm {
        uint32_t& w;
        ~Disarm() { std::atomic_ref<uint32_t>(w).fetch_sub(1, std::memory_order_seq_cst); }
    } disarm{irq_waiters};
    while (true) {
        const uint32_t seq = std::atomic_ref<uint32_t>(irq_seq).load(std::memory_order_seq_cst);
        if (ready()) return;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return;
        FutexWait(&irq_seq, seq, std::min<std::chrono::nanoseconds>(deadline - now, kHealthPeriod));
        if (!ready()) health();
    }
}

// Reaps until `min_count` completions are in: reap(done) reaps more after
// the first `done` and returns how many. block(deadline) sleeps on the
// interrupt. timed_out() builds the Timeout error. Returns the count reaped.
template <typename Ready, typename Reap, typename Health, typename Block, typename TimedOut>
size_t WaitForCompletions(size_t min_count, const WaitOptions& options, Ready&& ready, Reap&& reap, Health&& health,
                          Block&& block, TimedOut&& timed_out) {
    using std::chrono::steady_clock;
    // A spinning wait reads the clock only every kSpinsPerClockRead spins,
    // the first time after that many: a read costs about 35 ns in a VM, as
    // much as a NOP on the device, and most completions come sooner. The
    // timeout, the health period and the adaptive spin budget count from
    // that first read.
    steady_clock::time_point start, deadline, next_health;
    bool clock_started = false;
    auto now = [&] {
        const auto t = steady_clock::now();
        if (!clock_started) {
            start = t;
            deadline = t + options.timeout;
            next_health = t + kHealthPeriod;
            clock_started = true;
        }
        return t;
    };
    size_t got = reap(size_t{0});
    uint32_t spins = 0;
    while (got < min_count) {
        if (ready()) {
            got += reap(got);
            continue;
        }
        if (options.mode != WaitMode::Blocking && (++spins % kSpinsPerClockRead) != 0) {
            CpuRelax();
            continue;
        }
        auto t = now();
        const bool spinning =
            options.mode == WaitMode::Poll || (options.mode == WaitMode::Adaptive && t - start < options.spin);
        if (spinning) {
            CpuRelax();
            if (t >= next_health) {
                health();
                next_health = t + kHealthPeriod;
            }
        } else {
            block(deadline);
            if (ready()) continue;
            t = steady_clock::now();
        }
        if (t >= deadline) throw timed_out();
    }
    return got;
}

// Waits on `queue` until min(min_count, out_size) completions are in, as
// WaitForCompletions; reap(done) reaps into the caller's records after the
// first `done`. Throws the queue's errors (TooManyAwaited, TimedOut,
// CheckHealth's).
template <typename Reap>
size_t WaitOnQueue(const DeviceQueue& queue, size_t out_size, size_t min_count, const WaitOptions& options,
                   Reap&& reap) {
    min_count = std::min(min_count, out_size);
    if (min_count > queue.InFlight()) throw queue.TooManyAwaited(min_count);
    return WaitForCompletions(
        min_count, options, [&] { return queue.CompletionsReady(); }, reap, [&] { queue.CheckHealth(); },
        [&](std::chrono::steady_clock::time_point deadline) { queue.BlockOnInterrupt(deadline); },
        [&] { return queue.TimedOut(options.timeout); });
}

}  // namespace spyre::driver::detail
