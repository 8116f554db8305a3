// SPDX-License-Identifier: Apache-2.0
// FlexStream (seed 001): an asynchronous, ordered queue of primitive device
// work, modelled on CUDA streams. Every enqueue validates its arguments,
// returns at once and runs after everything enqueued before it on the same
// stream; streams are not ordered against each other unless an Event says so.
//
// Host buffers passed to CopyToDevice/CopyFromDevice must stay valid (and,
// for CopyToDevice, unchanged) until the copy has completed: Synchronize, an
// Event, or a host callback tells when.
//
// Errors are sticky: when an operation fails, the stream drops the work
// queued behind it, Synchronize/Query report the failure (stream index, op
// index, device error code), and further enqueues throw it, until Reset().
// Other streams are not affected.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "spyre/memory/device_handle.hpp"
#include "spyre/error.hpp"
#include "spyre/stream/scheduler.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

class Device;
class SPYRE_INTERNAL DeviceCore;
class SPYRE_INTERNAL DeviceInternals;
class FlexStream;
struct SPYRE_INTERNAL EventState;
struct SPYRE_INTERNAL StreamState;
namespace detail {
struct SPYRE_INTERNAL QueuedOp;
}

// What Query() reports.
enum class StreamStatus {
    Idle,     // everything enqueued has completed
    Busy,     // work is queued or running
    Faulted,  // an operation failed; Synchronize() throws it
};
const char* ToString(StreamStatus status) noexcept;

struct StreamOptions {
    int priority = kStreamPriorityDefault;  // see scheduler.hpp
};

// A marker in a stream (CUDA-style). Record() places it; Wait() makes
// another stream's later work wait for it. The scheduler settles both on the
// host once the work before them is done (never queued in the ring behind
// other streams' work); the timestamp is the device clock when the record's
// stream was seen done (docs/streams.md, Events).
class Event {
public:
    explicit Event(Device& device);
    Event(Event&&) noexcept;
    Event& operator=(Event&&) noexcept;
    ~Event();

    // Enqueues the marker on `stream`; re-recording moves it.
    void Record(FlexStream& stream);
    // True once the last Record has completed (or there was none).
    bool Query() const;
    // Blocks until the last Record has completed. Throws the recording
    // stream's error if the work before the marker failed.
    void Synchronize() const;
    // Waits at most `timeout` for the same; whether it has completed.
    // Reports nothing: a Synchronize after it returns at once and throws
    // what it would have. For a caller that waits in slices (Python's
    // synchronize looks for Ctrl-C between them).
    bool SynchronizeFor(std::chrono::nanoseconds timeout) const;
    // The device whose streams may record and wait for it.
    const DeviceId& device() const;
    // Milliseconds between two completed events, from device timestamps.
    // Throws InvalidArgument if either was never recorded, NotReady if
    // either has not completed.
    static double ElapsedTime(const Event& start, const Event& end);

private:
    friend class FlexStream;
    std::shared_ptr<EventState> state_;
};

class FlexStream {
public:
    FlexStream(FlexStream&&) noexcept;
    FlexStream& operator=(FlexStream&&) noexcept;
    // Waits for the stream's work (errors are dropped: call Synchronize
    // first to see them), then retires the stream index.
    ~FlexStream();

    int stream_index() const noexcept;
    int priority() const noexcept;

    void CopyToDevice(const void* host_address, const DeviceHandle& device_handle, uint64_t size);
    void CopyFromDevice(void* host_address, const DeviceHandle& device_handle, uint64_t size);
    // Runs the program at `device_handle`; its size comes from its header.
    // The bytes run as the device finds them: operands must hold their
    // tensors' addresses (BuiltKernel::Bind); one left at 0 (unbound) runs
    // at device address 0 (docs/execution_plan.md).
    void Launch(const DeviceHandle& device_handle);
    // Same, with the program's byte size given (the device checks it).
    void Launch(const DeviceHandle& device_handle, uint64_t program_size);
    // Runs `callback` on the scheduler thread after all prior work of this
    // stream, before any later work. It must not block on this device's
    // streams (Synchronize inside it throws). An exception from it becomes
    // the stream's sticky error.
    void AddCallback(std::function<void()> callback);
    // Later work on this stream waits (on the device) for `event`'s last Record.
    void Wait(const Event& event);

    // Blocks until everything enqueued so far has completed; throws the
    // sticky error if an operation failed.
    void Synchronize();
    // Waits at most `timeout` for the same; whether it has completed.
    // Reports nothing, as Event::SynchronizeFor.
    bool SynchronizeFor(std::chrono::nanoseconds timeout);
    StreamStatus Query() const;
    // The sticky error, if any.
    std::optional<Error> LastError() const;
    // Clears a fault so the stream can be used again. Waits for work still
    // in flight first. A no-op on a healthy stream.
    void Reset();

    // Operations enqueued / completed (including dropped ones) so far.
    uint64_t enqueued() const noexcept;
    uint64_t completed() const noexcept;

    // Enqueues a group of control blocks at once (Scheduler::QueueOperations
    // on this stream); the scheduler never splits a group between turns and
    // LINKs its ring CBs, so a failure cancels the rest of the group on the
    // device. SpyreStream uses this for the steps of one Operation.
    void EnqueueGroup(std::span<ControlBlock> group);
private:
    friend class DeviceInternals;  // libspyre's own layers reach the device through it
    friend class Device;
    friend class Event;
    FlexStream(std::shared_ptr<DeviceCore> core, StreamState* state);

    void Enqueue(detail::QueuedOp&& op);

    std::shared_ptr<DeviceCore> core_;
    StreamState* state_ = nullptr;
};

}  // namespace spyre
SPYRE_API_END
