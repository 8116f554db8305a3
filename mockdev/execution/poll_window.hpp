// SPDX-License-Identifier: Apache-2.0
//
// Whether a queue lane of the card polls for its next work before it
// sleeps, from what polling has paid off lately. Polling costs CPU for as
// long as it lasts (up to the budget, --poll-us) and pays when work comes
// within it, which then needs no wake-up. A lane whose work comes in
// bursts (a chain, a stream, a batch) keeps polling, even when the bursts
// are far apart. A lane whose work comes seldom (a remote rank's calls, a
// job's steps) stops after kMissesToClose polls in a row ended with
// nothing: on a host with few CPUs those polls keep the thread that has
// just rung the doorbell off the CPU. The first work that comes within the
// budget again (a wake-up included) reopens the window.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace spyre::mockdev {

class PollWindow {
public:
    using Duration = std::chrono::nanoseconds;
    static constexpr uint32_t kMissesToClose = 8;

    explicit PollWindow(Duration budget = Duration::zero()) : budget_(budget) {}

    Duration budget() const { return budget_; }
    // How long to poll now: the budget, or zero (sleep at once). Any thread
    // may read it (tests); one thread calls WorkCame.
    Duration window() const {
        return misses_.load(std::memory_order_relaxed) < kMissesToClose ? budget_ : Duration::zero();
    }

    // New work came `idle` after the last work ended.
    void WorkCame(Duration idle) {
        const uint32_t misses = misses_.load(std::memory_order_relaxed);
        if (idle <= budget_) {
            if (misses != 0) misses_.store(0, std::memory_order_relaxed);
        } else if (misses < kMissesToClose) {
            misses_.store(misses + 1, std::memory_order_relaxed);
        }
    }

private:
    const Duration budget_;
    std::atomic<uint32_t> misses_{0};  // spells in a row that outlasted the budget
};

}  // namespace spyre::mockdev
