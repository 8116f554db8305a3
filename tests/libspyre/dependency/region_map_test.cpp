// SPDX-License-Identifier: Apache-2.0
// RegionMap, the dependency engine's hazard map: RAW, WAW and WAR on
// overlapping ranges, none on disjoint ones or other spaces, collisions,
// lazy invalidation, kept and erased entries.
#include "dependency/region_map.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace spyre::dependency {
namespace {

// One address space (0), as the orchestration runtime files its regions.
struct SpaceMap : RegionMap<int32_t> {
    using RegionMap::RegionMap;
    void Insert(uint64_t start, uint64_t size, bool write, int32_t task) {
        RegionMap::Insert(0, start, size, write, task);
    }
    template <typename Alive>
    void Lookup(uint64_t start, uint64_t size, bool write, int32_t self, Alive&& alive, std::vector<int32_t>& deps) {
        RegionMap::Lookup(0, start, size, write, self, alive, deps);
    }
};
using TensorMap = SpaceMap;

struct Fixture {
    SpaceMap map{8};
    std::set<int32_t> dead;
    std::vector<int32_t> Deps(uint64_t start, uint64_t size, bool write, int32_t self = 1000) {
        std::vector<int32_t> d;
        map.Lookup(start, size, write, self, [&](int32_t t) { return !dead.count(t); }, d);
        std::sort(d.begin(), d.end());
        return d;
    }
};

using V = std::vector<int32_t>;

// The live writers a read of [start, start + size) of space 0 meets, sorted.
V Writers(RegionMap<int32_t>& map, uint64_t start, uint64_t size) {
    V d;
    map.Lookup(0, start, size, false, -1, [](int32_t) { return true; }, d);
    std::sort(d.begin(), d.end());
    return d;
}

TEST(RegionMap, ReadAfterWriteOnOverlapOnly) {
    Fixture f;
    f.map.Insert(0x1000, 256, true, 1);
    EXPECT_EQ(f.Deps(0x1000, 256, false), V{1});
    EXPECT_EQ(f.Deps(0x10F0, 64, false), V{1});   // overlapping sub-region
    EXPECT_EQ(f.Deps(0x1100, 64, false), V{});    // starts right after: disjoint
    EXPECT_EQ(f.Deps(0x0F00, 256, false), V{});   // ends right before
    EXPECT_EQ(f.Deps(0x0F00, 257, false), V{1});  // one byte of overlap
}

TEST(RegionMap, ReadersOfOneVersionDoNotDependOnEachOther) {
    Fixture f;
    f.map.Insert(0, 128, true, 1);
    f.map.Insert(0, 128, false, 2);
    f.map.Insert(0, 128, false, 3);
    EXPECT_EQ(f.Deps(0, 128, false), V{1});  // a reader waits for the writer only
}

TEST(RegionMap, WriteAfterReadWaitsForReadersAndWriter) {
    Fixture f;
    f.map.Insert(0, 128, true, 1);
    f.map.Insert(0, 64, false, 2);
    f.map.Insert(64, 64, false, 3);
    EXPECT_EQ(f.Deps(0, 128, true), (V{1, 2, 3}));  // WAW + WAR
    EXPECT_EQ(f.Deps(64, 64, true), (V{1, 3}));     // reader 2 touched only [0, 64)
    f.map.Insert(0, 128, true, 4);  // covers everything before it
    EXPECT_EQ(f.Deps(0, 128, false), V{4});
    EXPECT_EQ(f.Deps(0, 128, true), V{4});
}

TEST(RegionMap, NeverReportsSelfOrDuplicates) {
    Fixture f;
    f.map.Insert(0, 1 << 20, true, 5);  // spans 16 granules
    EXPECT_EQ(f.Deps(0, 1 << 20, false), V{5});
    EXPECT_EQ(f.Deps(0, 1 << 20, true, 5), V{});
}

TEST(RegionMap, LazyInvalidationDropsDeadEntries) {
    Fixture f;
    f.map.Insert(0, 128, true, 1);
    f.map.Insert(0, 128, false, 2);
    EXPECT_EQ(f.map.entries(), 2u);
    f.dead = {1, 2};
    EXPECT_EQ(f.Deps(0, 128, true), V{});
    EXPECT_EQ(f.map.entries(), 0u);  // removed by the lookup that met them
}

TEST(RegionMap, CollisionsKeepRegionsApart) {
    // A one-task map has 4 buckets: many granules share each.
    TensorMap map(1);
    for (int32_t i = 0; i < 64; ++i) map.Insert(uint64_t(i) << TensorMap::kGranuleShift, 100, true, i);
    for (int32_t i = 0; i < 64; ++i) {
        std::vector<int32_t> d;
        map.Lookup(uint64_t(i) << TensorMap::kGranuleShift, 100, false, -1, [](int32_t) { return true; }, d);
        EXPECT_EQ(d, V{i});
    }
    EXPECT_EQ(map.bucket_count(), 4u);
}

// A region as wide as a function's whole memory (here 64 GiB) is filed
// once and looked up in one pass over the table, not granule by granule
// (2^20 granules); narrow and wide regions still find each other.
TEST(RegionMap, WideRegionsCostNoMoreThanTheTable) {
    Fixture f;
    constexpr uint64_t kWide = 64ull << 30;
    f.map.Insert(0, kWide, true, 1);  // writes everything
    EXPECT_EQ(f.map.entries(), 1u);
    EXPECT_EQ(f.Deps(123ull << 20, 64, false), V{1});     // a narrow read inside it
    f.map.Insert(40ull << 30, 4096, true, 2);             // a narrow write inside it
    EXPECT_EQ(f.Deps(0, kWide, false), (V{1, 2}));        // a wide read meets both
    EXPECT_EQ(f.Deps(kWide, kWide, false), V{});          // disjoint: right after
    f.map.Insert(0, kWide + 4096, true, 3);               // a wider write covers task 1's entry
    EXPECT_EQ(f.Deps(5, 1, false), (V{3}));
    f.dead = {2, 3};
    EXPECT_EQ(f.Deps(0, 2 * kWide, true), V{});
}

// Ranges of different spaces (host tensors' storages) never meet, even at
// the same offsets and in the same buckets.
TEST(RegionMap, SpacesAreIndependent) {
    RegionMap<int32_t> map(1);  // 4 buckets: the spaces share them
    map.Insert(1, 0, 100, true, 1);
    map.Insert(2, 0, 100, true, 2);
    std::vector<int32_t> d;
    auto all = [](int32_t) { return true; };
    map.Lookup(1, 50, 10, false, -1, all, d);
    EXPECT_EQ(d, V{1});
    d.clear();
    map.Lookup(2, 0, 100, true, -1, all, d);
    EXPECT_EQ(d, V{2});
    d.clear();
    map.Lookup(3, 0, 100, true, -1, all, d);
    EXPECT_EQ(d, V{});
    map.Insert(1, 0, 100, true, 3);  // covers task 1's entry only
    d.clear();
    map.Lookup(2, 0, 100, false, -1, all, d);
    EXPECT_EQ(d, V{2});
    EXPECT_EQ(map.entries(), 2u);
}

// A covering write drops what it covers, but entries the caller keeps (a
// failed writer whose readers must be skipped) stay until erased.
TEST(RegionMap, KeptEntriesSurviveACoveringWriteUntilErased) {
    RegionMap<int32_t> map(8);
    auto all = [](int32_t) { return true; };
    map.Insert(7, 0, 64, true, 1);
    map.Insert(7, 0, 64, false, 2);
    map.Insert(7, 0, 128, true, 3, [](int32_t t) { return t == 1; });
    std::vector<int32_t> d;
    map.Lookup(7, 0, 64, false, -1, all, d);
    std::sort(d.begin(), d.end());
    EXPECT_EQ(d, (V{1, 3}));  // 2 was dropped, 1 kept
    map.Erase(7, 0, 64, 1);
    d.clear();
    map.Lookup(7, 0, 64, false, -1, all, d);
    EXPECT_EQ(d, V{3});
    map.Erase(7, 0, 128, 3);
    EXPECT_EQ(map.entries(), 0u);
}

TEST(RegionMap, EraseFindsWideAndMultiGranuleEntries) {
    RegionMap<int32_t> map(8);
    map.Insert(0, 12345, 3 << 16, false, 1);  // four granules
    map.Insert(0, 0, 1ull << 30, false, 2);   // wide (a read: a write would drop the other)
    EXPECT_EQ(map.entries(), 5u);
    map.Erase(0, 12345, 3 << 16, 1);
    map.Erase(0, 0, 1ull << 30, 2);
    EXPECT_EQ(map.entries(), 0u);
}

// A write of part of an entry cuts that part out, so a reader of those
// bytes meets the writer alone and a reader of the rest still meets the
// entry, in every granule the entry spans; a write inside it leaves two
// pieces; Erase takes the pieces.
TEST(RegionMap, AWriteOfPartOfAnEntryCutsThatPartOut) {
    constexpr uint64_t G = 1 << 16;
    RegionMap<int32_t> map(8);
    map.Insert(0, 100, 4 * G, true, 1);  // five granules
    map.Insert(0, 100, 2 * G, true, 2);  // its first half, over three granules
    EXPECT_EQ(Writers(map, 100, 10), V{2});
    EXPECT_EQ(Writers(map, 100 + 2 * G - 10, 10), V{2});     // the cut's last granule
    EXPECT_EQ(Writers(map, 100 + 3 * G, 10), V{1});          // the rest, in another granule
    EXPECT_EQ(Writers(map, 100 + 2 * G - 1, 2), (V{1, 2}));  // across the cut
    map.Insert(0, 100 + 3 * G, 100, true, 3);             // inside the rest: two pieces
    EXPECT_EQ(Writers(map, 100 + 3 * G + 10, 10), V{3});
    EXPECT_EQ(Writers(map, 100 + 3 * G - 10, 10), V{1});
    EXPECT_EQ(Writers(map, 100 + 3 * G + 100, 10), V{1});
    map.Erase(0, 100, 4 * G, 1);
    map.Erase(0, 100, 2 * G, 2);
    map.Erase(0, 100 + 3 * G, 100, 3);
    EXPECT_EQ(map.entries(), 0u);
}

// A piece a cut leaves is filed only where it lies. The entry was filed
// under every granule its whole range touched; a piece left in a granule
// it no longer touches escaped the next write's cut, which visits only
// its own granules, and a later reader of that write's bytes met the
// stale piece there (found probing from outside: a reader skipped for a
// failed writer whose bytes two later tasks had written over).
TEST(RegionMap, APieceLeftByACutLivesOnlyInTheGranulesItTouches) {
    constexpr uint64_t G = 1 << 16;
    for (const size_t tasks : {size_t(1), size_t(8), size_t(1024)}) {  // granules sharing buckets, and apart
        RegionMap<int32_t> map(tasks);
        map.Insert(0, G - 216, 256, true, 1);  // across the granule boundary
        map.Insert(0, G - 52, 256, true, 2);   // cuts 1 to [G-216, G-52): one granule now
        map.Insert(0, G - 192, 416, true, 3);  // cuts 1 to [G-216, G-192), covers 2
        EXPECT_EQ(Writers(map, G - 124, 256), V{3}) << tasks;
        EXPECT_EQ(Writers(map, G + 8, 8), V{3}) << tasks;
        EXPECT_EQ(Writers(map, G - 200, 4), V{1}) << tasks;
        // A cut that leaves pieces on both sides, each in one granule.
        map.Insert(0, 3 * G - 100, 200, true, 4);
        map.Insert(0, 3 * G - 50, 100, true, 5);
        EXPECT_EQ(Writers(map, 3 * G - 60, 8), V{4}) << tasks;
        EXPECT_EQ(Writers(map, 3 * G - 40, 80), V{5}) << tasks;
        map.Insert(0, 3 * G - 100, 50, true, 6);  // covers 4's first piece: nothing of 4 left there
        map.Insert(0, 3 * G + 50, 50, true, 7);   // and its second
        EXPECT_EQ(Writers(map, 3 * G - 100, 200), (V{5, 6, 7})) << tasks;
        // A task that files one range twice (two parameters): both copies cut.
        map.Insert(0, 5 * G - 8, 16, true, 8);
        map.Insert(0, 5 * G - 8, 16, true, 8);
        map.Insert(0, 5 * G, 8, true, 9);
        EXPECT_EQ(Writers(map, 5 * G, 8), V{9}) << tasks;
        EXPECT_EQ(Writers(map, 5 * G - 8, 8), V{8}) << tasks;
        for (int32_t t = 1; t <= 9; ++t) map.Erase(0, 0, 6 * G, t);
        EXPECT_EQ(map.entries(), 0u) << tasks;
    }
}

// Erase takes a range's pieces but those `spare` keeps: another range
// of the task that stays (the orchestration runtime's kept failed writes).
TEST(RegionMap, EraseSparesWhatStays) {
    RegionMap<int32_t> map(8);
    auto none = [](int32_t) { return false; };
    auto all = [](int32_t) { return true; };
    map.Insert(0, 0, 100, true, 1, none);
    map.Insert(0, 40, 20, true, 1, none);  // a second range of task 1, inside the first
    map.Insert(0, 0, 20, true, 2, none);   // cuts [0, 100) to [20, 100)
    map.Erase(0, 0, 100, 1, [](uint64_t s, uint64_t e) { return 40 <= s && e <= 60; });
    std::vector<int32_t> d;
    map.Lookup(0, 45, 5, false, -1, all, d);
    EXPECT_EQ(d, V{1});  // [40, 60) stayed
    d.clear();
    map.Lookup(0, 70, 5, false, -1, all, d);
    EXPECT_EQ(d, V{});  // the piece [20, 100) went
    map.Erase(0, 40, 20, 1);
    map.Erase(0, 0, 20, 2);
    EXPECT_EQ(map.entries(), 0u);
}

// A write wider than 4 MiB drops and cuts the narrow entries it covers, as
// a narrow write does: it left them, and a reader of what it wrote met a
// failed writer there (probe of 5 Dec).
TEST(RegionMap, AWideWriteDropsAndCutsTheNarrowEntriesItCovers) {
    RegionMap<int32_t> map(8);
    auto none = [](int32_t) { return false; };
    auto all = [](int32_t) { return true; };
    constexpr uint64_t G = 1 << 16;
    map.Insert(0, 0, 100, true, 1, none);          // covered whole
    map.Insert(0, 99 * G, 2 * G, true, 2, none);   // covered in part: [100G, 101G) stays
    map.Insert(0, 0, 100 * G, true, 3, none);      // 100 granules: wide
    std::vector<int32_t> d;
    map.Lookup(0, 0, 100, false, -1, all, d);
    EXPECT_EQ(d, V{3});
    d.clear();
    map.Lookup(0, 99 * G, 10, false, -1, all, d);
    EXPECT_EQ(d, V{3});
    d.clear();
    map.Lookup(0, 100 * G, 10, false, -1, all, d);
    EXPECT_EQ(d, V{2});
}

TEST(RegionMap, EmptyRangesTouchNothing) {
    RegionMap<int32_t> map(8);
    auto all = [](int32_t) { return true; };
    map.Insert(0, 0, 100, true, 1);
    map.Insert(0, 50, 0, true, 2);
    EXPECT_EQ(map.entries(), 1u);
    std::vector<int32_t> d;
    map.Lookup(0, 50, 0, true, -1, all, d);
    EXPECT_EQ(d, V{});
    map.Lookup(0, 0, 100, false, -1, all, d);
    EXPECT_EQ(d, V{1});
}

// Readers of an input nobody writes (every tile of a tiled matmul reads a
// row block of A): a read looks at the writers only, so it does not
// slow down with every reader before it; the dead readers are still swept.
TEST(RegionMap, AReadDoesNotLookAtOtherReaders) {
    Fixture f;
    f.map.Insert(0, 128, true, 1);
    for (int32_t t = 2; t < 202; ++t) f.map.Insert(0, 128, false, t);
    int looked = 0;
    auto counting = [&](int32_t t) {
        ++looked;
        return !f.dead.count(t);
    };
    std::vector<int32_t> d;
    f.map.Lookup(0, 128, false, 1000, counting, d);  // may sweep the readers once
    looked = 0;
    d.clear();
    f.map.Lookup(0, 128, false, 1000, counting, d);
    EXPECT_EQ(d, V{1});
    EXPECT_EQ(looked, 1);  // the writer, none of the 200 readers
    d.clear();
    f.map.Lookup(0, 128, true, 1000, counting, d);  // a write waits for them all
    EXPECT_EQ(d.size(), 201u);
}

TEST(RegionMap, DeadReadersOfAnUnwrittenInputAreSwept) {
    Fixture f;
    for (int32_t t = 0; t < 10000; ++t) {  // lookup, file, finish: as the runtime does
        EXPECT_EQ(f.Deps(0, 128, false, t), V{});
        f.map.Insert(0, 128, false, t);
        f.dead.insert(t);
    }
    EXPECT_LT(f.map.entries(), 64u);
}

}  // namespace
}  // namespace spyre::dependency
