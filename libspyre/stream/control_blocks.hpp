// SPDX-License-Identifier: Apache-2.0
// Internal: control blocks the runtime builds itself (tensors, SpyreStream,
// plan loading), with device addresses resolved and checked up front.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device/device_core.hpp"
#include "device/device_internals.hpp"
#include "spyre/error.hpp"
#include "spyre/stream/flex_stream.hpp"
#include "spyre/uapi/spyre_program.h"
#include "stream/scheduler_core.hpp"

namespace spyre::detail {

// The function-relative address of [handle, handle + size), checked against
// the stream's device and the allocation it lies in (one the copy may
// write, for `write`).
inline uint64_t Address(DeviceCore& core, const DeviceHandle& handle, uint64_t size, const char* what,
                        bool write = false) {
    CheckSameDevice(handle.device(), core.id(), [&] { return std::string(what) + ": handle " + handle.ToString(); },
                    "stream");
    if (size == 0) throw Error(ErrorKind::InvalidArgument, std::string(what) + " of 0 bytes");
    return write ? core.AddressToWrite(handle, size) : core.allocator->DeviceAddress(handle, size);
}

// A copy of bytes the control block owns (so the caller's buffer may go at once).
inline ControlBlock OwnedCopyToDevice(DeviceCore& core, const DeviceHandle& dst, std::vector<uint8_t> bytes) {
    auto owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
    ControlBlock cb;
    cb.kind = ControlBlock::Kind::CopyToDevice;
    cb.size = owned->size();
    cb.device_addr = Address(core, dst, cb.size, "CopyToDevice", true);
    cb.src = owned->data();
    cb.keep_alive = std::move(owned);
    return cb;
}

inline ControlBlock CopyToDevice(DeviceCore& core, const void* src, const DeviceHandle& dst, uint64_t size) {
    ControlBlock cb;
    cb.kind = ControlBlock::Kind::CopyToDevice;
    cb.size = size;
    cb.device_addr = Address(core, dst, size, "CopyToDevice", true);
    cb.src = src;
    return cb;
}

inline ControlBlock CopyFromDevice(DeviceCore& core, void* dst, const DeviceHandle& src, uint64_t size) {
    ControlBlock cb;
    cb.kind = ControlBlock::Kind::CopyFromDevice;
    cb.size = size;
    cb.device_addr = Address(core, src, size, "CopyFromDevice");
    cb.dst = dst;
    return cb;
}

// `size` 0: the device takes the size from the program header, which must
// then lie inside the allocation.
inline ControlBlock Launch(DeviceCore& core, const DeviceHandle& program, uint64_t size) {
    ControlBlock cb;
    cb.kind = ControlBlock::Kind::Launch;
    cb.size = size;
    cb.device_addr = Address(core, program, size ? size : sizeof(spyre_program_header), "Launch");
    return cb;
}

inline ControlBlock Callback(std::function<void()> fn) {
    ControlBlock cb;
    cb.kind = ControlBlock::Kind::HostCallback;
    cb.callback = std::move(fn);
    return cb;
}

// Runs `cleanup` on the scheduler thread after all work queued on `stream`
// so far, even if the stream faults (it frees what that work used).
inline void QueueCleanup(FlexStream& stream, std::function<void()> cleanup) {
    std::shared_ptr<StreamState> s = DeviceInternals::Core(stream)->sched->Find(stream.stream_index());
    if (!s) throw Error(ErrorKind::InvalidArgument, "cleanup on a retired stream");
    QueuedOp op;
    op.kind = OpKind::HostCallback;
    op.always = true;
    op.callback = std::move(cleanup);
    DeviceInternals::Core(stream)->sched->Queue(*s, std::span(&op, 1));
}

}  // namespace spyre::detail
