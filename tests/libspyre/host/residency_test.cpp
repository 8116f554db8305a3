// SPDX-License-Identifier: Apache-2.0
// The host level's residency map (libspyre/host/residency): which device
// holds a current copy of which range, and when the ranges of storages
// nobody holds go. A run's end sweeps only once the map has doubled since
// the last sweep: sweeping at every run end walked every storage ever used
// and still held, so each small run cost time in proportion to them.
#include "host/residency.hpp"

#include <gtest/gtest.h>

#include <vector>

using namespace spyre;
using namespace spyre::host;

TEST(HostResidency, ACopyIsCurrentUntilAWriteElsewhere) {
    Residency r;
    const HostTensor t = HostTensor::Zeros({4, 4});
    r.Copied(t, 0);
    EXPECT_TRUE(r.Current(t, 0));
    EXPECT_FALSE(r.Current(t, 1));
    r.Wrote(t.Rows(1, 2), 1);
    EXPECT_FALSE(r.Current(t, 0));
    EXPECT_TRUE(r.Current(t.Rows(1, 2), 1));
}

TEST(HostResidency, ARunsEndSweepsOnlyOnceTheMapHasDoubled) {
    Residency r;
    std::vector<HostTensor> held;
    for (int i = 0; i < 100; ++i) {
        held.push_back(HostTensor::Zeros({1, 4}));
        r.Copied(held.back(), 0);
    }
    r.Sweep();
    ASSERT_EQ(r.storages(), 100u);
    for (int i = 0; i < 150; ++i) r.Copied(HostTensor::Zeros({1, 4}), 0);  // used once, let go at once
    r.SweepIfGrown();
    EXPECT_EQ(r.storages(), 250u) << "under 2 x 100 + 64: no walk";
    for (int i = 0; i < 20; ++i) r.Copied(HostTensor::Zeros({1, 4}), 0);
    r.SweepIfGrown();
    EXPECT_EQ(r.storages(), 100u) << "the held ones stay, the others go";
    for (const HostTensor& t : held) EXPECT_TRUE(r.Current(t, 0));
}
