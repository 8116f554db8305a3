// SPDX-License-Identifier: Apache-2.0
#include "spyre/memory/device_buffer.hpp"

#include <utility>

#include "spyre/error.hpp"

namespace spyre {

DeviceBuffer DeviceBuffer::Allocate(std::shared_ptr<DeviceMemory> memory, uint64_t size) {
    if (!memory) throw Error(ErrorKind::InvalidArgument, "DeviceBuffer::Allocate without a device");
    const DeviceAllocation a = memory->buffer_allocator().AllocateOwned(size);
    return DeviceBuffer(std::move(memory), a);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : memory_(std::move(other.memory_)), allocation_(other.allocation_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        reset();
        memory_ = std::move(other.memory_);
        allocation_ = other.allocation_;
    }
    return *this;
}

const DeviceAllocation& DeviceBuffer::allocation() const {
    if (!memory_) throw Error(ErrorKind::InvalidArgument, "an empty DeviceBuffer has no allocation");
    return allocation_;
}

const DeviceId& DeviceBuffer::device() const {
    if (!memory_) throw Error(ErrorKind::InvalidArgument, "an empty DeviceBuffer has no device");
    return memory_->buffer_allocator().device();
}

const DeviceHandle& DeviceBuffer::HandleOn(const DeviceId& device, const char* what, const char* user) const {
    CheckSameDevice(std::optional<DeviceId>(this->device()), device, what, user);
    return allocation_.handle;
}

void DeviceBuffer::reset() noexcept {
    if (!memory_) return;
    memory_->FreeAfterQueuedWork({&allocation_, 1});
    memory_.reset();
}

}  // namespace spyre
