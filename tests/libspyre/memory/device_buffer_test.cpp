// SPDX-License-Identifier: Apache-2.0
// DeviceBuffer: one owner per allocation, moved not copied, freed on
// destruction only after the work queued on the device's streams, and typed
// by its device (WrongDevice when used on another).
#include <optional>

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
