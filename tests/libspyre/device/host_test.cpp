// SPDX-License-Identifier: Apache-2.0
// spyre::Host: one discovery of every card and function, Devices of any
// subset sharing one environment (here one embedded spyre-mockdev with
// 2 cards x 2 VFs), typed errors for bad selectors and double opens.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "device/device_internals.hpp"
#include "mock_fixture.hpp"
#include "random_data.hpp"
#include "spyre/device/host.hpp"
#include "spyre/tensor/spyre_tensor.hpp"

using namespace spyre;
using namespace spyre::test;

namespace {

HostOptions TwoCardsTwoVfs() { return HostOptions::EmbeddedMock(2, 2, "1G"); }

// Copies `n` reproducible bytes to a fresh block of `dev` and back through
// its default stream; returns the block so callers can look at it again.
DeviceAllocation RoundTrip(Device& dev, size_t n, uint64_t seed) {
    const std::vector<uint8_t> in = RandomBytes(n, seed);
    std::vector<uint8_t> out(n, 0);
    DeviceAllocation block = dev.allocator().Allocate(n);
    dev.default_stream().CopyToDevice(in.data(), block.handle, n);
    dev.default_stream().CopyFromDevice(out.data(), block.handle, n);
    dev.default_stream().Synchronize();
    EXPECT_EQ(std::memcmp(in.data(), out.data(), n), 0) << dev.pci_address() << ": round trip of " << n << " bytes";
    return block;
}

class HostTest : public ::testing::Test {
protected:
    void SetUp() override {
        SPYRE_REQUIRE_FUSE();
        host_.emplace(Host::Open(TwoCardsTwoVfs()));
    }
    Host& host() { return *host_; }
    std::optional<Host> host_;
};

}  // namespace

TEST_F(HostTest, ReportsEveryCardAndFunction) {
    const auto& fns = host().functions();
    ASSERT_EQ(fns.size(), 6u);
    const char* addresses[] = {"0000:01:00.0", "0000:01:00.1", "0000:01:00.2",
                               "0000:02:00.0", "0000:02:00.1", "0000:02:00.2"};
    for (size_t i = 0; i < fns.size(); ++i) {
        SCOPED_TRACE(addresses[i]);
        EXPECT_EQ(fns[i].index, i);
        EXPECT_EQ(fns[i].pci_address, addresses[i]);
        EXPECT_EQ(fns[i].kind, i % 3 == 0 ? driver::FunctionKind::PF : driver::FunctionKind::VF);
        EXPECT_EQ(fns[i].id.card, i / 3);
        EXPECT_EQ(fns[i].id.function, i % 3);
        EXPECT_EQ(fns[i].id.ToString(), addresses[i]);
        EXPECT_GT(fns[i].memory_bytes, 0u);
        EXPECT_EQ(fns[i].held_elsewhere, std::optional<bool>(false));
    }
    // The two VFs of a card get equal slices, each smaller than the card.
    EXPECT_EQ(fns[1].memory_bytes, fns[2].memory_bytes);
    EXPECT_LT(fns[1].memory_bytes, 1ull << 30);

    const auto cards = host().cards();
    ASSERT_EQ(cards.size(), 2u);
    EXPECT_EQ(cards[0].card, 0);
    EXPECT_EQ(cards[0].functions, (std::vector<size_t>{0, 1, 2}));
    EXPECT_EQ(cards[1].card, 1);
    EXPECT_EQ(cards[1].functions, (std::vector<size_t>{3, 4, 5}));
    EXPECT_NE(host().Describe().find("embedded spyre-mockdev"), std::string::npos) << host().Describe();
    EXPECT_EQ(host().Find("02:00.1").index, 4u);
    EXPECT_EQ(host().Find("5").pci_address, "0000:02:00.2");
}

TEST_F(HostTest, TwoVfsAreTwoDevicesOnOneMockWithSeparateMemory) {
    std::vector<Device> devs = host().OpenAll({"0000:01:00.1", "0000:01:00.2"});
    ASSERT_EQ(devs.size(), 2u);
    Device& vf1 = devs[0];
    Device& vf2 = devs[1];
    const uint32_t tree = host().Find("0").id.tree;
    EXPECT_NE(tree, 0u);
    EXPECT_EQ(vf1.id(), (DeviceId{0, 1, tree}));
    EXPECT_EQ(vf2.id(), (DeviceId{0, 2, tree}));
    // One mock serves both: the same daemon, different memory windows.
    EXPECT_EQ(DeviceInternals::Function(vf1).device_info().daemon_pid, DeviceInternals::Function(vf2).device_info().daemon_pid);
    EXPECT_NE(DeviceInternals::Function(vf1).Read64(SPYRE_REG_MEM_BASE), DeviceInternals::Function(vf2).Read64(SPYRE_REG_MEM_BASE));

    // Byte-exact round trips on both, small (inline) and large (DMA engine).
    const size_t big = (3u << 20) + 5;
    RoundTrip(vf1, 4096 + 3, 1);
    const DeviceAllocation block1 = RoundTrip(vf1, big, 2);
    const DeviceAllocation block2 = RoundTrip(vf2, big, 3);
    // What VF1 wrote is not in VF2's memory: VF2 reads back its own bytes only,
    // and a fresh VF2 block is zeroed, not VF1's data.
    std::vector<uint8_t> seen(big);
    vf2.default_stream().CopyFromDevice(seen.data(), block2.handle, big);
    vf2.default_stream().Synchronize();
    EXPECT_EQ(seen, RandomBytes(big, 3));
    const DeviceAllocation fresh = vf2.allocator().Allocate(big);
    vf2.default_stream().CopyFromDevice(seen.data(), fresh.handle, big);
    vf2.default_stream().Synchronize();
    EXPECT_EQ(seen, std::vector<uint8_t>(big, 0));
    // A VF1 handle on VF2 is refused, not read.
    EXPECT_SPYRE_ERROR(vf2.default_stream().CopyFromDevice(seen.data(), block1.handle, big), WrongDevice,
                       "0000:01:00.1");
}

TEST_F(HostTest, OpeningAFunctionTwiceIsBusyUntilTheFirstDeviceCloses) {
    {
        Device vf = host().Open("1");
        EXPECT_SPYRE_ERROR(host().Open("01:00.1"), Busy, "0000:01:00.1 is already open as a Device of this Host");
        EXPECT_SPYRE_ERROR(host().OpenAll({"2", "0000:01:00.2"}), InvalidArgument, "named twice");
        // The refused list opened nothing: VF2 is still free.
        Device vf2 = host().Open("2");
        EXPECT_EQ(vf2.id(), host().Find("2").id);
    }
    Device again = host().Open("1");
    RoundTrip(again, 1 << 20, 4);
}

// Two mocks both have a 0000:01:00.0, and they are still two devices:
// a tensor of one copied through the other's stream would read the other's
// memory at the same address.
TEST_F(HostTest, TheSameAddressOnTwoDeviceTreesIsTwoDevices) {
    Host other = Host::Open(TwoCardsTwoVfs());
    Device a = host().Open("0000:01:00.0"), b = other.Open("0000:01:00.0");
    EXPECT_EQ(a.pci_address(), b.pci_address());
    EXPECT_NE(a.id(), b.id());
    EXPECT_NE(a.id().tree, b.id().tree);
    std::vector<float> ones(64, 1.0f), out(64, -1.0f);
    SpyreTensor t = SpyreTensor::FromHost(a, a.default_stream(), ones.data(), {64}, DType::FP32);
    a.Synchronize();
    try {
        t.CopyToHost(b.default_stream(), out.data());
        ADD_FAILURE() << "a tensor of one device tree copied through another's stream";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::WrongDevice) << e.what();
        EXPECT_NE(std::string(e.what()).find("0000:01:00.0 of device tree " + std::to_string(a.id().tree)),
                  std::string::npos) << e.what();
    }
    EXPECT_SPYRE_ERROR(SpyreTensor::FromHost(b, a.default_stream(), ones.data(), {64}, DType::FP32), WrongDevice,
                       "of device tree");
}

TEST_F(HostTest, ADeviceOutlivesItsHost) {
    std::optional<Device> pf;
    std::filesystem::path mount;
    {
        Host local = std::move(host());
        host_.reset();
        const std::string desc = local.Describe();  // "local:embedded spyre-mockdev at /tmp/..."
        mount = desc.substr(desc.find('/'));
        pf.emplace(local.Open("3"));
    }
    // The mock stays up for the Device, and goes with it.
    EXPECT_TRUE(IsMounted(mount.string())) << mount;
    EXPECT_EQ(pf->id().card, 1);
    EXPECT_EQ(pf->id().function, 0);
    RoundTrip(*pf, (2u << 20) + 128, 5);
    pf.reset();
    EXPECT_FALSE(IsMounted(mount.string())) << mount;
}

TEST_F(HostTest, BadSelectorsAreTypedErrors) {
    EXPECT_SPYRE_ERROR(host().Open(""), InvalidArgument, "empty device selector");
    EXPECT_SPYRE_ERROR(host().Open("6"), NotFound, "function index 6 out of range: 6 spyre function(s)");
    EXPECT_SPYRE_ERROR(host().Open("0000:09:00.0"), NotFound, "no spyre function 0000:09:00.0");
    // Neither an index nor an address: a typo, not a device that is missing
    // (it read NotFound, unlike the same entry in SPYRE_DEVICES).
    EXPECT_SPYRE_ERROR(host().Open("gpu0"), InvalidArgument,
                       "device selector 'gpu0' is not an index or a PCI address (DDDD:BB:DD.F or BB:DD.F)");
    EXPECT_SPYRE_ERROR(host().Find("01:00"), InvalidArgument, "device selector '01:00' is not an index");
    EXPECT_SPYRE_ERROR(host().OpenAll({"1", "bad"}), InvalidArgument, "device selector 'bad' is not");
    HostOptions no_root;
    no_root.source = HostOptions::Source::DeviceRoot;
    EXPECT_SPYRE_ERROR(Host::Open(no_root), InvalidArgument, "needs a device_root");
    no_root.device_root = "/nonexistent/spyre";
    EXPECT_SPYRE_ERROR(Host::Open(no_root), NotFound, "/nonexistent/spyre");
    EXPECT_SPYRE_ERROR(Host(nullptr), InvalidArgument, "needs a backend");
}

TEST_F(HostTest, ASecondHostOnTheSameRootSeesTheSameFunctions) {
    // A Host over a mounted mock (the first Host's), as apps find /run/spyre.
    const std::string desc = host().Describe();
    HostOptions at_root;
    at_root.source = HostOptions::Source::DeviceRoot;
    at_root.device_root = desc.substr(desc.find('/'));
    Host second = Host::Open(at_root);
    ASSERT_EQ(second.functions().size(), 6u);
    EXPECT_EQ(second.functions()[4].pci_address, "0000:02:00.1");
    EXPECT_EQ(second.Describe().find("embedded"), std::string::npos) << second.Describe();
    Device d = second.Open("4");
    // The function is held now: by this process, so neither Host calls it held elsewhere.
    EXPECT_SPYRE_ERROR(host().Open("4"), Busy, "in use");
    EXPECT_EQ(Host::Open(at_root).functions()[4].held_elsewhere, std::optional<bool>(false));
    RoundTrip(d, 64 << 10, 6);
}

TEST_F(HostTest, AFunctionHeldByAnotherProcessIsReportedAndRefused) {
    const std::string desc = host().Describe();
    const std::filesystem::path mount = desc.substr(desc.find('/'));
    int ready[2], done[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(done), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // Holds VF 2 of card 1 until the parent closes `done`.
        ::close(done[1]);  // else the read below never sees end of file
        ::close(ready[0]);
        try {
            driver::Function fn = driver::Function::Open(driver::DeviceRoot(mount).Find("0000:02:00.2"));
            char c = 'r';
            if (::write(ready[1], &c, 1) != 1) ::_exit(2);
            while (::read(done[0], &c, 1) > 0) {}
        } catch (const Error&) {
            ::_exit(1);
        }
        ::_exit(0);
    }
    ::close(ready[1]);
    ::close(done[0]);
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the child could not open 0000:02:00.2";
    HostOptions at_root;
    at_root.source = HostOptions::Source::DeviceRoot;
    at_root.device_root = mount;
    Host seen = Host::Open(at_root);
    for (const FunctionDescription& f : seen.functions())
        EXPECT_EQ(f.held_elsewhere, std::optional<bool>(f.pci_address == "0000:02:00.2")) << f.pci_address;
    EXPECT_SPYRE_ERROR(seen.Open("0000:02:00.2"), Busy, "in use");
    ::close(done[1]);
    ::close(ready[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A child forked from a process with an open Host, Device, stream and block
// lets go of its copies (destructors, as at its exit): that leaves the
// parent's device, data and private mock alone. Destroying the Device there
// joined the parent's threads (a segfault), and destroying the Host
// unmounted the parent's mock (found probing from outside, in Python).
TEST_F(HostTest, AForkedChildLettingGoOfWhatItInheritedLeavesTheParentAlone) {
    const std::string desc = host().Describe();
    const std::string mount = desc.substr(desc.find('/'));
    std::optional<Device> dev(host().Open("0"));
    const size_t n = 1 << 20;
    const std::vector<uint8_t> in = RandomBytes(n, 17);
    std::optional<DeviceBuffer> buf(dev->AllocateBuffer(n));
    std::optional<FlexStream> stream(dev->CreateStream());
    stream->CopyToDevice(in.data(), buf->handle(), n);
    stream->Synchronize();
    for (int i = 0; i < 8; ++i) stream->CopyToDevice(in.data(), buf->handle(), n);  // in flight at the fork
    std::optional<Event> event(std::in_place, *dev);
    event->Record(*stream);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::alarm(20);  // a hang ends the child, and the test sees it
        // Refused as every call on what it inherited: opening the parent's
        // function through its Host took it, and the event read false for
        // good (found probing from outside).
        const auto refused = [](const std::function<void()>& call) {
            try {
                call();
            } catch (const Error& e) {
                return e.kind() == ErrorKind::InvalidArgument && std::string(e.what()).find("before it forked") != std::string::npos;
            }
            return false;
        };
        if (!refused([&] { host().Open("1"); }) || !refused([&] { (void)event->Query(); })) ::_exit(3);
        stream.reset();
        buf.reset();
        dev.reset();
        host_.reset();
        ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the child crashed or hung, or was not refused (exit 3) (status " << status << ")";
    EXPECT_TRUE(IsMounted(mount)) << mount;
    std::vector<uint8_t> out(n, 0);
    stream->CopyFromDevice(out.data(), buf->handle(), n);
    stream->Synchronize();
    EXPECT_EQ(std::memcmp(in.data(), out.data(), n), 0);
    event.reset();
    stream.reset();
    buf.reset();
    dev.reset();
    RoundTrip(dev.emplace(host().Open("0")), 4096, 18);  // the function was given back, not kept by the child
}
