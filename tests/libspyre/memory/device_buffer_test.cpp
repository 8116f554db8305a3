// SPDX-License-Identifier: Apache-2.0
// DeviceBuffer: one owner per allocation, moved not copied, freed on
// destruction only after the work queued on the device's streams, and typed
// by its device (WrongDevice when used on another).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "spyre/memory/device_buffer.hpp"
#include "stream_fixture.hpp"
#include "upper_layer_util.hpp"

using spyre::test::StreamTest;
using namespace spyre;
using namespace spyre::test;

TEST_F(StreamTest, DeviceBufferFreesOnceWhenItsOwnerGoes) {
    Device dev = OpenDevice();
    const MemoryFigures empty = Memory(dev);
    {
        DeviceBuffer a = dev.AllocateBuffer(4096);
        ASSERT_TRUE(a);
        EXPECT_EQ(a.size(), 4096u);
        EXPECT_EQ(a.device(), dev.id());
        EXPECT_EQ(a.handle().device(), std::optional<DeviceId>(dev.id()));
        EXPECT_EQ(Memory(dev).live_allocations, empty.live_allocations + 1);
        DeviceBuffer b = std::move(a);  // ownership moves; nothing is freed
        EXPECT_FALSE(a);                // NOLINT(bugprone-use-after-move): the moved-from state is the point
        EXPECT_EQ(a.size(), 0u);
        EXPECT_EQ(Memory(dev).live_allocations, empty.live_allocations + 1);
        DeviceBuffer c = dev.AllocateBuffer(128);
        c = std::move(b);  // c's own block goes back, b's stays
        EXPECT_EQ(Memory(dev).live_allocations, empty.live_allocations + 1);
        EXPECT_EQ(c.size(), 4096u);
    }
    EXPECT_EQ(Memory(dev), empty);
}

// Allocator::Free on a live buffer's handle is refused: it used to free the
// block, the allocator handed it to the next owner, and the buffer's own
// free later freed that owner's block under it.
TEST_F(StreamTest, AllocatorFreeOfABuffersBlockIsRefusedAndTheBufferStillOwnsIt) {
    Device dev = OpenDevice();
    const MemoryFigures empty = Memory(dev);
    std::optional<DeviceBuffer> a(dev.AllocateBuffer(4096));
    EXPECT_SPYRE_ERROR(dev.allocator().Free(a->handle()), InvalidArgument,
                       "belongs to a DeviceBuffer or tensor: it is freed when that goes");
    EXPECT_EQ(Memory(dev).live_allocations, empty.live_allocations + 1);
    const DeviceAllocation next = dev.allocator().Allocate(4096);
    EXPECT_NE(next.handle, a->handle());  // still a's
    a.reset();
    EXPECT_EQ(Memory(dev).live_allocations, empty.live_allocations + 1);  // next stays live
    EXPECT_NO_THROW(dev.allocator().Lookup(next.handle, 4096));
    dev.allocator().Free(next.handle);  // a plain allocation still frees with Free
    EXPECT_EQ(Memory(dev), empty);
}

TEST_F(StreamTest, DeviceBufferRoundTripsBytesAndWaitsForQueuedWork) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    const std::vector<float> in = RandomFloats(1 << 16, 7);
    std::vector<float> out(in.size(), 0.0f);
    DeviceBuffer buffer = dev.AllocateBuffer(in.size() * sizeof(float));
    s.CopyToDevice(in.data(), buffer.handle(), buffer.size());
    s.CopyFromDevice(out.data(), buffer.handle(), buffer.size());
    // Freed while both copies may still be queued: reset returns once they
    // are done, so the memory cannot be handed out under them.
    buffer.reset();
    EXPECT_EQ(s.completed(), s.enqueued());
    EXPECT_EQ(out, in);
    EXPECT_FALSE(buffer);
}

// The same for a copy through the DMAEngine outside any stream: the free
// waited only for the streams, so a block freed under a 64 MiB copy was
// handed out again and the copy's tail overwrote its new owner's bytes.
TEST_F(StreamTest, ABufferFreedUnderADmaCopyIsHandedOutOnlyOnceTheCopyEnds) {
    Device dev = OpenDevice();
    constexpr uint64_t kBytes = 64ull << 20, kTail = 1ull << 20;
    const std::vector<uint8_t> old_bytes(kBytes, 0xAB);
    const std::vector<uint8_t> new_bytes(kTail, 0x5C);
    for (int round = 0; round < 3; ++round) {
        DeviceBuffer first = dev.AllocateBuffer(kBytes);
        const uint64_t first_address = dev.allocator().DeviceAddress(first.handle(), kBytes);
        const DmaTicket copy = dev.dma().CopyToDevice(old_bytes.data(), first.handle(), kBytes);
        first.reset();
        DeviceBuffer second = dev.AllocateBuffer(kBytes);
        ASSERT_EQ(dev.allocator().DeviceAddress(second.handle(), kBytes), first_address) << "not the same block";
        dev.dma().Wait(dev.dma().CopyToDeviceAt(new_bytes.data(), first_address + kBytes - kTail, kTail));
        dev.dma().Wait(copy);  // its outcome is still the caller's to take
        std::vector<uint8_t> tail(kTail);
        dev.dma().Wait(dev.dma().CopyFromDeviceAt(tail.data(), first_address + kBytes - kTail, kTail));
        ASSERT_EQ(tail, new_bytes) << "round " << round << ": the freed block's old copy wrote its new owner";
    }
}

// The same for a raw block (Allocator::Allocate and Free): Free gave the
// block back at once, so copies queued into it landed in its next owner
// after that owner's own copy had ended (found from outside: 64 MiB of
// 0xFF where the new owner wrote zeros, 3 of 3 runs). Free now waits for
// the copies and stream work queued so far, as cudaFree does.
TEST_F(StreamTest, ARawBlockFreedUnderDmaCopiesIsHandedOutOnlyOnceTheCopiesEnd) {
    Device dev = OpenDevice();
    constexpr uint64_t kBytes = 64ull << 20;
    const std::vector<uint8_t> old_bytes(kBytes, 0xFF), new_bytes(kBytes, 0x00);
    for (int round = 0; round < 3; ++round) {
        const DeviceAllocation raw = dev.allocator().Allocate(kBytes);
        std::vector<DmaTicket> copies;
        for (int i = 0; i < 4; ++i) copies.push_back(dev.dma().CopyToDevice(old_bytes.data(), raw.handle, kBytes));
        dev.allocator().Free(raw.handle);
        DeviceBuffer next = dev.AllocateBuffer(kBytes);
        ASSERT_EQ(next.handle(), raw.handle) << "not the same block";
        dev.dma().Wait(dev.dma().CopyToDevice(new_bytes.data(), next.handle(), kBytes));
        for (DmaTicket t : copies) dev.dma().Wait(t);  // their outcomes are still the caller's to take
        std::vector<uint8_t> back(kBytes, 0x77);
        dev.dma().Wait(dev.dma().CopyFromDevice(back.data(), next.handle(), kBytes));
        const size_t stale = size_t(std::count(back.begin(), back.end(), uint8_t(0xFF)));
        ASSERT_EQ(stale, 0u) << "round " << round << ": copies into the freed block wrote its next owner";
    }
}

// A copy submitted while a free waits for the work queued into its block
// passed the liveness check (the block was still live) and landed after the
// wait, in the block's next owner (found probing from outside: up to all 8
// MiB of a new buffer overwritten, 4 of 5 runs). From the moment its free
// begins the block is named by no new copy or launch, and a second free of
// it is refused too; once freed it is handed out again as usual.
TEST_F(StreamTest, WorkNamingABlockWhoseFreeBeganIsRefused) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    const std::vector<uint8_t> bytes(4096, 0xAA);
    for (const bool raw : {true, false}) {
        SCOPED_TRACE(raw ? "Allocator::Free" : "DeviceBuffer::reset");
        std::optional<DeviceBuffer> buffer;
        if (!raw) buffer.emplace(dev.AllocateBuffer(bytes.size()));
        const DeviceAllocation block =
            raw ? dev.allocator().Allocate(bytes.size()) : DeviceAllocation{buffer->handle(), bytes.size()};
        // The free waits for this stream's callback, which waits for the test.
        std::atomic<bool> release{false};
        s.AddCallback([&] {
            for (int i = 0; i < 30000 && !release.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        });
        std::thread freeing([&] {
            if (raw) dev.allocator().Free(block.handle);
            else buffer->reset();
        });
        std::string refused;
        for (int i = 0; i < 5000 && refused.empty(); ++i) {
            try {
                dev.dma().Wait(dev.dma().CopyToDevice(bytes.data(), block.handle, bytes.size()));
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            } catch (const Error& e) {
                refused = e.what();
            }
        }
        EXPECT_NE(refused.find("lies in an allocation being freed"), std::string::npos) << refused;
        if (raw) {
            EXPECT_SPYRE_ERROR(dev.allocator().Free(block.handle), InvalidArgument, "is being freed already");
        }
        release = true;
        freeing.join();
        s.Synchronize();
        EXPECT_SPYRE_ERROR(dev.dma().CopyToDevice(bytes.data(), block.handle, bytes.size()), InvalidArgument,
                           "is not inside a live allocation");
        DeviceBuffer next = dev.AllocateBuffer(bytes.size());  // handed out again
        dev.dma().Wait(dev.dma().CopyToDevice(bytes.data(), next.handle(), bytes.size()));
    }
}

// A host callback may not wait, so a raw Free there is refused, saying
// why; the block stays live and is freed after the callback.
TEST_F(StreamTest, ARawFreeInAHostCallbackIsRefusedAndTheBlockStaysLive) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    const DeviceAllocation raw = dev.allocator().Allocate(4096);
    std::optional<Error> refused;
    s.AddCallback([&] {
        try {
            dev.allocator().Free(raw.handle);
        } catch (const Error& e) {
            refused = e;
        }
    });
    s.Synchronize();
    ASSERT_TRUE(refused.has_value());
    EXPECT_EQ(refused->kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(refused->message().find("Allocator::Free in a host callback (the scheduler thread) cannot wait"),
              std::string::npos)
        << refused->message();
    EXPECT_NO_THROW(dev.allocator().Lookup(raw.handle, 4096));
    dev.allocator().Free(raw.handle);
    EXPECT_SPYRE_ERROR(dev.allocator().Free(raw.handle), InvalidArgument, "freed already");
}

// The same for a buffer destroyed inside a host callback, which may not
// wait: it was freed at once, so a copy still queued for it on another
// stream landed in the next allocation (found from outside: the next
// buffer read 0xab where its owner wrote 0x11, 3 of 3 runs). The
// scheduler now frees it once every stream has done what it had queued.
TEST_F(StreamTest, ABufferFreedInAHostCallbackIsHandedOutOnlyOnceTheQueuedWorkEnds) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream(), other = dev.CreateStream(), t = dev.CreateStream();
    const MemoryFigures empty = Memory(dev);
    const std::vector<uint8_t> stale(4096, 0xAB), big(8u << 20, 0);
    DeviceBuffer scratch = dev.AllocateBuffer(big.size());
    std::string freed;
    for (int round = 0; round < 3; ++round) {
        s.AddCallback([&] {
            DeviceBuffer b = dev.AllocateBuffer(4096);
            for (int i = 0; i < 40; ++i) other.CopyToDevice(big.data(), scratch.handle(), big.size());  // busy
            other.CopyToDevice(stale.data(), b.handle(), 4096);  // queued for b, which goes now
            freed = b.handle().ToString();
        });
        s.Synchronize();
        const bool still_queued = other.completed() < other.enqueued();
        DeviceBuffer c = dev.AllocateBuffer(4096);
        if (still_queued) {
            EXPECT_NE(c.handle().ToString(), freed) << "handed out under a queued copy";
        }
        const std::vector<uint8_t> mine(4096, 0x11);
        std::vector<uint8_t> back(4096);
        t.CopyToDevice(mine.data(), c.handle(), 4096);
        t.Synchronize();
        other.Synchronize();
        t.CopyFromDevice(back.data(), c.handle(), 4096);
        t.Synchronize();
        ASSERT_EQ(back, mine) << "round " << round << ": a copy queued for the freed buffer wrote its next owner";
    }
    // Nothing is left over: the deferred frees run once the streams are
    // idle (in the scheduler's pass that saw the last completion, which
    // may end just after the waiter returned).
    scratch.reset();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (Memory(dev) != empty && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(Memory(dev), empty);
}

// A null host address fails the call (both directions, the fast path's
// sizes and the engines'); it faulted in the copy's thread.
TEST_F(StreamTest, ADmaCopyWithANullHostAddressIsInvalidArgument) {
    Device dev = OpenDevice();
    DeviceBuffer buffer = dev.AllocateBuffer(16ull << 20);
    for (const uint64_t bytes : {uint64_t(100), uint64_t(16) << 20}) {
        EXPECT_SPYRE_ERROR(dev.dma().CopyToDevice(nullptr, buffer.handle(), bytes), InvalidArgument,
                           "host-to-device copy of " + std::to_string(bytes) + " bytes with a null host address");
        EXPECT_SPYRE_ERROR(dev.dma().CopyFromDevice(nullptr, buffer.handle(), bytes), InvalidArgument,
                           "device-to-host copy of " + std::to_string(bytes) + " bytes with a null host address");
    }
    EXPECT_EQ(dev.dma().Stats().failed, 0u);
}

// A progress callback that throws ends the copy: the call returned while
// later chunks still wrote the caller's buffer (up to 514 MB of a 512 MiB
// copy after the throw), which the caller may free as the exception unwinds.
TEST_F(StreamTest, AProgressCallbackThatThrowsLeavesNoChunkWritingTheBuffer) {
    Device dev = OpenDevice();
    constexpr uint64_t kBytes = 64ull << 20, kChunk = 1ull << 20;
    DeviceBuffer buffer = dev.AllocateBuffer(kBytes);
    std::vector<uint8_t> host(kBytes, 0x11);
    dev.dma().Wait(dev.dma().CopyToDevice(host.data(), buffer.handle(), kBytes));
    std::fill(host.begin(), host.end(), 0);
    struct Stop {};
    EXPECT_THROW(dev.dma().CopyFromDevice(host.data(), buffer.handle(), kBytes,
                                          [](const ProgressInfo&) { throw Stop{}; }, kChunk),
                 Stop);
    std::fill(host.begin(), host.end(), 0);
    // Nothing may land after the call returned; 200 ms is far longer than
    // the rest of the copy took when it went on.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(std::count(host.begin(), host.end(), 0), std::ptrdiff_t(kBytes));
}

TEST_F(StreamTest, EmptyDeviceBufferAndZeroBytesAreInvalid) {
    Device dev = OpenDevice();
    DeviceBuffer empty;
    EXPECT_FALSE(empty);
    EXPECT_SPYRE_ERROR((void)empty.handle(), InvalidArgument, "empty DeviceBuffer");
    EXPECT_SPYRE_ERROR((void)empty.device(), InvalidArgument, "empty DeviceBuffer");
    empty.reset();  // a no-op
    EXPECT_SPYRE_ERROR(dev.AllocateBuffer(0), InvalidArgument, "");
}

// The buffer keeps the device's core: it may outlive the Device object.
TEST_F(StreamTest, DeviceBufferOutlivesItsDevice) {
    std::optional<Device> dev(OpenDevice());
    DeviceBuffer buffer = dev->AllocateBuffer(256);
    const DeviceId id = dev->id();
    dev.reset();
    EXPECT_EQ(buffer.device(), id);
    buffer.reset();
}

TEST_F(StreamTest, DeviceBufferOfAnotherDeviceIsWrongDevice) {
    Device vf1 = OpenDevice(1), vf2 = OpenDevice(2);
    DeviceBuffer b1 = vf1.AllocateBuffer(256);
    EXPECT_EQ(&b1.HandleOn(vf1.id(), "buffer", "stream"), &b1.handle());
    EXPECT_SPYRE_ERROR((void)b1.HandleOn(vf2.id(), "copy target", "stream"), WrongDevice,
                       "copy target belongs to " + vf1.pci_address());
    // Where it is used: a stream of the other VF refuses its handle.
    FlexStream s2 = vf2.CreateStream();
    std::vector<uint8_t> bytes(256, 1);
    EXPECT_SPYRE_ERROR(s2.CopyToDevice(bytes.data(), b1.handle(), bytes.size()), WrongDevice, vf1.pci_address());
    EXPECT_EQ(s2.enqueued(), 0u);
}
