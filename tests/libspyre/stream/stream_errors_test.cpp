// SPDX-License-Identifier: Apache-2.0
// Sticky stream errors and recovery, bad input, host callback failures and
// device loss.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <numeric>
#include <optional>
#include <thread>

#include <stdlib.h>

#include "spyre/uapi/spyre_errors.h"
#include "stream_fixture.hpp"
#include "stream_test_util.hpp"

using namespace spyre;
using namespace spyre::test;

namespace {
// The first `n` bytes of device memory at `h`, read directly.
std::vector<uint8_t> Peek(Device& dev, const DeviceHandle& h, size_t n) {
    std::vector<uint8_t> out(n);
    dev.dma().Wait(dev.dma().CopyFromDevice(out.data(), h, n));
    return out;
}
uint64_t Peek64(Device& dev, const DeviceHandle& h) {
    uint64_t v = 0;
    dev.dma().Wait(dev.dma().CopyFromDevice(&v, h, 8));
    return v;
}
void Poke64(Device& dev, const DeviceHandle& h, uint64_t v) { dev.dma().Wait(dev.dma().CopyToDevice(&v, h, 8)); }
}  // namespace

TEST_F(StreamTest, FailingLaunchIsStickyDropsLaterWorkAndNamesTheOp) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream(), other = dev.CreateStream();
    DeviceAllocation junk = dev.allocator().Allocate(4096), cells = dev.allocator().Allocate(64);
    std::vector<uint8_t> garbage(4096, 0xAB);
    dev.dma().Wait(dev.dma().CopyToDevice(garbage.data(), junk.handle, 4096));
    for (int i = 0; i < 8; ++i) Poke64(dev, cells.handle.Offset(8 * i, 8, cells), 0);

    // Hold the scheduler so the whole sequence reaches it at once (one turn).
    Gate gate;
    s.AddCallback(gate.Callback());                   // op #0
    ASSERT_TRUE(gate.WaitEntered());
    const uint64_t one = 1, two = 2, three = 3;
    std::vector<uint8_t> big(8192, 0xEE);
    uint64_t back = 0xBAD;
    std::atomic<bool> callback_ran{false};
    s.CopyToDevice(&one, cells.handle, 8);                             // op #1 runs
    s.Launch(junk.handle, 256);                                        // op #2 fails (not a program)
    s.CopyToDevice(&two, cells.handle.Offset(8, 8, cells), 8);         // op #3 inline: dropped
    s.CopyToDevice(big.data(), junk.handle, 4096);                     // op #4 DMA (> 4032 bytes): dropped
    s.CopyToDevice(&three, cells.handle.Offset(16, 8, cells), 8);      // op #5 inline: dropped
    s.CopyFromDevice(&back, cells.handle, 8);                          // op #6 dropped
    s.AddCallback([&] { callback_ran = true; });                       // op #7 dropped
    gate.Open();
    ASSERT_TRUE(SettlesWithin(s));
    try {
        s.Synchronize();
        ADD_FAILURE() << "Synchronize did not throw";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceError) << e.what();
        EXPECT_NE(std::string(e.what()).find("op #2"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("Launch"), std::string::npos) << e.what();
        EXPECT_EQ(e.context().op_index, 2u);
        EXPECT_EQ(e.context().stream, s.stream_index());
        EXPECT_NE(e.context().device_code, 0u);
        EXPECT_NE(e.context().device_code, uint32_t(SPYRE_ERR_CANCELED));
        EXPECT_FALSE(e.context().device.empty());
    }
    EXPECT_EQ(s.Query(), StreamStatus::Faulted);
    ASSERT_TRUE(s.LastError().has_value());
    EXPECT_EQ(s.LastError()->context().op_index, 2u);
    EXPECT_EQ(s.completed(), s.enqueued()) << "dropped ops count as completed";
    // Work behind the failure never happened.
    EXPECT_EQ(Peek64(dev, cells.handle), 1u);
    EXPECT_EQ(Peek64(dev, cells.handle.Offset(8, 8, cells)), 0u) << "an op after the failure ran";
    EXPECT_EQ(Peek64(dev, cells.handle.Offset(16, 8, cells)), 0u) << "an op after the failure ran";
    EXPECT_EQ(Peek(dev, junk.handle, 4096), garbage) << "a DMA copy after the failure ran";
    EXPECT_EQ(back, 0xBADu);
    EXPECT_FALSE(callback_ran.load());
    EXPECT_GE(dev.scheduler().Stats().dropped, 1u);

    // Enqueues on the faulted stream throw its error.
    EXPECT_SPYRE_ERROR(s.CopyToDevice(&one, cells.handle, 8), DeviceError, "op #2");
    EXPECT_SPYRE_ERROR(s.Launch(junk.handle), DeviceError, "op #2");
    EXPECT_SPYRE_ERROR(s.AddCallback([] {}), DeviceError, "op #2");
    // Other streams are unaffected.
    const uint64_t nine = 9;
    uint64_t other_back = 0;
    other.CopyToDevice(&nine, cells.handle.Offset(24, 8, cells), 8);
    other.CopyFromDevice(&other_back, cells.handle.Offset(24, 8, cells), 8);
    other.Synchronize();
    EXPECT_EQ(other_back, 9u);
    EXPECT_EQ(other.Query(), StreamStatus::Idle);
    // Reset makes the stream usable again.
    s.Reset();
    EXPECT_EQ(s.Query(), StreamStatus::Idle);
    EXPECT_FALSE(s.LastError().has_value());
    s.CopyToDevice(&two, cells.handle.Offset(8, 8, cells), 8);
    s.CopyFromDevice(&back, cells.handle.Offset(8, 8, cells), 8);
    s.Synchronize();
    EXPECT_EQ(back, 2u);
    s.Reset();  // a no-op on a healthy stream
    EXPECT_EQ(s.Query(), StreamStatus::Idle);
}

// Three control blocks: write `first` to cells[0], launch garbage (fails on
// the device), write `third` to cells[1]; both cells start at 0.
struct FailingGroup {
    explicit FailingGroup(Device& dev)
        : dev(dev), junk(dev.allocator().Allocate(4096)), cells(dev.allocator().Allocate(64)), blocks(3) {
        std::vector<uint8_t> garbage(4096, 0x5C);
        dev.dma().Wait(dev.dma().CopyToDevice(garbage.data(), junk.handle, 4096));
        Poke64(dev, cells.handle, 0);
        Poke64(dev, second_cell(), 0);
        blocks[0].kind = ControlBlock::Kind::CopyToDevice;
        blocks[0].device_addr = Addr(dev, cells.handle, 8);
        blocks[0].size = 8;
        blocks[0].src = &first;
        blocks[1].kind = ControlBlock::Kind::Launch;
        blocks[1].device_addr = Addr(dev, junk.handle, 256);
        blocks[1].size = 256;
        blocks[2].kind = ControlBlock::Kind::CopyToDevice;
        blocks[2].device_addr = Addr(dev, second_cell(), 8);
        blocks[2].size = 8;
        blocks[2].src = &third;
    }
    DeviceHandle second_cell() const { return cells.handle.Offset(8, 8, cells); }
    // Only the first write ran: the failure cancelled the rest of the chain.
    void ExpectCancelledAfterFirst() const {
        EXPECT_EQ(Peek64(dev, cells.handle), first);
        EXPECT_EQ(Peek64(dev, second_cell()), 0u) << "the third CB of the chain ran";
    }
    Device& dev;
    DeviceAllocation junk, cells;
    const uint64_t first = 0x1111, third = 0x3333;
    std::vector<ControlBlock> blocks;
};

TEST_F(StreamTest, FailureInsideAGroupCancelsTheRestOfTheChainOnTheDevice) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    FailingGroup g(dev);
    const uint64_t base = s.enqueued();
    s.EnqueueGroup(g.blocks);
    EXPECT_EQ(s.enqueued(), base + 3);
    ASSERT_TRUE(SettlesWithin(s));
    try {
        s.Synchronize();
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceError);
        EXPECT_EQ(e.context().op_index, base + 1) << e.what();
    }
    g.ExpectCancelledAfterFirst();
    EXPECT_GE(dev.scheduler().Stats().dropped, 1u);
    s.Reset();
    std::vector<ControlBlock> empty;
    s.EnqueueGroup(empty);  // nothing
    EXPECT_EQ(s.enqueued(), base + 3);
}

// A stream's next turn may wait in the ring behind the one before it (its
// ring stream, contract 1.4, lets the device cancel it). Here the first turn
// blocks on a device semaphore, the second goes in behind it, then the first
// fails: the device cancels the second, the event recorded after it fires
// with the error, and Reset lets the stream go on (its ring stream restarts).
TEST_F(StreamTest, ATurnQueuedBehindAFailingOneIsCancelledOnTheDevice) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    FailingGroup g(dev);
    DeviceAllocation sem = dev.allocator().Allocate(8), marker = dev.allocator().Allocate(8);
    Poke64(dev, sem.handle, 0);
    Poke64(dev, marker.handle, 0);
    std::vector<ControlBlock> first(2);
    first[0].kind = ControlBlock::Kind::SemWait;
    first[0].device_addr = Addr(dev, sem.handle, 8);
    first[0].value = 1;
    first[1] = g.blocks[1];  // a launch of garbage: fails on the device
    const uint64_t base = s.enqueued(), cbs = dev.scheduler().Stats().ring_cbs;
    s.EnqueueGroup(first);
    ASSERT_TRUE(Eventually([&] { return dev.scheduler().Stats().ring_cbs >= cbs + 2; }));
    const uint64_t value = 0x77;
    s.CopyToDevice(&value, marker.handle, 8);  // inline: a ring op
    Event recorded(dev);
    recorded.Record(s);
    ASSERT_TRUE(Eventually([&] { return dev.scheduler().Stats().ring_cbs >= cbs + 3; }))
        << "the second turn did not go into the ring behind the first";
    EXPECT_EQ(s.Query(), StreamStatus::Busy);
    Poke64(dev, sem.handle, 1);  // the first turn goes on, and fails
    ASSERT_TRUE(SettlesWithin(s));
    const std::string failed_op = "op #" + std::to_string(base + 1);
    EXPECT_SPYRE_ERROR(s.Synchronize(), DeviceError, failed_op);
    EXPECT_EQ(Peek64(dev, marker.handle), 0u) << "the turn behind the failure ran";
    EXPECT_SPYRE_ERROR(recorded.Synchronize(), DeviceError, failed_op);
    s.Reset();
    s.CopyToDevice(&value, marker.handle, 8);
    recorded.Record(s);
    s.Synchronize();
    recorded.Synchronize();
    EXPECT_EQ(Peek64(dev, marker.handle), value) << "the stream's ring stream did not restart";
}

TEST_F(StreamTest, ThrowingHostCallbackBecomesTheStickyError) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    DeviceAllocation cell = dev.allocator().Allocate(8);
    Poke64(dev, cell.handle, 0);
    const uint64_t v = 4;
    // Hold the scheduler thread (on another stream) while both ops go in.
    FlexStream holder = dev.CreateStream();
    Gate gate;
    holder.AddCallback(gate.Callback());
    ASSERT_TRUE(gate.WaitEntered());
    s.AddCallback([] { throw std::runtime_error("callback exploded"); });  // op #0
    s.CopyToDevice(&v, cell.handle, 8);                                    // op #1 dropped
    gate.Open();
    ASSERT_TRUE(SettlesWithin(s));
    try {
        s.Synchronize();
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::TaskFailed) << e.what();  // user code raised (it was Internal, "a bug in spyre")
        EXPECT_NE(std::string(e.what()).find("callback exploded"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("op #0"), std::string::npos) << e.what();
        EXPECT_EQ(e.context().op_index, 0u);
    }
    EXPECT_EQ(Peek64(dev, cell.handle), 0u);
    s.Reset();
    // A spyre::Error keeps its kind.
    s.AddCallback([] { throw Error(ErrorKind::Unsupported, "not today"); });
    EXPECT_SPYRE_ERROR(s.Synchronize(), Unsupported, "not today");
    s.Reset();
    s.AddCallback([] { throw 42; });
    EXPECT_SPYRE_ERROR(s.Synchronize(), TaskFailed, "host callback threw");
    s.Reset();
    s.CopyToDevice(&v, cell.handle, 8);
    s.Synchronize();
    EXPECT_EQ(Peek64(dev, cell.handle), 4u);
}

TEST_F(StreamTest, WaitingInsideAHostCallbackIsRefused) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream(), idle = dev.CreateStream();
    Event e(dev);
    std::optional<Error> own, other, device_wide, event;
    s.AddCallback([&] {
        try {
            s.Synchronize();
        } catch (const Error& err) {
            own = err;
        }
        try {
            idle.Synchronize();  // idle: fails all the same, not only when it would block
        } catch (const Error& err) {
            other = err;
        }
        try {
            dev.Synchronize();
        } catch (const Error& err) {
            device_wide = err;
        }
        try {
            e.Synchronize();
        } catch (const Error& err) {
            event = err;
        }
    });
    ASSERT_TRUE(SettlesWithin(s));
    s.Synchronize();  // the callback caught everything: the stream is healthy
    for (auto* err : {&own, &other, &device_wide, &event}) {
        ASSERT_TRUE(err->has_value());
        EXPECT_EQ((*err)->kind(), ErrorKind::InvalidArgument) << (*err)->what();
        EXPECT_NE(std::string((*err)->what()).find("host callback"), std::string::npos) << (*err)->what();
    }
}

TEST_F(StreamTest, BadInputIsRefusedAndNothingIsEnqueued) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    DeviceAllocation a = dev.allocator().Allocate(256);
    uint8_t host[512] = {};
    const uint64_t before = s.enqueued();
    EXPECT_SPYRE_ERROR(s.CopyToDevice(nullptr, a.handle, 8), InvalidArgument, "null host address");
    EXPECT_SPYRE_ERROR(s.CopyFromDevice(nullptr, a.handle, 8), InvalidArgument, "null host address");
    EXPECT_SPYRE_ERROR(s.CopyToDevice(host, a.handle, 0), InvalidArgument, "0 bytes");
    EXPECT_SPYRE_ERROR(s.CopyFromDevice(host, a.handle, 0), InvalidArgument, "0 bytes");
    // Ranges that leave the allocation.
    EXPECT_THROW(s.CopyToDevice(host, a.handle, 257), Error);
    EXPECT_THROW(s.CopyFromDevice(host, a.handle, 512), Error);
    try {
        s.CopyToDevice(host, a.handle, 257);
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    }
    // A handle no allocation covers.
    const DeviceHandle wild = PFDeviceHandle{~0ull - 4096};
    EXPECT_THROW(s.CopyToDevice(host, wild, 8), Error);
    try {
        s.CopyToDevice(host, wild, 8);
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    }
    // A freed handle.
    DeviceAllocation freed = dev.allocator().Allocate(128);
    dev.allocator().Free(freed.handle);
    try {
        s.CopyToDevice(host, freed.handle, 8);
        ADD_FAILURE() << "freed handle accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    }
    EXPECT_THROW(s.Launch(freed.handle), Error);
    // A VF handle on a PF device.
    try {
        s.CopyToDevice(host, VFDeviceHandle{3, 0}, 8);
        ADD_FAILURE() << "foreign handle accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
    }
    // Launch with a bad program size.
    EXPECT_SPYRE_ERROR(s.Launch(a.handle, 0), InvalidArgument, "program");
    EXPECT_SPYRE_ERROR(s.Launch(a.handle, 63), InvalidArgument, "63-byte program");
    EXPECT_SPYRE_ERROR(s.Launch(a.handle, (1ull << 20) + 8), InvalidArgument, "program");
    EXPECT_THROW(s.Launch(a.handle, 512), Error);  // larger than its allocation
    DeviceAllocation tiny = dev.allocator().Allocate(16);
    EXPECT_THROW(s.Launch(tiny.handle), Error);  // no room for a header
    EXPECT_SPYRE_ERROR(s.AddCallback(nullptr), InvalidArgument, "empty callback");
    EXPECT_EQ(s.enqueued(), before) << "a refused call enqueued something";
    EXPECT_EQ(s.Query(), StreamStatus::Idle);
    s.Synchronize();
}

namespace {

// Synchronize on a thread of its own, so that a hang fails the caller's
// bounded wait on the future: what it threw, or nothing.
std::future<std::optional<Error>> SynchronizeAsync(FlexStream& s) {
    return std::async(std::launch::async, [&s] {
        try {
            s.Synchronize();
            return std::optional<Error>();
        } catch (const Error& e) {
            return std::optional<Error>(e);
        }
    });
}

}  // namespace

TEST_F(StreamTest, DeviceLossFailsQueuedWorkAndLaterEnqueues) {
    Device dev = OpenDevice();
    std::vector<FlexStream> streams;
    for (int i = 0; i < 3; ++i) streams.push_back(dev.CreateStream());
    DeviceAllocation a = dev.allocator().Allocate(1 << 20);
    std::vector<uint64_t> v(1 << 17);
    std::iota(v.begin(), v.end(), 0);
    Gate gate;
    streams[0].AddCallback(gate.Callback());
    ASSERT_TRUE(gate.WaitEntered());
    for (int i = 0; i < 2000; ++i)
        for (auto& s : streams) s.CopyToDevice(&v[i], a.handle.Offset(8ull * i, 8, a), 8);
    streams[1].CopyToDevice(v.data(), a.handle, 1 << 20);
    streams[2].CopyFromDevice(v.data(), a.handle, 1 << 20);
    daemon().Signal(SIGKILL);
    gate.Open();
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& s : streams) {
        // Bounded: a hang fails here instead of at the suite timeout.
        auto done = SynchronizeAsync(s);
        ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "Synchronize hangs";
        const std::optional<Error> err = done.get();
        ASSERT_TRUE(err.has_value()) << "stream " << s.stream_index() << " completed on a dead device";
        EXPECT_EQ(err->kind(), ErrorKind::DeviceLost) << err->what();
        EXPECT_EQ(std::string(err->what()).find("device lost: device lost"), std::string::npos) << err->what();
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RecordProperty("loss_detected_s", std::to_string(secs));
    for (auto& s : streams) {
        EXPECT_EQ(s.Query(), StreamStatus::Faulted);
        EXPECT_EQ(s.completed(), s.enqueued());
        EXPECT_SPYRE_ERROR(s.CopyToDevice(v.data(), a.handle, 8), DeviceLost, "");
    }
    // A reset stream still cannot enqueue on a lost device.
    streams[0].Reset();
    EXPECT_SPYRE_ERROR(streams[0].CopyToDevice(v.data(), a.handle, 8), DeviceLost, "");
    EXPECT_SPYRE_ERROR(dev.default_stream().AddCallback([] {}), DeviceLost, "");
    EXPECT_SPYRE_ERROR(dev.CreateStream(), DeviceLost, "");
    dev.Synchronize();  // returns: everything completed (failed)
}

// A daemon stopped with SIGSTOP: its process lives and it writes no GONE,
// so Synchronize used to wait out the driver's 30 s timeout per wait. Its
// heartbeat stands still (contract 3.3): the ring's work fails as
// DeviceLost ("stopped responding") within the driver's bound, and the
// stream says so after the daemon goes on.
TEST_F(StreamTest, RingWorkOnAStoppedDaemonFailsAsDeviceLostWithinTheHeartbeatBound) {
    ScopedEnv bound("SPYRE_HEARTBEAT_TIMEOUT_MS", "1000");
    const spyre::test::ResumeAtScopeEnd go_on(daemon());
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    DeviceAllocation a = dev.allocator().Allocate(4096);
    std::vector<uint64_t> v(512), back(512, 0);
    std::iota(v.begin(), v.end(), 7);
    for (int i = 0; i < 64; ++i) s.CopyToDevice(&v[i], a.handle.Offset(8ull * i, 8, a), 8);  // inline: the ring
    s.Synchronize();  // alive
    daemon().Signal(SIGSTOP);
    ASSERT_TRUE(WaitUntilStopped(daemon().pid())) << "the daemon did not stop";
    for (int i = 64; i < 128; ++i) s.CopyToDevice(&v[i], a.handle.Offset(8ull * i, 8, a), 8);
    auto done = SynchronizeAsync(s);
    // Bounded: the bound and a health period or two; a hang fails here.
    ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "Synchronize hangs";
    const std::optional<Error> err = done.get();
    ASSERT_TRUE(err.has_value()) << "ring work completed on a stopped device";
    EXPECT_EQ(err->kind(), ErrorKind::DeviceLost) << err->what();
    EXPECT_NE(err->message().find("stopped responding: its heartbeat has not moved for 1000 ms"), std::string::npos)
        << err->what();
    daemon().Signal(SIGCONT);
    EXPECT_EQ(s.Query(), StreamStatus::Faulted);
    EXPECT_SPYRE_ERROR(s.CopyToDevice(v.data(), a.handle, 8), DeviceLost, "stopped responding");
}

// A process whose daemon stops while it holds a device, and which does not
// wait on the device again: destroying the Device closes its function, and
// the close's hand-over request would wait for the stopped daemon for
// ever. It gives up after the heartbeat's bound, so the process can end.
TEST_F(StreamTest, DestroyingADeviceOfAStoppedDaemonEndsWithinTheHeartbeatBound) {
    ScopedEnv bound("SPYRE_HEARTBEAT_TIMEOUT_MS", "500");
    const spyre::test::ResumeAtScopeEnd go_on(daemon());
    std::optional<Device> dev;
    dev.emplace(OpenDevice(1));
    std::optional<FlexStream> s;
    s.emplace(dev->CreateStream());
    const DeviceAllocation a = dev->allocator().Allocate(4096);
    std::vector<uint64_t> v(512, 0x5a5a5a5a5a5a5a5aull), back(512, 0);
    s->CopyToDevice(v.data(), a.handle, 4096);
    s->CopyFromDevice(back.data(), a.handle, 4096);
    s->Synchronize();
    ASSERT_EQ(back, v);
    daemon().Signal(SIGSTOP);
    ASSERT_TRUE(WaitUntilStopped(daemon().pid())) << "the daemon did not stop";
    auto destroyed = std::async(std::launch::async, [&] {
        s.reset();
        dev.reset();
    });
    const bool ended = destroyed.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    daemon().Signal(SIGCONT);  // a hung destroy finishes, so the test fails rather than hangs
    ASSERT_TRUE(ended) << "destroying a Device waits for its stopped daemon";
    destroyed.get();
    // The daemon went on and the function is free again.
    std::optional<Device> again;
    for (int look = 0; look < 500 && !again; ++look) {
        try {
            again.emplace(OpenDevice(1));
        } catch (const Error& e) {
            ASSERT_EQ(e.kind(), ErrorKind::Busy) << e.what();
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    ASSERT_TRUE(again.has_value()) << "the function stayed held after its daemon went on";
    DeviceAllocation b = again->allocator().Allocate(4096);
    FlexStream t = again->CreateStream();
    t.CopyFromDevice(back.data(), b.handle, 4096);
    t.Synchronize();
    EXPECT_EQ(back, std::vector<uint64_t>(512, 0)) << "the next owner sees the last owner's bytes";
}

// Large copies go to the DMA engine, beside the ring: with no ring work in
// flight nothing else would look at the device, so the copy itself must see
// that the daemon is gone (its shared memory lingers, orphaned) and fail the
// stream with DeviceLost. Both directions, each on its own stream.
TEST_F(StreamTest, LargeCopiesOnAKilledDeviceFailWithDeviceLost) {
    Device dev = OpenDevice(1, {});
    FlexStream up = dev.CreateStream();
    FlexStream down = dev.CreateStream();
    constexpr uint64_t kSize = 64ull << 20;
    DeviceAllocation a = dev.allocator().Allocate(kSize);
    std::vector<uint8_t> v(kSize, 0x5A);
    up.CopyToDevice(v.data(), a.handle, kSize);
    up.Synchronize();  // alive: fine

    daemon().Signal(SIGKILL);
    ASSERT_TRUE(WaitForExit(daemon().pid())) << "the daemon outlived SIGKILL";
    Watchdog watchdog(std::chrono::seconds(60), "FlexStream copies on a dead device");
    up.CopyToDevice(v.data(), a.handle, kSize);
    down.CopyFromDevice(v.data(), a.handle, kSize);
    for (FlexStream* s : {&up, &down}) {
        try {
            s->Synchronize();
            ADD_FAILURE() << "stream " << s->stream_index() << ": a 64 MiB copy succeeded on a dead device";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::DeviceLost) << e.what();
            EXPECT_NE(std::string(e.what()).find(dev.pci_address()), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(s == &up ? "CopyToDevice" : "CopyFromDevice"), std::string::npos)
                << e.what();
        }
        EXPECT_EQ(s->Query(), StreamStatus::Faulted);
    }
}

// A child forked after the device was opened: the device's threads stayed
// with the parent, so its copy and wait used to hang for good. It is
// InvalidArgument at once, saying to open the device again; the parent's
// device goes on working.
TEST_F(StreamTest, AForkedChildCannotUseItsParentsDevice) {
    Device dev = OpenDevice();
    DeviceBuffer buf = dev.AllocateBuffer(4096);
    std::vector<uint8_t> bytes(4096, 0x5a), back(4096, 0);
    FlexStream& kept = dev.default_stream();  // a stream the program holds across the fork
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::alarm(20);  // a hang ends the child, and the test sees it
        // Query and LastError read the parent's stream state: a stream busy
        // at the fork read Busy in the child for good (found probing).
        for (int call = 0; call < 2; ++call) {
            try {
                if (call == 0) (void)kept.Query();
                else (void)kept.LastError();
                ::_exit(4 + call);
            } catch (const Error& e) {
                if (e.kind() != ErrorKind::InvalidArgument ||
                    std::string(e.what()).find("before it forked") == std::string::npos)
                    ::_exit(1);
            }
        }
        int code = 3;
        try {
            dev.default_stream().CopyToDevice(bytes.data(), buf.handle(), bytes.size());
            dev.default_stream().Synchronize();
            code = 2;  // it worked: the child reached the parent's device
        } catch (const Error& e) {
            code = e.kind() == ErrorKind::InvalidArgument &&
                           std::string(e.what()).find("before it forked") != std::string::npos &&
                           std::string(e.what()).find("open the device again in the child") != std::string::npos
                       ? 0
                       : 1;
        }
        ::_exit(code);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "the child hung or crashed (status " << status << ")";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: another error, 2: the copy went through, 4/5: Query/LastError answered";
    dev.default_stream().CopyToDevice(bytes.data(), buf.handle(), bytes.size());
    dev.default_stream().CopyFromDevice(back.data(), buf.handle(), back.size());
    dev.default_stream().Synchronize();
    EXPECT_EQ(back, bytes);
}

// The same through the allocator and DMA engine a program kept from
// before the fork: only the Device's accessors were checked, so a child
// holding `dev.allocator()` and `dev.dma()` allocated, read and overwrote
// the parent's live block (found probing from outside, 4 of 4). Each call
// is InvalidArgument in the child; the parent's bytes stay.
TEST_F(StreamTest, AForkedChildCannotUseTheParentsAllocatorOrDmaEngineItKept) {
    Device dev = OpenDevice();
    SpyreAllocator& allocator = dev.allocator();
    DMAEngine& dma = dev.dma();
    DeviceAllocation block = allocator.Allocate(4096);
    std::vector<uint8_t> bytes(4096, 0x42), back(4096, 0);
    dma.Wait(dma.CopyToDevice(bytes.data(), block.handle, bytes.size()));
    const uint64_t address = allocator.DeviceAddress(block.handle, bytes.size());
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::alarm(20);  // a hang ends the child, and the test sees it
        std::vector<uint8_t> junk(4096, 0xee), read(4096, 0);
        int refused = 0, other = 0;
        auto expect_refused = [&](auto&& call) {
            try {
                call();
            } catch (const Error& e) {
                const bool named = e.kind() == ErrorKind::InvalidArgument &&
                                   std::string(e.what()).find("before it forked") != std::string::npos;
                (named ? refused : other) += 1;
            }
        };
        expect_refused([&] { allocator.Allocate(128); });
        expect_refused([&] { allocator.Stats(); });
        expect_refused([&] { allocator.Lookup(block.handle, 1); });
        expect_refused([&] { allocator.DeviceAddress(block.handle, 1); });
        expect_refused([&] { allocator.Free(block.handle); });
        expect_refused([&] { dma.CopyToDevice(junk.data(), block.handle, junk.size()); });
        expect_refused([&] { dma.CopyFromDevice(read.data(), block.handle, read.size()); });
        expect_refused([&] { dma.CopyToDeviceAt(junk.data(), address, junk.size()); });
        expect_refused([&] { dma.CopyFromDeviceAt(read.data(), address, read.size()); });
        expect_refused([&] { dma.CopyOnDevice(block.handle, block.handle, 64); });
        expect_refused([&] { dma.CopyToDevice(junk.data(), block.handle, junk.size(), ProgressCallback{}); });
        expect_refused([&] { dma.Wait(1); });
        expect_refused([&] { dma.Poll(1); });
        ::_exit(refused == 13 && other == 0 ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "the child hung or crashed (status " << status << ")";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "a call in the child was not refused as forked";
    dma.Wait(dma.CopyFromDevice(back.data(), block.handle, back.size()));
    EXPECT_EQ(back, bytes);  // the parent's block as it wrote it
    allocator.Free(block.handle);
}

TEST_F(StreamTest, DeviceLossWhileIdleIsSeenOnTheNextEnqueue) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    DeviceAllocation a = dev.allocator().Allocate(64);
    uint64_t v = 1;
    s.CopyToDevice(&v, a.handle, 8);
    s.Synchronize();
    daemon().Signal(SIGKILL);
    // The next ring submission finds the device gone: the stream fails with
    // DeviceLost (bounded), then enqueues throw it.
    auto done = std::async(std::launch::async, [&] {
        try {
            for (int i = 0; i < 100; ++i) {
                s.CopyToDevice(&v, a.handle, 8);
                s.Synchronize();
            }
        } catch (const Error& e) {
            return std::optional<Error>(e);
        }
        return std::optional<Error>();
    });
    ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready);
    const std::optional<Error> err = done.get();
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->kind(), ErrorKind::DeviceLost) << err->what();
}

// The group form of the public entrance: the blocks run as one LINKed
// chain (a failure cancels the rest on the device), and a malformed block
// refuses the whole group before any of it is queued.
TEST_F(StreamTest, QueueOperationsGroupIsOneChainCheckedWhole) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    FailingGroup g(dev);
    std::vector<ControlBlock> bad = g.blocks;
    bad[2].src = nullptr;
    const uint64_t base = s.enqueued();
    EXPECT_SPYRE_ERROR(dev.scheduler().QueueOperations(s.stream_index(), bad), InvalidArgument, "null host address");
    EXPECT_EQ(s.enqueued(), base) << "a refused group queues nothing";

    // A raw copy block whose device range runs past the function's memory,
    // or wraps 2^64, failed only later, as the stream's sticky error.
    uint8_t host[8] = {};
    for (uint64_t size : {uint64_t(1) << 62, ~uint64_t(0) - 4}) {
        ControlBlock copy;
        copy.kind = ControlBlock::Kind::CopyToDevice;
        copy.device_addr = 64;
        copy.src = host;
        copy.size = size;
        EXPECT_SPYRE_ERROR(dev.scheduler().QueueOperation(s.stream_index(), copy), InvalidArgument,
                           "runs past the function's memory");
    }
    EXPECT_EQ(s.enqueued(), base);

    dev.scheduler().QueueOperations(s.stream_index(), g.blocks);
    EXPECT_EQ(s.enqueued(), base + 3);
    EXPECT_SPYRE_ERROR(s.Synchronize(), DeviceError, "op #" + std::to_string(base + 1));
    g.ExpectCancelledAfterFirst();
    s.Reset();
}

// A daemon killed and started again on the same mount serves a new device
// tree: the lost Device's objects used to carry the same DeviceId (card,
// function, tree by directory), so its tensor read the new Device's memory
// and a copy to its handle overwrote the new owner's bytes (found from
// outside, 4 of 4 runs). Now they are WrongDevice on the new Device's
// streams, naming both trees.
TEST(DeviceTree, ADaemonRestartedOnTheSameMountIsAnotherDevice) {
    char dir[] = "/tmp/spyre-restart-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    const std::filesystem::path mount = dir;
    struct RemoveAtEnd {
        std::filesystem::path path;
        ~RemoveAtEnd() { std::filesystem::remove(path); }
    } remove_at_end{mount};
    driver::MockOptions options;
    options.vfs = 0;
    options.mem = "1G";
    options.mount = mount;
    driver::MockDaemon first = driver::MockDaemon::Start(options);
    Host old_host = Host::Open(HostOptions::DeviceRootAt(mount));
    Device old_dev = old_host.Open("0");
    const std::vector<float> seven(1024, 7.0f);
    DeviceBuffer old_buf = old_dev.AllocateBuffer(4096);
    old_dev.default_stream().CopyToDevice(seven.data(), old_buf.handle(), 4096);
    old_dev.default_stream().Synchronize();

    first.Signal(SIGKILL);
    ASSERT_TRUE(WaitForExit(first.pid()));
    first.Stop();  // unmounts the dead mount; the directory is ours, it stays
    driver::MockDaemon second = driver::MockDaemon::Start(options);
    ASSERT_EQ(second.mount(), mount);

    Host new_host = Host::Open(HostOptions::DeviceRootAt(mount));
    Device new_dev = new_host.Open("0");
    EXPECT_NE(new_dev.id(), old_dev.id());
    EXPECT_EQ(new_host.functions().at(0).id, new_dev.id()) << "a listed function and its Device differ";
    const std::vector<float> forty_two(1024, 42.0f);
    DeviceBuffer new_buf = new_dev.AllocateBuffer(4096);
    ASSERT_EQ(new_buf.handle().ToString(), old_buf.handle().ToString()) << "not the same address: no alias to test";
    new_dev.default_stream().CopyToDevice(forty_two.data(), new_buf.handle(), 4096);
    new_dev.default_stream().Synchronize();

    std::vector<float> out(1024, 0.0f);
    const std::string trees = "of device tree " + std::to_string(old_dev.id().tree);
    EXPECT_SPYRE_ERROR(new_dev.default_stream().CopyFromDevice(out.data(), old_buf.handle(), 4096), WrongDevice,
                       trees);
    EXPECT_SPYRE_ERROR(new_dev.default_stream().CopyToDevice(seven.data(), old_buf.handle(), 4096), WrongDevice,
                       trees);
    new_dev.default_stream().CopyFromDevice(out.data(), new_buf.handle(), 4096);
    new_dev.default_stream().Synchronize();
    EXPECT_EQ(out, forty_two) << "the new Device's memory was written through the lost one's handle";
}

// The ring runs CBs in order for every stream: a caller's SemWait queued
// before the SemWrite that releases it holds the write behind it until the
// card's watchdog stops the wait. The failure says so (it said "SemWait
// failed on the device: WATCHDOG", an outside probe); the write then runs.
// A short watchdog keeps the test short.
TEST(StreamSemaphores, AWaitQueuedBeforeItsWriteSaysWhyTheWatchdogStoppedIt) {
    HostOptions options = HostOptions::EmbeddedMock(1, 0, "1G");
    options.embedded_mock.extra_args = {"--watchdog-ms", "300"};
    Host host = Host::Open(options);
    Device dev = host.Open("0");
    FlexStream writer = dev.CreateStream(), waiter = dev.CreateStream();
    DeviceBuffer sem = dev.AllocateBuffer(64);
    const uint64_t zero = 0;
    writer.CopyToDevice(&zero, sem.handle(), 8);
    writer.Synchronize();
    const uint64_t address = sem.handle().pf().physical_address;
    ControlBlock wait{.kind = ControlBlock::Kind::SemWait, .device_addr = address, .value = 1};
    ControlBlock write{.kind = ControlBlock::Kind::SemWrite, .device_addr = address, .value = 1};
    // The wait reaches the ring first (queued at once, the scheduler may
    // send either stream's CB first).
    const uint64_t sent = dev.scheduler().Stats().ring_cbs;
    dev.scheduler().QueueOperation(waiter.stream_index(), wait);
    ASSERT_TRUE(Eventually([&] { return dev.scheduler().Stats().ring_cbs > sent; }));
    dev.scheduler().QueueOperation(writer.stream_index(), write);
    writer.Synchronize();  // ran once the watchdog stopped the wait
    try {
        waiter.Synchronize();
        ADD_FAILURE() << "the wait was never released";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceError) << e.what();
        EXPECT_EQ(e.context().device_code, uint32_t(SPYRE_ERR_WATCHDOG));
        EXPECT_NE(std::string(e.what()).find("SemWait failed on the device: WATCHDOG (the semaphore did not reach its "
                                             "value within the watchdog's period"),
                  std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("queue the write first"), std::string::npos) << e.what();
    }
    EXPECT_EQ(Peek64(dev, sem.handle()), 1u);
    // Queued in that order, the two just run.
    waiter.Reset();
    writer.CopyToDevice(&zero, sem.handle(), 8);
    writer.Synchronize();
    dev.scheduler().QueueOperation(writer.stream_index(), write);
    writer.Synchronize();
    dev.scheduler().QueueOperation(waiter.stream_index(), wait);
    waiter.Synchronize();
}
