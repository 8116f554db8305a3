// SPDX-License-Identifier: Apache-2.0
// FlexStream basics: copies round trip, launches run, FIFO holds, errors stick.
#include <numeric>

#include "device/device_core.hpp"
#include "device/device_internals.hpp"
#include "stream/scheduler_core.hpp"
#include "spyre/stream/flex_stream.hpp"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/plan/program_image.hpp"
#include "stream_fixture.hpp"

using spyre::test::StreamTest;
using namespace spyre;

namespace {
// An empty program on the device, uploaded: what a launch needs.
DeviceAllocation UploadEmptyProgram(Device& dev) {
    const std::vector<uint8_t> bytes = ProgramImage{}.Encode();
    const DeviceAllocation p = dev.allocator().Allocate(bytes.size());
    dev.default_stream().CopyToDevice(bytes.data(), p.handle, bytes.size());
    dev.default_stream().Synchronize();
    return p;
}
}  // namespace

TEST_F(StreamTest, CopiesRoundTripByteForByte) {
    Device dev = OpenDevice();
    FlexStream& s = dev.default_stream();
    for (uint64_t size : {1ull, 63ull, 4032ull, 4033ull, 1ull << 20, (1ull << 20) + 7, 9ull << 20}) {
        SCOPED_TRACE(size);
        std::vector<uint8_t> in(size), out(size, 0);
        std::iota(in.begin(), in.end(), uint8_t(size));
        DeviceAllocation a = dev.allocator().Allocate(size);
        s.CopyToDevice(in.data(), a.handle, size);
        s.CopyFromDevice(out.data(), a.handle, size);
        s.Synchronize();
        EXPECT_EQ(in, out);
        dev.allocator().Free(a.handle);
    }
}

// Every copy counts on the device's DMA engine, whether the ring carried it
// inside its control blocks (small) or the engine moved it.
TEST_F(StreamTest, EveryCopyCountsOnTheDmaEngineInlineOrNot) {
    Device dev = OpenDevice();
    FlexStream& s = dev.default_stream();
    constexpr uint64_t kSmall = 8, kLarge = 1ull << 20;
    std::vector<uint8_t> in(kLarge, 0x5a), out(kLarge, 0);
    DeviceAllocation a = dev.allocator().Allocate(kLarge);
    const DmaStats before = dev.dma().Stats();
    s.CopyToDevice(in.data(), a.handle, kSmall);
    s.CopyToDevice(in.data(), a.handle, kLarge);
    s.CopyFromDevice(out.data(), a.handle, kLarge);
    s.Synchronize();
    EXPECT_EQ(in, out);
    const DmaStats after = dev.dma().Stats();
    EXPECT_EQ(after.to_device_copies - before.to_device_copies, 2u);
    EXPECT_EQ(after.to_device_bytes - before.to_device_bytes, kSmall + kLarge);
    EXPECT_EQ(after.from_device_copies - before.from_device_copies, 1u);
    EXPECT_EQ(after.from_device_bytes - before.from_device_bytes, kLarge);
    EXPECT_EQ(after.failed, before.failed);
    EXPECT_GE(dev.scheduler().Stats().inline_copies, 1u);  // the small one did ride in the ring
    dev.allocator().Free(a.handle);
}

TEST_F(StreamTest, LaunchRunsAfterItsCopiesAndBeforeTheCopyBack) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    KernelBuilder kb;
    const BuiltKernel k = kb.Elementwise(ElementwiseOp::Add, {64}, {64}, DType::FP32);
    DeviceAllocation a = dev.allocator().Allocate(256), b = dev.allocator().Allocate(256), c = dev.allocator().Allocate(256);
    const std::vector<uint64_t> addrs = {dev.allocator().DeviceAddress(a.handle, 256), dev.allocator().DeviceAddress(b.handle, 256),
                                         dev.allocator().DeviceAddress(c.handle, 256)};
    const std::vector<uint8_t> program = k.Bind(addrs);
    DeviceAllocation p = dev.allocator().Allocate(program.size());
    std::vector<float> x(64), y(64), z(64, 0);
    std::iota(x.begin(), x.end(), 1.0f);
    std::iota(y.begin(), y.end(), 100.0f);
    s.CopyToDevice(program.data(), p.handle, program.size());
    s.CopyToDevice(x.data(), a.handle, 256);
    s.CopyToDevice(y.data(), b.handle, 256);
    s.Launch(p.handle);
    s.CopyFromDevice(z.data(), c.handle, 256);
    s.Synchronize();
    for (int i = 0; i < 64; ++i) EXPECT_EQ(z[i], x[i] + y[i]) << i;
    EXPECT_EQ(s.Query(), StreamStatus::Idle);
}

TEST_F(StreamTest, FailureIsStickyUntilReset) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    FlexStream other = dev.CreateStream();
    DeviceAllocation junk = dev.allocator().Allocate(4096);
    std::vector<uint8_t> garbage(4096, 0xAB);
    s.CopyToDevice(garbage.data(), junk.handle, 4096);
    s.Launch(junk.handle, 256);  // not a program
    uint64_t v = 7, back = 0;
    DeviceAllocation w = dev.allocator().Allocate(8);
    EXPECT_SPYRE_ERROR(s.Synchronize(), DeviceError, "op #1");
    EXPECT_EQ(s.Query(), StreamStatus::Faulted);
    EXPECT_SPYRE_ERROR(s.CopyToDevice(&v, w.handle, 8), DeviceError, "op #1");
    // The other stream keeps working.
    other.CopyToDevice(&v, w.handle, 8);
    other.CopyFromDevice(&back, w.handle, 8);
    other.Synchronize();
    EXPECT_EQ(back, 7u);
    s.Reset();
    EXPECT_EQ(s.Query(), StreamStatus::Idle);
    v = 9;
    s.CopyToDevice(&v, w.handle, 8);
    s.CopyFromDevice(&back, w.handle, 8);
    s.Synchronize();
    EXPECT_EQ(back, 9u);
}

TEST_F(StreamTest, ThousandsOfEmptyLaunchesComplete) {
    Device dev = OpenDevice();
    FlexStream& s = dev.default_stream();
    const std::vector<uint8_t> bytes = ProgramImage{}.Encode();
    const DeviceAllocation p = dev.allocator().Allocate(bytes.size());
    s.CopyToDevice(bytes.data(), p.handle, bytes.size());
    for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < 1024; ++i) s.Launch(p.handle);
        s.Synchronize();
    }
    EXPECT_EQ(s.completed(), 1u + 3 * 1024);
    EXPECT_EQ(DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_LAUNCHES), 3u * 1024);
}

// A pass walks only the streams with work (listed): streams that sit idle
// or were destroyed are not walked. Every op paid 30-40 ns per other
// stream of the Device (found probing from outside: Event record and
// Synchronize took 140-180 us beside 4,000 idle streams, 0.6 us alone).
TEST_F(StreamTest, IdleStreamsAreNotWalked) {
    Device dev = OpenDevice();
    const DeviceAllocation p = UploadEmptyProgram(dev);
    std::vector<FlexStream> idle;
    for (int i = 0; i < 300; ++i) idle.push_back(dev.CreateStream());
    {
        std::vector<FlexStream> gone;
        for (int i = 0; i < 300; ++i) gone.push_back(dev.CreateStream());
        for (int i = 0; i < 300; i += 30) gone[size_t(i)].Launch(p.handle);  // some had work before they went
    }
    for (int i = 0; i < 300; i += 50) {
        idle[size_t(i)].Launch(p.handle);
        idle[size_t(i)].Synchronize();
    }
    FlexStream s = dev.CreateStream();
    for (int i = 0; i < 20; ++i) {
        s.Launch(p.handle);
        Event e(dev);
        e.Record(s);
        e.Synchronize();
    }
    s.Synchronize();
    const detail::SchedulerCore& sched = *DeviceInternals::Core(dev)->sched;
    EXPECT_LE(sched.ListedStreams(), 2u) << "of " << 300 + 1 + 1 << " streams alive";
    EXPECT_EQ(s.completed(), 40u);
    EXPECT_EQ(DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_LAUNCHES), 10u + 6 + 20);
}

TEST_F(StreamTest, StreamsComeAndGo) {
    Device dev = OpenDevice();
    const DeviceAllocation p = UploadEmptyProgram(dev);
    for (int round = 0; round < 5; ++round) {
        FlexStream s = dev.CreateStream();
        for (int i = 0; i < 1024; ++i) s.Launch(p.handle);
        s.Synchronize();
        EXPECT_EQ(s.completed(), 1024u);
    }
}
