// SPDX-License-Identifier: Apache-2.0
// Internal: completion handling. Retires ring completions in ring order onto
// their streams, settles event records and waits on the host, turns device
// status into sticky stream errors, drops the work of faulted streams. No
// device: tests feed completions.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "spyre/driver/command_ring.hpp"
#include "spyre/error.hpp"
#include "spyre/memory/dma_engine.hpp"
#include "stream/stream_state.hpp"

namespace spyre::detail {

// Op `seq` of `s` is done (ops complete in stream order).
void Complete(StreamState& s, uint64_t seq);
// While a trace records: op #seq of `s` (on `device`) as a span of the
// stream's track, from when it could start (enqueued, and the op before it
// done) to `done_ns`, with the arrow from its enqueue and the device's
// error code for it (`device_code`, 0: none).
void TraceOp(StreamState& s, const std::string& device, OpKind kind, uint64_t seq, const OpTrace& trace,
             uint64_t done_ns, uint32_t device_code = 0);
// Makes `error` the stream's sticky error; the first failure is the one kept.
void Fault(StreamState& s, Error error);
// Takes the event's next record sequence and queues the record with it
// (`enqueue(seq)`), one Record of an event at a time. Two at once would take
// the same sequence, and the slower one's store could move `recorded` back
// below a sequence already completed: a later Record would then look done at
// once. If `enqueue` throws, nothing is recorded.
template <typename Enqueue>
void RecordEvent(EventState& ev, Enqueue&& enqueue) {
    std::lock_guard lock(ev.record_mu);
    const uint64_t seq = ev.recorded.load(std::memory_order_relaxed) + 1;
    enqueue(seq);
    ev.recorded.store(seq, std::memory_order_release);
}
// Record `seq` of the event completed: moves the event forward over every
// record completed in sequence (never backwards) and wakes its waiters.
void CompleteEvent(EventState& ev, uint64_t seq, uint64_t timestamp_ns, const std::optional<Error>& error);
// "stream S op #N: <what>" with the stream and op in the error's context.
Error StreamOpError(ErrorKind kind, const StreamState& s, uint64_t seq, const std::string& what, ErrorContext ctx = {});
// Drops what a faulted stream still holds, in order, once nothing of it is
// in flight. Event records still fire (waiters do not hang) and cleanup
// callbacks still run (nothing leaks). Returns the ops dropped.
size_t DropFaulted(StreamState& s);

// Settles the event record or wait at the head of `s` on the host once
// nothing of `s` is in flight, so the work before it is done. A record
// behind ring work of its stream rides in that stream's turn instead, as a
// NOP retired with it (never queued behind another stream's work: a device
// SEM_WRITE would wait for whatever else is in the ring). A record fires
// even on a faulted stream, with its error; a wait settles once its event
// has completed. Returns whether the head was settled.
bool SettleEventOnHost(StreamState& s, const std::string& device);

// The CBs in the ring, in submission order.
class RingRecords {
public:
    struct Record {
        StreamState* stream;
        uint64_t seq;
        uint64_t user_data;
        OpKind kind;
        OpTrace trace = {};
        uint64_t submit_ns = 0;  // while a trace records: when it went into the ring
        std::shared_ptr<EventState> event = {};  // EventRecord: the event it fires when retired
        uint64_t event_seq = 0;
        bool ends_turn = false;  // the last CB of its stream's turn
        uint64_t copy_bytes = 0;  // CopyToDevice: the bytes it carried inline
    };

    // `dma`: where the inline copies are counted and traced, as every copy
    // is (null only in tests of the bookkeeping alone).
    explicit RingRecords(std::string device, DMAEngine* dma = nullptr) : device_(std::move(device)), dma_(dma) {}

    size_t size() const { return records_.size(); }
    bool empty() const { return records_.empty(); }
    void Add(Record r) {
        ++r.stream->ring_inflight;
        records_.push_back(std::move(r));
    }
    // The CB added last ends its stream's turn.
    void EndTurn() {
        records_.back().ends_turn = true;
        ++records_.back().stream->turns_inflight;
    }
    // The stream of the ring's last CB (nullptr when empty).
    const StreamState* last_stream() const { return records_.empty() ? nullptr : records_.back().stream; }
    // Retires `done` (reaped from the ring, in ring order). Throws
    // ProtocolError if the device completed out of order. Returns the CBs
    // the device cancelled behind an earlier failure.
    size_t Retire(std::span<const driver::Completion> done);
    // The device is gone: every CB in the ring fails with `lost`.
    void FailAll(const Error& lost);

private:
    // While a trace records: a CB's device span runs from its submission, or
    // the ring's previous completion if later, to its own completion.
    void TraceDevice(const Record& r, const driver::Completion& c);
    static void FireRecord(StreamState& s, Record& r);

    std::string device_;
    DMAEngine* dma_;
    std::deque<Record> records_;
    uint32_t trace_track_ = 0;
    uint64_t trace_recording_ = 0;
    uint64_t trace_last_done_ns_ = 0;
};

}  // namespace spyre::detail
