// SPDX-License-Identifier: Apache-2.0
// RunCost: how long a job's runs take, as a running average, so a runtime
// can tell the jobs cheaper to run on the thread that made them ready than
// to hand to another thread and back. Both orchestration levels use it: the
// orchestration runtime for host kernels, the host level for chip tasks.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace spyre::dependency {

// The average of the runs measured (a runtime times each run, or samples
// them). Read and written without a lock: a lost update only delays the
// average.
class RunCost {
public:
    // Runs this short are cheaper to make on the thread that made the task
    // ready than to hand to a worker thread and back (docs/orchestration.md).
    static constexpr uint32_t kDefaultCheapNs = 1000;

    RunCost() = default;
    RunCost(const RunCost& other)
        : cheap_ns_(other.cheap_ns_), ns_(other.ns_.load(std::memory_order_relaxed)) {}
    RunCost& operator=(const RunCost& other) {
        cheap_ns_ = other.cheap_ns_;
        ns_.store(other.ns_.load(std::memory_order_relaxed), std::memory_order_relaxed);
        return *this;
    }
    // The bound under which the average counts as cheap (the runtime's
    // option: the task graph's when a kernel is registered, the host
    // level's when a chip function is first made ready; before any run).
    void SetCheapBelow(uint32_t ns) noexcept { cheap_ns_ = std::max<uint32_t>(ns, 1); }
    void Record(uint64_t run_ns) noexcept {
        // Clamped at four times the bound: one run stretched by a preemption
        // or an interrupt (a millisecond here and there on a busy machine)
        // must not make a cheap job look slow for the next hundred runs; a
        // job slower than the bound still averages above it after two
        // measured runs.
        const uint64_t cap = std::min<uint64_t>(uint64_t(cheap_ns_) * 4, kUnknown - 1);
        const uint32_t sample = uint32_t(std::min<uint64_t>(run_ns, cap));
        const uint32_t avg = ns_.load(std::memory_order_relaxed);
        ns_.store(avg == kUnknown ? sample : uint32_t((uint64_t(avg) * 7 + sample) / 8), std::memory_order_relaxed);
    }
    // False until a run was measured.
    bool Cheap() const noexcept { return ns_.load(std::memory_order_relaxed) < cheap_ns_; }

private:
    static constexpr uint32_t kUnknown = UINT32_MAX;
    uint32_t cheap_ns_ = kDefaultCheapNs;
    std::atomic<uint32_t> ns_{kUnknown};
};

}  // namespace spyre::dependency
