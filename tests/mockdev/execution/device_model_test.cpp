// SPDX-License-Identifier: Apache-2.0
// Building blocks of the device model without a daemon: the bounds of a
// function's memory window, the card's worker pool and the CB budget.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "execution/card_cores.hpp"
#include "execution/device_memory.hpp"

using namespace spyre::mockdev;
using namespace std::chrono_literals;

namespace {
Budget Forever() { return Budget(Budget::Clock::now() + 1h); }
}  // namespace

TEST(DeviceMemory, SpanStaysInsideTheWindow) {
    std::vector<uint8_t> bytes(4096);
    const DeviceMemory mem(bytes.data(), bytes.size());
    EXPECT_EQ(mem.Span(0, 4096)->data(), bytes.data());
    EXPECT_EQ(mem.Span(4095, 1)->size(), 1u);
    EXPECT_TRUE(mem.Span(4096, 0));  // empty, at the end
    EXPECT_FALSE(mem.Span(4096, 1));
    EXPECT_FALSE(mem.Span(4097, 0));
    EXPECT_FALSE(mem.Span(1, 4096));
    EXPECT_FALSE(mem.Span(8, UINT64_MAX));      // addr + len wraps
    EXPECT_FALSE(mem.Span(UINT64_MAX, 2));
}

TEST(Budget, ReportsAbortBeforeTheWatchdog) {
    EXPECT_EQ(Forever().Check(), SPYRE_ERR_NONE);
    EXPECT_EQ(Budget(Budget::Clock::now() - 1ms).Check(), SPYRE_ERR_WATCHDOG);
    EXPECT_EQ(Budget(Budget::Clock::now() - 1ms, [] { return true; }).Check(), SPYRE_ERR_ABORTED);
    EXPECT_EQ(Forever().Until(Budget::Clock::now() - 1ms).Check(), SPYRE_ERR_WATCHDOG);
}

TEST(CardCores, RunsEveryChunkExactlyOnce) {
    CardCores engine(3);
    for (size_t chunks : {0u, 1u, 2u, 1000u}) {
        std::vector<std::atomic<int>> hits(chunks);
        EXPECT_EQ(engine.ParallelFor(chunks, Forever(), [&](size_t i) {
            hits[i]++;
            return uint16_t(SPYRE_ERR_NONE);
        }),
                  SPYRE_ERR_NONE);
        for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
}

TEST(CardCores, StopsWithinAChunkWhenTheBudgetEnds) {
    CardCores engine(2);
    std::atomic<size_t> ran{0};
    const auto start = std::chrono::steady_clock::now();
    const uint16_t status = engine.ParallelFor(100000, Budget(Budget::Clock::now() + 30ms), [&](size_t) {
        std::this_thread::sleep_for(1ms);
        ran++;
        return uint16_t(SPYRE_ERR_NONE);
    });
    EXPECT_EQ(status, SPYRE_ERR_WATCHDOG);
    EXPECT_LT(ran.load(), 1000u);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);

    std::atomic<bool> abort{false};
    std::thread aborter([&] {
        std::this_thread::sleep_for(20ms);
        abort = true;
    });
    EXPECT_EQ(engine.ParallelFor(100000, Budget(Budget::Clock::now() + 1h, [&] { return abort.load(); }),
                                 [](size_t) {
                                     std::this_thread::sleep_for(1ms);
                                     return uint16_t(SPYRE_ERR_NONE);
                                 }),
              SPYRE_ERR_ABORTED);
    aborter.join();
}

TEST(CardCores, TheFirstFaultStopsTheRestAndExceptionsReachTheCaller) {
    CardCores engine(2);
    EXPECT_EQ(engine.ParallelFor(1000, Forever(), [](size_t i) { return uint16_t(i == 5 ? SPYRE_ERR_SHAPE : 0); }),
              SPYRE_ERR_SHAPE);
    EXPECT_THROW(engine.ParallelFor(10, Forever(),
                                    [](size_t i) -> uint16_t {
                                        if (i == 3) throw std::runtime_error("kernel bug");
                                        return SPYRE_ERR_NONE;
                                    }),
                 std::runtime_error);
    // The pool is still fine.
    EXPECT_EQ(engine.ParallelFor(10, Forever(), [](size_t) { return uint16_t(SPYRE_ERR_NONE); }), SPYRE_ERR_NONE);
}

TEST(CardCores, OneProgramHoldsTheCardAndAWaiterGivesUpAtItsBound) {
    CardCores engine(1);
    uint16_t status = 0;
    std::optional<CardCores::Turn> held(engine.Acquire(Forever(), status));
    ASSERT_TRUE(*held);
    std::thread other([&] {
        uint16_t s = 0;
        auto turn = engine.Acquire(Budget(Budget::Clock::now() + 20ms), s);
        EXPECT_FALSE(turn);
        EXPECT_EQ(s, SPYRE_ERR_WATCHDOG);
    });
    other.join();
    held.reset();
    auto again = engine.Acquire(Budget(Budget::Clock::now() + 20ms), status);
    EXPECT_TRUE(again);
    EXPECT_EQ(status, SPYRE_ERR_NONE);
}

// Functions get the card in the order they asked for it: a function that
// asks again right after its turn queues behind everyone already waiting.
TEST(CardCores, TurnsAreHandedOutInArrivalOrder) {
    CardCores engine(1);
    uint16_t status = 0;
    std::optional<CardCores::Turn> held(engine.Acquire(Forever(), status));
    std::mutex order_mutex;
    std::vector<int> order;
    std::vector<std::thread> waiters;
    for (int i = 0; i < 4; ++i) {
        waiters.emplace_back([&, i] {
            uint16_t s = 0;
            auto turn = engine.Acquire(Forever(), s);
            std::lock_guard lock(order_mutex);
            order.push_back(i);
        });
        // The next one starts only once this one is in the queue.
        while (engine.waiting() != unsigned(i + 1)) std::this_thread::yield();
    }
    held.reset();
    for (auto& t : waiters) t.join();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(engine.waiting(), 0u);
}
