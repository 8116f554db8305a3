// SPDX-License-Identifier: Apache-2.0
//
// What the driver's rings share (the CB ring, the task queues): copying
// entries into a submission ring, reading completion records by their phase
// (both post spyre_cqe the same way, spyre_cb.h "CQE phase"), and waiting
// for a device's completions: poll, spin then block, or block on the
// completion interrupt, checking the device's health meanwhile. The
// interrupt protocol is the same for both (spyre_regs.h, spyre_task.h): a
// waiter counts itself in irq_waiters, reads irq_seq, checks for completions
// once more and only then futex-waits on irq_seq.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>

#include "spyre/common/futex.hpp"
#include "spyre/driver/command_ring.hpp"
#include "spyre/uapi/spyre_cb.h"
#include "spyre/uapi/spyre_regs.h"

namespace spyre::driver::detail {

// A word the device shares with the driver (doorbells, ring indices), seen
// atomically: the device is another process, so plain loads would race.
template <typename T>
std::atomic_ref<T> Word(T& t) {
    return std::atomic_ref<T>(t);
}

// Copies `entries` into the submission ring `ring` of `size` (a power of
// two) entries from position `tail` on, wrapping at the ring's end, and
// advances `tail` past them. The caller has checked that they fit.
template <typename T>
void CopyToRing(T* ring, uint32_t size, uint32_t& tail, std::span<const T> entries) {
    for (size_t done = 0; done < entries.size();) {
        const uint32_t at = spyre_ring_slot(tail, size);
        const size_t n = std::min<size_t>(entries.size() - done, size - at);  // up to the ring's end
        std::memcpy(static_cast<void*>(&ring[at]), entries.data() + done, n * sizeof(T));
        done += n;
        tail += uint32_t(n);
    }
}

// True when the CQE slot of completion position `cq_pos` (of a CQ of
// `entries`, a power of two) holds that position's record: its phase byte,
// which the device writes last with a release store, shows the position's
// lap. Reads that one byte.
inline bool CqePosted(const spyre_cqe* cq, uint32_t entries, uint32_t cq_pos) noexcept {
    auto& phase = const_cast<uint8_t&>(cq[spyre_ring_slot(cq_pos, entries)].phase);
    return std::atomic_ref<uint8_t>(phase).load(std::memory_order_acquire) == spyre_cqe_phase(cq_pos, entries);
}

// A private copy of the record at `cq_pos`, once CqePosted: the device may
// rewrite the slot (its next lap) while the caller looks at it.
inline spyre_cqe ReadCqe(const spyre_cqe* cq, uint32_t entries, uint32_t cq_pos) noexcept {
    spyre_cqe e;
    std::memcpy(&e, &cq[spyre_ring_slot(cq_pos, entries)], sizeof e);
    return e;
}

// How often a spinning or sleeping waiter checks that the device still lives.
inline constexpr std::chrono::milliseconds kHealthPeriod{100};

// Sleeps on the interrupt until ready() or `deadline`; calls health() (which
// throws for a dead or halted device) whenever a sleep ends with nothing ready.
template <typename Ready, typename Health>
void BlockOnInterrupt(uint32_t& irq_waiters, uint32_t& irq_seq, Ready&& ready, Health&& health,
                      std::chrono::steady_clock::time_point deadline) {
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

}  // namespace spyre::driver::detail
