// SPDX-License-Identifier: Apache-2.0
// Events (seed 001 open question 4): Record on one stream, Wait on another
// (settled on the host), Query/Synchronize/ElapsedTime, re-recording,
// and events recorded behind a failure.
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <optional>
#include <thread>

#include "stream_fixture.hpp"
#include "stream_test_util.hpp"

using namespace spyre;
using namespace spyre::test;

namespace {
std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 7 + (i >> 12));
    return v;
}

// A writes `in` to `buf` by DMA and records `written`; B waits for it, then
// reads `buf` back into `out`.
void WriteThenRead(FlexStream& a, FlexStream& b, Event& written, const std::vector<uint8_t>& in,
                   std::vector<uint8_t>& out, const DeviceHandle& buf) {
    a.CopyToDevice(in.data(), buf, in.size());
    written.Record(a);
    b.Wait(written);
    b.CopyFromDevice(out.data(), buf, out.size());
}
// Zeroes `gate` through `other` (its bytes, by DMA: the ring will be held),
// then holds the ring with a semaphore wait on A until gate's first word
// reads 1. Whether the wait reached the ring.
bool HoldRingOnGate(Device& dev, FlexStream& a, FlexStream& other, const DeviceHandle& gate,
                    const std::vector<uint8_t>& gate_bytes) {
    other.CopyToDevice(gate_bytes.data(), gate, gate_bytes.size());
    other.Synchronize();
    const SchedulerStats before = dev.scheduler().Stats();
    ControlBlock hold;
    hold.kind = ControlBlock::Kind::SemWait;
    hold.device_addr = Addr(dev, gate, 8);
    hold.value = 1;
    dev.scheduler().QueueOperation(a.stream_index(), hold);
    return Eventually([&] { return dev.scheduler().Stats().ring_cbs > before.ring_cbs; });
}
}  // namespace

TEST_F(StreamTest, EventOrdersALargeDmaWriteBeforeAnotherStreamsRead) {
    Device dev = OpenDevice();
    FlexStream a = dev.CreateStream(), b = dev.CreateStream();
    constexpr size_t kSize = 8u << 20;  // DMA, several chunks
    DeviceAllocation buf = dev.allocator().Allocate(kSize);
    for (uint8_t round = 1; round <= 3; ++round) {
        SCOPED_TRACE(int(round));
        const std::vector<uint8_t> in = Pattern(kSize, round);
        std::vector<uint8_t> out(kSize, 0);
        Event written(dev);
        WriteThenRead(a, b, written, in, out, buf.handle);
        ASSERT_TRUE(SettlesWithin(b));
        b.Synchronize();
        EXPECT_TRUE(written.Query());
        written.Synchronize();
        EXPECT_TRUE(in == out) << "B read the buffer before A's write completed";
        a.Synchronize();
    }
}

TEST_F(StreamTest, EventWaitOrdersRingWorkAcrossStreams) {
    // A: slow-ish program chain writes the value; B: waits, then snapshots it with a launch.
    Device dev = OpenDevice(1);
    FlexStream a = dev.CreateStream(), b = dev.CreateStream();
    DeviceAllocation cell = dev.allocator().Allocate(8), copy = dev.allocator().Allocate(8);
    const ProgramTable progs = ProgramTable::Upload(
        dev, {Fill8Program(Addr(dev, cell.handle, 8), 4242), Copy8Program(Addr(dev, cell.handle, 8), Addr(dev, copy.handle, 8))});
    const uint64_t zero = 0;
    a.CopyToDevice(&zero, cell.handle, 8);
    b.CopyToDevice(&zero, copy.handle, 8);
    a.Synchronize();
    b.Synchronize();
    Gate gate;
    Event ev(dev);
    a.AddCallback(gate.Callback());  // A (and the scheduler) held until B's wait is queued
    a.Launch(progs.handles[0]);
    ev.Record(a);
    b.Wait(ev);
    b.Launch(progs.handles[1]);
    uint64_t back = 0;
    b.CopyFromDevice(&back, copy.handle, 8);
    EXPECT_FALSE(ev.Query());
    gate.Open();
    ASSERT_TRUE(SettlesWithin(b));
    b.Synchronize();
    EXPECT_EQ(back, Fill8Value(4242));
    EXPECT_TRUE(ev.Query());
}

TEST_F(StreamTest, AnEventBehindHostWorkDoesNotQueueBehindAnotherStreamsRing) {
    // A holds the ring in a device-side semaphore wait (as a long LAUNCH
    // would). B copies by DMA and records an event; C waits for it and reads
    // by DMA. None of that needs the ring, so it must not wait for A: this
    // is what lets a copy stream overlap a compute stream.
    Device dev = OpenDevice();
    FlexStream a = dev.CreateStream(), b = dev.CreateStream(), c = dev.CreateStream();
    constexpr size_t kSize = 1u << 20;  // DMA, not inline in the ring
    DeviceAllocation gate = dev.allocator().Allocate(kSize), data = dev.allocator().Allocate(kSize);
    std::vector<uint8_t> gate_bytes(kSize, 0);
    const SchedulerStats before = dev.scheduler().Stats();
    ASSERT_TRUE(HoldRingOnGate(dev, a, b, gate.handle, gate_bytes)) << "A's semaphore wait never reached the ring";

    const std::vector<uint8_t> in = Pattern(kSize, 5);
    std::vector<uint8_t> out(kSize, 0);
    Event written(dev);
    WriteThenRead(b, c, written, in, out, data.handle);
    ASSERT_TRUE(Eventually([&] { return written.Query(); }, std::chrono::seconds(5)))
        << "B's record queued behind A's semaphore wait in the ring";
    ASSERT_TRUE(SettlesWithin(c, std::chrono::seconds(5))) << "C's wait queued behind A's semaphore wait";
    c.Synchronize();
    EXPECT_TRUE(in == out) << "C read the buffer before B's write completed";
    EXPECT_EQ(a.Query(), StreamStatus::Busy) << "the ring was not held meanwhile: the test proves nothing";
    EXPECT_GE(dev.scheduler().Stats().host_events - before.host_events, 2u);

    // Open the gate by DMA (the ring is still held), then wait on the
    // event from inside the ring: its semaphore was never written (the
    // record settled on the host), so that wait must not go to the device
    // as a semaphore wait.
    gate_bytes[0] = 1;
    b.CopyToDevice(gate_bytes.data(), gate.handle, kSize);
    ASSERT_TRUE(SettlesWithin(a));
    a.Synchronize();
    const uint64_t v = 77;
    uint64_t back = 0;
    DeviceAllocation cell = dev.allocator().Allocate(8);
    a.CopyToDevice(&v, cell.handle, 8);  // inline: A's wait may share its turn
    a.Wait(written);
    a.CopyFromDevice(&back, cell.handle, 8);
    ASSERT_TRUE(SettlesWithin(a));
    a.Synchronize();
    EXPECT_EQ(back, 77u);
}

TEST_F(StreamTest, EventQuerySynchronizeAndElapsedTime) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    Event start(dev), end(dev), never(dev);
    // Never recorded: complete, and Synchronize returns at once.
    EXPECT_TRUE(never.Query());
    never.Synchronize();
    EXPECT_SPYRE_ERROR(Event::ElapsedTime(never, never), InvalidArgument, "never recorded");

    Gate gate;
    start.Record(s);
    s.AddCallback(gate.Callback());
    end.Record(s);
    ASSERT_TRUE(gate.WaitEntered());
    EXPECT_TRUE(Eventually([&] { return start.Query(); }));
    EXPECT_FALSE(end.Query());
    EXPECT_SPYRE_ERROR(Event::ElapsedTime(start, end), NotReady, "not completed");
    EXPECT_SPYRE_ERROR(Event::ElapsedTime(start, never), InvalidArgument, "never recorded");
    EXPECT_SPYRE_ERROR(Event::ElapsedTime(never, start), InvalidArgument, "never recorded");
    gate.Open();
    end.Synchronize();
    EXPECT_TRUE(end.Query());
    const double ms = Event::ElapsedTime(start, end);
    EXPECT_GE(ms, 0.0);
    EXPECT_GE(Event::ElapsedTime(start, start), 0.0);
    EXPECT_EQ(Event::ElapsedTime(start, start), 0.0);
    s.Synchronize();
}

TEST_F(StreamTest, WaitOnANeverRecordedEventIsANoOp) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    Event e(dev);
    const uint64_t before = s.enqueued();
    s.Wait(e);
    EXPECT_EQ(s.enqueued(), before);
    uint64_t v = 5, back = 0;
    DeviceAllocation a = dev.allocator().Allocate(8);
    s.CopyToDevice(&v, a.handle, 8);
    s.CopyFromDevice(&back, a.handle, 8);
    ASSERT_TRUE(SettlesWithin(s));
    s.Synchronize();
    EXPECT_EQ(back, 5u);
}

TEST_F(StreamTest, ReRecordingMovesTheEvent) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    Event e(dev);
    e.Record(s);
    e.Synchronize();
    EXPECT_TRUE(e.Query());
    Gate gate;
    s.AddCallback(gate.Callback());
    e.Record(s);  // moves past the held callback
    ASSERT_TRUE(gate.WaitEntered());
    EXPECT_FALSE(e.Query()) << "Query must follow the latest Record";
    // Waiting now waits for the second record.
    FlexStream other = dev.CreateStream();
    std::atomic<bool> other_ran{false};
    other.Wait(e);
    other.AddCallback([&] { other_ran = true; });
    EXPECT_FALSE(other_ran.load());
    gate.Open();
    e.Synchronize();
    ASSERT_TRUE(SettlesWithin(other));
    other.Synchronize();
    EXPECT_TRUE(other_ran.load());
    for (int i = 0; i < 20; ++i) e.Record(i % 2 ? s : other);
    s.Synchronize();
    other.Synchronize();
    ASSERT_TRUE(Eventually([&] { return e.Query(); }, std::chrono::seconds(10)))
        << "records on two streams completed out of order and moved the event backwards";
    e.Synchronize();
}

// Threads recording one event at once, each on its stream, with waits on
// it between: nothing hangs, and once they are done a Record behind held
// work leaves the event pending until that work is done (two records that
// took one sequence would make it look done at once).
TEST_F(StreamTest, ConcurrentRecordsOfOneEventKeepItsOrder) {
    Device dev = OpenDevice();
    Event e(dev);
    constexpr int kThreads = 4, kRecords = 300;
    std::vector<FlexStream> streams;
    for (int t = 0; t < kThreads; ++t) streams.push_back(dev.CreateStream());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < kRecords; ++i) {
                if (i % 8 == 0) streams[t].Wait(e);
                e.Record(streams[t]);
            }
        });
    for (auto& th : threads) th.join();
    for (FlexStream& s : streams) ASSERT_TRUE(SettlesWithin(s));
    e.Synchronize();
    FlexStream last = dev.CreateStream();
    Gate gate;
    last.AddCallback(gate.Callback());
    e.Record(last);
    ASSERT_TRUE(gate.WaitEntered());
    EXPECT_FALSE(e.Query()) << "the record behind held work looks done";
    gate.Open();
    e.Synchronize();
    EXPECT_TRUE(e.Query());
}

namespace {
bool OnThreadNamed(const char* name) {
    char buf[32] = {};
    pthread_getname_np(pthread_self(), buf, sizeof buf);
    return std::string(buf) == name;
}
}  // namespace

// Re-recording on another stream while the first record is still pending:
// the older record completes last and must not move the event (or its
// semaphore) backwards, or Synchronize and later Waits never finish.
// A wait is for the newest record at the time of the call. A later record
// of the same event on another stream, completing first, used to release it
// (the event kept only the highest sequence completed), and B ran before
// A's work was done.
TEST_F(StreamTest, AWaitIsNotReleasedByALaterRecordOnAnotherStream) {
    Device dev = OpenDevice();
    FlexStream a = dev.CreateStream(), b = dev.CreateStream(), c = dev.CreateStream();
    constexpr size_t kSize = 1u << 20;  // DMA, not inline in the ring A holds
    DeviceAllocation gate = dev.allocator().Allocate(kSize);
    std::vector<uint8_t> gate_bytes(kSize, 0);
    ASSERT_TRUE(HoldRingOnGate(dev, a, c, gate.handle, gate_bytes)) << "A's semaphore wait never reached the ring";
    std::atomic<bool> a_done{false}, b_ran{false};
    a.AddCallback([&] { a_done = true; });
    Event e(dev);
    e.Record(a);  // #1, behind A's held wait
    b.Wait(e);    // for #1
    b.AddCallback([&] { b_ran = !a_done.load(); });
    e.Record(c);  // #2 on an idle stream: completes at once
    ASSERT_TRUE(SettlesWithin(c));
    c.Synchronize();
    EXPECT_TRUE(e.Query()) << "the newest record (#2) is done";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(b_ran.load()) << "B's wait for record #1 was released by record #2";
    EXPECT_EQ(b.Query(), StreamStatus::Busy);
    gate_bytes[0] = 1;
    c.CopyToDevice(gate_bytes.data(), gate.handle, kSize);
    ASSERT_TRUE(SettlesWithin(a));
    ASSERT_TRUE(SettlesWithin(b));
    b.Synchronize();
    EXPECT_TRUE(a_done.load());
    EXPECT_FALSE(b_ran.load()) << "B ran before A's work was done";
    e.Synchronize();
}

TEST_F(StreamTest, OlderRecordCompletingLastDoesNotRewindTheEvent) {
    // A DMA completion hook that holds A's large copy (off the scheduler thread).
    auto gate = std::make_shared<Gate>();
    auto armed = std::make_shared<std::atomic<bool>>(false);
    DeviceOptions o;
    o.dma.on_complete = [gate, armed] {
        if (armed->load() && !OnThreadNamed("spyre-sched") && armed->exchange(false)) gate->Wait();
    };
    Device dev = OpenDevice(-1, o);
    FlexStream a = dev.CreateStream(), c = dev.CreateStream(), b = dev.CreateStream(), d = dev.CreateStream();
    constexpr size_t kSize = 4u << 20;  // past the DMA fast path: completes on the queue's thread
    DeviceAllocation buf = dev.allocator().Allocate(kSize), cell = dev.allocator().Allocate(8);
    const std::vector<uint8_t> in = Pattern(kSize, 9);
    Event e(dev);
    armed->store(true);
    a.CopyToDevice(in.data(), buf.handle, kSize);
    e.Record(a);  // record #1, held behind A's copy
    if (!gate->WaitEntered(1, std::chrono::seconds(20))) {
        gate->Open();
        GTEST_SKIP() << "the copy completed on the scheduler thread; cannot hold it";
    }
    e.Record(c);  // record #2 on an idle stream: reaches the device first
    ASSERT_TRUE(SettlesWithin(c));
    c.Synchronize();
    EXPECT_TRUE(e.Query());
    b.Wait(e);  // waits for #2 (already done)
    const uint64_t v = 77;
    b.CopyToDevice(&v, cell.handle, 8);
    ASSERT_TRUE(SettlesWithin(b));
    b.Synchronize();
    gate->Open();  // now #1 completes, after #2
    ASSERT_TRUE(SettlesWithin(a));
    a.Synchronize();
    ASSERT_TRUE(Eventually([&] { return e.Query(); }, std::chrono::seconds(10))) << "the event moved backwards";
    e.Synchronize();
    // A later wait for the latest record still finds the semaphore at #2.
    uint64_t back = 0;
    d.Wait(e);
    d.CopyFromDevice(&back, cell.handle, 8);
    ASSERT_TRUE(SettlesWithin(d));
    d.Synchronize();
    EXPECT_EQ(back, 77u);
}

// An event recorded behind a failure still fires, so the waiting stream does
// not hang; Event::Synchronize reports the recording stream's error.
TEST_F(StreamTest, EventRecordedAfterAFaultFiresAndCarriesTheError) {
    Device dev = OpenDevice();
    FlexStream a = dev.CreateStream(), b = dev.CreateStream();
    DeviceAllocation junk = dev.allocator().Allocate(4096), cell = dev.allocator().Allocate(8);
    std::vector<uint8_t> garbage(4096, 0xCD);
    a.CopyToDevice(garbage.data(), junk.handle, 4096);
    a.Synchronize();
    Event e(dev);
    // Hold the scheduler thread so A's failure cannot come before the Record.
    FlexStream holder = dev.CreateStream();
    Gate gate;
    holder.AddCallback(gate.Callback());
    ASSERT_TRUE(gate.WaitEntered());
    a.Launch(junk.handle, 512);  // op #1 on A fails on the device
    e.Record(a);
    b.Wait(e);
    const uint64_t v = 31;
    uint64_t back = 0;
    b.CopyToDevice(&v, cell.handle, 8);
    b.CopyFromDevice(&back, cell.handle, 8);
    gate.Open();
    ASSERT_TRUE(SettlesWithin(b)) << "B hangs on an event recorded behind A's failure";
    b.Synchronize();  // B itself is healthy
    EXPECT_EQ(back, 31u);
    EXPECT_TRUE(e.Query());
    try {
        e.Synchronize();
        ADD_FAILURE() << "Event::Synchronize did not report A's error";
    } catch (const Error& err) {
        EXPECT_EQ(err.kind(), ErrorKind::DeviceError) << err.what();
        EXPECT_EQ(err.context().stream, a.stream_index());
        EXPECT_NE(std::string(err.what()).find("op #1"), std::string::npos) << err.what();
    }
    EXPECT_SPYRE_ERROR(a.Synchronize(), DeviceError, "op #1");
    // After Reset, a new record on A is clean again.
    a.Reset();
    e.Record(a);
    e.Synchronize();
}

// A record that rides in the ring holds its event, and the event holds the
// device. Once the record's stream is done the caller may drop everything at
// once; the scheduler thread must have let go of the event by then, or the
// device's teardown would run on the scheduler thread and join it
// (std::terminate: "Resource deadlock avoided"; before the fix 1 run of this
// test in 3 with 40 rounds).
TEST_F(StreamTest, DroppingEverythingRightAfterARecordInTheRingTearsDownOnTheCallersThread) {
    for (int i = 0; i < 100; ++i) {
        Device dev = OpenDevice();
        FlexStream s = dev.CreateStream();
        DeviceAllocation cell = dev.allocator().Allocate(8);
        const uint64_t value = 1000 + i;
        Event recorded(dev);
        s.CopyToDevice(&value, cell.handle, 8);  // inline: the record rides behind it as a NOP
        recorded.Record(s);
        s.Synchronize();
        EXPECT_TRUE(recorded.Query());
        dev.allocator().Free(cell.handle);
    }  // event, stream and device dropped at once, every iteration
}

// A host callback whose closure holds the last reference to the device (a
// Device, or a stream only its own callback keeps) lets go of it on the
// scheduler thread: the device's teardown, which joins that thread, runs on
// a thread of its own, and the device closes. Torn down there, it aborted
// the process ("Resource deadlock avoided": an outside probe).
TEST_F(StreamTest, ACallbackHoldingTheLastReferenceClosesTheDeviceOffItsThread) {
    for (const bool holds_device : {true, false}) {
        SCOPED_TRACE(holds_device ? "the Device" : "its own stream");
        std::atomic<bool> ran{false};
        {
            Device dev = OpenDevice();
            auto slow = [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); };
            if (holds_device) {
                auto held = std::make_shared<Device>(std::move(dev));
                held->default_stream().AddCallback(slow);
                held->default_stream().AddCallback([held, &ran] { ran = true; });
            } else {
                auto held = std::make_shared<FlexStream>(dev.CreateStream());
                held->AddCallback(slow);
                held->AddCallback([held, &ran] { ran = true; });
            }
        }  // only the callback holds it now
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        std::optional<Device> again;
        while (!again) {
            try {
                again.emplace(OpenDevice());  // Busy while the old one closes
            } catch (const Error& e) {
                ASSERT_EQ(e.kind(), ErrorKind::Busy) << e.what();
                ASSERT_LT(std::chrono::steady_clock::now(), until) << "the device never closed: " << e.what();
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
        }
        EXPECT_TRUE(ran.load());
        uint64_t value = 42, back = 0;
        DeviceAllocation cell = again->allocator().Allocate(8);
        FlexStream s = again->CreateStream();
        s.CopyToDevice(&value, cell.handle, 8);
        s.CopyFromDevice(&back, cell.handle, 8);
        s.Synchronize();
        EXPECT_EQ(back, 42u);
        again->allocator().Free(cell.handle);
    }
}

TEST_F(StreamTest, EventOfAnotherDeviceIsRefused) {
    Device d1 = OpenDevice(1);
    Device d2 = OpenDevice(2);
    FlexStream s1 = d1.CreateStream();
    Event e2(d2);
    EXPECT_SPYRE_ERROR(e2.Record(s1), WrongDevice, "event belongs to " + d2.pci_address() + ", stream to " + d1.pci_address());
    EXPECT_SPYRE_ERROR(s1.Wait(e2), WrongDevice, "event belongs to " + d2.pci_address() + ", stream to " + d1.pci_address());
    EXPECT_EQ(s1.enqueued(), 0u);
    // Two devices' stamps do not subtract: ElapsedTime used to return a number.
    Event e1(d1);
    e1.Record(s1);
    e1.Synchronize();
    FlexStream s2 = d2.CreateStream();
    e2.Record(s2);
    e2.Synchronize();
    EXPECT_SPYRE_ERROR(Event::ElapsedTime(e1, e2), WrongDevice, "start event belongs to " + d1.pci_address());
}

// SynchronizeFor waits a slice and says whether the work is done, while the
// ring is held on the device (a waiter sleeping on the ring) and while a
// host callback holds a stream (a waiter sleeping on the stream's word);
// it reports nothing: the Synchronize after it throws the sticky error.
TEST_F(StreamTest, SynchronizeForWaitsASliceAndLeavesTheReportToSynchronize) {
    Device dev = OpenDevice();
    FlexStream a = dev.CreateStream(), b = dev.CreateStream();
    constexpr size_t kSize = 1u << 20;  // DMA, not inline in the ring A holds
    DeviceAllocation gate = dev.allocator().Allocate(kSize);
    std::vector<uint8_t> gate_bytes(kSize, 0);
    ASSERT_TRUE(HoldRingOnGate(dev, a, b, gate.handle, gate_bytes)) << "A's semaphore wait never reached the ring";
    Event behind(dev);
    behind.Record(a);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(a.SynchronizeFor(std::chrono::milliseconds(20)));
    EXPECT_FALSE(behind.SynchronizeFor(std::chrono::milliseconds(20)));
    EXPECT_FALSE(dev.SynchronizeFor(std::chrono::milliseconds(20)));
    EXPECT_FALSE(a.SynchronizeFor(std::chrono::nanoseconds(-1)));  // a past deadline looks once
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "a slice waited for the work";
    gate_bytes[0] = 1;
    b.CopyToDevice(gate_bytes.data(), gate.handle, kSize);
    EXPECT_TRUE(a.SynchronizeFor(std::chrono::nanoseconds::max()));  // no overflow: waits for good
    EXPECT_TRUE(behind.SynchronizeFor(std::chrono::seconds(30)));
    EXPECT_TRUE(dev.SynchronizeFor(std::chrono::seconds(30)));

    // A held host callback, then one that throws: the slice says done, the
    // Synchronize after it reports.
    std::atomic<bool> release{false};
    b.AddCallback([&] {
        while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    b.AddCallback([] { throw Error(ErrorKind::IoError, "the callback failed"); });
    EXPECT_FALSE(b.SynchronizeFor(std::chrono::milliseconds(20)));
    release = true;
    EXPECT_TRUE(b.SynchronizeFor(std::chrono::seconds(30)));
    EXPECT_SPYRE_ERROR(b.Synchronize(), IoError, "the callback failed");
    b.Reset();
}
