// SPDX-License-Identifier: Apache-2.0
#include "spyre/memory/dma_engine.hpp"

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

}  // namespace spyre
