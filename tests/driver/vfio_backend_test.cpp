// SPDX-License-Identifier: Apache-2.0
// VfioBackend against a fake kernel: the fake answers the container, group
// and device ioctls as vfio-pci does, keeps the device's regions in a memfd
// at offsets of its choosing, refuses calls out of vfio's order, and logs
// every call. The backend must take exactly vfio's path to a device fd, use
// the offsets the kernel serves, and turn each refusal into a typed error.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/vfio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "spyre/uapi/spyre.h"
#include "vfio_backend.hpp"

namespace spyre::driver {
namespace {

constexpr int kContainer = 100, kGroup = 101, kDevice = 102, kDup = 103;
constexpr const char* kAddress = "0000:3b:00.1";
constexpr const char* kGroupNode = "/dev/vfio/42";

class FakeVfio : public Syscalls {
public:
    int api_version = VFIO_API_VERSION;
    std::vector<unsigned> iommu_types = {VFIO_TYPE1v2_IOMMU, VFIO_TYPE1_IOMMU};
    uint32_t group_flags = VFIO_GROUP_FLAGS_VIABLE;
    uint32_t device_flags = VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET;
    int group_open_errno = 0;
    size_t max_transfer = SIZE_MAX;  // bytes per pread/pwrite: short transfers below the request
    std::map<uint32_t, vfio_region_info> regions;
    std::vector<std::string> calls;
    std::set<int> live;  // fds handed out and not closed

    FakeVfio() {
        memfd_ = ::memfd_create("fake-vfio-device", MFD_CLOEXEC);
        EXPECT_GE(memfd_, 0);
        EXPECT_EQ(::ftruncate(memfd_, off_t(kSpan) * 10), 0);
        constexpr uint32_t kRwMmap = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE | VFIO_REGION_INFO_FLAG_MMAP;
        Serve(VFIO_PCI_BAR0_REGION_INDEX, SPYRE_BAR0_SIZE, kRwMmap);
        Serve(VFIO_PCI_BAR2_REGION_INDEX, 16 << 20, kRwMmap);
        Serve(VFIO_PCI_BAR4_REGION_INDEX, SPYRE_BAR4_SIZE, kRwMmap);
        Serve(VFIO_PCI_CONFIG_REGION_INDEX, 4096, VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE);
        Poke<uint32_t>(VFIO_PCI_CONFIG_REGION_INDEX, 0, SPYRE_PCI_VENDOR_IBM | (uint32_t(SPYRE_PCI_DEVICE_VF) << 16));
        Poke<uint32_t>(VFIO_PCI_BAR0_REGION_INDEX, SPYRE_REG_MAGIC, SPYRE_MAGIC);
        Poke<uint32_t>(VFIO_PCI_BAR0_REGION_INDEX, SPYRE_REG_VERSION, SPYRE_VERSION);
        Poke<uint32_t>(VFIO_PCI_BAR0_REGION_INDEX, SPYRE_REG_FUNC_ID,
                       SPYRE_FUNC_ID_IS_VF | (3u << SPYRE_FUNC_ID_CARD_SHIFT) | 1u);
        Poke<uint64_t>(VFIO_PCI_BAR0_REGION_INDEX, SPYRE_REG_MEM_SIZE, 16 << 20);
        Poke<uint32_t>(VFIO_PCI_BAR0_REGION_INDEX, SPYRE_REG_NUM_CORES, 32);
    }
    ~FakeVfio() override { ::close(memfd_); }

    // Region `index` at an offset of the fake's choosing (not vfio-pci's
    // index << 40), so a backend that assumes offsets is caught.
    void Serve(uint32_t index, uint64_t size, uint32_t flags) {
        vfio_region_info r{};
        r.argsz = sizeof r;
        r.index = index;
        r.flags = flags;
        r.size = size;
        r.offset = uint64_t(index) * kSpan + 0x3000;
        regions[index] = r;
    }
    template <typename T>
    void Poke(uint32_t index, uint64_t offset, T v) {
        ASSERT_EQ(::pwrite(memfd_, &v, sizeof v, off_t(regions.at(index).offset + offset)), ssize_t(sizeof v));
    }
    template <typename T>
    T Peek(uint32_t index, uint64_t offset) {
        T v{};
        EXPECT_EQ(::pread(memfd_, &v, sizeof v, off_t(regions.at(index).offset + offset)), ssize_t(sizeof v));
        return v;
    }

    int Open(const char* path, int flags) override {
        calls.push_back(std::string("open ") + path);
        if (!(flags & O_RDWR)) return Fail(EACCES);
        if (std::string(path) == kVfioContainer) return Hand(kContainer);
        if (std::string(path) == kGroupNode) return group_open_errno ? Fail(group_open_errno) : Hand(kGroup);
        return Fail(ENOENT);
    }
    int Close(int fd) override {
        calls.push_back("close " + Name(fd));
        return live.erase(fd) ? 0 : Fail(EBADF);
    }
    int Dup(int fd) override {
        calls.push_back("dup " + Name(fd));
        return fd == kDevice ? Hand(kDup) : Fail(EBADF);
    }

    int IoctlValue(int fd, unsigned long request, unsigned long value) override {
        switch (request) {
        case VFIO_GET_API_VERSION:
            calls.push_back("GET_API_VERSION " + Name(fd));
            return fd == kContainer ? api_version : Fail(ENOTTY);
        case VFIO_CHECK_EXTENSION:
            calls.push_back("CHECK_EXTENSION " + Name(fd) + " " + std::to_string(value));
            return fd == kContainer && Offers(value) ? 1 : 0;
        case VFIO_SET_IOMMU:
            calls.push_back("SET_IOMMU " + Name(fd) + " " + std::to_string(value));
            // vfio: a container takes an IOMMU model only once it holds a group.
            if (fd != kContainer || !group_attached_ || !Offers(value)) return Fail(EINVAL);
            iommu_set_ = true;
            return 0;
        case VFIO_DEVICE_RESET:
            calls.push_back("DEVICE_RESET " + Name(fd));
            return fd == kDevice ? 0 : Fail(ENOTTY);
        default: ADD_FAILURE() << "unexpected ioctl " << request; return Fail(ENOTTY);
        }
    }

    int Ioctl(int fd, unsigned long request, void* arg) override {
        switch (request) {
        case VFIO_GROUP_GET_STATUS: {
            calls.push_back("GROUP_GET_STATUS " + Name(fd));
            auto* s = static_cast<vfio_group_status*>(arg);
            if (fd != kGroup || s->argsz < sizeof *s) return Fail(EINVAL);
            s->flags = group_flags;
            return 0;
        }
        case VFIO_GROUP_SET_CONTAINER:
            calls.push_back("GROUP_SET_CONTAINER " + Name(fd) + " " + Name(*static_cast<int*>(arg)));
            if (fd != kGroup || *static_cast<int*>(arg) != kContainer) return Fail(EINVAL);
            group_attached_ = true;
            return 0;
        case VFIO_GROUP_GET_DEVICE_FD:
            calls.push_back("GROUP_GET_DEVICE_FD " + Name(fd) + " " + static_cast<const char*>(arg));
            if (fd != kGroup || !iommu_set_) return Fail(EINVAL);  // vfio: no device before the IOMMU is set
            return std::strcmp(static_cast<const char*>(arg), kAddress) == 0 ? Hand(kDevice) : Fail(ENODEV);
        case VFIO_DEVICE_GET_INFO: {
            calls.push_back("DEVICE_GET_INFO " + Name(fd));
            auto* d = static_cast<vfio_device_info*>(arg);
            if (fd != kDevice || d->argsz < sizeof *d) return Fail(EINVAL);
            d->flags = device_flags;
            d->num_regions = VFIO_PCI_NUM_REGIONS;
            d->num_irqs = VFIO_PCI_NUM_IRQS;
            return 0;
        }
        case VFIO_DEVICE_GET_REGION_INFO: {
            auto* r = static_cast<vfio_region_info*>(arg);
            calls.push_back("DEVICE_GET_REGION_INFO " + Name(fd) + " " + std::to_string(r->index));
            if (fd != kDevice || r->argsz < sizeof *r || r->index >= VFIO_PCI_NUM_REGIONS) return Fail(EINVAL);
            auto it = regions.find(r->index);
            const uint32_t index = r->index;
            *r = it != regions.end() ? it->second : vfio_region_info{.argsz = uint32_t(sizeof *r), .index = index};
            return 0;
        }
        default: ADD_FAILURE() << "unexpected ioctl " << request; return Fail(ENOTTY);
        }
    }

    void* Mmap(size_t length, int prot, int fd, off_t offset) override {
        calls.push_back("mmap " + Name(fd) + " " + std::to_string(offset) + " " + std::to_string(length));
        const vfio_region_info* r = Containing(uint64_t(offset));
        if (fd != kDevice || !r || !(r->flags & VFIO_REGION_INFO_FLAG_MMAP) || uint64_t(offset) + length > r->offset + r->size) {
            errno = EINVAL;
            return MAP_FAILED;
        }
        return ::mmap(nullptr, length, prot, MAP_SHARED, memfd_, offset);
    }

    ssize_t Pread(int fd, void* buf, size_t count, off_t offset) override {
        const ssize_t n = Clamp(fd, count, offset);
        return n <= 0 ? n : ::pread(memfd_, buf, size_t(n), offset);
    }
    ssize_t Pwrite(int fd, const void* buf, size_t count, off_t offset) override {
        const ssize_t n = Clamp(fd, count, offset);
        return n <= 0 ? n : ::pwrite(memfd_, buf, size_t(n), offset);
    }

private:
    static constexpr uint64_t kSpan = 64ull << 20;  // room between the fake's regions

    int Hand(int fd) {
        live.insert(fd);
        return fd;
    }
    static int Fail(int e) {
        errno = e;
        return -1;
    }
    static std::string Name(int fd) {
        switch (fd) {
        case kContainer: return "container";
        case kGroup: return "group";
        case kDevice: return "device";
        default: return std::to_string(fd);
        }
    }
    bool Offers(unsigned long type) const {
        for (unsigned t : iommu_types)
            if (t == type) return true;
        return false;
    }
    const vfio_region_info* Containing(uint64_t offset) const {
        for (const auto& [index, r] : regions)
            if (r.size && offset >= r.offset && offset <= r.offset + r.size) return &r;
        return nullptr;
    }
    // vfio-pci: a transfer ends at its region's end (0 there), EINVAL outside any region.
    ssize_t Clamp(int fd, size_t count, off_t offset) const {
        const vfio_region_info* r = Containing(uint64_t(offset));
        if (fd != kDevice || !r) return Fail(EINVAL);
        return ssize_t(std::min({count, size_t(r->offset + r->size - uint64_t(offset)), max_transfer}));
    }

    int memfd_ = -1;
    bool group_attached_ = false, iommu_set_ = false;
};

FunctionInfo Info() {
    FunctionInfo info;
    info.pci_address = kAddress;
    info.vendor_id = SPYRE_PCI_VENDOR_IBM;
    info.device_id = SPYRE_PCI_DEVICE_VF;
    info.is_vf = true;
    info.dev_node = kGroupNode;
    info.transport = Transport::Vfio;
    return info;
}

template <typename F>
Error Caught(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e;
    }
    ADD_FAILURE() << "no spyre::Error thrown";
    return Error(ErrorKind::Internal, "none");
}

TEST(VfioBackend, OpensTheDeviceTheWayVfioAsks) {
    FakeVfio fake;
    {
        auto backend = OpenVfioBackend(Info(), fake);
        EXPECT_STREQ(backend->name(), "vfio");
        EXPECT_EQ(backend->fd(), kDevice);
    }
    EXPECT_TRUE(fake.live.empty());
    const std::vector<std::string> expected = {
        "open /dev/vfio/vfio",
        "GET_API_VERSION container",
        "CHECK_EXTENSION container " + std::to_string(VFIO_TYPE1v2_IOMMU),
        "open /dev/vfio/42",
        "GROUP_GET_STATUS group",
        "GROUP_SET_CONTAINER group container",
        "SET_IOMMU container " + std::to_string(VFIO_TYPE1v2_IOMMU),
        std::string("GROUP_GET_DEVICE_FD group ") + kAddress,
        "DEVICE_GET_INFO device",
        "DEVICE_GET_REGION_INFO device 0",
        "DEVICE_GET_REGION_INFO device 2",
        "DEVICE_GET_REGION_INFO device 4",
        "DEVICE_GET_REGION_INFO device 7",
        "close device",
        "close group",
        "close container",
    };
    EXPECT_EQ(fake.calls, expected);
}

TEST(VfioBackend, FallsBackToType1WithoutType1v2) {
    FakeVfio fake;
    fake.iommu_types = {VFIO_TYPE1_IOMMU};
    auto backend = OpenVfioBackend(Info(), fake);
    EXPECT_NE(std::find(fake.calls.begin(), fake.calls.end(), "SET_IOMMU container " + std::to_string(VFIO_TYPE1_IOMMU)),
              fake.calls.end());
}

TEST(VfioBackend, DescribesTheFunctionFromConfigSpaceAndRegisters) {
    FakeVfio fake;
    auto backend = OpenVfioBackend(Info(), fake);
    const spyre_device_info di = backend->DeviceInfo();
    EXPECT_EQ(di.vendor_id, SPYRE_PCI_VENDOR_IBM);
    EXPECT_EQ(di.device_id, SPYRE_PCI_DEVICE_VF);
    EXPECT_EQ(di.contract_version, SPYRE_VERSION);
    EXPECT_EQ(di.card_index, 3);
    EXPECT_EQ(di.function_index, 1);
    EXPECT_EQ(di.mem_size, 16u << 20);
    EXPECT_EQ(di.num_cores, 32u);
    EXPECT_EQ(di.daemon_pid, 0);  // no daemon behind a card
    EXPECT_STREQ(di.pci_address, kAddress);
    EXPECT_EQ(di.flags, SPYRE_DEVICE_FLAGS_RESET | SPYRE_DEVICE_FLAGS_PCI | SPYRE_DEVICE_FLAGS_VF);
}

TEST(VfioBackend, RegionInfoCarriesTheKernelsOffsets) {
    FakeVfio fake;
    auto backend = OpenVfioBackend(Info(), fake);
    for (uint32_t index : {SPYRE_REGION_BAR0, SPYRE_REGION_BAR2, SPYRE_REGION_BAR4, SPYRE_REGION_CONFIG}) {
        const spyre_region_info ri = backend->RegionInfo(index);
        EXPECT_EQ(ri.index, index);
        EXPECT_EQ(ri.offset, fake.regions.at(index).offset) << index;
        EXPECT_EQ(ri.size, fake.regions.at(index).size) << index;
        EXPECT_EQ(ri.flags, fake.regions.at(index).flags) << index;
    }
    // The function's memory is its BAR2 aperture.
    EXPECT_EQ(backend->RegionInfo(SPYRE_REGION_DEVMEM).offset, fake.regions.at(SPYRE_REGION_BAR2).offset);
    EXPECT_EQ(Caught([&] { backend->RegionInfo(SPYRE_REGION_BAR2 + 1); }).kind(), ErrorKind::InvalidArgument);
    EXPECT_EQ(Caught([&] { backend->RegionInfo(SPYRE_NUM_REGIONS); }).kind(), ErrorKind::InvalidArgument);
}

// A mapping of the device fd at the region's offset and trapped access at
// the same offset are the same bytes.
TEST(VfioBackend, MapsBarsThroughTheDeviceFdAtTheRegionOffset) {
    FakeVfio fake;
    auto backend = OpenVfioBackend(Info(), fake);
    MappedRegion bar0 = backend->Map(SPYRE_REGION_BAR0);
    const auto& r0 = fake.regions.at(SPYRE_REGION_BAR0);
    EXPECT_EQ(fake.calls.back(), "mmap device " + std::to_string(r0.offset) + " " + std::to_string(r0.size));
    ASSERT_EQ(bar0.size(), SPYRE_BAR0_SIZE);
    uint32_t magic;
    std::memcpy(&magic, bar0.data() + SPYRE_REG_MAGIC, 4);
    EXPECT_EQ(magic, SPYRE_MAGIC);

    const std::vector<uint8_t> pattern = {1, 2, 3, 4, 5, 6, 7, 8};
    backend->Write(SPYRE_REGION_BAR0, 0x1000, pattern, {});
    EXPECT_EQ(std::memcmp(bar0.data() + 0x1000, pattern.data(), pattern.size()), 0);
    std::memset(bar0.data() + 0x2000, 0xA5, 16);
    std::vector<uint8_t> back(16);
    backend->Read(SPYRE_REGION_BAR0, 0x2000, back, {});
    EXPECT_EQ(back, std::vector<uint8_t>(16, 0xA5));

    MappedRegion mem = backend->Map(SPYRE_REGION_DEVMEM);
    EXPECT_EQ(mem.size(), fake.regions.at(SPYRE_REGION_BAR2).size);
}

TEST(VfioBackend, DmaFileIsTheDeviceFdAtTheMemoryOffset) {
    FakeVfio fake;
    auto backend = OpenVfioBackend(Info(), fake);
    const RegionFile f = backend->File(SPYRE_REGION_DEVMEM);
    EXPECT_EQ(f.fd, kDup);
    EXPECT_EQ(f.offset, fake.regions.at(SPYRE_REGION_BAR2).offset);
    EXPECT_EQ(fake.calls.back(), "dup device");
}

TEST(VfioBackend, ResetIsVfioDeviceReset) {
    FakeVfio fake;
    auto backend = OpenVfioBackend(Info(), fake);
    backend->Reset();
    EXPECT_EQ(fake.calls.back(), "DEVICE_RESET device");
}

TEST(VfioBackend, NoResetWhereVfioOffersNone) {
    FakeVfio fake;
    fake.device_flags = VFIO_DEVICE_FLAGS_PCI;
    auto backend = OpenVfioBackend(Info(), fake);
    Error e = Caught([&] { backend->Reset(); });
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("no reset"), std::string::npos) << e.what();
    EXPECT_EQ(backend->DeviceInfo().flags & SPYRE_DEVICE_FLAGS_RESET, 0u);
}

// Each refusal on the way to the device fd is a typed error, and every fd
// opened before it is closed again.
void ExpectOpenFails(FakeVfio& fake, ErrorKind kind, const std::string& words) {
    Error e = Caught([&] { OpenVfioBackend(Info(), fake); });
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    EXPECT_TRUE(fake.live.empty()) << "an fd was left open";
}

TEST(VfioBackend, WrongApiVersionIsUnsupported) {
    FakeVfio fake;
    fake.api_version = 7;
    ExpectOpenFails(fake, ErrorKind::Unsupported, "VFIO API 7");
}

TEST(VfioBackend, NoType1IommuIsUnsupported) {
    FakeVfio fake;
    fake.iommu_types = {};
    ExpectOpenFails(fake, ErrorKind::Unsupported, "type-1 IOMMU");
}

TEST(VfioBackend, GroupNotViableIsUnsupported) {
    FakeVfio fake;
    fake.group_flags = 0;
    ExpectOpenFails(fake, ErrorKind::Unsupported, "not viable");
    EXPECT_EQ(std::find(fake.calls.begin(), fake.calls.end(), "GROUP_SET_CONTAINER group container"), fake.calls.end());
}

TEST(VfioBackend, GroupHeldElsewhereIsBusy) {
    FakeVfio fake;
    fake.group_open_errno = EBUSY;
    ExpectOpenFails(fake, ErrorKind::Busy, "held by another process");
    FakeVfio in_container;
    in_container.group_flags = VFIO_GROUP_FLAGS_VIABLE | VFIO_GROUP_FLAGS_CONTAINER_SET;
    ExpectOpenFails(in_container, ErrorKind::Busy, "another container");
}

TEST(VfioBackend, DeviceNotInTheGroupIsNotFound) {
    FakeVfio fake;
    FunctionInfo info = Info();
    info.pci_address = "0000:3b:00.2";
    Error e = Caught([&] { OpenVfioBackend(info, fake); });
    EXPECT_EQ(e.kind(), ErrorKind::NotFound) << e.what();
    EXPECT_TRUE(fake.live.empty());
    EXPECT_NE(std::string(e.what()).find("has no device 0000:3b:00.2"), std::string::npos) << e.what();
}

TEST(VfioBackend, MissingRegionIsAProtocolError) {
    FakeVfio fake;
    fake.regions.erase(VFIO_PCI_BAR4_REGION_INDEX);  // vfio-pci reports it with size 0
    ExpectOpenFails(fake, ErrorKind::ProtocolError, "region 4 missing");
}

TEST(VfioBackend, MissingMemoryApertureLeavesOnlyTheRegisters) {
    FakeVfio fake;
    fake.regions.erase(VFIO_PCI_BAR2_REGION_INDEX);
    auto backend = OpenVfioBackend(Info(), fake);
    EXPECT_EQ(backend->RegionInfo(SPYRE_REGION_DEVMEM).size, 0u);
    EXPECT_EQ(Caught([&] { backend->Map(SPYRE_REGION_DEVMEM); }).kind(), ErrorKind::ProtocolError);
    EXPECT_EQ(Caught([&] { backend->File(SPYRE_REGION_DEVMEM); }).kind(), ErrorKind::ProtocolError);
}

// vfio-pci traps a BAR it cannot map (a sparse or non-page-aligned one):
// no mapping, but pread/pwrite at the region offset reach the same bytes.
TEST(VfioBackend, UnmappableRegionIsTrappedAccess) {
    FakeVfio fake;
    fake.regions.at(VFIO_PCI_BAR0_REGION_INDEX).flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
    auto backend = OpenVfioBackend(Info(), fake);
    Error e = Caught([&] { backend->Map(SPYRE_REGION_BAR0); });
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("trapped access"), std::string::npos) << e.what();
    std::vector<uint8_t> magic(4);
    backend->Read(SPYRE_REGION_BAR0, SPYRE_REG_MAGIC, magic, {});
    uint32_t v;
    std::memcpy(&v, magic.data(), 4);
    EXPECT_EQ(v, SPYRE_MAGIC);
    const uint32_t value = 0x600DF00D;
    backend->Write(SPYRE_REGION_BAR0, SPYRE_REG_SCRATCH, std::span(reinterpret_cast<const uint8_t*>(&value), 4), {});
    EXPECT_EQ(fake.Peek<uint32_t>(VFIO_PCI_BAR0_REGION_INDEX, SPYRE_REG_SCRATCH), value);
    // Config space is never mappable.
    EXPECT_EQ(Caught([&] { backend->Map(SPYRE_REGION_CONFIG); }).kind(), ErrorKind::Unsupported);
}

// The kernel may move fewer bytes than asked: the backend goes on until all
// are moved, and the region's end (a 0-byte transfer) is an error, not a hang.
TEST(VfioBackend, ShortTransfersAreResumed) {
    FakeVfio fake;
    fake.max_transfer = 3;
    auto backend = OpenVfioBackend(Info(), fake);
    std::vector<uint8_t> pattern(61);
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = uint8_t(i * 7 + 1);
    backend->Write(SPYRE_REGION_BAR2, 4093, pattern, {});
    std::vector<uint8_t> back(pattern.size());
    backend->Read(SPYRE_REGION_BAR2, 4093, back, {});
    EXPECT_EQ(back, pattern);

    const uint64_t end = fake.regions.at(SPYRE_REGION_BAR2).size;
    std::vector<uint8_t> across(8);
    Error e = Caught([&] { backend->Read(SPYRE_REGION_BAR2, end - 4, across, {}); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("past the end of region 2"), std::string::npos) << e.what();
}

}  // namespace
}  // namespace spyre::driver
