// SPDX-License-Identifier: Apache-2.0
// Where a ready chip task goes (libspyre/host/placement): the device it
// names, else the one where it would end soonest, its queue (tasks per slot
// times the device's task time) weighed against the input bytes it would
// move there (bytes not current there times the link's cost per byte, plus
// a call's fixed cost on another rank); near ties to the holder of the
// inputs, then this rank, then round-robin. And DeviceCosts, which learns
// the task time and the link cost from the calls that ran.
#include "host/placement.hpp"
#include "host/remote_protocol.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "spyre/host/chip_executor.hpp"

using namespace spyre;
using namespace spyre::host;

namespace {

constexpr uint64_t KiB = 1024, MiB = 1024 * KiB;

// `n` devices with room 1, nothing queued, no inputs, the priors.
PlacementInput Idle(size_t n) {
    PlacementInput in;
    in.load.assign(n, 0);
    in.room.assign(n, 1);
    in.current_bytes.assign(n, 0);
    return in;
}

}  // namespace

TEST(HostPlacement, ANamedDeviceWinsWhateverItsLoad) {
    EXPECT_EQ(Place({.pinned = 2, .load = {0, 0, 9}, .room = {1, 1, 1}, .current_bytes = {100, 0, 0}, .rotate = 0}), 2u);
}

TEST(HostPlacement, LeastLoadedWithTiesRoundRobin) {
    EXPECT_EQ(Place({.pinned = {}, .load = {2, 1, 3}, .room = {1, 1, 1}, .current_bytes = {0, 0, 0}, .rotate = 0}), 1u);
    EXPECT_EQ(Place({.pinned = {}, .load = {0, 0, 0, 0}, .room = {1, 1, 1, 1}, .current_bytes = {0, 0, 0, 0}, .rotate = 6}), 2u);
    EXPECT_EQ(Place({.pinned = {}, .load = {1, 0, 1, 0}, .room = {1, 1, 1, 1}, .current_bytes = {0, 0, 0, 0}, .rotate = 2}), 3u);
}

// A device whose slots are all held by chip calls waiting for nested runs
// is avoided, however idle it looks and whatever it holds of the inputs,
// while another device is not; when every device is, load decides again.
TEST(HostPlacement, ADeviceBlockedByWaitingCallsIsAvoidedWhileAnotherIsNot) {
    PlacementInput in = Idle(3);
    in.load = {1, 1, 2};
    in.current_bytes = {0, 64 * MiB, 0};
    in.input_bytes = 64 * MiB;
    in.blocked = {true, true, false};
    for (size_t rotate = 0; rotate < 3; ++rotate) {
        in.rotate = rotate;
        EXPECT_EQ(Place(in), 2u) << "rotate " << rotate;
    }
    in.blocked = {true, true, true};
    in.current_bytes = {0, 0, 0};
    in.rotate = 0;
    EXPECT_EQ(Place(in), 0u);
}

// A lost device (its rank or card gone) takes no task while another may,
// however idle it is or whatever it holds; a named one still goes there
// (its call then says why it fails), and so does a task every device of
// which is lost.
TEST(HostPlacement, ALostDeviceIsAvoidedWhileAnotherIsNot) {
    PlacementInput in = Idle(3);
    in.load = {4, 0, 4};
    in.current_bytes = {0, 64 * MiB, 0};
    in.input_bytes = 64 * MiB;
    in.lost = {false, true, false};
    for (size_t rotate = 0; rotate < 3; ++rotate) {
        in.rotate = rotate;
        EXPECT_NE(Place(in), 1u) << "rotate " << rotate;
    }
    in.pinned = 1;
    EXPECT_EQ(Place(in), 1u);
    in.pinned.reset();
    in.lost = {true, true, true};
    in.rotate = 0;
    EXPECT_EQ(Place(in), 1u);  // the best of the lost: its call fails DeviceLost
}

// A device that runs two chip tasks at once has half the backlog of one
// running one with the same tasks queued.
TEST(HostPlacement, BacklogCountsWhatADeviceRunsAtOnce) {
    EXPECT_EQ(Place({.pinned = {}, .load = {1, 2}, .room = {1, 4}, .current_bytes = {0, 0}, .rotate = 0}), 1u);
    EXPECT_EQ(Place({.pinned = {}, .load = {1, 2}, .room = {1, 2}, .current_bytes = {0, 0}, .rotate = 0}), 0u);
}

// (a) A chain over one tensor: the device holding its copy keeps the next
// task while the others are as busy (idle, or one task each), whatever the
// rotation, on this rank or against another rank's devices.
TEST(HostPlacement, AChainOverOneTensorStaysWhereItsCopyIs) {
    for (uint32_t queued : {0u, 1u, 3u})
        for (size_t rotate = 0; rotate < 5; ++rotate) {
            PlacementInput in = Idle(5);
            in.load.assign(5, queued);
            in.remote = {false, false, false, true, true};
            in.input_bytes = 256 * KiB;
            in.current_bytes = {0, 0, 256 * KiB, 0, 0};
            in.rotate = rotate;
            EXPECT_EQ(Place(in), 2u) << queued << " queued on each, rotate " << rotate;
        }
    // Half the inputs current is still the cheapest.
    PlacementInput in = Idle(3);
    in.input_bytes = 512 * KiB;
    in.current_bytes = {0, 256 * KiB, 0};
    EXPECT_EQ(Place(in), 1u);
    // A few bytes current (below the tie) still break the tie for the holder.
    in.input_bytes = 64;
    in.current_bytes = {0, 0, 32};
    EXPECT_EQ(Place(in), 2u);
}

// (b) The holder busy with long tasks and another device idle: the task
// moves when the queue there costs more than moving its bytes, and stays
// when moving costs more.
TEST(HostPlacement, ABusyHolderKeepsTheTaskOnlyWhileMovingCostsMore) {
    PlacementInput in = Idle(2);
    in.input_bytes = 1 * MiB;
    in.current_bytes = {1 * MiB, 0};
    in.load = {2, 0};
    in.task_ns = {5'000'000, 5'000'000};  // 5 ms tasks
    in.ns_per_byte = {0.5, 0.5};          // 1 MiB moves in 0.52 ms
    in.call_ns = {0, 0};
    EXPECT_EQ(Place(in), 1u) << "10 ms of queue against 0.52 ms of copying";
    in.task_ns = {100'000, 100'000};      // 0.2 ms of queue
    EXPECT_EQ(Place(in), 0u) << "0.2 ms of queue against 0.52 ms of copying";
    // The boundary: 2 tasks of 262 us queued against 524,288 ns of copying.
    in.task_ns = {262'144 - 1'500, 0};
    EXPECT_EQ(Place(in), 0u) << "within the tie: the holder";
    in.task_ns = {262'144 + 1'500, 0};
    EXPECT_EQ(Place(in), 1u) << "the queue costs 3 us more than the copy";
}

// Another rank's device pays the trip: the bytes over the network and the
// call's round trip. It wins only when this rank's queue costs more.
TEST(HostPlacement, ARemoteDeviceWhenThisRanksQueueCostsMoreThanTheTrip) {
    PlacementInput in = Idle(3);
    in.remote = {false, true, true};
    in.input_bytes = 64 * KiB;
    in.task_ns = {100'000, 100'000, 100'000};
    in.ns_per_byte = {0.5, 1.0, 1.0};
    in.call_ns = {0, 50'000, 50'000};
    // Ties, and a queue shorter than the trip, stay on this rank.
    for (size_t rotate = 0; rotate < 3; ++rotate) {
        in.rotate = rotate;
        EXPECT_EQ(Place(in), 0u) << "rotate " << rotate;
    }
    in.load = {1, 0, 0};  // 100 + 32 us here against 65.5 + 50 us there
    in.rotate = 0;
    EXPECT_EQ(Place(in), 1u);
    in.rotate = 2;
    EXPECT_EQ(Place(in), 2u) << "equal remote devices round-robin";
    in.input_bytes = 256 * KiB;  // 100 + 131 us here against 262 + 50 us there
    EXPECT_EQ(Place(in), 0u);
    // Only remote devices: the least loaded of them.
    EXPECT_EQ(Place({.pinned = {}, .load = {3, 1}, .room = {1, 1}, .remote = {true, true}, .current_bytes = {0, 0},
                     .rotate = 0}), 1u);
}

// A remote device whose calls ran faster learns a lower cost per byte
// than this rank's devices (the figures include the calls' compute), but
// its bytes still go onto a device there: it pays at least this rank's
// best link, and idle devices here keep the work. It took 56-92% of one
// task at a time from idle devices here (found probing from outside).
TEST(HostPlacement, AFastLearntRemoteLinkDoesNotTakeWorkFromIdleDevicesHere) {
    PlacementInput in = Idle(3);
    in.remote = {false, false, true};
    in.input_bytes = 1024 * KiB;
    in.task_ns = {300'000, 300'000, 300'000};
    in.ns_per_byte = {1.0, 1.2, 0.4};
    in.call_ns = {0, 0, 50'000};
    for (size_t rotate = 0; rotate < 3; ++rotate) {
        in.rotate = rotate;
        EXPECT_EQ(Place(in), 0u) << "rotate " << rotate;  // 1049 us here against 1049 + 50 us there
    }
    in.load = {1, 1, 0};  // a task's 300 us queued here: the remote device's trip is cheaper
    EXPECT_EQ(Place(in), 2u);
}

// Without measurements the priors decide: this rank's devices before
// another's on equal load.
TEST(HostPlacement, ThePriorsKeepEqualWorkOnThisRank) {
    PlacementInput in = Idle(2);
    in.remote = {true, false};
    in.input_bytes = 4 * KiB;
    EXPECT_EQ(Place(in), 1u);
    in.load = {0, 1};  // a prior task (100 us) here against a call's round trip (50 us) + 4 KiB there
    EXPECT_EQ(Place(in), 0u);
}

TEST(HostDeviceCosts, LearnsTaskTimeAndLinkCostFromCalls) {
    DeviceCosts costs({false, true});
    PlacementInput in;
    costs.Fill(in);
    ASSERT_EQ(in.task_ns.size(), 2u);
    EXPECT_EQ(in.task_ns[0], DeviceCosts::kPriorTaskNs);
    EXPECT_EQ(in.ns_per_byte[0], DeviceCosts::kPriorLocalNsPerByte);
    EXPECT_EQ(in.ns_per_byte[1], DeviceCosts::kPriorRemoteNsPerByte);
    EXPECT_EQ(in.call_ns[0], 0);
    EXPECT_EQ(in.call_ns[1], DeviceCosts::kRemoteCallNs);

    // Task time: a moving average with weight 1/8 per call.
    costs.Record(0, 900'000, ChipCallStats{});
    costs.Fill(in);
    EXPECT_DOUBLE_EQ(in.task_ns[0], 100'000 + 800'000.0 / 8);
    EXPECT_EQ(in.task_ns[1], DeviceCosts::kPriorTaskNs) << "each device learns its own";
    EXPECT_EQ(in.ns_per_byte[0], DeviceCosts::kPriorLocalNsPerByte) << "no bytes moved: no link sample";

    // A call that moved 1 MiB in 104,858 ns bounds the link's cost at 0.1 ns/B: taken at once.
    costs.Record(1, 104'858, ChipCallStats{.bytes_uploaded = 512 * KiB, .bytes_downloaded = 512 * KiB});
    costs.Fill(in);
    EXPECT_NEAR(in.ns_per_byte[1], 0.1, 1e-4);
    // A slower one (0.42 ns/B) moves it up by 1/32 of the difference only.
    costs.Record(1, 440'402, ChipCallStats{.bytes_uploaded = 1 * MiB});
    costs.Fill(in);
    EXPECT_NEAR(in.ns_per_byte[1], 0.1 + (0.42 - 0.1) / 32, 1e-4);
    // Calls below the sample size leave it alone.
    costs.Record(1, 10'000'000, ChipCallStats{.bytes_uploaded = DeviceCosts::kLinkSampleBytes - 1});
    costs.Fill(in);
    EXPECT_NEAR(in.ns_per_byte[1], 0.1 + (0.42 - 0.1) / 32, 1e-4);
}

// A task too large for a remote call's messages (over 256 inputs, or a
// tensor over 1 GiB: remote::CallFits) goes to this rank's devices however
// busy they are: on another rank it would fail where this rank runs it. It
// goes to another rank only when every device is remote (its call then
// says why). Before, 16 of 24 tasks of 300 arguments went to rank 1 and
// failed.
TEST(HostPlacement, ATaskTooLargeForARemoteCallStaysOnThisRank) {
    PlacementInput in = Idle(3);
    in.remote = {true, false, true};
    in.load = {0, 9, 0};
    EXPECT_NE(Place(in), 1u);  // fits: an idle remote device wins
    in.remote_fits = false;
    for (size_t rotate = 0; rotate < 3; ++rotate) {
        in.rotate = rotate;
        EXPECT_EQ(Place(in), 1u) << "rotate " << rotate;
    }
    in.remote = {true, true, true};
    EXPECT_LT(Place(in), 3u);
}

TEST(HostPlacement, CallFitsCountsInputsOutputsAndBytes) {
    const HostTensor small = HostTensor::Zeros({4, 4});
    std::vector<TensorArg> args(256, In(small));
    EXPECT_TRUE(remote::CallFits(args));
    args.push_back(In(small));
    EXPECT_FALSE(remote::CallFits(args));  // 257 inputs
    args.assign(256, InOut(small));
    EXPECT_TRUE(remote::CallFits(args));
    args.push_back(Out(small));
    EXPECT_FALSE(remote::CallFits(args));  // 257 outputs
    // A tensor the wire cannot describe (1 to 8 dims) stays here too: it
    // was placed on another rank by load, and failed there.
    const HostTensor nine = HostTensor::Zeros({1, 1, 1, 1, 1, 1, 1, 2, 2});
    EXPECT_FALSE(remote::CallFits(std::vector<TensorArg>{In(nine)}));
    EXPECT_TRUE(remote::CallFits(std::vector<TensorArg>{In(HostTensor::Zeros({1, 1, 1, 1, 1, 1, 2, 2}))}));
}
