// SPDX-License-Identifier: Apache-2.0
// The Scheduler's public face: a caller's control blocks are checked and
// become QueuedOps, then take the one way in (SchedulerCore::Queue).
#include <vector>

#include "stream/scheduler_core.hpp"

namespace spyre {

const char* ToString(SchedulerPolicy policy) noexcept {
    switch (policy) {
    case SchedulerPolicy::RoundRobin: return "round-robin";
    case SchedulerPolicy::Priority: return "priority";
    case SchedulerPolicy::DrainOneFirst: return "drain-one-first";
    }
    return "?";
}

const char* ToString(ControlBlock::Kind kind) noexcept { return detail::ToString(detail::OpKind(uint8_t(kind))); }

const char* detail::ToString(OpKind kind) noexcept {
    switch (kind) {
    case OpKind::Launch: return "Launch";
    case OpKind::CopyToDevice: return "CopyToDevice";
    case OpKind::CopyFromDevice: return "CopyFromDevice";
    case OpKind::SemWrite: return "SemWrite";
    case OpKind::SemWait: return "SemWait";
    case OpKind::HostCallback: return "HostCallback";
    case OpKind::EventRecord: return "EventRecord";
    case OpKind::EventWait: return "EventWait";
    }
    return "?";
}

namespace {

// A control block from outside the library is checked like FlexStream's
// arguments: a null buffer or missing callback would crash the scheduler
// thread, not fail one stream. (Device addresses are checked by the DMA
// engine and the device, and fail the stream.)
void Check(int stream_index, const ControlBlock& cb, uint64_t memory_size) {
    auto bad = [&](const std::string& what) {
        return Error(ErrorKind::InvalidArgument, std::string("QueueOperation: ") + ToString(cb.kind) + " " + what,
                     ErrorContext{.stream = stream_index});
    };
    switch (cb.kind) {
    case ControlBlock::Kind::CopyToDevice:
    case ControlBlock::Kind::CopyFromDevice:
        if (cb.size == 0) throw bad("of 0 bytes");
        if (cb.kind == ControlBlock::Kind::CopyToDevice ? !cb.src : !cb.dst) throw bad("with a null host address");
        // A range past the function's memory (or one that wraps) failed
        // later, as the stream's sticky error: refused here instead.
        if (cb.size > memory_size || cb.device_addr > memory_size - cb.size)
            throw bad("of " + std::to_string(cb.size) + " bytes at device address " + std::to_string(cb.device_addr) +
                      " runs past the function's memory (" + std::to_string(memory_size) + " bytes)");
        {
            const auto host = reinterpret_cast<uintptr_t>(cb.kind == ControlBlock::Kind::CopyToDevice ? cb.src : cb.dst);
            if (host + cb.size < host) throw bad("of " + std::to_string(cb.size) + " bytes wraps the host address space");
        }
        break;
    case ControlBlock::Kind::HostCallback:
        if (!cb.callback) throw bad("without a callback");
        break;
    case ControlBlock::Kind::Launch:
    case ControlBlock::Kind::SemWrite:
    case ControlBlock::Kind::SemWait: break;
    default: throw Error(ErrorKind::InvalidArgument, "QueueOperation: a control block of an unknown kind (" +
                                                         std::to_string(int(cb.kind)) + ")",
                         ErrorContext{.stream = stream_index});
    }
}

}  // namespace

void Scheduler::QueueOperation(int stream_index, ControlBlock cb) { QueueOperations(stream_index, std::span(&cb, 1)); }

void Scheduler::QueueOperations(int stream_index, std::span<ControlBlock> group) {
    std::shared_ptr<StreamState> s = core_->Find(stream_index);
    if (!s)
        throw Error(ErrorKind::InvalidArgument, "no stream with index " + std::to_string(stream_index),
                    ErrorContext{.stream = stream_index});
    for (const ControlBlock& cb : group) Check(stream_index, cb, core_->memory_size());
    std::vector<detail::QueuedOp> ops;
    ops.reserve(group.size());
    for (ControlBlock& cb : group) ops.push_back(detail::QueuedOp::From(std::move(cb)));
    core_->Queue(*s, ops);
}

const SchedulerOptions& Scheduler::options() const noexcept { return core_->options(); }

SchedulerStats Scheduler::Stats() const { return core_->Stats(); }

}  // namespace spyre
