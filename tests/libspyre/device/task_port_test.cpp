// SPDX-License-Identifier: Apache-2.0
// TaskPort (libspyre/device/task_port.hpp, internal): a device's task queues
// driven by the threads that call it. A client hands it NOP tasks (task
// queues run TASK and NOP) with ids, and the tests check that every task
// comes back exactly once whoever drives, that a kick from inside the
// client's callbacks does not lock the port against itself, that the
// client never gets more room than the queues have, and that a device that
// dies fails what is in flight instead of leaving a waiter hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "device/device_core.hpp"
#include "device/device_internals.hpp"
#include "device/task_port.hpp"
#include "spyre/uapi/spyre_errors.h"
#include "stream/scheduler_core.hpp"
#include "stream_fixture.hpp"

using spyre::test::StreamTest;
using namespace spyre;

namespace {

const std::atomic<uint32_t> never_moves{0};  // a waiter's word that never moves: drive until nothing is in flight

// Hands out NOP tasks 0..total-1 and records what comes back.
class NopClient : public TaskPortClient {
public:
    explicit NopClient(uint64_t total) : total_(total) {}
    // Each queue up to its room, in turn.
    void FillQueues(std::span<std::vector<spyre_cb>> per_queue, std::span<const QueueRoom> rooms) override {
        uint32_t room = 0;
        for (size_t q = 0; q < rooms.size(); ++q) {
            room += rooms[q].free;
            for (uint32_t n = rooms[q].free; n > 0 && next_ < total_; --n) per_queue[q].push_back(driver::NopCb(next_++));
        }
        max_room = std::max(max_room, room);
    }
    void Finished(std::span<const spyre_cqe> done) override {
        for (const spyre_cqe& c : done) {
            if (c.status != SPYRE_ERR_NONE) ++bad_status;
            if (!seen.insert(c.user_data).second) ++repeated;
        }
        back.store(seen.size(), std::memory_order_release);  // what a thread that does not drive may read
        if (on_finished) on_finished();
    }
    void Failed(const Error& e) override {
        failed = true;
        failure = e.kind();
    }
    bool all_back() const { return seen.size() == total_; }

    std::function<void()> on_finished;
    std::atomic<uint64_t> back{0};
    std::set<uint64_t> seen;
    uint64_t repeated = 0, bad_status = 0;
    uint32_t max_room = 0;
    std::atomic<bool> failed{false};  // read by a thread that drives in a loop
    ErrorKind failure = ErrorKind::Internal;

private:
    const uint64_t total_;
    uint64_t next_ = 0;
};

}  // namespace

// Many more tasks than the queues hold: kicks send what fits, a waiter
// drives the rest; every id comes back once, with status OK, and the client
// was never offered more room than the queues have.
TEST_F(StreamTest, TaskPortEveryTaskComesBackOnce) {
    Device dev = OpenDevice();
    NopClient client(5000);
    TaskPort port(dev, {}, client);
    ASSERT_GT(port.capacity(), 0u);
    port.Kick();
    while (port.Drive(never_moves, 0)) port.Kick();
    EXPECT_TRUE(client.all_back()) << client.seen.size() << " of 5000 came back";
    EXPECT_EQ(client.repeated, 0u);
    EXPECT_EQ(client.bad_status, 0u);
    EXPECT_LE(client.max_room, port.capacity());
    EXPECT_FALSE(client.failed);
    EXPECT_EQ(port.in_flight(), 0u);
}

// The client kicks the port from inside its completion callback (as the
// runtime does when a completion makes tasks ready): the kick leaves a note
// and the driving thread sends the next tasks; nothing deadlocks.
TEST_F(StreamTest, TaskPortAKickFromInsideACallbackIsANote) {
    Device dev = OpenDevice();
    NopClient client(2000);
    TaskPort port(dev, {}, client);
    int kicks = 0;
    client.on_finished = [&] {
        ++kicks;
        port.Kick();
    };
    auto driven = std::async(std::launch::async, [&] {
        port.Kick();
        while (port.Drive(never_moves, 0)) {
        }
    });
    ASSERT_EQ(driven.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the port locked itself";
    driven.get();
    EXPECT_TRUE(client.all_back()) << client.seen.size() << " of 2000 came back";
    EXPECT_GT(kicks, 0);
    EXPECT_EQ(client.repeated, 0u);
}

// Nobody waits: after one kick the port's own thread reaps and sends the
// rest.
TEST_F(StreamTest, TaskPortItsThreadFinishesWhatNobodyWaitsFor) {
    Device dev = OpenDevice();
    NopClient client(3000);
    TaskPort port(dev, {}, client);
    port.Kick();
    for (int look = 0; look < 20000 && client.back.load(std::memory_order_acquire) < 3000; ++look)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // at most ~20 s: a bound, not a timing
    ASSERT_EQ(client.back.load(std::memory_order_acquire), 3000u);
    EXPECT_EQ(client.repeated, 0u);
    EXPECT_EQ(client.bad_status, 0u);
}

// The device dies with tasks in flight: the waiter's Drive returns, the
// client hears Failed (DeviceLost) once, and later kicks send nothing.
TEST_F(StreamTest, TaskPortADeadDeviceFailsWhatIsInFlight) {
    Device dev = OpenDevice();
    NopClient client(1u << 30);  // more than can ever finish before the kill
    TaskPort port(dev, {}, client);
    port.Kick();
    // A kick while the device's thread holds the port only calls it: the
    // tasks may go out a moment later. Killed before, a Drive found nothing
    // in flight and returned at once, before the tasks sent after it (seen
    // in CI under load: 1024 in flight, no failure heard).
    for (int look = 0; look < 20000 && port.in_flight() == 0; ++look)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // at most ~20 s: a bound, not a timing
    ASSERT_GT(port.in_flight(), 0u);
    daemon().Signal(SIGKILL);
    auto driven = std::async(std::launch::async, [&] {
        // Drive returns false whenever nothing is in flight, which the
        // port's thread can make true for a moment before the daemon is
        // gone (it reaped every task and has not sent the next yet): drive
        // until the failure is heard (seen in CI under load: the loop
        // ended with 1024 in flight sent after it, no failure heard).
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!client.failed.load() && std::chrono::steady_clock::now() < until)
            if (!port.Drive(never_moves, 0)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    ASSERT_EQ(driven.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "Drive hangs on a dead device";
    driven.get();
    EXPECT_TRUE(client.failed);
    EXPECT_EQ(client.failure, ErrorKind::DeviceLost);
    EXPECT_EQ(port.in_flight(), 0u);
    const size_t seen = client.seen.size();
    port.Kick();
    EXPECT_EQ(client.seen.size(), seen);
}

// A thread that kicks while another drives (asleep on the interrupt, or
// looking): each kick calls the driver, nothing is lost or repeated.
TEST_F(StreamTest, TaskPortKicksFromAnotherThreadCallTheDriver) {
    Device dev = OpenDevice();
    NopClient client(20000);
    TaskPort port(dev, {}, client);
    std::atomic<bool> stop{false};
    std::thread kicker([&] {
        while (!stop.load()) {
            port.Kick();
            std::this_thread::yield();
        }
    });
    auto driven = std::async(std::launch::async, [&] {
        port.Kick();
        while (client.back.load(std::memory_order_acquire) < 20000) port.Drive(never_moves, 0);
    });
    const bool finished = driven.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
    stop = true;
    kicker.join();
    ASSERT_TRUE(finished) << "the driver stopped with " << client.back.load() << " of 20000 back";
    driven.get();
    EXPECT_EQ(client.back.load(), 20000u);
    EXPECT_EQ(client.repeated, 0u);
    EXPECT_EQ(client.bad_status, 0u);
}

namespace {
uint64_t PortWakeRequests(const Device& dev) { return DeviceInternals::Core(dev)->sched->port_wake_requests(); }
// Until the device's thread is in its long sleep (at most ~2 s: a bound,
// not a timing): awake, it serves an unattended port within a tick on its
// own, and nothing would be owed or asked.
void WaitForTheDevicesLongSleep(const Device& dev) {
    for (int look = 0; look < 2000 && !DeviceInternals::Core(dev)->sched->sleeping_long(); ++look)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}
// Whether a port asked the device's thread to look since `since()`, or
// the thread served a port unasked (its long sleep of a second ended
// meanwhile: then there was nothing left to ask).
struct DeviceThreadCalls {
    Device& dev;
    uint64_t requests = 0, backstops = 0;
    void since() {
        requests = PortWakeRequests(dev);
        backstops = dev.scheduler().Stats().task_backstops;
    }
    bool came() const {
        return PortWakeRequests(dev) > requests || dev.scheduler().Stats().task_backstops > backstops;
    }
};
}  // namespace

// A caller that drives right after its kicks (a Worker's chip call) owes the
// device's thread no wake: inside a CallerDrivesScope the kick that leaves
// tasks unattended asks nothing of that thread, and the drive reaps them all.
TEST_F(StreamTest, TaskPortACallerThatDrivesNextAsksTheDevicesThreadNothing) {
    Device dev = OpenDevice();
    // In a scope, then (the control) outside one, on a port of its own each.
    for (const bool scoped : {true, false}) {
        NopClient client(8);
        TaskPort port(dev, {}, client);
        ASSERT_GE(port.capacity(), 16u);  // 8 tasks: sent by the first kick, not reaped by it
        WaitForTheDevicesLongSleep(dev);
        const uint64_t before = PortWakeRequests(dev);
        {
            std::optional<TaskPort::CallerDrivesScope> scope;
            if (scoped) scope.emplace();
            port.Kick();
            while (port.Drive(never_moves, 0)) {
            }
        }
        if (scoped)
            EXPECT_EQ(PortWakeRequests(dev), before);
        else
            EXPECT_GT(PortWakeRequests(dev), before);
        EXPECT_TRUE(client.all_back());
        EXPECT_EQ(client.repeated, 0u);
    }
}

// The wake is owed, not dropped. A scope pays it at its end if its tasks
// are still unattended, and the device's thread then finishes them; a
// scope whose caller stays away from its wait longer than kOwedWakeAfter
// (host work between submits) pays at its next kick.
TEST_F(StreamTest, TaskPortAScopePaysTheWakeItOwes) {
    Device dev = OpenDevice();
    for (const bool at_the_end : {true, false}) {
        SCOPED_TRACE(at_the_end ? "paid at the scope's end" : "paid at a kick after kOwedWakeAfter");
        NopClient client(8);
        TaskPort port(dev, {}, client);
        WaitForTheDevicesLongSleep(dev);
        DeviceThreadCalls calls{dev};
        calls.since();
        {
            const TaskPort::CallerDrivesScope scope;
            port.Kick();
            if (!at_the_end) {
                std::this_thread::sleep_for(TaskPort::kOwedWakeAfter * 2);
                port.Kick();
                EXPECT_TRUE(calls.came()) << "owed for 2 ms and not paid";
            }
        }
        if (at_the_end) {
            EXPECT_TRUE(calls.came()) << "the scope ended without asking the device's thread";
        }
        for (int look = 0; look < 20000 && client.back.load(std::memory_order_acquire) < 8; ++look)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));  // at most ~20 s: a bound, not a timing
        ASSERT_EQ(client.back.load(std::memory_order_acquire), 8u);
        EXPECT_EQ(client.repeated, 0u);
    }
}
