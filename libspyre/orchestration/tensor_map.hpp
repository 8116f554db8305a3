// SPDX-License-Identifier: Apache-2.0
// TensorMap (seed 004): which live tasks read or write which regions, for
// automatic dependency discovery. Keys are address ranges, not base
// addresses: a region is filed under every 64 KiB granule it touches, and a
// lookup reports entries whose range overlaps the asked one, so overlapping
// sub-regions are dependencies and disjoint ones are not.
//
// Hazards found (the seed tracks the first two; WAR goes beyond it):
//   read  (INPUT)         after a write: RAW on the writers;
//   write (OUTPUT/INOUT)  after a write: WAW on the writers, and after a
//                         read: WAR on the readers since that write.
// Readers of one version never depend on each other.
//
// Lazy invalidation: nothing is removed when a task finishes; an entry whose
// task the `alive` predicate rejects (completed, or its slot reused) is
// dropped when a lookup meets it. A write also drops the entries it covers
// whole: later tasks reach them through the writer. Not thread-safe: the
// task graph calls it under its lock.
//
// Wide regions (more than kWideGranules granules, up to the whole mapping
// of a function's memory) are filed once, in a list every lookup scans,
// and a lookup wider than the table scans each bucket once instead of each
// granule: no region costs more than the table's size, however large.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace spyre::orchestration {

class TensorMap {
public:
    static constexpr unsigned kGranuleShift = 16;
    static constexpr uint64_t kWideGranules = 64;  // 4 MiB

    // `expected_tasks`: the task ring's capacity; the table is sized for it.
    explicit TensorMap(int32_t expected_tasks);

    // Appends to `deps` (without duplicates, never `self`) the live tasks a
    // task `self` accessing [start, start + size) must wait for; `write`
    // selects the hazards. `alive(task)` says whether an entry still counts.
    template <typename Alive>
    void Lookup(uint64_t start, uint64_t size, bool write, int32_t self, Alive&& alive, std::vector<int32_t>& deps);
    // Records that `task` reads (write = false) or writes [start, start + size).
    void Insert(uint64_t start, uint64_t size, bool write, int32_t task);

    size_t bucket_count() const noexcept { return buckets_.size(); }
    size_t entries() const noexcept;  // entries held, stale ones included

private:
    struct Entry {
        uint64_t start;
        uint64_t end;
        int32_t task;
        bool write;
    };
    std::vector<Entry>& Bucket(uint64_t granule) noexcept {
        return buckets_[(granule * 0x9E3779B97F4A7C15ull >> 32) & mask_];
    }
    static void AddDep(std::vector<int32_t>& deps, int32_t task) {
        for (int32_t d : deps)
            if (d == task) return;
        deps.push_back(task);
    }
    // Appends the live entries of `bucket` that [start, end) depends on;
    // drops the dead ones.
    template <typename Alive>
    static void Scan(std::vector<Entry>& bucket, uint64_t start, uint64_t end, bool write, int32_t self, Alive& alive,
                     std::vector<int32_t>& deps) {
        for (size_t i = 0; i < bucket.size();) {
            Entry& e = bucket[i];
            if (!alive(e.task)) {  // lazy invalidation
                e = bucket.back();
                bucket.pop_back();
                continue;
            }
            if (e.task != self && e.start < end && start < e.end && (e.write || write)) AddDep(deps, e.task);
            ++i;
        }
    }
    // Drops the entries of `bucket` inside [start, end), but `task`'s.
    static void DropInside(std::vector<Entry>& bucket, uint64_t start, uint64_t end, int32_t task);
    std::vector<std::vector<Entry>> buckets_;
    std::vector<Entry> wide_;  // regions of more than kWideGranules granules
    uint64_t mask_;
};

template <typename Alive>
void TensorMap::Lookup(uint64_t start, uint64_t size, bool write, int32_t self, Alive&& alive,
                       std::vector<int32_t>& deps) {
    const uint64_t end = start + size;
    const uint64_t g_first = start >> kGranuleShift, g_last = (end - 1) >> kGranuleShift;
    if (g_last - g_first < buckets_.size()) {
        for (uint64_t g = g_first; g <= g_last; ++g) Scan(Bucket(g), start, end, write, self, alive, deps);
    } else {  // wider than the table: every bucket once
        for (auto& bucket : buckets_) Scan(bucket, start, end, write, self, alive, deps);
    }
    if (!wide_.empty()) [[unlikely]]
        Scan(wide_, start, end, write, self, alive, deps);
}

}  // namespace spyre::orchestration
