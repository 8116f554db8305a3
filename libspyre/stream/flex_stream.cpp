// SPDX-License-Identifier: Apache-2.0
#include "spyre/stream/flex_stream.hpp"

#include <utility>

#include "deadline.hpp"
#include "device/device_core.hpp"
#include "device/device_internals.hpp"
#include "spyre/trace/trace.hpp"
#include "spyre/uapi/spyre_program.h"
#include "stream/control_blocks.hpp"
#include "stream/scheduler_core.hpp"
#include "moved_from.hpp"

namespace spyre {

using detail::OpKind;
using detail::QueuedOp;

const char* ToString(StreamStatus status) noexcept {
    switch (status) {
    case StreamStatus::Idle: return "idle";
    case StreamStatus::Busy: return "busy";
    case StreamStatus::Faulted: return "faulted";
    }
    return "?";
}

using detail::LiveState;

FlexStream::FlexStream(std::shared_ptr<DeviceCore> core, StreamState* state) : core_(std::move(core)), state_(state) {}

FlexStream::FlexStream(FlexStream&& other) noexcept
    : core_(std::move(other.core_)), state_(std::exchange(other.state_, nullptr)) {}

FlexStream& FlexStream::operator=(FlexStream&& other) noexcept {
    if (this != &other) {
        FlexStream dying(std::move(*this));
        core_ = std::move(other.core_);
        state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
}

FlexStream::~FlexStream() {
    if (!state_ || core_->ForkedAway()) return;  // the parent's stream: left as it is
    // Host buffers of queued copies belong to the caller: finish before the
    // stream goes, so nothing runs against memory the caller reclaims next.
    try {
        if (!core_->OnSchedulerThread()) core_->WaitUntil(state_->completed, state_->enqueued_count.load(), state_->done);
    } catch (const Error&) {
    }
    core_->RetireStream(state_);
}

// A moved-from stream reads as index -1 with nothing enqueued.
int FlexStream::stream_index() const noexcept { return state_ ? state_->index : -1; }
int FlexStream::priority() const noexcept { return state_ ? state_->priority : 0; }
uint64_t FlexStream::enqueued() const noexcept {
    return state_ ? state_->enqueued_count.load(std::memory_order_acquire) : 0;
}
uint64_t FlexStream::completed() const noexcept {
    if (!state_) return 0;
    core_->sched->Poke();  // work this thread submitted completes without a wait
    return state_->completed.load(std::memory_order_acquire);
}

void FlexStream::Enqueue(QueuedOp&& op) {
    StreamState& state = LiveState(state_, "FlexStream");
    core_->CheckSameProcess();
    core_->sched->Queue(state, std::span(&op, 1));
}

void FlexStream::EnqueueGroup(std::span<ControlBlock> group) {
    SPYRE_TRACE_SCOPE("FlexStream::EnqueueGroup");
    std::vector<QueuedOp> ops;
    ops.reserve(group.size());
    for (ControlBlock& cb : group) ops.push_back(QueuedOp::From(std::move(cb)));
    StreamState& state = LiveState(state_, "FlexStream::EnqueueGroup");
    core_->CheckSameProcess();
    core_->sched->Queue(state, ops);
}

void FlexStream::CopyToDevice(const void* host_address, const DeviceHandle& device_handle, uint64_t size) {
    SPYRE_TRACE_SCOPE("FlexStream::CopyToDevice");
    LiveState(state_, "FlexStream::CopyToDevice");
    if (!host_address)
        throw Error(ErrorKind::InvalidArgument, "CopyToDevice from a null host address",
                    ErrorContext{.stream = state_->index});
    Enqueue(QueuedOp::From(detail::CopyToDevice(*core_, host_address, device_handle, size)));
}

void FlexStream::CopyFromDevice(void* host_address, const DeviceHandle& device_handle, uint64_t size) {
    SPYRE_TRACE_SCOPE("FlexStream::CopyFromDevice");
    LiveState(state_, "FlexStream::CopyFromDevice");
    if (!host_address)
        throw Error(ErrorKind::InvalidArgument, "CopyFromDevice to a null host address",
                    ErrorContext{.stream = state_->index});
    Enqueue(QueuedOp::From(detail::CopyFromDevice(*core_, host_address, device_handle, size)));
}

void FlexStream::Launch(const DeviceHandle& device_handle) {
    SPYRE_TRACE_SCOPE("FlexStream::Launch");
    LiveState(state_, "FlexStream::Launch");
    Enqueue(QueuedOp::From(detail::Launch(*core_, device_handle, 0)));
}

void FlexStream::Launch(const DeviceHandle& device_handle, uint64_t program_size) {
    SPYRE_TRACE_SCOPE("FlexStream::Launch");
    LiveState(state_, "FlexStream::Launch");
    if (program_size < sizeof(spyre_program_header) || program_size > SPYRE_PROGRAM_MAX_SIZE)
        throw Error(ErrorKind::InvalidArgument,
                    "Launch of a " + std::to_string(program_size) + "-byte program: programs are " +
                        std::to_string(sizeof(spyre_program_header)) + " to " + std::to_string(SPYRE_PROGRAM_MAX_SIZE) +
                        " bytes",
                    ErrorContext{.stream = state_->index});
    Enqueue(QueuedOp::From(detail::Launch(*core_, device_handle, program_size)));
}

void FlexStream::AddCallback(std::function<void()> callback) {
    SPYRE_TRACE_SCOPE("FlexStream::AddCallback");
    LiveState(state_, "FlexStream::AddCallback");
    if (!callback)
        throw Error(ErrorKind::InvalidArgument, "AddCallback with an empty callback", ErrorContext{.stream = state_->index});
    QueuedOp op;
    op.kind = OpKind::HostCallback;
    op.callback = std::move(callback);
    Enqueue(std::move(op));
}

void FlexStream::Wait(const Event& event) {
    SPYRE_TRACE_SCOPE("FlexStream::Wait");
    LiveState(state_, "FlexStream::Wait");
    EventState& ev = LiveState(event.state_, "FlexStream::Wait: event");
    CheckSameDevice(ev.core->id(), core_->id(), "FlexStream::Wait: event", "stream");
    const uint64_t target = ev.recorded.load(std::memory_order_acquire);
    if (target == 0) return;  // never recorded: nothing to wait for (CUDA does the same)
    QueuedOp op;
    op.kind = OpKind::EventWait;
    op.value = target;
    op.event = event.state_;
    Enqueue(std::move(op));
}

void FlexStream::Synchronize() {
    SPYRE_TRACE_SCOPE("FlexStream::Synchronize");
    LiveState(state_, "FlexStream::Synchronize");
    core_->WaitUntil(state_->completed, state_->enqueued_count.load(std::memory_order_acquire), state_->done);
    if (!state_->faulted.load(std::memory_order_acquire)) return;  // set with the fault, under mu
    std::lock_guard lock(state_->mu);
    if (state_->fault) throw *state_->fault;
}

bool FlexStream::SynchronizeFor(std::chrono::nanoseconds timeout) {
    LiveState(state_, "FlexStream::SynchronizeFor");
    return core_->WaitUntil(state_->completed, state_->enqueued_count.load(std::memory_order_acquire), state_->done,
                            DeadlineAfter(timeout));
}

StreamStatus FlexStream::Query() const {
    LiveState(state_, "FlexStream::Query");
    core_->CheckSameProcess();  // the parent's state: in a child a busy stream read Busy for good
    core_->sched->Poke();
    if (state_->faulted.load(std::memory_order_acquire)) return StreamStatus::Faulted;
    return state_->completed.load(std::memory_order_acquire) >= state_->enqueued_count.load(std::memory_order_acquire)
               ? StreamStatus::Idle
               : StreamStatus::Busy;
}

std::optional<Error> FlexStream::LastError() const {
    StreamState& state = LiveState(state_, "FlexStream::LastError");
    core_->CheckSameProcess();  // a lock a parent's thread held at the fork stays held here
    std::lock_guard lock(state.mu);
    return state_->fault;
}

void FlexStream::Reset() {
    LiveState(state_, "FlexStream::Reset");
    core_->WaitUntil(state_->completed, state_->enqueued_count.load(std::memory_order_acquire), state_->done);
    std::lock_guard lock(state_->mu);
    state_->fault.reset();
    state_->faulted.store(false, std::memory_order_release);
}

// ---------------------------------------------------------------- Event

// Sequences start at 1: a fresh event (0) has seen no record.
Event::Event(Device& device) : state_(std::make_shared<EventState>()) { state_->core = DeviceInternals::Core(device); }

Event::Event(Event&&) noexcept = default;
Event& Event::operator=(Event&&) noexcept = default;
Event::~Event() = default;

void Event::Record(FlexStream& stream) {
    SPYRE_TRACE_SCOPE("Event::Record");
    LiveState(state_, "Event::Record");
    LiveState(stream.state_, "Event::Record: stream");
    CheckSameDevice(state_->core->id(), stream.core_->id(), "Event::Record: event", "stream");
    detail::RecordEvent(*state_, [&](uint64_t seq) {
        QueuedOp op;
        op.kind = OpKind::EventRecord;
        op.event = state_;
        op.value = seq;
        stream.Enqueue(std::move(op));
    });
}

const DeviceId& Event::device() const { return LiveState(state_, "Event::device").core->id(); }

bool Event::Query() const {
    const auto& core = LiveState(state_, "Event::Query").core;
    core->CheckSameProcess();  // in a forked child it read false for good
    core->sched->Poke();
    return state_->Reached(state_->recorded.load(std::memory_order_acquire));
}

namespace {
// Until the newest record at the call completes, or `until`; whether it
// did. Each completion of the event's records (in any order) wakes the wait
// to look again. WaitUntil runs at least once: a host callback is refused
// every time, not only when the record is still in flight.
bool WaitForNewestRecord(EventState& e, std::chrono::steady_clock::time_point until) {
    const uint64_t target = e.recorded.load(std::memory_order_acquire);
    for (;;) {
        const uint64_t seen = e.completions.load(std::memory_order_acquire);
        const bool reached = e.Reached(target);
        if (!e.core->WaitUntil(e.completions, reached ? 0 : seen + 1, e.done, until)) return false;
        if (reached) return true;
    }
}
}  // namespace

void Event::Synchronize() const {
    SPYRE_TRACE_SCOPE("Event::Synchronize");
    WaitForNewestRecord(LiveState(state_, "Event::Synchronize"), std::chrono::steady_clock::time_point::max());
    std::lock_guard lock(state_->mu);
    if (state_->error) throw *state_->error;
}

bool Event::SynchronizeFor(std::chrono::nanoseconds timeout) const {
    return WaitForNewestRecord(LiveState(state_, "Event::SynchronizeFor"), DeadlineAfter(timeout));
}

double Event::ElapsedTime(const Event& start, const Event& end) {
    // Two devices' clocks need not agree: their stamps do not subtract.
    CheckSameDevice(LiveState(start.state_, "Event::ElapsedTime: start").core->id(),
                    LiveState(end.state_, "Event::ElapsedTime: end").core->id(), "Event::ElapsedTime: start event",
                    "end event");
    for (const Event* e : {&start, &end}) {
        if (LiveState(e->state_, "Event::ElapsedTime").recorded.load() == 0)
            throw Error(ErrorKind::InvalidArgument, "ElapsedTime of an event that was never recorded");
        if (!e->Query()) throw Error(ErrorKind::NotReady, "ElapsedTime of an event that has not completed yet");
    }
    const double ns = double(int64_t(end.state_->timestamp_ns.load() - start.state_->timestamp_ns.load()));
    return ns / 1e6;
}

}  // namespace spyre
