// SPDX-License-Identifier: Apache-2.0
// Internal: what a stream and an event share with the scheduler thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "spyre/common/eventcount.hpp"
#include "spyre/error.hpp"
#include "spyre/stream/flex_stream.hpp"  // declares these states first, internal (SPYRE_INTERNAL)
#include "stream/op_queue.hpp"
#include "stream/queued_op.hpp"

namespace spyre {

class DeviceCore;

struct StreamState : std::enable_shared_from_this<StreamState> {
    StreamState(int index, int priority) : index(index), priority(priority) {}

    const int index;
    const int priority;
    // The device's ring stream for this stream's CBs (contract 1.4), or -1
    // (none free, or a device without them): set before the scheduler sees it.
    int ring_stream = -1;

    // Producer side: any host thread may enqueue (the queue takes no lock).
    detail::OpQueue incoming;
    std::atomic<uint64_t> enqueued_count{0};  // ops pushed so far (counted before the push)
    std::mutex mu;                           // guards fault
    std::optional<Error> fault;
    std::atomic<bool> faulted{false};       // mirrors fault.has_value()
    // Scheduler-written, on its own line: producers do not read it on the way in.
    alignas(64) std::atomic<uint64_t> completed{0};  // ops done (including dropped), in order
    std::atomic<bool> retired{false};
    EventCount done;

    // Whether the scheduler looks at this stream on its passes: set by the
    // producer whose push found it unset (which hands the stream over on
    // the scheduler's arrivals), cleared by the scheduler once the stream
    // is idle. A pass walks only these, so streams that sit idle cost it
    // nothing (every op paid 30-40 ns per idle stream on the Device).
    std::atomic<bool> listed{false};
    StreamState* next_arrival = nullptr;  // the arrivals' link (set by the producer that listed it)
    // Keeps a listed stream alive for the scheduler: a stream queued to by
    // index (Scheduler::QueueOperation) may be retired and dropped from the
    // registry meanwhile, and the last reference go with the caller's.
    // Written by whoever lists it, taken by the scheduler when it unlists it.
    std::shared_ptr<StreamState> self_while_listed;

    // Scheduler side (whoever drives it: the thread or a caller holding the drive lock).
    bool in_active = false;                 // in the scheduler's active_
    // A push listed it again while DropIdleStreams unlisted it, and may not
    // have put it on the arrivals yet: it is not unlisted again until it
    // has been taken off them (unlisted in that window, the push's second
    // listing put it on the arrivals twice, a cycle: found probing).
    bool awaiting_arrival = false;
    std::deque<detail::QueuedOp> local;     // taken from incoming, in order
    uint64_t next_seq = 0;                  // op index of local.front()
    uint32_t ring_inflight = 0;             // CBs of this stream in the ring
    uint32_t turns_inflight = 0;            // its turns in the ring (a turn may wait behind the last)
    bool host_busy = false;                 // a DMA copy of this stream is running
    uint32_t skipped_turns = 0;             // Priority policy: aging
    // Trace (docs/trace.md): the stream's track in the current recording
    // and when its last op completed (ops run one after another).
    uint32_t trace_track = 0;
    uint64_t trace_recording = 0;
    uint64_t trace_last_done_ns = 0;

    bool HasWork() const { return !local.empty() || ring_inflight != 0 || host_busy; }
    // Nothing the scheduler must come back for (incoming aside).
    bool Idle() const { return !HasWork() && turns_inflight == 0; }
};

// An event lives on the host, so it needs no device memory: a record fires
// when the stream's ring work before it retires (a NOP in its turn) or at
// once on the host when none is in flight; a wait holds its stream back on
// the host (SettleEventOnHost).
struct EventState {
    std::shared_ptr<DeviceCore> core;
    std::mutex record_mu;                // one Record at a time (RecordEvent)
    std::atomic<uint64_t> recorded{0};   // Record calls so far (the last record's sequence)
    // Records complete out of sequence order when the event is re-recorded
    // on another stream: each is tracked on its own, so a wait for one is
    // never released by a newer one completing first (Reached).
    std::atomic<uint64_t> completed{0};    // every record up to this one has completed
    std::atomic<uint64_t> completions{0};  // records completed so far, in any order (a waiter's counter)
    std::atomic<uint64_t> timestamp_ns{0};  // device clock when the newest completed record completed
    EventCount done;
    mutable std::mutex mu;
    std::optional<Error> error;          // the newest completed record's stream fault, if it had one
    uint64_t newest = 0;                 // under mu: the newest record completed
    std::vector<uint64_t> ahead;         // under mu: records completed past `completed`

    // Whether record `seq` has completed.
    bool Reached(uint64_t seq) const {
        if (completed.load(std::memory_order_acquire) >= seq) return true;
        std::lock_guard lock(mu);
        return std::find(ahead.begin(), ahead.end(), seq) != ahead.end();
    }
};

}  // namespace spyre
