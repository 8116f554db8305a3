// SPDX-License-Identifier: Apache-2.0
//
// Bounds-checked access to one function's memory window. Every address a CB
// or a program names is function-relative, [0, size); executors reach device
// memory only through Span, so nothing a driver sends can touch bytes outside
// the submitting function's own memory.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace spyre::mockdev {

class DeviceMemory {
public:
    DeviceMemory(uint8_t* base, uint64_t size) : base_(base), size_(size) {}

    uint64_t size() const { return size_; }

    // The bytes [addr, addr + len) of the window, or nullopt if any of them
    // (or the sum itself) falls outside it. A zero-length span at addr <=
    // size is valid.
    std::optional<std::span<uint8_t>> Span(uint64_t addr, uint64_t len) const;

private:
    uint8_t* base_;
    uint64_t size_;
};

}  // namespace spyre::mockdev
