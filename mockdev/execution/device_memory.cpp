// SPDX-License-Identifier: Apache-2.0
#include "execution/device_memory.hpp"

namespace spyre::mockdev {

std::optional<std::span<uint8_t>> DeviceMemory::Span(uint64_t addr, uint64_t len) const {
    if (addr > size_ || len > size_ - addr) return std::nullopt;  // no overflow: addr <= size_
    return std::span<uint8_t>(base_ + addr, size_t(len));
}

}  // namespace spyre::mockdev
