// SPDX-License-Identifier: Apache-2.0
// DMAEngine (seed 000): the one way bytes move between host memory and a
// device's allocations. Every copy is checked against its allocation (and
// so against the function's own memory) before anything is submitted, is
// counted, and shows as a span on the device's DMA track while a trace
// records; the driver's DmaQueue moves the bytes (its copy engines, or
// io_uring). Streams, the orchestration runtime and the host level all
// copy through it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "spyre/common/progress.hpp"
#include "spyre/memory/allocator.hpp"
#include "spyre/driver_options.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

namespace driver {
class DmaQueue;
struct DmaCompletion;
}

// A copy in flight (driver::DmaQueue::Ticket).
using DmaTicket = uint64_t;

// What an engine has moved since it was made: copies submitted and their
// bytes by direction, and copies that failed.
struct DmaStats {
    uint64_t to_device_copies = 0, to_device_bytes = 0;
    uint64_t from_device_copies = 0, from_device_bytes = 0;
    uint64_t on_device_copies = 0, on_device_bytes = 0;
    uint64_t failed = 0;
};

class DMAEngine {
public:
    // Both must outlive the engine; `device` names its DMA track ("0000:3b:00.0").
    DMAEngine(SpyreAllocator& allocator, driver::DmaQueue& queue, std::string device = {})
        : allocator_(allocator), queue_(queue), device_(std::move(device)) {}

    // Each returns at once; Wait() or Poll() says when the bytes are in
    // place. Throws InvalidArgument when a range is not inside one live
    // allocation.
    DmaTicket CopyToDevice(const void* host, const DeviceHandle& device, uint64_t size);
    DmaTicket CopyFromDevice(void* host, const DeviceHandle& device, uint64_t size);
    DmaTicket CopyOnDevice(const DeviceHandle& src, const DeviceHandle& dst, uint64_t size);

    // The same at a function-relative address this engine's allocator
    // returned for a checked range (SpyreAllocator::DeviceAddress): how a
    // stream's queued copy, checked when it was enqueued, starts later.
    // Not checked against an allocation here: only against the function's
    // memory (any byte of the caller's own function, nothing outside it).
    DmaTicket CopyToDeviceAt(const void* host, uint64_t device_address, uint64_t size);
    DmaTicket CopyFromDeviceAt(void* host, uint64_t device_address, uint64_t size);

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
    uint64_t Wait(DmaTicket ticket, std::chrono::milliseconds timeout = std::chrono::seconds(60));
    // Bytes moved if the copy is done (the ticket is then spent), else
    // nullopt; throws spyre::Error if it failed.
    std::optional<uint64_t> Poll(DmaTicket ticket);

    // A small host-to-device copy a stream's ring carried inside its control
    // blocks (in order with the stream's launches), checked when it was
    // enqueued: counted here like every other copy and, when `start_ns` is
    // set (a trace recorded when it went into the ring), drawn on the DMA
    // track from `start_ns` to `end_ns` (where the device ran its control
    // block, as the device ring's track draws it). Called when the ring
    // retires it.
    void CountRingCopy(uint64_t size, bool failed, uint64_t start_ns, uint64_t end_ns) noexcept;

    DmaStats Stats() const noexcept;
    driver::DmaBackend backend() const noexcept;

private:
    enum class Direction : uint8_t { ToDevice, FromDevice, OnDevice };
    template <typename Submit>
    uint64_t Chunked(const char* what, uint64_t size, const ProgressCallback& progress, uint64_t chunk, Submit submit);
    void Count(Direction direction, uint64_t size) noexcept;  // one copy of `size` bytes
    // Counts a submitted copy and, while a trace records, notes its start.
    DmaTicket Started(DmaTicket ticket, Direction direction, uint64_t size);
    // Ends a copy's span (when it has one), drawn where `done` says the
    // queue moved the bytes (else from its start to now); counts it when
    // it failed.
    void Finished(DmaTicket ticket, bool failed, const driver::DmaCompletion* done = nullptr) noexcept;
    // traced_mu_ held; `end_ns` 0: now.
    void TraceSpan(Direction direction, uint64_t bytes, uint64_t start_ns, uint64_t end_ns = 0) noexcept;

    SpyreAllocator& allocator_;
    driver::DmaQueue& queue_;
    const std::string device_;

    struct Counter {
        std::atomic<uint64_t> copies{0}, bytes{0};
    };
    Counter to_device_, from_device_, on_device_;
    std::atomic<uint64_t> failed_{0};

    // Copies in flight that started while a trace recorded.
    struct Traced {
        Direction direction;
        uint64_t bytes;
        uint64_t start_ns;
    };
    std::mutex traced_mu_;
    std::unordered_map<DmaTicket, Traced> traced_;
    std::atomic<bool> any_traced_{false};
    // The DMA track's lanes (traced_mu_): copies that overlap in time
    // (several streams or threads) go on further lanes, so each lane's
    // spans follow one another as a trace viewer's tracks need.
    struct Lane {
        uint32_t track;
        uint64_t last_end_ns;
    };
    std::vector<Lane> lanes_;
    uint64_t lanes_recording_ = 0;
};

}  // namespace spyre
SPYRE_API_END
