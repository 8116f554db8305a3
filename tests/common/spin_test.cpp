// SPDX-License-Identifier: Apache-2.0
// SpinFor (spyre/common/spin.hpp): the one spin above the driver looks until
// ready, pauses then yields within its limits, and gives up after them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "spyre/common/spin.hpp"

namespace {

using spyre::SpinFor;
using spyre::SpinLimits;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(SpinFor, ReadyAtOnceLooksOnce) {
    int looks = 0;
    const auto seen = SpinFor([&] { return ++looks == 1; }, {0ns, 0ns});
    EXPECT_TRUE(seen.ready);
    EXPECT_EQ(looks, 1);
    EXPECT_EQ(seen.yields, 0u);
}

TEST(SpinFor, PausesUntilReadyWithoutYielding) {
    int looks = 0;
    const auto seen = SpinFor([&] { return ++looks == 1000; }, {});  // kForever
    EXPECT_TRUE(seen.ready);
    EXPECT_EQ(looks, 1000);
    EXPECT_EQ(seen.yields, 0u);
}

TEST(SpinFor, GivesUpAfterThePauseWhenThereIsNoYield) {
    int looks = 0;
    const auto start = Clock::now();
    const auto seen = SpinFor([&] { ++looks; return false; }, {200us, 0ns});
    EXPECT_FALSE(seen.ready);
    EXPECT_EQ(seen.yields, 0u);
    EXPECT_GE(Clock::now() - start, 200us);  // a lower bound only: the host may be slow
    EXPECT_GT(looks, 1);
}

TEST(SpinFor, YieldsAfterThePauseThenGivesUp) {
    const auto start = Clock::now();
    const auto seen = SpinFor([] { return false; }, {50us, 100ms});
    EXPECT_FALSE(seen.ready);
    EXPECT_GT(seen.yields, 0u);
    EXPECT_GE(Clock::now() - start, 100ms + 50us);
}

TEST(SpinFor, NoPauseGoesStraightToYielding) {
    int looks = 0;
    const auto seen = SpinFor([&] { return ++looks == 3; }, {0ns, 1s});
    EXPECT_TRUE(seen.ready);
    EXPECT_EQ(seen.yields, 2u);  // the first look, then one yield before each next
}

TEST(SpinFor, SeesAnotherThreadsStore) {
    std::atomic<bool> flag{false};
    std::thread setter([&] {
        std::this_thread::sleep_for(2ms);
        flag.store(true, std::memory_order_release);
    });
    const auto seen = SpinFor([&] { return flag.load(std::memory_order_acquire); }, {10us, 10s});
    setter.join();
    EXPECT_TRUE(seen.ready);
}

}  // namespace
