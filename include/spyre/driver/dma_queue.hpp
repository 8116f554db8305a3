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

namespace spyre::driver {

// IoUring: every chunk is an io_uring request. Engines: every chunk is a
// memcpy by a copy engine; also what runs where io_uring is unavailable.
enum class DmaBackend { IoUring, Engines, Fallback = Engines };
// The default path, chosen by measurement (docs/dma.md): the copy engines,
// since the kernel's tmpfs copy runs at about half a memcpy here.
inline constexpr DmaBackend kDefaultDmaBackend = DmaBackend::Engines;
const char* ToString(DmaBackend backend) noexcept;

struct DmaOptions {
    // The path for chunks; nullopt = kDefaultDmaBackend. The environment
    // variable SPYRE_DMA=io_uring|engines|fallback overrides it.
    std::optional<DmaBackend> backend;
    // Where io_uring is asked for but its set-up fails (seccomp, old
    // kernels): false = run on the copy engines (backend() and
    // backend_reason() say so), true = throw Unsupported.
    bool require_io_uring = false;
    uint64_t chunk_bytes = 4ull << 20;     // size of the chunks of a large copy
    unsigned queue_depth = 16;             // io_uring submission queue entries per ring
    uint64_t inline_threshold = 1ull << 20; // copies up to this size use the fast path
    // Called once each time a copy (ticket) completes, successfully or not,
    // after its completion is visible to Poll and Wait: on a worker or
    // completion thread of the queue, in a thread waiting in Wait (which
    // copies its ticket's chunks that no worker has started), or in the calling thread before
    // HostToDevice/DeviceToHost/DeviceToDevice returns for a copy done there
    // (so possibly before the caller has the ticket). Meant for waking a
    // thread; it must be thread-safe, must not throw, and must stay callable
    // until the queue is destroyed. It may call Poll.
    std::function<void()> on_complete;
};

struct DmaCompletion {
    uint64_t bytes = 0;  // bytes moved
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

    class Backend;  // in dma_queue.cpp

private:
    std::unique_ptr<Backend> backend_;
};

}  // namespace spyre::driver
