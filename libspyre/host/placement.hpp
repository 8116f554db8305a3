// SPDX-License-Identifier: Apache-2.0
// Where a ready chip task runs (seed 003's q6), decided when it becomes
// ready. A device's backlog is its chip tasks queued or running per chip
// task it runs at once. The device the task names; else the device holding
// the most of its input bytes current, unless its backlog is more than
// `kLocalitySlack` above the least; else the least backlogged device of
// this rank, unless a device of another rank is more than `kRemoteSlack`
// below it (a remote device costs the inputs' trip over the network: ties,
// and a free slot here, keep a task on this rank);
// ties broken round-robin from `rotate` so equal work spreads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace spyre::host {

inline constexpr double kLocalitySlack = 1;
inline constexpr double kRemoteSlack = 0.5;

struct PlacementInput {
    std::optional<size_t> pinned;
    std::vector<uint32_t> load;         // chip tasks queued or running, per device
    std::vector<uint32_t> room;         // chip tasks it runs at once, per device (>= 1)
    std::vector<bool> remote;           // served by another rank, per device (empty: none)
    std::vector<uint64_t> local_bytes;  // input bytes already current there, per device
    size_t rotate = 0;
};

size_t Place(const PlacementInput& in);

}  // namespace spyre::host
