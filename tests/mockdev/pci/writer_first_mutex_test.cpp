// SPDX-License-Identifier: Apache-2.0
// WriterFirstMutex (the card's holder lock): readers share it, a writer
// excludes them, and a waiting writer goes before readers that come later,
// so a flood of readers cannot hold off an open for ever.
#include "pci/writer_first_mutex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <thread>

using spyre::mockdev::WriterFirstMutex;
using namespace std::chrono_literals;

TEST(WriterFirstMutex, ReadersShareAndAWriterExcludes) {
    WriterFirstMutex m;
    {
        std::shared_lock a(m);
        std::shared_lock b(m, std::try_to_lock);
        EXPECT_TRUE(b.owns_lock());
        EXPECT_FALSE(m.try_lock());
    }
    std::unique_lock w(m);
    EXPECT_FALSE(m.try_lock_shared());
    w.unlock();
    EXPECT_TRUE(m.try_lock_shared());
    m.unlock_shared();
}

// A reader holds it; a writer waits for it. A reader that comes now does
// not get in ahead of the writer (std::shared_mutex on glibc lets it in,
// and this test then fails after its bound).
TEST(WriterFirstMutex, AWaitingWriterGoesBeforeLaterReaders) {
    WriterFirstMutex m;
    m.lock_shared();
    std::atomic<bool> wrote{false};
    std::thread writer([&] {
        std::unique_lock w(m);
        wrote.store(true);
    });
    // The writer is queued once a later reader is refused; before that it
    // may not have reached the lock yet. Bounded: 2000 looks of 1 ms.
    bool refused = false;
    for (int look = 0; look < 2000 && !refused; ++look) {
        if (m.try_lock_shared()) {
            m.unlock_shared();
            std::this_thread::sleep_for(1ms);
        } else {
            refused = true;
        }
    }
    EXPECT_TRUE(refused) << "a reader got in ahead of a waiting writer for 2 s";
    EXPECT_FALSE(wrote.load());
    m.unlock_shared();
    writer.join();
    EXPECT_TRUE(wrote.load());
}
