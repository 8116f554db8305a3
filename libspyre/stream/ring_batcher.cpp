// SPDX-License-Identifier: Apache-2.0
#include "stream/ring_batcher.hpp"

#include <algorithm>
#include <span>

#include "spyre/driver/command_ring.hpp"
#include "trace/recorder.hpp"

namespace spyre::detail {

bool RingBatcher::IsRingOp(const QueuedOp& op) const {
    switch (op.kind) {
    case OpKind::Launch:
    case OpKind::SemWrite:
    case OpKind::SemWait:
    case OpKind::EventRecord:
    case OpKind::EventWait: return true;
    case OpKind::CopyToDevice: return op.size <= inline_max_;
    case OpKind::CopyFromDevice:
    case OpKind::HostCallback: return false;
    }
    return false;
}

bool RingBatcher::Ready(const StreamState& s) const {
    if (s.local.empty() || s.host_busy) return false;
    const QueuedOp& op = s.local.front();
    if (!IsRingOp(op)) return false;
    if (s.faulted.load(std::memory_order_relaxed)) return false;
    // A record rides in the ring (a NOP fired when retired) behind ring work
    // of its stream; with none in flight the host settles it at once
    // (SettleEventOnHost). A wait rides as a NOP once its event has completed.
    if (op.kind == OpKind::EventRecord) return s.ring_inflight != 0;
    if (op.kind == OpKind::EventWait) return op.event->Reached(op.value);
    return true;
}

size_t RingBatcher::SlotsFor(const QueuedOp& op) {
    if (op.kind == OpKind::CopyToDevice) return 1 + (op.size + sizeof(spyre_cb) - 1) / sizeof(spyre_cb);
    return 1;
}

// Ring slots (and CBs) of the LINKed chain at the stream's head.
size_t RingBatcher::ChainSlots(const StreamState& s, size_t* cbs) const {
    size_t slots = 0, n = 0;
    for (const QueuedOp& op : s.local) {
        if (!IsRingOp(op)) break;
        slots += SlotsFor(op);
        ++n;
        if (!op.link) break;
    }
    *cbs = n;
    return slots;
}

void RingBatcher::Append(StreamState& s, std::vector<spyre_cb>& batch, RingRecords& records, uint64_t trace_ns) {
    QueuedOp op = std::move(s.local.front());
    s.local.pop_front();
    const uint64_t seq = s.next_seq++;
    const uint64_t ud = next_user_data_++;
    switch (op.kind) {
    case OpKind::Launch: batch.push_back(driver::LaunchCb(op.device_addr, op.size, ud)); break;
    case OpKind::CopyToDevice:
        driver::AppendCopyInline(batch, op.device_addr, std::span(static_cast<const uint8_t*>(op.src), size_t(op.size)),
                                 ud);
        ++inline_copies_;
        break;
    case OpKind::SemWrite: batch.push_back(driver::SemWriteCb(op.device_addr, op.value, ud)); break;
    case OpKind::SemWait: batch.push_back(driver::SemWaitCb(op.device_addr, op.value, 0, ud)); break;
    case OpKind::EventWait:
        // Its event has completed (Ready): it only keeps its place in the turn.
    case OpKind::EventRecord:
        // Fired when retired (RingRecords), after the stream's CBs before it.
        batch.push_back(driver::NopCb(ud));
        break;
    default: throw Error(ErrorKind::Internal, "not a ring op");
    }
    RingRecords::Record rec{&s, seq, ud, op.kind, op.trace(), op.trace_enqueue_ns ? trace_ns : 0};
    if (op.kind == OpKind::EventRecord) {
        rec.event = std::move(op.event);
        rec.event_seq = op.value;
    }
    if (op.kind == OpKind::CopyToDevice) rec.copy_bytes = op.size;
    records.Add(std::move(rec));
}

size_t RingBatcher::TakeTurn(StreamState& s, size_t quantum, Budget& budget, std::vector<spyre_cb>& batch,
                             RingRecords& records) {
    size_t taken = 0;
    size_t previous = SIZE_MAX;  // the stream's last CB in this batch
    // The stream's CBs go in its ring stream, so a turn that waits in the
    // ring behind its previous one is cancelled should that one fail. A turn
    // with nothing of the stream ahead of it restarts the ring stream: a
    // failure before it has been seen (a faulted stream takes no turn).
    bool restart = s.ring_inflight == 0;
    while (taken < quantum && Ready(s)) {
        // A LINKed chain goes down whole, never interleaved with another
        // stream; only a chain larger than the whole budget is split.
        size_t chain_cbs = 0;
        const size_t chain_slots = ChainSlots(s, &chain_cbs);
        const bool fits = chain_slots <= budget.slots && chain_cbs <= budget.cbs;
        if (!fits && !(budget.ring_idle && batch.empty())) break;
        for (size_t k = 0; k < chain_cbs && Ready(s); ++k) {
            if (SlotsFor(s.local.front()) > budget.slots || budget.cbs == 0) break;
            const size_t first = batch.size();
            split_ = s.local.front().link ? &s : nullptr;  // the chain goes on past this CB
            Append(s, batch, records, budget.trace_ns);
            if (s.ring_stream >= 0) driver::PutInRingStream(batch[first], uint32_t(s.ring_stream), restart);
            restart = false;
            if (previous != SIZE_MAX) batch[previous].flags |= SPYRE_CB_F_LINK;
            previous = first;
            budget.slots -= batch.size() - first;
            --budget.cbs;
            ++taken;
        }
        if (budget.cbs == 0 || budget.slots == 0) break;
    }
    if (taken != 0) records.EndTurn();
    return taken;
}

}  // namespace spyre::detail
