// SPDX-License-Identifier: Apache-2.0
#include "region_tracker.hpp"

namespace spyre::host {

void RegionTracker::Lookup(uint64_t storage, uint64_t begin, uint64_t end, bool write, HostTask* task,
                           std::vector<HostTask*>& producers) {
    const uint64_t size = end > begin ? end - begin : 0;
    map_.Lookup(storage, begin, size, write, task, [](HostTask* t) { return t->state != HostTask::State::Done; },
                producers);
}

void RegionTracker::File(uint64_t storage, uint64_t begin, uint64_t end, bool write, HostTask* task) {
    const uint64_t size = end > begin ? end - begin : 0;
    // A write drops the entries it covers, failed and skipped ones too: the
    // lookup made each of them a producer of `task`, which skips it when it
    // reads what they wrote (later tasks then meet the failure through
    // `task`) and only orders it otherwise (later readers read what `task`
    // wrote). Kept, they made every task of a chain behind a failure wait
    // for every skipped one before it (a loop of 20,000 tasks ran for
    // minutes).
    // A write covering part of an entry cuts that part out: a reader of
    // those bytes reads this task's version and meets it alone (a failed
    // writer of the whole tensor skipped the reader of a row another task
    // had rewritten since). The ranges are the exact bytes a task touches.
    map_.Insert(storage, begin, size, write, task);
}

void RegionTracker::Forget(const HostTask& task) {
    for (const TensorArg& a : task.args) {
        const uint64_t begin = a.tensor.byte_offset(), end = begin + a.tensor.bytes();
        map_.Erase(a.tensor.storage_id(), begin, end - begin, const_cast<HostTask*>(&task));
    }
}

}  // namespace spyre::host
