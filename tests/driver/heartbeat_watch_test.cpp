// SPDX-License-Identifier: Apache-2.0
// HeartbeatWatch (driver/heartbeat_watch.hpp): when a device's heartbeat
// (contract 3.3) counts as still, on a clock the test moves, and how
// SPYRE_HEARTBEAT_TIMEOUT_MS is read.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "heartbeat_watch.hpp"
#include "spyre/error.hpp"

namespace spyre::driver {
namespace {

constexpr int64_t kMs = 1000000;

TEST(HeartbeatWatch, AMovingHeartbeatIsNeverStill) {
    HeartbeatWatch watch(std::chrono::milliseconds(1000));
    for (uint32_t beat = 0; beat < 100; ++beat) EXPECT_FALSE(watch.Still(beat, int64_t(beat) * 100 * kMs)) << beat;
}

TEST(HeartbeatWatch, AStillHeartbeatIsStillOnceTheBoundHasPassed) {
    HeartbeatWatch watch(std::chrono::milliseconds(1000));
    int64_t now = 5000 * kMs;
    EXPECT_FALSE(watch.Still(7, now));
    for (int look = 1; look < 10; ++look) EXPECT_FALSE(watch.Still(7, now + look * 100 * kMs)) << look;
    EXPECT_TRUE(watch.Still(7, now + 1000 * kMs));
    EXPECT_TRUE(watch.Still(7, now + 1100 * kMs));
    // It moves again: the count starts over.
    EXPECT_FALSE(watch.Still(8, now + 1200 * kMs));
    EXPECT_FALSE(watch.Still(8, now + 1600 * kMs));
    EXPECT_FALSE(watch.Still(8, now + 2000 * kMs));
    EXPECT_TRUE(watch.Still(8, now + 2200 * kMs));
}

// A caller that did not look for more than half the bound (its process was
// stopped, the VM paused) cannot tell how long the device was still.
TEST(HeartbeatWatch, ALookAfterALongGapStartsTheCountAgain) {
    HeartbeatWatch watch(std::chrono::milliseconds(1000));
    EXPECT_FALSE(watch.Still(3, 0));
    EXPECT_FALSE(watch.Still(3, 5000 * kMs));  // the gap: not still yet
    EXPECT_FALSE(watch.Still(3, 5400 * kMs));
    EXPECT_FALSE(watch.Still(3, 5800 * kMs));
    EXPECT_TRUE(watch.Still(3, 6000 * kMs));
}

TEST(HeartbeatWatch, ACounterThatWrapsStillMoves) {
    HeartbeatWatch watch(std::chrono::milliseconds(1000));
    EXPECT_FALSE(watch.Still(UINT32_MAX, 0));
    EXPECT_FALSE(watch.Still(UINT32_MAX, 400 * kMs));
    EXPECT_FALSE(watch.Still(0, 800 * kMs));  // moved, across the wrap
    EXPECT_FALSE(watch.Still(0, 1200 * kMs));
    EXPECT_FALSE(watch.Still(0, 1600 * kMs));
    EXPECT_TRUE(watch.Still(0, 1800 * kMs));
}

class HeartbeatEnv : public ::testing::Test {
protected:
    void TearDown() override { ::unsetenv("SPYRE_HEARTBEAT_TIMEOUT_MS"); }
};

TEST_F(HeartbeatEnv, UnsetGivesTheDefaultAndZeroTurnsTheWatchOff) {
    ::unsetenv("SPYRE_HEARTBEAT_TIMEOUT_MS");
    EXPECT_EQ(HeartbeatWatch::BoundFromEnvironment(), HeartbeatWatch::kDefaultBound);
    ::setenv("SPYRE_HEARTBEAT_TIMEOUT_MS", "", 1);
    EXPECT_EQ(HeartbeatWatch::BoundFromEnvironment(), HeartbeatWatch::kDefaultBound);
    ::setenv("SPYRE_HEARTBEAT_TIMEOUT_MS", "0", 1);
    EXPECT_EQ(HeartbeatWatch::BoundFromEnvironment().count(), 0);
    ::setenv("SPYRE_HEARTBEAT_TIMEOUT_MS", "2500", 1);
    EXPECT_EQ(HeartbeatWatch::BoundFromEnvironment().count(), 2500);
    ::setenv("SPYRE_HEARTBEAT_TIMEOUT_MS", "300", 1);
    EXPECT_EQ(HeartbeatWatch::BoundFromEnvironment().count(), 300);
}

TEST_F(HeartbeatEnv, AValueThatIsNoBoundIsRefusedByName) {
    for (const char* bad : {"abc", "-5", "+300", "10ms", "299", "1", "99999999999999999999999", "86400001", " 500"}) {
        SCOPED_TRACE(bad);
        ::setenv("SPYRE_HEARTBEAT_TIMEOUT_MS", bad, 1);
        try {
            (void)HeartbeatWatch::BoundFromEnvironment();
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(std::string("SPYRE_HEARTBEAT_TIMEOUT_MS=") + bad), std::string::npos)
                << e.what();
        }
    }
}

}  // namespace
}  // namespace spyre::driver
