// SPDX-License-Identifier: Apache-2.0
// Dependency discovery for host-level tasks from the byte ranges of the
// host tensors they read and write, with TensorMap's rules
// (libspyre/orchestration/tensor_map, docs/orchestration.md):
//   a read waits for the overlapping writers (RAW);
//   a write waits for the overlapping writers (WAW) and the readers filed
//   since them (WAR); readers of one version never wait for each other.
// A task that finished well imposes nothing and is dropped when met; a
// failed or skipped one stays (its consumers are skipped) until Forget.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "host_task.hpp"

namespace spyre::host {

class RegionTracker {
public:
    // Appends to `producers` the tasks `task` must follow to access
    // [begin, end) of `storage`, then files the access.
    void Access(uint64_t storage, uint64_t begin, uint64_t end, bool write, HostTask* task,
                std::vector<HostTask*>& producers);
    // Drops every access of `task` (its run ended).
    void Forget(const HostTask& task);
    size_t entries() const;

private:
    struct Entry {
        uint64_t begin, end;
        HostTask* task;
        bool write;
    };
    std::unordered_map<uint64_t, std::vector<Entry>> by_storage_;
};

}  // namespace spyre::host
