// SPDX-License-Identifier: Apache-2.0
// DeviceBuffer: one device allocation with one owner. Move-only; the memory
// goes back when the buffer is destroyed or reset, after the work the
// device's streams have queued so far (as cudaFree does), so nothing queued
// can touch it once it is handed out again. The buffer keeps what frees it
// (the device's core) alive, and knows its device: code that mixes devices
// checks it with HandleOn and gets ErrorKind::WrongDevice.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "spyre/memory/allocator.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// Where a DeviceBuffer's memory comes from and goes back to. The device
// core implements it (its deferred free waits for queued work first).
class DeviceMemory {
public:
    virtual SpyreAllocator& buffer_allocator() noexcept = 0;
    virtual void FreeAfterQueuedWork(std::span<const DeviceAllocation> blocks) noexcept = 0;

protected:
    ~DeviceMemory() = default;
};

class DeviceBuffer {
public:
    DeviceBuffer() noexcept = default;  // empty: owns nothing
    // Allocates `size` bytes of `memory`; throws as SpyreAllocator::Allocate
    // does (InvalidArgument for 0, OutOfMemory).
    static DeviceBuffer Allocate(std::shared_ptr<DeviceMemory> memory, uint64_t size);

    ~DeviceBuffer() { reset(); }
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    explicit operator bool() const noexcept { return memory_ != nullptr; }
    // The allocation; InvalidArgument for an empty buffer.
    const DeviceAllocation& allocation() const;
    const DeviceHandle& handle() const { return allocation().handle; }
    uint64_t size() const noexcept { return memory_ ? allocation_.size : 0; }
    // The device the memory belongs to; InvalidArgument for an empty buffer.
    const DeviceId& device() const;
    // The handle, for use on `device`: Error(WrongDevice, "<what> belongs to
    // <its device>, <user> to <device>") when the buffer is on another one.
    const DeviceHandle& HandleOn(const DeviceId& device, const char* what, const char* user) const;

    // Frees now (after queued work); the buffer is empty afterwards.
    void reset() noexcept;

private:
    DeviceBuffer(std::shared_ptr<DeviceMemory> memory, DeviceAllocation allocation) noexcept
        : memory_(std::move(memory)), allocation_(allocation) {}

    std::shared_ptr<DeviceMemory> memory_;
    DeviceAllocation allocation_{PFDeviceHandle{}, 0};
};

}  // namespace spyre
SPYRE_API_END
