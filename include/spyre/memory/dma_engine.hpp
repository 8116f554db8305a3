// SPDX-License-Identifier: Apache-2.0
// DMAEngine (seed 000): asynchronous copies between host memory and device
// allocations, by DeviceHandle. Every copy is checked against its allocation
// (and so against the function's own memory) before anything is submitted;
// the driver's DmaQueue moves the bytes (io_uring, or the fallback).
#pragma once

#include <chrono>
#include <cstdint>

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

    // Bytes moved; throws spyre::Error if the copy failed.
    uint64_t Wait(DmaTicket ticket, std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
        return queue_.Wait(ticket, timeout).bytes;
    }

    driver::DmaBackend backend() const noexcept { return queue_.backend(); }

private:
    SpyreAllocator& allocator_;
    driver::DmaQueue& queue_;
};

}  // namespace spyre
