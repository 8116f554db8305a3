// SPDX-License-Identifier: Apache-2.0
#include "stream/completion.hpp"

#include <algorithm>

#include "spyre/common/device_clock.hpp"
#include "spyre/uapi/spyre_errors.h"
#include "trace/recorder.hpp"

namespace spyre::detail {

void Complete(StreamState& s, uint64_t seq) {
    s.completed.store(seq + 1, std::memory_order_seq_cst);
    s.done.Notify();
}

void TraceOp(StreamState& s, const std::string& device, OpKind kind, uint64_t seq, const OpTrace& trace,
             uint64_t done_ns, uint32_t device_code) {
    if (trace.enqueue_ns == 0 || !trace::Enabled()) return;
    const uint64_t recording = trace::detail::Recording();
    if (s.trace_recording != recording) {
        s.trace_track = trace::detail::NamedTrack(device + " stream " + std::to_string(s.index));
        s.trace_recording = recording;
        s.trace_last_done_ns = 0;
    }
    const uint64_t start = std::max(trace.enqueue_ns, s.trace_last_done_ns);
    trace::detail::Span(s.trace_track, "stream", ToString(kind), start, done_ns, int64_t(seq), trace.enqueue_ns,
                        trace.flow, device_code);
    s.trace_last_done_ns = done_ns;
}

void RingRecords::TraceDevice(const Record& r, const driver::Completion& c) {
    const uint64_t recording = trace::detail::Recording();
    if (trace_recording_ != recording) {
        trace_track_ = trace::detail::NamedTrack(device_ + " device ring");
        trace_recording_ = recording;
        trace_last_done_ns_ = 0;
    }
    // The device runs its ring's CBs one after another.
    const uint64_t start = std::max(r.submit_ns, trace_last_done_ns_);
    trace::detail::Span(trace_track_, "device", ToString(r.kind), start, c.timestamp_ns, int64_t(r.seq), 0, 0,
                        c.status);
    trace_last_done_ns_ = c.timestamp_ns;
}

void Fault(StreamState& s, Error error) {
    std::lock_guard lock(s.mu);
    if (s.fault) return;  // the first failure is the one reported
    s.fault = std::move(error);
    s.faulted.store(true, std::memory_order_release);
}

void CompleteEvent(EventState& ev, uint64_t seq, uint64_t timestamp_ns, const std::optional<Error>& error) {
    {
        std::lock_guard lock(ev.mu);
        // The event's time and error are its newest record's: an older one
        // completing later never moves them back.
        if (seq > ev.newest) {
            ev.newest = seq;
            ev.error = error;
            ev.timestamp_ns.store(timestamp_ns, std::memory_order_relaxed);
        }
        uint64_t upto = ev.completed.load(std::memory_order_relaxed);
        if (seq == upto + 1) {
            ++upto;
            for (auto it = std::find(ev.ahead.begin(), ev.ahead.end(), upto + 1); it != ev.ahead.end();
                 it = std::find(ev.ahead.begin(), ev.ahead.end(), upto + 1)) {
                ev.ahead.erase(it);
                ++upto;
            }
            ev.completed.store(upto, std::memory_order_release);
        } else {
            ev.ahead.push_back(seq);  // re-recorded elsewhere: an older record is still in flight
        }
        ev.completions.fetch_add(1, std::memory_order_seq_cst);
    }
    ev.done.Notify();
}

Error StreamOpError(ErrorKind kind, const StreamState& s, uint64_t seq, const std::string& what, ErrorContext ctx) {
    ctx.stream = s.index;
    ctx.op_index = seq;
    return Error(kind, "stream " + std::to_string(s.index) + " op #" + std::to_string(seq) + ": " + what,
                 std::move(ctx));
}

size_t DropFaulted(StreamState& s) {
    if (!s.faulted.load(std::memory_order_relaxed)) return 0;
    size_t dropped = 0;
    while (!s.local.empty() && s.ring_inflight == 0 && !s.host_busy && s.local.front().kind != OpKind::EventRecord &&
           !s.local.front().always) {
        s.local.pop_front();
        Complete(s, s.next_seq++);
        ++dropped;
    }
    return dropped;
}

bool SettleEventOnHost(StreamState& s, const std::string& device) {
    if (s.local.empty() || s.ring_inflight != 0 || s.host_busy) return false;
    QueuedOp& op = s.local.front();
    if (op.kind == OpKind::EventRecord) {
        std::optional<Error> err;
        if (s.faulted.load()) {
            std::lock_guard lock(s.mu);
            err = s.fault;
        }
        // The device clock is CLOCK_MONOTONIC: now is when the work before
        // the record was seen done, never before it was.
        CompleteEvent(*op.event, op.value, DeviceClockNs(), err);
    } else if (op.kind == OpKind::EventWait) {
        if (s.faulted.load(std::memory_order_relaxed)) return false;  // DropFaulted drops it
        if (!op.event->Reached(op.value)) return false;
    } else {
        return false;
    }
    const uint64_t seq = s.next_seq++;
    const OpKind kind = op.kind;
    const OpTrace trace = op.trace();
    s.local.pop_front();  // lets go of the event before the stream's waiter wakes
    if (trace.enqueue_ns && trace::Enabled()) TraceOp(s, device, kind, seq, trace, trace::detail::NowNs());
    Complete(s, seq);
    return true;
}

// A record fires done or failed alike (waiters never hang), with the
// stream's error if it has one; the time is when the host saw it, as on the
// host path. Then it lets go of the event, before its stream completes: the
// event may hold the last reference to the device, whose teardown must run
// on the caller's thread, never on this one (it joins the scheduler thread).
void RingRecords::FireRecord(StreamState& s, Record& r) {
    std::optional<Error> err;
    if (s.faulted.load()) {
        std::lock_guard lock(s.mu);
        err = s.fault;
    }
    CompleteEvent(*r.event, r.event_seq, DeviceClockNs(), err);
    r.event.reset();
}

namespace {

// What a device failure of a caller's CB usually means, where the code
// alone does not say it.
std::string FailureHint(OpKind kind, uint32_t status) {
    if (kind == OpKind::SemWait && status == SPYRE_ERR_WATCHDOG)
        return " (the semaphore did not reach its value within the watchdog's period; the ring runs CBs in order "
               "for every stream of the device, so a SemWrite queued after this wait, on any stream, could not run "
               "before it: queue the write first)";
    if (kind == OpKind::Launch && status == SPYRE_ERR_OVERLAP)
        return " (an op's output overlaps an input it reads other elements of, e.g. one tensor bound as a matmul's "
               "input and output: docs/hardware.md, \"Program binaries\")";
    return "";
}

}  // namespace

size_t RingRecords::Retire(std::span<const driver::Completion> done) {
    size_t cancelled = 0;
    uint64_t reaped_ns = 0;  // while a trace records: when this batch was seen, read once
    for (const driver::Completion& c : done) {
        if (records_.empty() || records_.front().user_data != c.user_data)
            throw Error(ErrorKind::ProtocolError,
                        "the device completed CB " + std::to_string(c.user_data) + " out of ring order",
                        ErrorContext{.device = device_});
        Record rec = std::move(records_.front());
        records_.pop_front();
        StreamState& s = *rec.stream;
        --s.ring_inflight;
        if (!c.ok() && !s.faulted.load()) {
            const std::string what = c.status == SPYRE_ERR_CANCELED
                                         ? std::string(ToString(rec.kind)) + " was cancelled by an earlier failure"
                                         : std::string(ToString(rec.kind)) + " failed on the device: " +
                                               spyre_error_name(c.status) + FailureHint(rec.kind, c.status);
            Fault(s, StreamOpError(ErrorKind::DeviceError, s, rec.seq, what,
                                   ErrorContext{.device = device_,
                                                .address = c.result ? std::optional<uint64_t>(c.result) : std::nullopt,
                                                .device_code = c.status}));
        } else if (c.status == SPYRE_ERR_CANCELED && rec.kind != OpKind::EventRecord) {
            ++cancelled;  // cancelled on the device behind the stream's failure
        }
        if (rec.kind == OpKind::EventRecord) FireRecord(s, rec);
        if (rec.kind == OpKind::CopyToDevice && dma_) {
            // Where the device ran it (TraceDevice's span): the ring's copies
            // run one after another, and drawn from their submission to the
            // reap they overlapped, a DMA lane each (found probing from outside).
            const uint64_t ran_from = rec.submit_ns ? std::max(rec.submit_ns, trace_last_done_ns_) : 0;
            dma_->CountRingCopy(rec.copy_bytes, !c.ok(), ran_from, c.timestamp_ns);
        }
        if (rec.ends_turn) --s.turns_inflight;
        if (rec.submit_ns != 0 && trace::Enabled()) {
            if (reaped_ns == 0) reaped_ns = trace::detail::NowNs();
            TraceDevice(rec, c);
            TraceOp(s, device_, rec.kind, rec.seq, rec.trace, reaped_ns, c.status);
        }
        Complete(s, rec.seq);
    }
    return cancelled;
}

void RingRecords::FailAll(const Error& lost) {
    for (Record& r : records_) {
        Fault(*r.stream, lost);
        if (r.kind == OpKind::EventRecord) FireRecord(*r.stream, r);
        if (r.kind == OpKind::CopyToDevice && dma_) dma_->CountRingCopy(r.copy_bytes, true, 0, 0);
        if (r.ends_turn) --r.stream->turns_inflight;
        --r.stream->ring_inflight;
        Complete(*r.stream, r.seq);
    }
    records_.clear();
}

}  // namespace spyre::detail
