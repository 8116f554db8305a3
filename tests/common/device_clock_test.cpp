// SPDX-License-Identifier: Apache-2.0
// The device clock (spyre/common/device_clock.hpp): a steady_clock reading
// converted with DeviceClockNs(t) is on the same clock as DeviceClockNs(),
// so the mock may stamp a completion with a time it has already read.
#include <gtest/gtest.h>

#include <chrono>

#include "spyre/common/device_clock.hpp"

TEST(DeviceClock, ASteadyClockReadingIsOnTheDeviceClock) {
    for (int i = 0; i < 1000; ++i) {
        const uint64_t before = spyre::DeviceClockNs();
        const uint64_t t = spyre::DeviceClockNs(std::chrono::steady_clock::now());
        const uint64_t after = spyre::DeviceClockNs();
        ASSERT_LE(before, t);
        ASSERT_LE(t, after);
    }
}
