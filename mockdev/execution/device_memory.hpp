// SPDX-License-Identifier: Apache-2.0
//
// Bounds-checked access to one function's memory window. Every address a CB
// or a program names is function-relative, [0, size); executors reach device
// memory only through Span, so nothing a driver sends can touch bytes outside
// the submitting function's own memory. The window carries its card's host
// link (host_link.hpp), for executors that hand memory to the host and take
// it back (semaphores).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "execution/host_link.hpp"

namespace spyre::mockdev {

class DeviceMemory {
public:
    DeviceMemory(uint8_t* base, uint64_t size, HostLink* host_link = nullptr)
        : base_(base), size_(size), host_link_(host_link) {}

    uint64_t size() const { return size_; }

    // HostLink::Published and Observed, where the window has a link.
    void Published() const {
        if (host_link_) host_link_->Published();
    }
    void Observed() const {
        if (host_link_) host_link_->Observed();
    }

    // The bytes [addr, addr + len) of the window, or nullopt if any of them
    // (or the sum itself) falls outside it. A zero-length span at addr <=
    // size is valid.
    std::optional<std::span<uint8_t>> Span(uint64_t addr, uint64_t len) const;

private:
    uint8_t* base_;
    uint64_t size_;
    HostLink* host_link_;
};

}  // namespace spyre::mockdev
