// SPDX-License-Identifier: Apache-2.0
// Host-level dependency discovery (libspyre/host/region_tracker): RAW, WAW
// and WAR on overlapping byte ranges, nothing between disjoint ranges or
// between readers, finished tasks imposing nothing, failed ones staying.
#include "host/region_tracker.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

using namespace spyre::host;

namespace {

// One access of `task`, looked up and filed: the tasks it must follow.
void Access(RegionTracker& map, uint64_t storage, uint64_t begin, uint64_t end, bool write, HostTask* task,
            std::vector<HostTask*>& producers) {
    map.Lookup(storage, begin, end, write, task, producers);
    map.File(storage, begin, end, write, task);
}

struct Fixture {
    RegionTracker map;
    HostTask tasks[8];
    std::vector<HostTask*> Access(int task, uint64_t begin, uint64_t end, bool write, uint64_t storage = 1) {
        std::vector<HostTask*> deps;
        ::Access(map, storage, begin, end, write, &tasks[task], deps);
        return deps;
    }
};

}  // namespace

TEST(HostRegionTracker, ReadAfterWriteWriteAfterWriteAndWriteAfterRead) {
    Fixture f;
    EXPECT_TRUE(f.Access(0, 0, 100, true).empty());
    EXPECT_EQ(f.Access(1, 50, 60, false), std::vector<HostTask*>{&f.tasks[0]});  // RAW
    EXPECT_EQ(f.Access(2, 0, 10, false), std::vector<HostTask*>{&f.tasks[0]});   // RAW, and no edge between readers
    auto deps = f.Access(3, 55, 58, true);                                         // WAW on 0, WAR on 1, not 2
    EXPECT_EQ(deps, (std::vector<HostTask*>{&f.tasks[0], &f.tasks[1]}));
}

TEST(HostRegionTracker, DisjointRangesAndOtherStoragesAreIndependent) {
    Fixture f;
    f.Access(0, 0, 64, true);
    EXPECT_TRUE(f.Access(1, 64, 128, true).empty());         // the next rows
    EXPECT_TRUE(f.Access(2, 0, 64, true, 2).empty());        // another tensor
    EXPECT_EQ(f.Access(3, 0, 128, false).size(), 2u);        // a reader of both row blocks
}

TEST(HostRegionTracker, FinishedTasksImposeNothingFailedOnesStayUntilForgotten) {
    Fixture f;
    f.Access(0, 0, 100, true);
    f.Access(1, 200, 300, true);
    f.tasks[0].state = HostTask::State::Done;
    f.tasks[1].state = HostTask::State::Failed;
    EXPECT_TRUE(f.Access(2, 0, 100, false).empty());
    EXPECT_EQ(f.Access(3, 250, 260, false), std::vector<HostTask*>{&f.tasks[1]});
    f.tasks[1].args.push_back({spyre::HostTensor{}, spyre::Access::Out});
    f.map.Forget(f.tasks[1]);  // its storage id is 0 here: nothing to forget on storage 1
    EXPECT_EQ(f.map.entries(), 3u);
}

// A chain of writers behind a failure: each depends on the one before it
// alone (which it inherits the failure from), not on every skipped writer
// since the failure. They all stayed, and a loop of N tasks behind a failed
// one took N^2 / 2 edges (20,000 tasks: minutes). A reader still meets the
// last skipped writer.
TEST(HostRegionTracker, AChainOfWritersBehindAFailureDependsLinkByLink) {
    RegionTracker map;
    std::vector<std::unique_ptr<HostTask>> tasks;
    for (int i = 0; i < 200; ++i) tasks.push_back(std::make_unique<HostTask>());
    std::vector<HostTask*> deps;
    Access(map, 1, 0, 100, true, tasks[0].get(), deps);
    tasks[0]->state = HostTask::State::Failed;
    for (size_t i = 1; i < tasks.size(); ++i) {
        deps.clear();
        Access(map, 1, 0, 100, true, tasks[i].get(), deps);
        ASSERT_EQ(deps, std::vector<HostTask*>{tasks[i - 1].get()}) << "task " << i;
        tasks[i]->state = HostTask::State::Skipped;
    }
    deps.clear();
    HostTask reader;
    Access(map, 1, 40, 50, false, &reader, deps);
    EXPECT_EQ(deps, std::vector<HostTask*>{tasks.back().get()});
    EXPECT_LE(map.entries(), 2u);
}
