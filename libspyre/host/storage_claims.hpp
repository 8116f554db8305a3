// SPDX-License-Identifier: Apache-2.0
// Which Workers have tasks in flight over a host storage's bytes. A Worker
// orders its own tasks (RegionTracker), but two Workers know nothing of each
// other's: a task of one reading bytes a task of the other writes (or
// writing bytes it reads or writes) would race, and the reader could see
// either value. Each storage keeps, per Worker with tasks in flight on it,
// how many accesses and the span of the bytes they read and the span they
// write; an access of another Worker that conflicts with those spans is
// refused when it is submitted. A span only grows while its Worker has
// accesses in flight: a bound of the ranges, never missing a race (two
// Workers writing disjoint row blocks of one tensor are fine; interleaved
// ones may be refused).
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "spyre/host/host_tensor.hpp"

namespace spyre::host {

class StorageClaims {
public:
    // Counts an access of [begin, end) by `owner` (a Worker's dispatcher);
    // false (nothing counted) when another owner's accesses in flight write
    // bytes of it, or, for a write, read or write bytes of it.
    bool TryClaim(const void* owner, uint64_t begin, uint64_t end, bool write);
    // One access `owner` counted has ended.
    void Release(const void* owner);
    // Whether accesses in flight (of any owner) write bytes of [begin, end).
    bool Written(uint64_t begin, uint64_t end);

private:
    struct Span {
        uint64_t begin = UINT64_MAX, end = 0;  // empty
        bool Overlaps(uint64_t b, uint64_t e) const noexcept { return begin < e && b < end; }
        void Add(uint64_t b, uint64_t e) noexcept {
            begin = std::min(begin, b);
            end = std::max(end, e);
        }
    };
    struct Footprint {
        const void* owner;
        uint64_t accesses;
        Span read, write;
    };
    std::mutex mu_;
    std::vector<Footprint> in_flight_;  // one per owner with accesses in flight
};

// The claims of `tensor`'s storage (it must not be empty).
StorageClaims& ClaimsOf(const HostTensor& tensor);

}  // namespace spyre::host
