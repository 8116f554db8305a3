// SPDX-License-Identifier: Apache-2.0
// Asynchronous copies between host memory and a function's device memory.
//
// The function's memory is a shared-memory object (region DEVMEM) that this
// process maps (a process reaches only its own function's memory, which it
// maps anyway). Large copies are cut into chunks that copy engines (one
// thread per core) move while the caller goes on. Two paths move a chunk:
// the copy engines' memcpy through the mapping, or an io_uring read/write
// against the object from the engine's own ring. Small copies take a fast
// path: a memcpy through the mapping, done before the call returns.
// docs/dma.md explains the choices and the measurements.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "spyre/driver/function.hpp"
#include "spyre/driver_options.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::driver {

struct DmaCompletion {
    uint64_t bytes = 0;  // bytes moved
    // On the device clock (DeviceClockNs): when the first chunk began
    // moving and the last one ended (a trace draws the copy there, not
    // from its submission to the poll that saw it end).
    uint64_t start_ns = 0;
    uint64_t end_ns = 0;
};

class DmaQueue {
public:
    using Ticket = uint64_t;

    // Maps the function's device memory and sets up the backend.
    explicit DmaQueue(Function& function, DmaOptions options = {});
    ~DmaQueue();  // waits for copies in flight
    DmaQueue(const DmaQueue&) = delete;
    DmaQueue& operator=(const DmaQueue&) = delete;

    DmaBackend backend() const noexcept;
    // Why this backend was chosen ("default", "requested", "SPYRE_DMA=engines",
    // "io_uring unavailable (io_uring_queue_init: ...)").
    const std::string& backend_reason() const noexcept;
    uint64_t memory_size() const noexcept;

    // Each call checks [device_addr, device_addr + size) against the
    // function's memory before anything is submitted (InvalidArgument, with
    // the address), then returns at once. Host buffers must stay valid until
    // the ticket completes. Thread-safe.
    //
    // A dead device fails the copy with DeviceLost: its shared memory
    // outlives the daemon, so nothing else would notice. Copies on the
    // engine check the daemon (Function::Alive, one pidfd poll) when
    // submitted and when their last chunk finishes (a device never comes
    // back, so a chunk finished on a dead device is caught then); fast-path copies use
    // Function::CheckAliveThrottled (a memory load, the daemon polled at most
    // once per millisecond).
    Ticket HostToDevice(const void* host, uint64_t device_addr, uint64_t size);
    Ticket DeviceToHost(void* host, uint64_t device_addr, uint64_t size);
    Ticket DeviceToDevice(uint64_t src_addr, uint64_t dst_addr, uint64_t size);

    // Blocks until the copy is complete and its data in place. Throws IoError
    // (with errno) if a chunk failed, Timeout, DeviceLost (the device was
    // gone when a chunk finished).
    DmaCompletion Wait(Ticket ticket, std::chrono::milliseconds timeout = std::chrono::seconds(60));
    // The completion if the copy is done (forgetting the ticket), else nullopt.
    std::optional<DmaCompletion> Poll(Ticket ticket);
    // Blocks until every copy submitted before the call has finished moving
    // its bytes, leaving each ticket for its Wait or Poll (which report its
    // outcome). Memory about to be freed waits so: no copy submitted into
    // it earlier writes it once it is handed out again.
    void WaitForCopiesSubmitted();

    class SPYRE_INTERNAL Backend;  // in dma_queue.cpp

private:
    std::unique_ptr<Backend> backend_;
};

}  // namespace spyre::driver
SPYRE_API_END
