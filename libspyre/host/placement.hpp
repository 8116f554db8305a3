// SPDX-License-Identifier: Apache-2.0
// Where a ready chip task runs (seed 003's q6), decided when it becomes
// ready: the device it names; else the device holding the most of its input
// bytes current, unless that device has more than `kLocalitySlack` tasks
// queued beyond the least-loaded one; else the least-loaded device, ties
// broken round-robin from `rotate` so equal work spreads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace spyre::host {

inline constexpr uint32_t kLocalitySlack = 1;

struct PlacementInput {
    std::optional<size_t> pinned;
    std::vector<uint32_t> load;         // chip tasks queued or running, per device
    std::vector<uint64_t> local_bytes;  // input bytes already current there, per device
    size_t rotate = 0;
};

size_t Place(const PlacementInput& in);

}  // namespace spyre::host
