// SPDX-License-Identifier: Apache-2.0
// DMAEngine (seed 000): asynchronous copies between host memory and device
// allocations, by DeviceHandle. Every copy is checked against its allocation
// (and so against the function's own memory) before anything is submitted;
// the driver's DmaQueue moves the bytes (io_uring, or the fallback).
#pragma once

#include <chrono>
#include <cstdint>

#include "spyre/common/progress.hpp"
#include "spyre/memory/allocator.hpp"
#include "spyre/driver/dma_queue.hpp"

namespace spyre {

using DmaTicket = driver::DmaQueue::Ticket;

class DMAEngine {
public:
    // Both must outlive the engine.
    DMAEngine(SpyreAllocator& allocator, driver::DmaQueue& queue) : allocator_(allocator), queue_(queue) {}

    // Each returns at once; Wait() says when the bytes are in place. Throws
    // InvalidArgument when a range is not inside one live allocation.
    DmaTicket CopyToDevice(const void* host, const DeviceHandle& device, uint64_t size);
    DmaTicket CopyFromDevice(void* host, const DeviceHandle& device, uint64_t size);
    DmaTicket CopyOnDevice(const DeviceHandle& src, const DeviceHandle& dst, uint64_t size);

    // Large copies with progress: the copy goes in chunks of `chunk` bytes
    // (all submitted at once, so they overlap as one copy would); these
    // wait for the last chunk, telling `progress` the bytes in place after
    // each, in order, and return the bytes moved. Same checks as above.
    static constexpr uint64_t kProgressChunk = 4ull << 20;
    uint64_t CopyToDevice(const void* host, const DeviceHandle& device, uint64_t size,
                          const ProgressCallback& progress, uint64_t chunk = kProgressChunk);
    uint64_t CopyFromDevice(void* host, const DeviceHandle& device, uint64_t size, const ProgressCallback& progress,
                            uint64_t chunk = kProgressChunk);

    // Bytes moved; throws spyre::Error if the copy failed.
    uint64_t Wait(DmaTicket ticket, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
        return queue_.Wait(ticket, timeout).bytes;
    }

    driver::DmaBackend backend() const noexcept { return queue_.backend(); }

private:
    template <typename Submit>
    uint64_t Chunked(const char* what, uint64_t size, const ProgressCallback& progress, uint64_t chunk, Submit submit);

    SpyreAllocator& allocator_;
    driver::DmaQueue& queue_;
};

}  // namespace spyre
