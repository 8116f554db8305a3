// SPDX-License-Identifier: Apache-2.0
// Where a ready chip task goes (libspyre/host/placement): the device it
// names, else the one holding most of its inputs unless it is busier than
// the least-loaded by more than the slack, else the least-loaded, ties
// round-robin.
#include "host/placement.hpp"

#include <gtest/gtest.h>

using namespace spyre::host;

TEST(HostPlacement, ANamedDeviceWinsWhateverItsLoad) {
    EXPECT_EQ(Place({.pinned = 2, .load = {0, 0, 9}, .local_bytes = {100, 0, 0}, .rotate = 0}), 2u);
}

TEST(HostPlacement, LeastLoadedWithTiesRoundRobin) {
    EXPECT_EQ(Place({.pinned = {}, .load = {2, 1, 3}, .local_bytes = {0, 0, 0}, .rotate = 0}), 1u);
    EXPECT_EQ(Place({.pinned = {}, .load = {0, 0, 0, 0}, .local_bytes = {0, 0, 0, 0}, .rotate = 6}), 2u);
    EXPECT_EQ(Place({.pinned = {}, .load = {1, 0, 1, 0}, .local_bytes = {0, 0, 0, 0}, .rotate = 2}), 3u);
}

TEST(HostPlacement, LocalityWithinTheSlackElseLoad) {
    // Device 2 holds the most input bytes and is one task busier than the least: it wins.
    EXPECT_EQ(Place({.pinned = {}, .load = {0, 0, 1}, .local_bytes = {0, 10, 50}, .rotate = 0}), 2u);
    // Two tasks busier: beyond the slack, the least-loaded wins.
    EXPECT_EQ(Place({.pinned = {}, .load = {0, 1, 2}, .local_bytes = {0, 10, 50}, .rotate = 0}), 0u);
}
