// SPDX-License-Identifier: Apache-2.0
// The device's memory region table: grants, refusals, release, and how PF
// grants and SR-IOV share the card memory.
#include <fcntl.h>
#include <unistd.h>

#include "mock_fixture.hpp"

using namespace spyre::driver;
using spyre::test::MockDeviceTest;

namespace {

uint32_t Command(Function& fn, uint32_t cmd, uint32_t arg) {
    fn.Write32(SPYRE_REG_REGION_ARG, arg);
    fn.Write32(SPYRE_REG_REGION_CMD, cmd);
    return fn.Read32(SPYRE_REG_REGION_RESULT);
}

int WriteNumVfs(const std::filesystem::path& file, const char* text) {
    int fd = ::open(file.c_str(), O_WRONLY);
    ssize_t n = ::write(fd, text, strlen(text));
    int e = errno;
    ::close(fd);
    return n < 0 ? -e : 0;
}

}  // namespace

TEST_F(MockDeviceTest, RegionCommandsGrantRefuseAndRelease) {
    Function fn = Function::Open(Vf(1));
    const uint64_t grantable = fn.Read64(SPYRE_REG_REGION_GRANTABLE);
    EXPECT_EQ(grantable, fn.Read64(SPYRE_REG_MEM_SIZE) / SPYRE_REGION_ALIGN * SPYRE_REGION_ALIGN);
    EXPECT_EQ(fn.Read32(SPYRE_REG_REGION_MAX), SPYRE_REGION_MAX_ENTRIES);

    ASSERT_EQ(Command(fn, SPYRE_REGION_CMD_ALLOC, 3), SPYRE_REGION_OK);  // 3 MiB rounds up to 4 MiB
    const uint32_t first = fn.Read32(SPYRE_REG_REGION_INDEX);
    EXPECT_EQ(fn.Read64(SPYRE_REG_REGION_SIZE(first)), 4ull << 20);
    EXPECT_EQ(fn.Read64(SPYRE_REG_REGION_BASE(first)), 0u);
    EXPECT_EQ(Command(fn, SPYRE_REGION_CMD_ALLOC, 0), SPYRE_REGION_EINVAL);
    EXPECT_EQ(Command(fn, SPYRE_REGION_CMD_ALLOC, uint32_t(grantable >> 20)), SPYRE_REGION_ENOSPC);
    EXPECT_EQ(Command(fn, SPYRE_REGION_CMD_FREE, 15), SPYRE_REGION_EINVAL);  // not granted
    EXPECT_EQ(Command(fn, 99, 0), SPYRE_REGION_EINVAL);
    for (uint32_t i = 1; i < SPYRE_REGION_MAX_ENTRIES; ++i) ASSERT_EQ(Command(fn, SPYRE_REGION_CMD_ALLOC, 2), SPYRE_REGION_OK);
    EXPECT_EQ(Command(fn, SPYRE_REGION_CMD_ALLOC, 2), SPYRE_REGION_EFULL);
    EXPECT_EQ(fn.Read32(SPYRE_REG_REGION_COUNT), SPYRE_REGION_MAX_ENTRIES);
    // The dump names them.
    EXPECT_NE(fn.RegisterDump().find("REGION15_SIZE"), std::string::npos);
    ASSERT_EQ(Command(fn, SPYRE_REGION_CMD_FREE, first), SPYRE_REGION_OK);
    EXPECT_EQ(fn.Read64(SPYRE_REG_REGION_SIZE(first)), 0u);
    // A reset keeps the grants; a new owner starts empty.
    fn.Reset();
    EXPECT_EQ(fn.Read32(SPYRE_REG_REGION_COUNT), SPYRE_REGION_MAX_ENTRIES - 1);
    Command(fn, SPYRE_REGION_CMD_FREE_ALL, 0);
    EXPECT_EQ(fn.Read32(SPYRE_REG_REGION_COUNT), 0u);
    EXPECT_EQ(fn.Read64(SPYRE_REG_REGION_LARGEST), grantable);
}

TEST_F(MockDeviceTest, GrantsEndWithTheOwner) {
    {
        Function fn = Function::Open(Vf(2));
        ASSERT_EQ(Command(fn, SPYRE_REGION_CMD_ALLOC, 64), SPYRE_REGION_OK);
    }
    Function again = Function::Open(Vf(2));
    EXPECT_EQ(again.Read32(SPYRE_REG_REGION_COUNT), 0u);
}

TEST_F(MockDeviceTest, PfGrantsAndSriovShareTheCardMemory) {
    const auto numvfs = Pf().sysfs_dir / "sriov_numvfs";
    Function pf = Function::Open(Pf());
    // With 2 VFs the PF may only be granted slice 0 (a third of 4 GiB).
    const uint64_t slice0 = pf.Read64(SPYRE_REG_REGION_GRANTABLE);
    EXPECT_LT(slice0, pf.Read64(SPYRE_REG_MEM_SIZE) / 2);
    ASSERT_EQ(WriteNumVfs(numvfs, "0"), 0);
    EXPECT_EQ(pf.Read64(SPYRE_REG_REGION_GRANTABLE), 4ull << 30);  // the whole card again
    // A PF region reaching past slice 0 keeps VFs from being enabled.
    ASSERT_EQ(Command(pf, SPYRE_REGION_CMD_ALLOC, 3 << 10), SPYRE_REGION_OK);  // 3 GiB
    EXPECT_EQ(WriteNumVfs(numvfs, "2"), -EBUSY);
    EXPECT_EQ(root().Functions().size(), 1u);
    Command(pf, SPYRE_REGION_CMD_FREE_ALL, 0);
    EXPECT_EQ(WriteNumVfs(numvfs, "2"), 0);
    EXPECT_EQ(pf.Read64(SPYRE_REG_REGION_GRANTABLE), slice0);
}

// A PF's holder that enables VFs keeps its mapping of the whole card, but
// past slice 0 the card shows the VFs' memory, not the PF's pages: the
// driver's copies stop at slice 0 from the enable on. Before, a copy there
// "succeeded" into detached pages: the PF's earlier bytes read as zeros and
// its writes reached nobody (found probing from outside, 2 of 2).
TEST_F(MockDeviceTest, APfsCopiesStopAtSliceZeroOnceItsHolderEnablesVfs) {
    const auto numvfs = Pf().sysfs_dir / "sriov_numvfs";
    ASSERT_EQ(WriteNumVfs(numvfs, "0"), 0);
    Function pf = Function::Open(Pf());
    DmaQueue queue(pf);
    const uint64_t high = 3ull << 30;  // past slice 0 of 2 VFs (a third of 4 GiB)
    std::vector<uint8_t> bytes(8192, 0xAA), back(8192, 0);
    queue.Wait(queue.HostToDevice(bytes.data(), high, bytes.size()));  // the whole card is the PF's
    queue.Wait(queue.DeviceToHost(back.data(), high, back.size()));
    EXPECT_EQ(back, bytes);
    ASSERT_EQ(WriteNumVfs(numvfs, "2"), 0);  // the holder's own moment
    EXPECT_SPYRE_ERROR(queue.HostToDevice(bytes.data(), high, bytes.size()), InvalidArgument,
                       "enabled after it was opened: slice 0");
    EXPECT_SPYRE_ERROR(queue.DeviceToHost(back.data(), high, back.size()), InvalidArgument, "slice 0");
    EXPECT_SPYRE_ERROR(queue.DeviceToDevice(0, high, 64), InvalidArgument, "slice 0");
    const uint64_t slice0 = pf.Read64(SPYRE_REG_REGION_GRANTABLE);
    std::fill(back.begin(), back.end(), 0);
    queue.Wait(queue.HostToDevice(bytes.data(), slice0 - bytes.size(), bytes.size()));  // its own part still is
    queue.Wait(queue.DeviceToHost(back.data(), slice0 - bytes.size(), back.size()));
    EXPECT_EQ(back, bytes);
    // VF 2's slice, where the PF wrote before the enable, starts from zeros.
    Function vf2 = Function::Open(Vf(2));
    DmaQueue vf_queue(vf2);
    const uint64_t at = high - vf2.Read64(SPYRE_REG_MEM_BASE);
    vf_queue.Wait(vf_queue.DeviceToHost(back.data(), at, back.size()));
    EXPECT_EQ(back, std::vector<uint8_t>(back.size(), 0));
}

// The region table is its holder's: a process holding nothing that writes
// the unheld PF's region registers through resource0 is refused, as for a
// ring enable, so it cannot grant itself a region that keeps VFs from being
// enabled (found probing from outside: an ALLOC there made every later
// sriov_numvfs write fail with EBUSY until the PF next changed hands).
TEST_F(MockDeviceTest, AProcessHoldingNothingCannotCommandTheRegionTable) {
    const auto numvfs = Pf().sysfs_dir / "sriov_numvfs";
    ASSERT_EQ(WriteNumVfs(numvfs, "0"), 0);
    const int fd = ::open((Pf().sysfs_dir / "resource0").c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << strerror(errno);
    const uint32_t three_gib = 3 << 10, alloc = SPYRE_REGION_CMD_ALLOC;
    EXPECT_EQ(::pwrite(fd, &three_gib, 4, SPYRE_REG_REGION_ARG), 4);  // a plain register
    errno = 0;
    EXPECT_EQ(::pwrite(fd, &alloc, 4, SPYRE_REG_REGION_CMD), -1);
    EXPECT_EQ(errno, EACCES);
    uint32_t count = ~0u;
    EXPECT_EQ(::pread(fd, &count, 4, SPYRE_REG_REGION_COUNT), 4);
    EXPECT_EQ(count, 0u);
    ::close(fd);
    EXPECT_EQ(WriteNumVfs(numvfs, "2"), 0);
    // Its holder still commands it.
    Function pf = Function::Open(Pf());
    EXPECT_EQ(Command(pf, SPYRE_REGION_CMD_ALLOC, 64), SPYRE_REGION_OK);
    EXPECT_EQ(pf.Read32(SPYRE_REG_REGION_COUNT), 1u);
}
