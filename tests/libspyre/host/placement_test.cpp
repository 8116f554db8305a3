// SPDX-License-Identifier: Apache-2.0
// Where a ready chip task goes (libspyre/host/placement): the device it
// names, else the one holding most of its inputs unless it is busier than
// the least backlogged by more than the slack, else the least backlogged
// (tasks per chip task it runs at once) of this rank unless another rank's
// is clearly freer, ties round-robin.
#include "host/placement.hpp"

#include <gtest/gtest.h>

using namespace spyre::host;

TEST(HostPlacement, ANamedDeviceWinsWhateverItsLoad) {
    EXPECT_EQ(Place({.pinned = 2, .load = {0, 0, 9}, .room = {1, 1, 1}, .local_bytes = {100, 0, 0}, .rotate = 0}), 2u);
}

TEST(HostPlacement, LeastLoadedWithTiesRoundRobin) {
    EXPECT_EQ(Place({.pinned = {}, .load = {2, 1, 3}, .room = {1, 1, 1}, .local_bytes = {0, 0, 0}, .rotate = 0}), 1u);
    EXPECT_EQ(Place({.pinned = {}, .load = {0, 0, 0, 0}, .room = {1, 1, 1, 1}, .local_bytes = {0, 0, 0, 0}, .rotate = 6}), 2u);
    EXPECT_EQ(Place({.pinned = {}, .load = {1, 0, 1, 0}, .room = {1, 1, 1, 1}, .local_bytes = {0, 0, 0, 0}, .rotate = 2}), 3u);
}

TEST(HostPlacement, LocalityWithinTheSlackElseLoad) {
    // Device 2 holds the most input bytes and is one task busier than the least: it wins.
    EXPECT_EQ(Place({.pinned = {}, .load = {0, 0, 1}, .room = {1, 1, 1}, .local_bytes = {0, 10, 50}, .rotate = 0}), 2u);
    // Two tasks busier: beyond the slack, the least-loaded wins.
    EXPECT_EQ(Place({.pinned = {}, .load = {0, 1, 2}, .room = {1, 1, 1}, .local_bytes = {0, 10, 50}, .rotate = 0}), 0u);
}

// A device that runs two chip tasks at once has half the backlog of one
// running one with the same tasks queued.
TEST(HostPlacement, BacklogCountsWhatADeviceRunsAtOnce) {
    EXPECT_EQ(Place({.pinned = {}, .load = {1, 2}, .room = {1, 4}, .local_bytes = {0, 0}, .rotate = 0}), 1u);
    EXPECT_EQ(Place({.pinned = {}, .load = {1, 2}, .room = {1, 2}, .local_bytes = {0, 0}, .rotate = 0}), 0u);
    // Locality within the slack, in backlog: device 1 holds the inputs, 2 queued on 2 slots...
    EXPECT_EQ(Place({.pinned = {}, .load = {0, 2}, .room = {1, 2}, .local_bytes = {0, 64}, .rotate = 0}), 1u);
    // ... but not 3.
    EXPECT_EQ(Place({.pinned = {}, .load = {0, 3}, .room = {1, 2}, .local_bytes = {0, 64}, .rotate = 0}), 0u);
}

// A device of another rank costs the inputs' trip: it gets a task only when
// every device of this rank is more than the remote slack busier.
TEST(HostPlacement, ARemoteDeviceOnlyWhenTheLocalOnesAreClearlyBusier) {
    const std::vector<bool> remote = {false, true, true};
    // Ties stay on this rank, whatever the rotation.
    EXPECT_EQ(Place({.pinned = {}, .load = {0, 0, 0}, .room = {1, 1, 1}, .remote = remote, .local_bytes = {0, 0, 0},
                     .rotate = 1}), 0u);
    // Half a task per slot busier is within the slack: a free local slot is taken first.
    EXPECT_EQ(Place({.pinned = {}, .load = {1, 0, 0}, .room = {2, 1, 1}, .remote = remote, .local_bytes = {0, 0, 0},
                     .rotate = 1}), 0u);
    // A whole task busier: the least loaded remote device, round-robin among equals.
    EXPECT_EQ(Place({.pinned = {}, .load = {1, 0, 0}, .room = {1, 1, 1}, .remote = remote, .local_bytes = {0, 0, 0},
                     .rotate = 2}), 2u);
    EXPECT_EQ(Place({.pinned = {}, .load = {1, 1, 0}, .room = {1, 1, 1}, .remote = remote, .local_bytes = {0, 0, 0},
                     .rotate = 0}), 2u);
    // Inputs current on a remote device draw the task there (nothing to ship).
    EXPECT_EQ(Place({.pinned = {}, .load = {0, 0, 0}, .room = {1, 1, 1}, .remote = remote, .local_bytes = {0, 0, 128},
                     .rotate = 0}), 2u);
    // Only remote devices: the least loaded of them.
    EXPECT_EQ(Place({.pinned = {}, .load = {3, 1}, .room = {1, 1}, .remote = {true, true}, .local_bytes = {0, 0},
                     .rotate = 0}), 1u);
}
