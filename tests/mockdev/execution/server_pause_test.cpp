// SPDX-License-Identifier: Apache-2.0
// A queue server's pause (execution/server_pause.hpp): the pausing thread
// gets control only once the server has parked, so nothing the server does
// on its way out of a sleep lands after the pause began.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "execution/server_pause.hpp"

using namespace spyre::mockdev;
using namespace std::chrono_literals;

namespace {

// A server like the ring's: it sleeps until woken, then writes (as the ring
// server writes STATUS and CNT_WAKEUPS after its futex sleep) before it
// looks for a pause again.
struct FakeServer {
    std::mutex exec_mutex;
    ServerPause pause;
    std::mutex sleep_mutex;
    std::condition_variable sleep_cv;
    bool woken = false;
    std::atomic<bool> stopping{false};
    std::atomic<int> writes{0};
    std::thread thread;

    void Wake() {
        std::lock_guard lock(sleep_mutex);
        woken = true;
        sleep_cv.notify_all();
    }
    void Run() {
        while (!stopping.load()) {
            if (pause.requested()) {
                pause.Park(exec_mutex);
                continue;
            }
            {
                std::unique_lock lock(sleep_mutex);
                sleep_cv.wait_for(lock, 1s, [&] { return woken; });
                woken = false;
            }
            std::this_thread::sleep_for(2ms);  // slow on its way out of the sleep
            writes.fetch_add(1);
        }
    }
    void Start() { thread = std::thread([this] { Run(); }); }
    void Stop() {
        stopping.store(true);
        Wake();
        thread.join();
    }
};

}  // namespace

TEST(ServerPause, ThePauserGetsControlOnlyOnceTheServerHasParked) {
    FakeServer server;
    server.Start();
    for (int round = 0; round < 20; ++round) {
        SCOPED_TRACE(round);
        std::this_thread::sleep_for(1ms);  // let the server go to sleep
        std::unique_lock lock(server.exec_mutex);
        server.pause.Begin([&] { server.Wake(); }, [&] { return server.stopping.load(); });
        const int at_pause = server.writes.load();
        std::this_thread::sleep_for(10ms);
        EXPECT_EQ(server.writes.load(), at_pause) << "the server wrote after the pause began";
        server.pause.End();
        lock.unlock();
        server.Wake();
    }
    server.Stop();
}

TEST(ServerPause, ABackToBackPauseFindsTheServerStillParked) {
    FakeServer server;
    server.Start();
    for (int round = 0; round < 50; ++round) {
        std::unique_lock lock(server.exec_mutex);
        server.pause.Begin([&] { server.Wake(); }, [&] { return server.stopping.load(); });
        server.pause.End();
        lock.unlock();
        lock.lock();  // at once: the server may still be parked, or running again
        server.pause.Begin([&] { server.Wake(); }, [&] { return server.stopping.load(); });
        const int at_pause = server.writes.load();
        std::this_thread::sleep_for(3ms);
        EXPECT_EQ(server.writes.load(), at_pause);
        server.pause.End();
    }
    server.Stop();
}

TEST(ServerPause, AServerThatIsGoneIsNotWaitedFor) {
    ServerPause pause;
    std::mutex exec_mutex;
    std::lock_guard lock(exec_mutex);
    int wakes = 0;
    const auto t0 = std::chrono::steady_clock::now();
    pause.Begin([&] { ++wakes; }, [] { return true; });
    EXPECT_TRUE(pause.requested());
    EXPECT_EQ(wakes, 0);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "waited for a server that is gone";
    pause.End();
    EXPECT_FALSE(pause.requested());
}
