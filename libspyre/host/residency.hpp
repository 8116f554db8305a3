// SPDX-License-Identifier: Apache-2.0
// Which devices likely hold a current copy of which host-tensor byte ranges
// (q6's data locality), as far as the tasks tell: a device's copy of a range
// counts as current from the moment a chip task there wrote or uploaded
// exactly it until any task writes an overlapping range elsewhere. A caller
// writing host memory between runs goes unseen here, so this only guides
// placement (the device with the most current input bytes); whether a copy
// is reused is the executor's content check.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>

#include "spyre/host/host_tensor.hpp"

namespace spyre::host {

class Residency {
public:
    static constexpr size_t kHost = SIZE_MAX;
    // [begin, end) of the tensor's storage was written by a task on
    // `device` (kHost for a SubWorker): every other copy is stale.
    void Wrote(const HostTensor& t, size_t device);
    // A device received exactly the tensor's bytes (an upload).
    void Copied(const HostTensor& t, size_t device);
    bool Current(const HostTensor& t, size_t device) const;
    // Tasks that ended having run with write access to the tensor's storage
    // (any part of it), as counted by CountWrite (ChipArg::writes).
    void CountWrite(const HostTensor& t);
    uint64_t Writes(const HostTensor& t) const;
    // Drops the ranges of storages nobody holds any more.
    void Sweep();
    // The same, once the map has doubled since the last sweep: a run's end
    // calls it, and a sweep at every run end walked every storage ever used
    // and still held (1,000 one-task runs took 60x longer while 20,000 used
    // tensors were held).
    void SweepIfGrown();
    size_t storages() const { return map_.size(); }  // held or not, until swept

private:
    // (begin, end, device), ordered by begin: a lookup is a search, not a
    // walk over every range of the storage (a program over 10,000 row views
    // of one tensor on 4 devices kept 40,000, walked on every placement and
    // every task's end, so each run over kept copies cost more than the last).
    using Copy = std::tuple<uint64_t, uint64_t, size_t>;
    struct PerStorage {
        std::weak_ptr<HostTensor::Storage> storage;
        std::set<Copy> copies;
        // The longest range kept so far: a range overlapping [b, e) begins
        // after b - longest, so an overlap search starts there.
        uint64_t longest = 0;
        uint64_t writes = 0;
    };
    std::unordered_map<uint64_t, PerStorage> map_;
    size_t after_sweep_ = 0;  // storages left by the last sweep
};

}  // namespace spyre::host
