// SPDX-License-Identifier: Apache-2.0
// The host level's policy over the dependency engine's RegionMap
// (libspyre/dependency/region_map.hpp): a host task's ranges of host
// tensors, one space per storage. A task that finished well imposes
// nothing and is dropped when met; a failed or skipped one stays (its
// readers are skipped) until writes cover it (a writer follows it, and
// runs: readers after it read its bytes; a write of part of its range cuts
// that part out) or until Forget.
#pragma once

#include <cstdint>
#include <vector>

#include "dependency/region_map.hpp"
#include "host_task.hpp"

namespace spyre::host {

class RegionTracker {
public:
    // Appends to `producers` the tasks `task` must follow to access
    // [begin, end) of `storage`. A task with several accesses looks all of
    // them up first (a read's lookup meets the producers it reads from),
    // then files them.
    void Lookup(uint64_t storage, uint64_t begin, uint64_t end, bool write, HostTask* task,
                std::vector<HostTask*>& producers);
    // Files the access, for the tasks submitted after `task`.
    void File(uint64_t storage, uint64_t begin, uint64_t end, bool write, HostTask* task);
    // Drops every access of `task` (its run ended).
    void Forget(const HostTask& task);
    size_t entries() const { return map_.entries(); }

private:
    // Sized for a few runs of a few hundred tasks in flight.
    dependency::RegionMap<HostTask*> map_{1024};
};

}  // namespace spyre::host
