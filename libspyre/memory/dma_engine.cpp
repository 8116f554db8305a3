// SPDX-License-Identifier: Apache-2.0
#include "spyre/memory/dma_engine.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "spyre/error.hpp"

namespace spyre {

DmaTicket DMAEngine::CopyToDevice(const void* host, const DeviceHandle& device, uint64_t size) {
    return queue_.HostToDevice(host, allocator_.DeviceAddress(device, size), size);
}

DmaTicket DMAEngine::CopyFromDevice(void* host, const DeviceHandle& device, uint64_t size) {
    return queue_.DeviceToHost(host, allocator_.DeviceAddress(device, size), size);
}

DmaTicket DMAEngine::CopyOnDevice(const DeviceHandle& src, const DeviceHandle& dst, uint64_t size) {
    return queue_.DeviceToDevice(allocator_.DeviceAddress(src, size), allocator_.DeviceAddress(dst, size), size);
}

template <typename Submit>
uint64_t DMAEngine::Chunked(const char* what, uint64_t size, const ProgressCallback& progress, uint64_t chunk,
                            Submit submit) {
    if (chunk == 0) throw Error(ErrorKind::InvalidArgument, std::string(what) + ": a chunk of 0 bytes");
    std::vector<std::pair<DmaTicket, uint64_t>> tickets;  // ticket, bytes done when it completes
    // On a failure, the chunks still queued touch the caller's memory: let them end first.
    auto drain = [&](size_t from) {
        for (size_t j = from; j < tickets.size(); ++j) {
            try {
                Wait(tickets[j].first);
            } catch (const Error&) {
            }
        }
    };
    try {
        for (uint64_t off = 0; off < size; off += chunk) {
            const uint64_t n = std::min(chunk, size - off);
            tickets.emplace_back(submit(off, n), off + n);
        }
    } catch (...) {
        drain(0);
        throw;
    }
    uint64_t moved = 0;
    for (size_t i = 0; i < tickets.size(); ++i) {
        try {
            moved += Wait(tickets[i].first);
        } catch (...) {
            drain(i + 1);
            throw;
        }
        if (progress) progress({what, tickets[i].second, size, "bytes"});
    }
    if (size == 0 && progress) progress({what, 0, 0, "bytes"});
    return moved;
}

uint64_t DMAEngine::CopyToDevice(const void* host, const DeviceHandle& device, uint64_t size,
                                 const ProgressCallback& progress, uint64_t chunk) {
    const uint64_t base = allocator_.DeviceAddress(device, size);  // the whole range is checked first
    const auto* src = static_cast<const uint8_t*>(host);
    return Chunked("copy to device", size, progress, chunk,
                   [&](uint64_t off, uint64_t n) { return queue_.HostToDevice(src + off, base + off, n); });
}

uint64_t DMAEngine::CopyFromDevice(void* host, const DeviceHandle& device, uint64_t size,
                                   const ProgressCallback& progress, uint64_t chunk) {
    const uint64_t base = allocator_.DeviceAddress(device, size);
    auto* dst = static_cast<uint8_t*>(host);
    return Chunked("copy from device", size, progress, chunk,
                   [&](uint64_t off, uint64_t n) { return queue_.DeviceToHost(dst + off, base + off, n); });
}

}  // namespace spyre
