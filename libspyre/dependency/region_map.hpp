// SPDX-License-Identifier: Apache-2.0
// RegionMap: which live tasks read or write which byte ranges, for
// dependency discovery. The orchestration runtime files its tasks' regions
// of the function's memory here (one address space), the host level its
// tasks' ranges of host tensors (one space per tensor storage).
//
// Hazards found:
//   read   after a write: RAW on the writers;
//   write  after a write: WAW on the writers, and after a read: WAR on the
//          readers since that write.
// Readers of one version never depend on each other; disjoint ranges and
// other spaces never depend on each other.
//
// A range is filed under every 64 KiB granule it touches (hashed with its
// space), and a lookup reports entries whose range overlaps the asked one.
// Wide ranges (more than kWideGranules granules) are filed once, in a list
// every lookup scans, and a lookup wider than the table scans each bucket
// once: no range costs more than the table's size, however large.
//
// Each granule keeps its writers and its readers apart: a read looks at
// the writers only, so the readers of one input (every tile of a matmul
// reads a row block of A) do not make each other's submissions slower.
//
// Lazy invalidation: an entry whose task the caller's `alive` predicate
// rejects (finished well, or its slot reused) is dropped when a lookup
// meets it; a read lookup also sweeps a granule's readers once they have
// doubled since the last sweep (nobody else meets the readers of an input
// nobody writes). A write drops the entries it covers whole, which later tasks
// reach through the writer, but those the caller's `keep` predicate holds
// (a failed writer whose readers must be skipped), and cuts the part it
// covers out of the entries it covers in part (the callers' ranges are what
// their tasks declare they touch, whole: a reader of that part then meets
// the writer alone). Erase drops one task's entries, pieces included, at
// once (tasks that are freed). Not thread-safe: callers hold their own lock.
// Empty ranges touch nothing and are never filed.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace spyre::dependency {

template <typename Task>
class RegionMap {
public:
    static constexpr unsigned kGranuleShift = 16;
    static constexpr uint64_t kWideGranules = 64;  // 4 MiB

    // `expected_tasks`: how many tasks are live at once; the table is sized for it.
    explicit RegionMap(size_t expected_tasks) {
        // About four buckets per task keeps chains short when every task
        // touches a couple of granules.
        const uint64_t n = std::bit_ceil(uint64_t(expected_tasks < 1 ? 1 : expected_tasks) * 4);
        buckets_.resize(n);
        mask_ = n - 1;
    }

    // Appends to `deps` (without duplicates, never `self`) the live tasks a
    // task `self` accessing [start, start + size) of `space` must wait for;
    // `write` selects the hazards. `alive(task)` says whether an entry still counts.
    template <typename Alive>
    void Lookup(uint64_t space, uint64_t start, uint64_t size, bool write, Task self, Alive&& alive,
                std::vector<Task>& deps) {
        if (size == 0) return;
        const Range r{space, start, start + size};
        const uint64_t g_first = start >> kGranuleShift, g_last = (r.end - 1) >> kGranuleShift;
        if (g_last - g_first < buckets_.size()) {
            for (uint64_t g = g_first; g <= g_last; ++g) LookIn(Bucket(space, g), r, write, self, alive, deps);
        } else {  // wider than the table: every bucket once
            for (auto& bucket : buckets_) LookIn(bucket, r, write, self, alive, deps);
        }
        if (!wide_.empty()) [[unlikely]]
            Scan(wide_, r, write, self, alive, deps);
    }

    // Records that `task` reads (write = false) or writes [start, start + size)
    // of `space`. A write drops the entries it covers whole, but `task`'s own
    // and those `keep(task)` holds, and leaves of each entry it covers in
    // part (again but `task`'s and the kept) the one or two pieces outside
    template <typename Keep>
    void Insert(uint64_t space, uint64_t start, uint64_t size, bool write, Task task, Keep&& keep) {
        if (size == 0) return;
        const Range r{space, start, start + size};
        const uint64_t g_first = start >> kGranuleShift, g_last = (r.end - 1) >> kGranuleShift;
        std::vector<Entry>* cut_out = write ? &cut_ : nullptr;
        cut_.clear();
        if (write && !wide_.empty()) DropInside(wide_, r, task, keep, cut_out);
        if (g_last - g_first >= kWideGranules) {
            // A wide write also drops (and cuts) the granules' entries, as
            // its lookup visits them: left, a failed writer's entry there
            // skipped a reader of what this write wrote since.
            if (write) {
                auto drop = [&](Granules& bucket) {
                    DropInside(bucket.writes, r, task, keep, cut_out);
                    DropInside(bucket.reads, r, task, keep, cut_out);
                    bucket.reads_swept = std::min(bucket.reads_swept, bucket.reads.size());
                };
                if (g_last - g_first < buckets_.size()) {
                    for (uint64_t g = g_first; g <= g_last; ++g) drop(Bucket(space, g));
                } else {
                    for (auto& bucket : buckets_) drop(bucket);
                }
            }
            wide_.push_back({r, task, write});
            CutPartlyCovered(r);
            return;
        }
        for (uint64_t g = g_first; g <= g_last; ++g) {
            Granules& bucket = Bucket(space, g);
            if (write) {
                DropInside(bucket.writes, r, task, keep, cut_out);
                DropInside(bucket.reads, r, task, keep, cut_out);
                bucket.reads_swept = std::min(bucket.reads_swept, bucket.reads.size());
                bucket.writes.push_back({r, task, true});
            } else {
                bucket.reads.push_back({r, task, false});
            }
        }
        CutPartlyCovered(r);
    }
    void Insert(uint64_t space, uint64_t start, uint64_t size, bool write, Task task) {
        Insert(space, start, size, write, task, [](const Task&) { return false; });
    }

    // Drops `task`'s entries inside [start, start + size) of `space` (the
    // range it was filed with, and the pieces later writes left of it), but
    // those whose [start, end) `spare` keeps (the pieces of another range of
    // the task that is to stay).
    template <typename Spare>
    void Erase(uint64_t space, uint64_t start, uint64_t size, Task task, const Spare& spare) {
        if (size == 0) return;
        const uint64_t end = start + size;
        const uint64_t g_first = start >> kGranuleShift, g_last = (end - 1) >> kGranuleShift;
        auto drop = [&](std::vector<Entry>& bucket) {
            for (size_t i = 0; i < bucket.size();) {
                const Entry& e = bucket[i];
                if (e.task == task && e.range.space == space && start <= e.range.start && e.range.end <= end &&
                    !spare(e.range.start, e.range.end)) {
                    bucket[i] = bucket.back();
                    bucket.pop_back();
                } else {
                    ++i;
                }
            }
        };
        if (g_last - g_first >= kWideGranules) {
            drop(wide_);
            return;
        }
        for (uint64_t g = g_first; g <= g_last; ++g) {
            Granules& bucket = Bucket(space, g);
            drop(bucket.writes);
            drop(bucket.reads);
            bucket.reads_swept = std::min(bucket.reads_swept, bucket.reads.size());
        }
    }
    void Erase(uint64_t space, uint64_t start, uint64_t size, Task task) {
        Erase(space, start, size, task, [](uint64_t, uint64_t) { return false; });
    }

    // Drops every entry inside [start, start + size) of `space`, whoever's:
    // memory that went back to its allocator, which the next owner of the
    // bytes must find empty.
    void EraseInside(uint64_t space, uint64_t start, uint64_t size) {
        if (size == 0) return;
        const Range r{space, start, start + size};
        auto drop = [&](std::vector<Entry>& bucket) {
            std::erase_if(bucket, [&](const Entry& e) { return r.Covers(e.range); });
        };
        drop(wide_);
        const uint64_t g_first = start >> kGranuleShift, g_last = (r.end - 1) >> kGranuleShift;
        auto drop_granule = [&](Granules& bucket) {
            drop(bucket.writes);
            drop(bucket.reads);
            bucket.reads_swept = std::min(bucket.reads_swept, bucket.reads.size());
        };
        if (g_last - g_first < buckets_.size()) {
            for (uint64_t g = g_first; g <= g_last; ++g) drop_granule(Bucket(space, g));
        } else {
            for (auto& bucket : buckets_) drop_granule(bucket);
        }
    }

    // Drops every entry whose task `alive` rejects, met by a lookup or not.
    template <typename Alive>
    void Sweep(Alive&& alive) {
        auto sweep = [&](std::vector<Entry>& bucket) {
            std::erase_if(bucket, [&](const Entry& e) { return !alive(e.task); });
        };
        sweep(wide_);
        for (Granules& b : buckets_) {
            sweep(b.writes);
            sweep(b.reads);
            b.reads_swept = std::min(b.reads_swept, b.reads.size());
        }
    }

    size_t bucket_count() const noexcept { return buckets_.size(); }
    // Entries held, stale ones included.
    size_t entries() const noexcept {
        size_t n = wide_.size();
        for (const auto& b : buckets_) n += b.writes.size() + b.reads.size();
        return n;
    }

private:
    struct Range {
        uint64_t space, start, end;
        bool Overlaps(const Range& o) const noexcept { return space == o.space && start < o.end && o.start < end; }
        bool Covers(const Range& o) const noexcept { return space == o.space && start <= o.start && o.end <= end; }
    };
    struct Entry {
        Range range;
        Task task;
        bool write;
        bool operator==(const Entry& o) const noexcept {
            return task == o.task && write == o.write && range.space == o.range.space && range.start == o.range.start &&
                   range.end == o.range.end;
        }
    };
    // One bucket of the table: the entries of the granules hashed to it.
    struct Granules {
        std::vector<Entry> writes;
        std::vector<Entry> reads;
        size_t reads_swept = 0;  // readers left by the last sweep
    };
    Granules& Bucket(uint64_t space, uint64_t granule) noexcept {
        return buckets_[((granule + space * 0xC2B2AE3D27D4EB4Full) * 0x9E3779B97F4A7C15ull >> 32) & mask_];
    }
    static void AddDep(std::vector<Task>& deps, const Task& task) {
        for (const Task& d : deps)
            if (d == task) return;
        deps.push_back(task);
    }
    // A lookup in one bucket: its writers always, its readers for a write;
    // a read sweeps the readers' dead entries once they have doubled.
    template <typename Alive>
    static void LookIn(Granules& bucket, const Range& r, bool write, const Task& self, Alive& alive,
                       std::vector<Task>& deps) {
        Scan(bucket.writes, r, write, self, alive, deps);
        if (write) {
            Scan(bucket.reads, r, write, self, alive, deps);
        } else if (bucket.reads.size() >= 2 * bucket.reads_swept + kSweepSlack) {
            for (size_t i = 0; i < bucket.reads.size();) {
                if (alive(bucket.reads[i].task)) {
                    ++i;
                } else {
                    bucket.reads[i] = bucket.reads.back();
                    bucket.reads.pop_back();
                }
            }
        } else {
            return;
        }
        bucket.reads_swept = bucket.reads.size();
    }
    // Appends the live entries of `bucket` that `r` depends on; drops the dead ones.
    template <typename Alive>
    static void Scan(std::vector<Entry>& bucket, const Range& r, bool write, const Task& self, Alive& alive,
                     std::vector<Task>& deps) {
        for (size_t i = 0; i < bucket.size();) {
            Entry& e = bucket[i];
            if (!alive(e.task)) {  // lazy invalidation
                e = bucket.back();
                bucket.pop_back();
                continue;
            }
            if (e.task != self && (e.write || write) && e.range.Overlaps(r)) AddDep(deps, e.task);
            ++i;
        }
    }
    // The entries the write `r` covers in part (DropInside listed them in
    // cut_) become the pieces outside `r`. An entry is filed once under each
    // granule its range touches, and so is each piece: under a granule,
    // the entry's copy there becomes the pieces that touch it, or goes. (A
    // piece left under a granule it does not touch escaped the next
    // write's cut, which visits only that write's granules, and a later
    // reader met it there: found probing from outside.)
    void CutPartlyCovered(const Range& r) {
        for (const Entry& e : cut_) {
            Entry pieces[2];
            size_t n = 0;
            if (e.range.start < r.start) pieces[n++] = {{e.range.space, e.range.start, r.start}, e.task, e.write};
            if (r.end < e.range.end) pieces[n++] = {{e.range.space, r.end, e.range.end}, e.task, e.write};
            // A wide entry's pieces stay in wide_, narrow or not.
            if (!wide_.empty()) {
                const size_t size = wide_.size();
                for (size_t i = 0; i < size; ++i) {
                    if (!(wide_[i] == e)) continue;
                    wide_[i] = pieces[0];  // n >= 1: the entry was covered only in part
                    if (n == 2) wide_.push_back(pieces[1]);
                }
            }
            const uint64_t e_first = e.range.start >> kGranuleShift, e_last = (e.range.end - 1) >> kGranuleShift;
            if (e_last - e_first >= kWideGranules) continue;
            for (uint64_t g = e_first; g <= e_last; ++g) {
                Granules& bucket = Bucket(e.range.space, g);
                bool met = false;  // an earlier granule of the entry's shares this bucket: done there
                for (uint64_t h = e_first; h < g && !met; ++h) met = &Bucket(e.range.space, h) == &bucket;
                if (met) continue;
                std::vector<Entry>& list = e.write ? bucket.writes : bucket.reads;
                // Every copy here (a task may file one range twice) goes;
                // each piece comes back once per granule of this bucket it
                // touches, as Insert files a range.
                if (std::erase(list, e) == 0) continue;  // dropped meanwhile (a dead task)
                for (uint64_t h = g; h <= e_last; ++h) {
                    if (&Bucket(e.range.space, h) != &bucket) continue;
                    for (size_t k = 0; k < n; ++k)
                        if ((pieces[k].range.start >> kGranuleShift) <= h && h <= ((pieces[k].range.end - 1) >> kGranuleShift))
                            list.push_back(pieces[k]);
                }
                if (!e.write) bucket.reads_swept = std::min(bucket.reads_swept, list.size());
            }
        }
        cut_.clear();
    }
    // Drops the entries of `bucket` inside `r`, but `task`'s and those `keep`
    // holds; adds to `partly` (when set, once each) those it overlaps only in part.
    template <typename Keep>
    static void DropInside(std::vector<Entry>& bucket, const Range& r, const Task& task, Keep& keep,
                           std::vector<Entry>* partly) {
        for (size_t i = 0; i < bucket.size();) {
            const Entry& e = bucket[i];
            if (e.task == task || !e.range.Overlaps(r) || keep(e.task)) {
                ++i;
            } else if (r.Covers(e.range)) {
                bucket[i] = bucket.back();
                bucket.pop_back();
            } else {
                if (partly && std::find(partly->begin(), partly->end(), e) == partly->end()) partly->push_back(e);
                ++i;
            }
        }
    }

    static constexpr size_t kSweepSlack = 16;  // readers a bucket gains before its first sweep
    std::vector<Granules> buckets_;
    std::vector<Entry> wide_;  // ranges of more than kWideGranules granules
    std::vector<Entry> cut_;   // the entries a write covers in part
    uint64_t mask_;
};

}  // namespace spyre::dependency
