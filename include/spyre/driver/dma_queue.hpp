// SPDX-License-Identifier: Apache-2.0
// Asynchronous copies between host memory and a function's device memory.
//
// The function's memory is a shared-memory object (region DEVMEM) that this
// process maps (a process reaches only its own function's memory, which it
// maps anyway). Large copies are cut into chunks and copied through the
// mapping by copy engines (one thread per core) while the caller goes on;
// on the io_uring backend some device-to-host chunks can be io_uring reads
// against the object instead (DmaOptions::uring_read_every; off by default,
// slower here). Small copies take a fast path: a memcpy through the mapping,
// done before the call returns. Where io_uring is unavailable (seccomp, old
// kernels) the fallback backend runs: same API, chosen automatically.
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

enum class DmaBackend { IoUring, Fallback };
const char* ToString(DmaBackend backend) noexcept;

struct DmaOptions {
    // Force a backend; otherwise io_uring when it works. The environment
    // variable SPYRE_DMA=io_uring|fallback forces one too.
    std::optional<DmaBackend> backend;
    uint64_t chunk_bytes = 4ull << 20;     // io_uring request size for large copies
    unsigned queue_depth = 16;             // io_uring requests in flight at most
    uint64_t inline_threshold = 1ull << 20; // copies up to this size use the fast path
    // io_uring backend: every Nth chunk of a device-to-host copy is an
    // io_uring read (1 = all, 2 = every other one), the rest go to the copy
    // engines; 0 = none. Measured best here: 0 (docs/dma.md); the reads stay
    // for hosts where the kernel's copy out of shmem beats a memcpy.
    unsigned uring_read_every = 0;
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
    // Why this backend was chosen ("io_uring", "SPYRE_DMA=fallback", "io_uring_queue_init: ...").
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

    class Backend;  // io_uring or fallback, in dma_queue.cpp

private:
    std::unique_ptr<Backend> backend_;
};

}  // namespace spyre::driver
