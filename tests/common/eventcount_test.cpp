// SPDX-License-Identifier: Apache-2.0
// EventCount (spyre/common/eventcount.hpp): a producer pays for a wake only
// while a waiter is armed, once per arm; an armed waiter never misses a
// Notify, whichever side comes first.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "spyre/common/eventcount.hpp"

namespace {

using spyre::EventCount;
using namespace std::chrono_literals;

TEST(EventCount, NotifyWithNoWaiterMovesNothing) {
    EventCount ec;
    const auto before = ec.Current();
    ec.Notify();
    ec.Notify();
    EXPECT_EQ(ec.Current(), before);
    EXPECT_FALSE(ec.Armed());
}

TEST(EventCount, NotifyAfterArmMakesWaitReturnAtOnce) {
    EventCount ec;
    const auto key = ec.Arm();
    EXPECT_TRUE(ec.Armed());
    ec.Notify();
    EXPECT_NE(ec.Current(), key);
    // The wake came before the wait: it must not sleep (a lost wake would
    // sleep the whole hour).
    EXPECT_TRUE(ec.Wait(key, std::chrono::hours(1)));
    EXPECT_FALSE(ec.Armed());
}

TEST(EventCount, OneWakePerArm) {
    EventCount ec;
    const auto key = ec.Arm();
    ec.Notify();
    ec.Notify();
    ec.Notify();
    EXPECT_EQ(ec.Current(), key + 1);  // the later ones found the waiter woken
    EXPECT_TRUE(ec.Wait(key, 1h));
    // Arming again clears the flag: the next Notify pays again.
    const auto key2 = ec.Arm();
    EXPECT_EQ(key2, key + 1);
    ec.Notify();
    EXPECT_EQ(ec.Current(), key2 + 1);
    ec.Disarm();
}

TEST(EventCount, DisarmedWaiterCostsNoWake) {
    EventCount ec;
    const auto key = ec.Arm();
    ec.Disarm();
    ec.Notify();
    EXPECT_EQ(ec.Current(), key);
}

TEST(EventCount, NotifyAllMovesTheSequenceEvenWithNoWaiter) {
    EventCount ec;
    const auto key = ec.Current();
    ec.NotifyAll();
    EXPECT_EQ(ec.Current(), key + 1);
    // A key taken before it (Current, then Arm) makes the wait return.
    ec.Arm();
    EXPECT_TRUE(ec.Wait(key, 1h));
}

TEST(EventCount, SleepUnlessLooksAfterArming) {
    EventCount ec;
    int looks = 0;
    ec.SleepUnless(
        [&] {
            ++looks;
            EXPECT_TRUE(ec.Armed());  // armed before the look: a Notify now would count
            return true;
        },
        1h);
    EXPECT_EQ(looks, 1);
    EXPECT_FALSE(ec.Armed());
}

TEST(EventCount, WaitTimesOutWithoutANotify) {
    EventCount ec;
    const auto key = ec.Arm();
    EXPECT_FALSE(ec.Wait(key, 1ms));
    EXPECT_FALSE(ec.Armed());
}

// Several producers each publish items one at a time and notify; several
// consumers sleep until the item they wait for is published. A lost wake
// leaves a consumer asleep for the whole (long) timeout with its item
// published, which the wait's result shows: such a wait returns with the
// sequence unmoved.
TEST(EventCount, NotifyAfterSeqCstUpdateWakesOncePerArmLikeNotify) {
    EventCount ec;
    const auto before = ec.Current();
    ec.NotifyAfterSeqCstUpdate();
    EXPECT_EQ(ec.Current(), before);  // nobody armed: no wake paid
    const auto key = ec.Arm();
    ec.NotifyAfterSeqCstUpdate();
    ec.NotifyAfterSeqCstUpdate();
    EXPECT_EQ(ec.Current(), key + 1);
    EXPECT_TRUE(ec.Wait(key, 1h));
    EXPECT_FALSE(ec.Armed());
}

// Producers publish by `publish` and wake by `notify`; consumers wait for
// counts they need and count a wait that slept its whole bound although
// the count was there (a lost wake).
template <typename Publish, typename Notify>
void ExpectNoLostWake(Publish publish, Notify notify) {
    constexpr int kProducers = 3, kConsumers = 3, kEach = 4000;
    EventCount ec;
    std::atomic<uint64_t> published{0};
    std::atomic<int> lost{0};
    std::vector<std::thread> threads;
    for (int c = 0; c < kConsumers; ++c) {
        threads.emplace_back([&] {
            for (uint64_t want = 1; want <= uint64_t(kProducers) * kEach; want += 97) {
                while (published.load(std::memory_order_acquire) < want) {
                    const auto key = ec.Arm();
                    if (published.load(std::memory_order_acquire) >= want) {
                        ec.Disarm();
                        break;
                    }
                    if (!ec.Wait(key, 30s) && published.load(std::memory_order_acquire) >= want) ++lost;
                }
            }
        });
    }
    for (int p = 0; p < kProducers; ++p) {
        threads.emplace_back([&] {
            for (int i = 0; i < kEach; ++i) {
                publish(published);
                notify(ec);
            }
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(published.load(), uint64_t(kProducers) * kEach);
    EXPECT_EQ(lost.load(), 0);
    EXPECT_FALSE(ec.Armed());
}

TEST(EventCount, ManyProducersAndWaitersLoseNoWake) {
    ExpectNoLostWake([](std::atomic<uint64_t>& n) { n.fetch_add(1, std::memory_order_release); },
                     [](EventCount& ec) { ec.Notify(); });
}

// The fence-free Notify, after a seq_cst update (how a stream enqueue and a
// DMA completion publish).
TEST(EventCount, SeqCstProducersWithoutTheFenceLoseNoWake) {
    ExpectNoLostWake([](std::atomic<uint64_t>& n) { n.fetch_add(1, std::memory_order_seq_cst); },
                     [](EventCount& ec) { ec.NotifyAfterSeqCstUpdate(); });
}

}  // namespace
