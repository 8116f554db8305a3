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

// A pause that takes the exec mutex just after the server looked for a
// pause, and before the server takes the mutex for its work: the server
// finds the mutex held (Enter), goes round and parks, so the pause gets
// control at once. A server that waited for the mutex there parked only
// after the pause had given up on it (kParkLimit, 5 s).
TEST(ServerPause, APauseBetweenTheServersLookAndItsWorkFindsItParked) {
    ServerPause pause;
    std::mutex exec_mutex;
    std::mutex gate_mutex;
    std::condition_variable gate;
    bool at_gate = false, pauser_has_mutex = false;
    std::atomic<bool> stopping{false};
    std::atomic<int> entered{0};
    std::thread server([&] {
        bool first = true;
        while (!stopping.load()) {
            if (pause.requested()) {
                pause.Park(exec_mutex);
                continue;
            }
            if (first) {  // the pauser takes the mutex right here, once
                first = false;
                std::unique_lock lock(gate_mutex);
                at_gate = true;
                gate.notify_all();
                gate.wait(lock, [&] { return pauser_has_mutex; });
            }
            if (auto exec = pause.Enter(exec_mutex)) entered.fetch_add(1);
            std::this_thread::yield();
        }
    });
    {
        std::unique_lock lock(gate_mutex);
        gate.wait(lock, [&] { return at_gate; });
    }
    std::unique_lock exec(exec_mutex);
    {
        std::lock_guard lock(gate_mutex);
        pauser_has_mutex = true;
    }
    gate.notify_all();
    const auto t0 = std::chrono::steady_clock::now();
    pause.Begin([] {}, [&] { return stopping.load(); });
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "the pause waited for a server blocked on its mutex";
    const int at_pause = entered.load();
    std::this_thread::sleep_for(10ms);
    EXPECT_EQ(entered.load(), at_pause) << "the server worked during the pause";
    pause.End();
    exec.unlock();
    // And it works again once the pause ends.
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (entered.load() == at_pause && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    EXPECT_GT(entered.load(), at_pause);
    stopping.store(true);
    server.join();
}
