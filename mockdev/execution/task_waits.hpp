// SPDX-License-Identifier: Apache-2.0
//
// The tasks of one task queue that wait for earlier tasks of the same queue
// (spyre_cb_task.after, contract 3.1), and how each earlier task ended. A
// task is admitted when the queue takes it, in submission order; it goes to
// a core once every task it names has ended, or at once, with a verdict and
// without running, when its list is malformed (BAD_DEPENDENCY) or a task it
// waited for did not succeed (DEPENDENCY_FAILED). It always ends after the
// tasks it names, so its completion follows theirs.
//
// Why positions within one SQ lap are enough: a task at position p may name
// only p-1 .. p-(window-1), and positions are taken in order, so when it is
// admitted the task at X + window has not been taken, and X's end record
// (kept at X % window) is either X's own or an older one's (X still in
// flight). Not thread-safe: the task queues' lock guards it.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "spyre/uapi/spyre_cb.h"

namespace spyre::mockdev {

// A CB taken from a task queue, not yet on a core.
struct QueuedTask {
    spyre_cb cb;
    uint32_t sq_pos;
    uint16_t verdict = 0;  // not NONE: it completes with this, never runs
};

class TaskWaits {
public:
    explicit TaskWaits(uint32_t window);  // the queue's SQ entries

    // The next task taken from the queue (at task.sq_pos). True: it may go
    // to a core now (its verdict possibly set); false: it waits here, and
    // Ended hands it over later.
    bool Admit(QueuedTask& task);
    // The task at `pos` ended with `status`: tasks that waited only for it
    // more are appended to `ready`. Returns how many.
    size_t Ended(uint32_t pos, uint16_t status, std::deque<QueuedTask>& ready);
    // Power-on state: nothing taken, nothing waits (a function reset).
    void Clear();

    size_t waiting() const { return waiting_count_; }

private:
    struct EndRecord {
        uint32_t pos = 0;
        uint16_t status = 0;
        bool valid = false;
    };
    struct Waiter {
        QueuedTask task;
        uint32_t left = 0;    // tasks named that have not ended
        bool failed = false;  // one of them did not succeed
    };
    struct Listener {
        uint32_t producer;  // the position it waits for
        uint32_t waiter;    // index into waiters_
    };

    const uint32_t window_;
    uint64_t taken_ = 0;  // admitted since the last Clear
    std::vector<EndRecord> ended_;                // by position % window_
    std::vector<std::vector<Listener>> listeners_;  // by the producer's position % window_
    std::vector<Waiter> waiters_;
    std::vector<uint32_t> free_waiters_;
    size_t waiting_count_ = 0;
};

}  // namespace spyre::mockdev
