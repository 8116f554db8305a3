// SPDX-License-Identifier: Apache-2.0
#include "execution/run_time_hints.hpp"

#include <algorithm>

namespace spyre::mockdev {

void QueueRunTime::Add(uint64_t run_ns) {
    // Loads and stores, no exchange: a locked instruction per task would
    // wait for the CQE stores before it.
    const uint64_t sample = std::min(run_ns, last_ns_.load(std::memory_order_relaxed));
    last_ns_.store(run_ns, std::memory_order_relaxed);
    average_ns_.store((average_ns_.load(std::memory_order_relaxed) * 3 + sample) / 4, std::memory_order_relaxed);
}

void QueueRunTime::Clear() {
    average_ns_.store(0, std::memory_order_relaxed);
    last_ns_.store(0, std::memory_order_relaxed);
}

bool ProgramTimes::RanLong(uint64_t program) const {
    const Entry& e = entries_[Slot(program)];
    return e.program.load(std::memory_order_relaxed) == program && e.long_runs.load(std::memory_order_relaxed) >= 2;
}

bool ProgramTimes::RanShort(uint64_t program) const {
    const Entry& e = entries_[Slot(program)];
    return e.program.load(std::memory_order_relaxed) == program && e.long_runs.load(std::memory_order_relaxed) == 0;
}

void ProgramTimes::Record(uint64_t program, uint64_t run_ns) {
    Entry& e = entries_[Slot(program)];
    const bool seen = e.program.load(std::memory_order_relaxed) == program;
    const uint8_t before = seen ? e.long_runs.load(std::memory_order_relaxed) : 0;
    const uint8_t now = run_ns < kShortTaskNs ? 0 : uint8_t(std::min(before + 1, 2));
    if (seen && now == before) return;
    e.program.store(program, std::memory_order_relaxed);
    e.long_runs.store(now, std::memory_order_relaxed);
}

void ProgramTimes::Clear() {
    for (Entry& e : entries_) {
        e.program.store(0, std::memory_order_relaxed);
        e.long_runs.store(0, std::memory_order_relaxed);
    }
}

}  // namespace spyre::mockdev
