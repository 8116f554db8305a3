// SPDX-License-Identifier: Apache-2.0
#include "stream/dma_dispatch.hpp"

#include "stream/completion.hpp"
#include "trace/recorder.hpp"

namespace spyre::detail {

Error DmaDispatch::Failure(const Record& r, const Error& e) const {
    return StreamOpError(e.kind(), *r.stream, r.seq, std::string(ToString(r.kind)) + " failed: " + e.message(),
                         ErrorContext{.device = device_, .address = r.device_addr, .sys_errno = e.context().sys_errno});
}

bool DmaDispatch::Start(StreamState& s, QueuedOp& op, uint64_t seq) {
    Record rec{&s, seq, 0, op.kind, op.device_addr, std::move(op.keep_alive), op.trace(),
               op.trace_enqueue_ns && trace::Enabled()};
    try {
        rec.ticket = op.kind == OpKind::CopyToDevice ? engine_.CopyToDeviceAt(op.src, op.device_addr, op.size)
                                                     : engine_.CopyFromDeviceAt(op.dst, op.device_addr, op.size);
    } catch (const Error& e) {
        Fault(s, Failure(rec, e));
        rec.keep_alive.reset();  // before the stream's waiter wakes
        Complete(s, seq);
        return false;
    }
    s.host_busy = true;
    records_.push_back(std::move(rec));
    return true;
}

bool DmaDispatch::Poll() {
    bool any = false;
    for (size_t i = 0; i < records_.size();) {
        Record& r = records_[i];
        std::optional<Error> failure;
        bool finished = false;
        try {
            finished = engine_.Poll(r.ticket).has_value();
        } catch (const Error& e) {
            finished = true;
            failure = Failure(r, e);
        }
        if (!finished) {
            ++i;
            continue;
        }
        StreamState& s = *r.stream;
        if (failure) Fault(s, *failure);
        s.host_busy = false;
        if (r.traced && trace::Enabled()) Trace(r);
        // The host memory it held goes before the stream's waiter wakes: a
        // caller who synchronized may count on it being let go (Python's
        // buffers are released then).
        r.keep_alive.reset();
        Complete(s, r.seq);
        records_[i] = std::move(records_.back());
        records_.pop_back();
        any = true;
    }
    return any;
}

void DmaDispatch::Trace(const Record& r) {
    TraceOp(*r.stream, device_, r.kind, r.seq, r.trace, trace::detail::NowNs());
}

void DmaDispatch::FailAll(const Error& lost) {
    for (Record& r : records_) {
        // Copies only move memory, so the wait is bounded; the ticket's own
        // error does not matter any more.
        try {
            engine_.Wait(r.ticket);
        } catch (const Error&) {
        }
        Fault(*r.stream, lost);
        r.stream->host_busy = false;
        r.keep_alive.reset();
        Complete(*r.stream, r.seq);
    }
    records_.clear();
}

}  // namespace spyre::detail
