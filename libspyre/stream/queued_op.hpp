// SPDX-License-Identifier: Apache-2.0
// Internal: one unit of stream work as the scheduler holds it. The public
// ControlBlock (scheduler.hpp) is what callers may build; a QueuedOp adds
// what only the runtime sets: event records and waits, chain links, cleanup
// callbacks that run on a faulted stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "spyre/stream/flex_stream.hpp"  // declares QueuedOp first, internal (SPYRE_INTERNAL)
#include "spyre/stream/scheduler.hpp"

namespace spyre {
struct EventState;
}

namespace spyre::detail {

// A caller's kinds (ControlBlock::Kind, described there) keep their values,
// so QueuedOp::From converts by value; the runtime adds the event kinds.
enum class OpKind : uint8_t {
    Launch = uint8_t(ControlBlock::Kind::Launch),
    CopyToDevice = uint8_t(ControlBlock::Kind::CopyToDevice),
    CopyFromDevice = uint8_t(ControlBlock::Kind::CopyFromDevice),
    SemWrite = uint8_t(ControlBlock::Kind::SemWrite),
    SemWait = uint8_t(ControlBlock::Kind::SemWait),
    HostCallback = uint8_t(ControlBlock::Kind::HostCallback),
    EventRecord,     // an event reaches its sequence number (settled on the host)
    EventWait,       // until an event reaches a sequence number (on the host, or a NOP in a turn)
};
const char* ToString(OpKind kind) noexcept;

// What a trace needs of an op (zero when no trace records).
struct OpTrace {
    uint64_t enqueue_ns = 0;  // when it was queued
    uint32_t flow = 0;        // the arrow from the enqueuing call to the op
};

struct QueuedOp {
    OpKind kind = OpKind::Launch;
    bool link = false;            // the next op of the stream depends on this one
    bool always = false;          // HostCallback: runs even on a faulted stream (cleanup)
    uint32_t trace_flow = 0;      // while a trace records: OpTrace::flow (here, it fills padding)
    uint64_t device_addr = 0;     // function-relative: program, copy target/source, semaphore
    uint64_t size = 0;            // Launch: program bytes (0: from its header); copies: bytes
    const void* src = nullptr;    // CopyToDevice source
    void* dst = nullptr;          // CopyFromDevice destination
    uint64_t value = 0;           // SemWrite/SemWait value; EventRecord/EventWait sequence
    std::shared_ptr<const void> keep_alive;  // owns src or dst when the runtime made it
    std::shared_ptr<EventState> event;
    std::function<void()> callback;
    uint64_t trace_enqueue_ns = 0;  // while a trace records: OpTrace::enqueue_ns (0 otherwise)

    OpTrace trace() const noexcept { return {trace_enqueue_ns, trace_flow}; }

    // A caller's control block (its kinds are a subset of OpKind's).
    static QueuedOp From(ControlBlock&& cb) {
        QueuedOp op;
        op.kind = OpKind(uint8_t(cb.kind));
        op.device_addr = cb.device_addr;
        op.size = cb.size;
        op.src = cb.src;
        op.dst = cb.dst;
        op.value = cb.value;
        op.keep_alive = std::move(cb.keep_alive);
        op.callback = std::move(cb.callback);
        return op;
    }
};

// An OpQueue slot is its sequence word plus an op: two cache lines while an
// op stays within 120 bytes. A third line costs every enqueue (measured: the
// draining enqueue went from 74 to 104 ns when 16 bytes of trace state grew
// the op to 128).
static_assert(sizeof(QueuedOp) <= 120, "QueuedOp outgrew two cache lines per OpQueue slot");

}  // namespace spyre::detail
