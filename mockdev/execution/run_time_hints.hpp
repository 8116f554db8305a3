// SPDX-License-Identifier: Apache-2.0
// How long a function's tasks ran lately, as its task lane reads it to
// choose between running them itself and waking the card's workers
// (task_queues.hpp): per queue (QueueRunTime) and per program
// (ProgramTimes). Hints: written by whichever core ran a task, read by the
// lane without a lock; a value read mid-update is a wrong hint, nothing more.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace spyre::mockdev {

// Below this a task runs on the lane rather than costing a worker's wake-up.
inline constexpr uint64_t kShortTaskNs = 5'000;

// A short task whose thread was preempted measures long once: on these
// 2-CPU VMs many times a second. Both hints therefore call a run long only
// when the one before it was long too; taken at its word, one preempted
// empty task made the lane wake a worker per pending task (up to a group of
// 8) for the empty tasks behind it.

// A queue's recent tasks: a moving average of their run times, each the
// shorter of its own and the previous task's.
class QueueRunTime {
public:
    void Add(uint64_t run_ns);
    bool Short() const { return average_ns_.load(std::memory_order_relaxed) < kShortTaskNs; }
    void Clear();  // power-on: short

private:
    std::atomic<uint64_t> average_ns_{0};
    std::atomic<uint64_t> last_ns_{0};
};

// Whether each program (by device address) ran long (kShortTaskNs or more)
// twice in a row lately, or short the last time; after one long run it is
// neither. Written only when it changes, so cores running the same program
// do not trade the line.
class ProgramTimes {
public:
    bool RanLong(uint64_t program) const;   // its last two runs were long
    bool RanShort(uint64_t program) const;  // seen lately, its last run short: false when unknown
    void Record(uint64_t program, uint64_t run_ns);
    void Clear();  // for the function's next owner, whose programs these are not

private:
    struct Entry {
        std::atomic<uint64_t> program{0};
        std::atomic<uint8_t> long_runs{0};  // in a row, up to 2
    };
    static constexpr size_t kEntries = 64;
    static size_t Slot(uint64_t program) { return size_t((program >> 3) * 0x9E3779B97F4A7C15ull >> 58); }
    std::array<Entry, kEntries> entries_;
};

}  // namespace spyre::mockdev
