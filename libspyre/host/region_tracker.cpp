// SPDX-License-Identifier: Apache-2.0
#include "region_tracker.hpp"

#include <algorithm>

namespace spyre::host {

void RegionTracker::Access(uint64_t storage, uint64_t begin, uint64_t end, bool write, HostTask* task,
                           std::vector<HostTask*>& producers) {
    std::vector<Entry>& entries = by_storage_[storage];
    std::erase_if(entries, [](const Entry& e) { return e.task->state == HostTask::State::Done; });
    for (const Entry& e : entries) {
        if (e.task == task || e.end <= begin || end <= e.begin) continue;
        // Entries are in filing order: a reader filed after the last
        // overlapping writer is a WAR hazard for a write; readers before that
        // writer are reached through it.
        if (e.write || write) producers.push_back(e.task);
    }
    if (write) {
        // Accesses this write covers completely are reached through it from now on.
        std::erase_if(entries, [&](const Entry& e) {
            return e.task != task && begin <= e.begin && e.end <= end && e.task->state != HostTask::State::Failed &&
                   e.task->state != HostTask::State::Skipped;
        });
    }
    entries.push_back({begin, end, task, write});
}

void RegionTracker::Forget(const HostTask& task) {
    for (const TensorArg& a : task.args) {
        auto it = by_storage_.find(a.tensor.storage_id());
        if (it == by_storage_.end()) continue;
        std::erase_if(it->second, [&](const Entry& e) { return e.task == &task; });
        if (it->second.empty()) by_storage_.erase(it);
    }
}

size_t RegionTracker::entries() const {
    size_t n = 0;
    for (const auto& [id, v] : by_storage_) n += v.size();
    return n;
}

}  // namespace spyre::host
