// SPDX-License-Identifier: Apache-2.0
// ParkingInbox and its unlock protocol (spyre/common/inbox.hpp): producers
// that finish work while another thread holds the lock park it; whoever
// holds the lock applies it. Nothing parked is ever lost or applied twice,
// and nothing is left behind once every thread has stopped, without a
// final sweep by the test.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "spyre/common/inbox.hpp"

namespace {

struct Item {
    Item* next = nullptr;
    uint32_t applied = 0;  // under the lock only
};
using Inbox = spyre::ParkingInbox<Item, &Item::next>;

TEST(ParkingInbox, TakeAllReturnsOldestFirst) {
    Inbox inbox;
    EXPECT_TRUE(inbox.Empty());
    EXPECT_EQ(inbox.TakeAll(), nullptr);
    Item items[3];
    for (Item& i : items) inbox.Push(i);
    EXPECT_FALSE(inbox.Empty());
    Item* t = inbox.TakeAll();
    for (Item& want : items) {
        ASSERT_EQ(t, &want);
        t = t->next;
    }
    EXPECT_EQ(t, nullptr);
    EXPECT_TRUE(inbox.Empty());
}

// Rounds of 4 producers parking 3000 items each while a fifth thread keeps
// taking the lock (and applying what it finds), so that producers often find
// it held. A round's end is where a lost hand-over shows: the last items
// parked while the holder held the lock, and nobody took it after.
TEST(ParkingInbox, NothingParkedIsLostOrAppliedTwice) {
    constexpr int kRounds = 40, kProducers = 4, kEach = 3000;
    for (int round = 0; round < kRounds; ++round) {
        std::vector<Item> items(size_t(kProducers) * kEach);
        Inbox inbox;
        std::mutex mu;
        uint64_t applied_total = 0;
        auto apply = [&] {
            for (Item* t = inbox.TakeAll(); t;) {
                Item* next = t->next;  // read first, as a real apply step must
                ++t->applied;
                ++applied_total;
                t = next;
            }
        };
        auto unlock = [&] {
            mu.unlock();
            spyre::ApplyParkedAfterUnlock(mu, inbox, apply);
        };
        std::atomic<int> producing{kProducers};
        std::thread holder([&] {
            while (producing.load() > 0) {
                mu.lock();
                apply();
                unlock();
            }
        });
        std::vector<std::thread> producers;
        for (int p = 0; p < kProducers; ++p)
            producers.emplace_back([&, p] {
                for (int i = 0; i < kEach; ++i) {
                    inbox.Push(items[size_t(p) * kEach + size_t(i)]);
                    if (mu.try_lock()) {
                        apply();
                        unlock();
                    }
                }
                producing.fetch_sub(1);
            });
        for (auto& t : producers) t.join();
        holder.join();
        ASSERT_TRUE(inbox.Empty()) << "round " << round << ": a parked item was left behind";
        std::lock_guard lock(mu);
        ASSERT_EQ(applied_total, items.size()) << "round " << round;
        for (size_t i = 0; i < items.size(); ++i)
            ASSERT_EQ(items[i].applied, 1u) << "round " << round << ": item " << i;
    }
}

}  // namespace
