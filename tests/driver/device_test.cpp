// SPDX-License-Identifier: Apache-2.0
// A real spyre-mockdev per test: open PF and VF, regions, mapped vs trapped
// registers, NOP round trips in every wait mode, dumps, resets, SR-IOV.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <sstream>
#include <thread>

#include "mock_fixture.hpp"
#include "spyre/common/device_clock.hpp"
#include "spyre/driver/register_dump.hpp"
#include "spyre/mock/spyre_mock.h"
#include "spyre/uapi/spyre_regdesc.hpp"

using namespace spyre::driver;
using spyre::test::MockDeviceTest;

namespace {

std::string ReadText(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<uint8_t> ReadBytes(const std::filesystem::path& p, size_t n) {
    std::vector<uint8_t> out(n);
    int fd = ::open(p.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0) << p;
    EXPECT_EQ(::pread(fd, out.data(), n, 0), ssize_t(n));
    ::close(fd);
    return out;
}

void RunNops(CommandRing& ring, WaitMode mode, int count) {
    Completion c;
    for (int i = 0; i < count; ++i) {
        const uint64_t tag = (uint64_t(mode) << 32) | uint64_t(i);
        const uint32_t pos = ring.Submit(std::array{NopCb(tag)});
        ASSERT_EQ(ring.Wait({&c, 1}, 1, {.mode = mode}), 1u);
        ASSERT_TRUE(c.ok()) << spyre_error_name(c.status);
        ASSERT_EQ(c.user_data, tag);
        ASSERT_EQ(c.sq_pos, pos);
        ASSERT_EQ(c.opcode, SPYRE_OP_NOP);
    }
}

}  // namespace

TEST_F(MockDeviceTest, ConfigSpaceIdentifiesPfAndVf) {
    auto pf = ReadBytes(Pf().sysfs_dir / "config", SPYRE_CONFIG_SIZE);
    EXPECT_EQ(pf[0], 0x14);
    EXPECT_EQ(pf[1], 0x10);
    EXPECT_EQ(pf[2], 0xa7);
    EXPECT_EQ(pf[3], 0x06);
    auto decoded = DecodeConfig(pf);
    EXPECT_EQ(decoded.class_code, SPYRE_PCI_CLASS_CODE);
    ASSERT_TRUE(decoded.sriov);
    EXPECT_EQ(decoded.sriov->num_vfs, 2);
    EXPECT_EQ(decoded.sriov->vf_device_id, SPYRE_PCI_DEVICE_VF);
    for (int bar : {0, 2, 4}) EXPECT_TRUE(decoded.bars[bar]) << "BAR" << bar;

    auto vf = DecodeConfig(ReadBytes(Vf(1).sysfs_dir / "config", SPYRE_CONFIG_SIZE));
    EXPECT_EQ(vf.device_id, SPYRE_PCI_DEVICE_VF);
    EXPECT_FALSE(vf.sriov);
}

TEST_F(MockDeviceTest, OpenPfReportsIdentityAndRegions) {
    Function fn = Function::Open(Pf());
    EXPECT_EQ(fn.device_info().device_id, SPYRE_PCI_DEVICE_PF);
    EXPECT_EQ(std::string(fn.device_info().pci_address), "0000:01:00.0");
    EXPECT_EQ(fn.Read32(SPYRE_REG_MAGIC), SPYRE_MAGIC);
    EXPECT_EQ(fn.Read32(SPYRE_REG_PCI_ID), SPYRE_PCI_VENDOR_IBM | (SPYRE_PCI_DEVICE_PF << 16));
    EXPECT_EQ(fn.Read64(SPYRE_REG_MEM_SIZE), 4ull << 30);
    EXPECT_TRUE(fn.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_READY);

    auto bar0 = fn.RegionInfo(SPYRE_REGION_BAR0);
    EXPECT_EQ(bar0.size, SPYRE_BAR0_SIZE);
    EXPECT_TRUE(bar0.flags & SPYRE_REGION_INFO_FLAG_MMAP);
    EXPECT_EQ(fn.RegionInfo(SPYRE_REGION_BAR2).size, SPYRE_BAR2_SIZE);
    EXPECT_EQ(fn.RegionInfo(SPYRE_REGION_BAR4).size, SPYRE_BAR4_SIZE);
    auto cfg = fn.RegionInfo(SPYRE_REGION_CONFIG);
    EXPECT_EQ(cfg.size, SPYRE_CONFIG_SIZE);
    EXPECT_FALSE(cfg.flags & SPYRE_REGION_INFO_FLAG_MMAP);
    EXPECT_SPYRE_ERROR(fn.MapRegion(SPYRE_REGION_CONFIG), Unsupported, "cannot be mapped");
    EXPECT_SPYRE_ERROR(fn.RegionInfo(SPYRE_NUM_REGIONS), InvalidArgument, "region 10 is none of the function's");
}

// On the mock, the shared-memory objects are the transport's: the driver
// learns them over the device node it holds, and nowhere else.
TEST_F(MockDeviceTest, MockBackendHandsSharedMemoryOnlyToTheHolder) {
    Function fn = Function::Open(Vf(1));
    EXPECT_STREQ(fn.backend_name(), "mock");
    MappedRegion mem = fn.MapRegion(SPYRE_REGION_DEVMEM);
    std::memcpy(mem.data() + 8192, "spyre!", 6);
    const RegionFile file = fn.OpenRegionFile(SPYRE_REGION_DEVMEM);
    char back[6] = {};
    EXPECT_EQ(::pread(file.fd, back, sizeof back, off_t(file.offset + 8192)), 6);
    ::close(file.fd);
    EXPECT_EQ(std::memcmp(back, "spyre!", 6), 0);

    const int config = ::open((Vf(1).sysfs_dir / "config").c_str(), O_RDONLY);
    ASSERT_GE(config, 0);
    spyre_mock_region_shm m{};
    m.argsz = sizeof m;
    m.index = SPYRE_REGION_DEVMEM;
    EXPECT_EQ(::ioctl(config, SPYRE_MOCK_IOC_REGION_SHM, &m), -1);
    EXPECT_EQ(errno, ENOTTY);
    EXPECT_EQ(m.shm_name[0], '\0');
    ::close(config);
}

TEST_F(MockDeviceTest, UnknownIoctlIsRejected) {
    Function fn = Function::Open(Pf());
    spyre_reset_req bogus{sizeof bogus, 0};
    EXPECT_EQ(::ioctl(fn.fd(), _IOW(';', 199, spyre_reset_req), &bogus), -1);
    EXPECT_EQ(errno, ENOTTY);
    spyre_reset_req bad_flags{sizeof bad_flags, 1};
    EXPECT_EQ(::ioctl(fn.fd(), SPYRE_IOC_RESET, &bad_flags), -1);
    EXPECT_EQ(errno, EINVAL);
}

TEST_F(MockDeviceTest, DeviceNodeIsExclusive) {
    Function fn = Function::Open(Vf(1));
    EXPECT_SPYRE_ERROR(Function::Open(Vf(1)), Busy, "in use");
    Function other = Function::Open(Vf(2));  // a different VF is free
    EXPECT_TRUE(other.is_vf());
}

TEST_F(MockDeviceTest, TrappedAndMappedRegisterAccessAgree) {
    Function fn = Function::Open(Pf());
    for (const auto& r : spyre::uapi::kRegisters) {
        if (r.width == 4)
            EXPECT_EQ(fn.Read32(r.offset), fn.ReadTrapped32(r.offset)) << r.name;
        else
            EXPECT_EQ(fn.Read64(r.offset), fn.ReadTrapped64(r.offset)) << r.name;
    }
    fn.Write32(SPYRE_REG_SCRATCH, 0xC0FFEE01u);  // mapped store
    EXPECT_EQ(fn.ReadTrapped32(SPYRE_REG_SCRATCH), 0xC0FFEE01u);
    fn.WriteTrapped32(SPYRE_REG_SCRATCH, 0x12345678u);  // trapped store
    EXPECT_EQ(fn.Read32(SPYRE_REG_SCRATCH), 0x12345678u);
    fn.WriteTrapped32(SPYRE_REG_MAGIC, 0);  // read-only: ignored, like hardware
    EXPECT_EQ(fn.ReadTrapped32(SPYRE_REG_MAGIC), SPYRE_MAGIC);
    EXPECT_SPYRE_ERROR(fn.Read32(0x3), InvalidArgument, "aligned");
    EXPECT_SPYRE_ERROR(fn.Read64(SPYRE_REG_STATUS), InvalidArgument, "8-byte aligned");
    // Offsets whose end wraps 32 bits: they passed the check, and the access
    // landed 4 GiB past BAR0 (SIGSEGV; found probing from outside).
    EXPECT_SPYRE_ERROR(fn.Read32(0xfffffffcu), InvalidArgument, "inside the register file");
    EXPECT_SPYRE_ERROR(fn.Read64(0xfffffff8u), InvalidArgument, "inside the register file");
    EXPECT_SPYRE_ERROR(fn.Write32(0xfffffffcu, 1), InvalidArgument, "inside the register file");
    EXPECT_SPYRE_ERROR(fn.Read32(SPYRE_REG_FILE_SIZE), InvalidArgument, "inside the register file");
    // A raw region read longer than the region is refused before any
    // buffer is taken (std::bad_alloc, std::length_error).
    EXPECT_SPYRE_ERROR(fn.ReadRegion(SPYRE_REGION_BAR2, 0, size_t(1) << 40), InvalidArgument, "runs past region 2");
    EXPECT_SPYRE_ERROR(fn.ReadRegion(SPYRE_REGION_BAR0, 0, SIZE_MAX), InvalidArgument, "runs past region 0");
    EXPECT_EQ(fn.ReadRegion(SPYRE_REGION_BAR0, SPYRE_REG_MAGIC, 4).size(), 4u);
}

// One CommandRing per function in a process: a second one reset the
// function under the first, whose next wait failed DeviceLost.
TEST_F(MockDeviceTest, ASecondCommandRingOnAFunctionIsBusy) {
    Function fn = Function::Open(Vf(1));
    std::optional<CommandRing> ring(std::in_place, fn);
    RunNops(*ring, WaitMode::Poll, 3);
    const uint64_t resets = fn.Read64(SPYRE_REG_CNT_RESETS);
    EXPECT_SPYRE_ERROR(CommandRing{fn}, Busy, "the CB ring is held by another CommandRing of this process");
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_RESETS), resets);
    RunNops(*ring, WaitMode::Poll, 3);  // the first goes on
    ring.reset();
    CommandRing again(fn);  // free once the first is gone
    RunNops(again, WaitMode::Poll, 3);
}

TEST_F(MockDeviceTest, SysfsResourceFilesAreTrappedRegisters) {
    Function fn = Function::Open(Pf());
    fn.Write32(SPYRE_REG_SCRATCH, 0xA5A55A5Au);
    int fd = ::open((Pf().sysfs_dir / "resource0").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint32_t v = 0;
    ASSERT_EQ(::pread(fd, &v, 4, SPYRE_REG_SCRATCH), 4);
    EXPECT_EQ(v, 0xA5A55A5Au);
    v = 0x01020304u;
    ASSERT_EQ(::pwrite(fd, &v, 4, SPYRE_REG_SCRATCH), 4);
    EXPECT_EQ(fn.Read32(SPYRE_REG_SCRATCH), 0x01020304u);
    uint16_t half = 1;
    EXPECT_EQ(::pwrite(fd, &half, 2, SPYRE_REG_SCRATCH), -1);  // registers are written whole
    EXPECT_EQ(errno, EINVAL);
    ::close(fd);
    EXPECT_EQ(std::filesystem::file_size(Pf().sysfs_dir / "resource2"), SPYRE_BAR2_SIZE);
    EXPECT_EQ(ReadText(Pf().sysfs_dir / "vendor"), "0x1014\n");
    EXPECT_EQ(ReadText(Vf(2).sysfs_dir / "device"), "0x06a8\n");
}

// Anyone may read a function's identity from resource0 while its owner
// changes: a read during a hand-over (the register file renewed) sees the
// registers before or after it, never a file halfway made. (Under the
// ThreadSanitizer daemon of CI this also shows the reads and the renewal
// ordered by a lock.)
TEST_F(MockDeviceTest, ReadingRegistersWhileTheFunctionChangesHandsSeesThemWhole) {
    const FunctionInfo vf = Vf(1);
    const spyre::driver::FunctionStatus expected = spyre::driver::ReadFunctionStatus(vf);
    ASSERT_EQ(expected.function, 1);
    ASSERT_GT(expected.memory_bytes, 0u);
    std::atomic<bool> stop{false};
    std::atomic<int> reads{0}, torn{0};
    std::thread reader([&] {
        const int fd = ::open((vf.sysfs_dir / "resource0").c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return;
        while (!stop.load()) {
            uint8_t regs[SPYRE_REG_MEM_SIZE + 8] = {};
            if (::pread(fd, regs, sizeof regs, 0) != ssize_t(sizeof regs)) continue;
            uint32_t magic, func_id;
            uint64_t mem;
            std::memcpy(&magic, regs + SPYRE_REG_MAGIC, 4);
            std::memcpy(&func_id, regs + SPYRE_REG_FUNC_ID, 4);
            std::memcpy(&mem, regs + SPYRE_REG_MEM_SIZE, 8);
            if (magic != SPYRE_MAGIC || (func_id & SPYRE_FUNC_ID_INDEX_MASK) != expected.function ||
                mem != expected.memory_bytes)
                torn.fetch_add(1);
            reads.fetch_add(1);
        }
        ::close(fd);
    });
    for (int i = 0; i < 30; ++i) {
        Function fn = Function::Open(vf);
        EXPECT_EQ(fn.Read32(SPYRE_REG_MAGIC), SPYRE_MAGIC);
    }
    stop.store(true);
    reader.join();
    EXPECT_GT(reads.load(), 0) << "the reader could not read resource0";
    EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
}

TEST_F(MockDeviceTest, NopRoundTripsInEveryWaitModeOnPfAndVf) {
    for (const FunctionInfo& info : {Pf(), Vf(1)}) {
        Function fn = Function::Open(info);
        CommandRing ring(fn);
        for (WaitMode mode : {WaitMode::Poll, WaitMode::Adaptive, WaitMode::Blocking}) {
            SCOPED_TRACE(std::string(ToString(mode)) + " on " + info.pci_address);
            RunNops(ring, mode, 300);
        }
        EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_NOPS), 900u);
        EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_CB_DONE), 900u);
        EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_CB_ERRORS), 0u);
    }
}

// The device reads its clock once per batch and once per CB: each CQE carries
// the device clock at its completion and the busy counter adds up the batch.
// The counter is added after the batch's last CQE (docs/hardware.md), so it
// may still lag the completions just reaped: the test looks until it moves.
TEST_F(MockDeviceTest, CompletionsCarryTheDeviceClockAndBusyTimeAddsUp) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    const uint64_t busy_before = fn.Read64(SPYRE_REG_CNT_BUSY_NS);
    std::vector<spyre_cb> cbs;
    for (uint32_t i = 0; i < 64; ++i) cbs.push_back(NopCb(i));
    std::vector<Completion> done(cbs.size());
    const uint64_t submitted = spyre::DeviceClockNs();
    ring.Submit(cbs);
    size_t got = 0;
    while (got < done.size()) got += ring.Wait(std::span(done).subspan(got), done.size() - got, {.mode = WaitMode::Poll});
    const uint64_t reaped = spyre::DeviceClockNs();
    uint64_t previous = submitted;
    for (const Completion& c : done) {
        ASSERT_TRUE(c.ok());
        EXPECT_GE(c.timestamp_ns, previous) << "CB " << c.user_data;
        EXPECT_LE(c.timestamp_ns, reaped) << "CB " << c.user_data;
        previous = c.timestamp_ns;
    }
    uint64_t busy = 0;
    for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
         busy == 0 && std::chrono::steady_clock::now() < until; std::this_thread::yield())
        busy = fn.Read64(SPYRE_REG_CNT_BUSY_NS) - busy_before;
    EXPECT_GT(busy, 0u) << "the busy counter did not move within 2 s of the batch's completions";
    EXPECT_LE(busy, reaped - submitted);
}
// The device writes each CQE with its lap's phase: after a lap and a bit,
// the slots written twice show lap 1's phase and the others lap 0's.
TEST_F(MockDeviceTest, CqesCarryTheirLapsPhase) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    const uint32_t entries = fn.Read32(SPYRE_REG_CQ_ENTRIES), extra = 10;
    std::vector<Completion> done(ring.sq_entries());
    for (uint32_t sent = 0; sent < entries + extra;) {
        const uint32_t n = std::min<uint32_t>(ring.sq_entries(), entries + extra - sent);
        std::vector<spyre_cb> cbs;
        for (uint32_t i = 0; i < n; ++i) cbs.push_back(NopCb(sent + i));
        ring.Submit(cbs);
        size_t got = 0;
        while (got < n) got += ring.Wait(std::span(done).subspan(got, n - got), n - got, {.mode = WaitMode::Poll});
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(done[i].user_data, sent + i);
        sent += n;
    }
    const auto* cq = reinterpret_cast<const spyre_cqe*>(fn.bar4() + fn.Read32(SPYRE_REG_CQ_OFFSET));
    for (uint32_t slot = 0; slot < entries; ++slot) {
        const uint32_t last_pos = slot < extra ? entries + slot : slot;
        ASSERT_EQ(cq[slot].phase, spyre_cqe_phase(last_pos, entries)) << "slot " << slot;
        ASSERT_EQ(cq[slot].user_data, last_pos) << "slot " << slot;
    }
}

// The driver knows a completion by its phase alone: a record with last
// lap's phase is not taken even if it names the right CB, one with this
// lap's is, though cq_tail never moved (the ring is off: only the test writes).
TEST_F(MockDeviceTest, CompletionsAreKnownByTheirPhaseNotByCqTail) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    fn.Write32(SPYRE_REG_CONTROL, 0);
    const uint32_t pos = ring.Submit(std::array{NopCb(77)});
    auto* cq = reinterpret_cast<spyre_cqe*>(fn.bar4() + fn.Read32(SPYRE_REG_CQ_OFFSET));
    const uint32_t entries = fn.Read32(SPYRE_REG_CQ_ENTRIES);
    spyre_cqe forged{};
    forged.user_data = 77;
    forged.sq_pos = pos;
    forged.opcode = SPYRE_OP_NOP;
    forged.phase = spyre_cqe_phase(entries, entries);  // last lap's (the next lap's) phase
    cq[0] = forged;
    Completion c;
    EXPECT_EQ(ring.Reap({&c, 1}), 0u);
    EXPECT_EQ(ring.InFlight(), 1u);
    cq[0].phase = spyre_cqe_phase(0, entries);
    ASSERT_EQ(ring.Reap({&c, 1}), 1u);
    EXPECT_EQ(c.user_data, 77u);
    EXPECT_EQ(ring.InFlight(), 0u);
    EXPECT_EQ(std::atomic_ref<uint32_t>(reinterpret_cast<spyre_doorbell_page*>(fn.bar4() + fn.Read32(SPYRE_REG_DB_OFFSET))->cq_tail).load(), 0u);
    // Nothing in flight: a record that shows the next position's phase is not looked at.
    cq[1] = forged;
    cq[1].phase = spyre_cqe_phase(1, entries);
    EXPECT_EQ(ring.Reap({&c, 1}), 0u);
}

TEST_F(MockDeviceTest, BatchesFillTheRingAndCompleteInOrder) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    std::vector<spyre_cb> cbs;
    for (uint32_t i = 0; i < ring.sq_entries(); ++i) cbs.push_back(NopCb(i));
    uint64_t expected = 0;
    std::vector<Completion> done(ring.sq_entries());
    for (int round = 0; round < 3; ++round) {  // wraps the ring three times
        ring.Submit(cbs);
        EXPECT_EQ(ring.FreeSlots(), 0u);
        EXPECT_SPYRE_ERROR(ring.Submit(std::array{NopCb(0)}), InvalidArgument, "free ring slots");
        size_t got = 0;
        while (got < done.size()) got += ring.Wait(std::span(done).subspan(got), done.size() - got, {.mode = WaitMode::Blocking});
        for (const auto& c : done) {
            ASSERT_TRUE(c.ok());
            ASSERT_EQ(c.user_data, expected++ % ring.sq_entries());
        }
    }
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_NOPS), 3ull * ring.sq_entries());
}

// The driver tells the device how far it consumed completions (cq_head)
// only every quarter ring, and always before the device could lack room for
// a CB in flight: with 1023 completions consumed and not yet published, a
// full ring of CBs still completes (the device would otherwise wait for CQ
// space that the driver had freed without saying so, and the wait time out).
TEST_F(MockDeviceTest, ConsumedCompletionsArePublishedBeforeTheDeviceLacksRoom) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    const auto* db = reinterpret_cast<const spyre_doorbell_page*>(fn.bar4() + fn.Read32(SPYRE_REG_DB_OFFSET));
    auto device_cq_head = [&] { return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(db->cq_head)).load(); };
    const uint32_t entries = fn.Read32(SPYRE_REG_CQ_ENTRIES), quarter = entries / 4;
    ASSERT_EQ(ring.sq_entries(), entries);
    Completion c;
    for (uint32_t i = 0; i + 1 < quarter; ++i) {
        ring.Submit(std::array{NopCb(i)});
        ASSERT_EQ(ring.Wait({&c, 1}, 1, {.mode = WaitMode::Poll}), 1u);
    }
    EXPECT_EQ(device_cq_head(), 0u);  // not told yet
    std::vector<spyre_cb> cbs;
    for (uint32_t i = 0; i < entries; ++i) cbs.push_back(NopCb(i));
    ring.Submit(cbs);
    EXPECT_EQ(device_cq_head(), quarter - 1);  // told before the full ring went in
    std::vector<Completion> done(entries);
    size_t got = 0;
    while (got < done.size())
        got += ring.Wait(std::span(done).subspan(got), done.size() - got,
                         {.mode = WaitMode::Poll, .timeout = std::chrono::seconds(5)});
    for (uint32_t i = 0; i < entries; ++i) ASSERT_EQ(done[i].user_data, i);
    // Reaped one by one, the device hears of it at least every quarter ring.
    for (uint32_t i = 0; i < quarter; ++i) {
        ring.Submit(std::array{NopCb(i)});
        ASSERT_EQ(ring.Wait({&c, 1}, 1, {.mode = WaitMode::Poll}), 1u);
        ASSERT_LT(quarter - 1 + entries + i + 1 - device_cq_head(), quarter);
    }
}

// A register dump without its DB.HEARTBEAT line: the heartbeat moves every
// 100 ms (contract 3.3), so two dumps of a still device differ only there.
static std::string StillPart(const std::string& dump) {
    const size_t at = dump.find("\nDB.HEARTBEAT ");
    if (at == std::string::npos) return dump + "(no DB.HEARTBEAT line)";
    const size_t end = dump.find('\n', at + 1);
    return dump.substr(0, at + 1) + (end == std::string::npos ? "" : dump.substr(end + 1));
}

TEST_F(MockDeviceTest, RegsFileMatchesRegdumpTool) {
    {
        Function fn = Function::Open(Pf());
        CommandRing ring(fn);
        RunNops(ring, WaitMode::Adaptive, 50);
        usleep(200 * 1000);  // let the ring server go to sleep so nothing moves
        std::string from_daemon = ReadText(Pf().sysfs_dir / "regs");
        auto r = spyre::test::RunCommand(spyre::test::ToolPath("SPYRE_REGDUMP") + " " + Pf().sysfs_dir.string());
        ASSERT_EQ(r.exit_code, 0) << r.output;
        // The tool adds one header line naming the function.
        ASSERT_EQ(r.output.rfind("# 0000:01:00.0 [1014:06a7] PF\n", 0), 0u) << r.output;
        EXPECT_EQ(StillPart(r.output.substr(r.output.find('\n') + 1)), StillPart(from_daemon));
        EXPECT_NE(from_daemon.find("CNT_NOPS"), std::string::npos);
        EXPECT_NE(from_daemon.find("  50\n"), std::string::npos) << from_daemon;
        EXPECT_EQ(StillPart(fn.RegisterDump()), StillPart(from_daemon));
        // The directory as a shell completes it, with a trailing slash
        // (refused as "not a spyre device node or function directory").
        auto slash = spyre::test::RunCommand(spyre::test::ToolPath("SPYRE_REGDUMP") + " " + Pf().sysfs_dir.string() + "/");
        ASSERT_EQ(slash.exit_code, 0) << slash.output;
        EXPECT_EQ(slash.output.rfind("# 0000:01:00.0 [1014:06a7] PF\n", 0), 0u) << slash.output;
        // By PCI address, through SPYRE_DEV_ROOT.
        auto by_addr = spyre::test::RunCommand("SPYRE_DEV_ROOT=" + root().path().string() + " " +
                                               spyre::test::ToolPath("SPYRE_REGDUMP") + " 01:00.0");
        EXPECT_EQ(StillPart(by_addr.output), StillPart(r.output));
        // A dump that cannot reach stdout is an error (it exited 0, and
        // --watch ran on for ever), with stdout full or closed.
        for (const char* out : {" > /dev/full", " >&-"})
            for (const char* watch : {"", " --watch 0.2"}) {
                // stderr to the captured pipe (fd 3), stdout where `out` says.
                auto lost = spyre::test::RunCommand("{ timeout 20 " + spyre::test::ToolPath("SPYRE_REGDUMP") + watch +
                                                    " " + Pf().sysfs_dir.string() + " 2>&3" + out + "; } 3>&1");
                EXPECT_EQ(lost.exit_code, 1) << out << watch << ": " << lost.output;
                EXPECT_NE(lost.output.find("cannot write the dump to standard output"), std::string::npos)
                    << out << watch << ": " << lost.output;
            }
    }
    auto missing = spyre::test::RunCommand("SPYRE_DEV_ROOT=" + root().path().string() + " " +
                                           spyre::test::ToolPath("SPYRE_REGDUMP") + " 0000:09:00.0");
    EXPECT_EQ(missing.exit_code, 1);
    EXPECT_NE(missing.output.find("no spyre function 0000:09:00.0"), std::string::npos) << missing.output;
}

// A bad command line of spyre-regdump is a usage error, exit code 2 as for
// every other tool (no function named exited with CLI11's 106), naming what
// was wrong; --help is no error.
TEST(RegdumpTool, UsageErrorsExitWith2) {
    const std::string tool = spyre::test::ToolPath("SPYRE_REGDUMP");
    const std::pair<std::string, std::string> bad[] = {
        {"", "function is required"},
        {" ''", "the function is empty"},  // was exit 1, as a function not found
        {" --watch -1 0", "--watch"},
        {" --watch nan 0", "'nan': SECONDS must be a number from 0 to 86400"},  // was one dump, exit 0
        {" --watch -nan 0", "'-nan': SECONDS"},
        {" --watch inf 0", "'inf': SECONDS"},
        {" --watch 1e9 0", "'1e9': SECONDS"},
        {" --watch 0x1 0", "'0x1': SECONDS"},  // was a dump every second
        {" --bogus 0", "--bogus"},
        {" --bogus", "--bogus"},  // said "function is required"
        {" 0 1", "1"},
    };
    for (const auto& [args, want] : bad) {
        SCOPED_TRACE("spyre-regdump" + args);
        auto r = spyre::test::RunCommand(tool + args);
        EXPECT_EQ(r.exit_code, 2) << r.output;
        EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
        EXPECT_NE(r.output.find("(see --help)"), std::string::npos) << r.output;
    }
    auto help = spyre::test::RunCommand(tool + " --help");
    EXPECT_EQ(help.exit_code, 0) << help.output;
    EXPECT_NE(help.output.find("Exit codes: 0 dumped (or --help), 1 the function cannot be found or read, 2 usage error."),
              std::string::npos)
        << help.output;
}

// A reset by another path under an open ring: whatever the emptied rings
// show the reaper, it says the function was reset (DeviceLost). It said
// "protocol error: completion N is for ring position 0" when it met the
// zeroed completion ring first (found probing from outside, 6 of 11).
TEST_F(MockDeviceTest, AResetUnderAnOpenRingIsReportedAsAReset) {
    Function fn = Function::Open(Vf(1));
    CommandRing ring(fn);
    // Into the completion ring's second lap, away from position 0: there a
    // zeroed completion record carries the phase the reaper expects.
    RunNops(ring, WaitMode::Poll, int(fn.Read32(SPYRE_REG_CQ_ENTRIES)) + 37);
    std::ofstream(Vf(1).sysfs_dir / "reset") << "1";
    Completion c;
    try {
        ring.Submit(std::array{NopCb(1)});
        ring.Wait({&c, 1}, 1, {.mode = WaitMode::Poll, .timeout = std::chrono::seconds(10)});
        ADD_FAILURE() << "a NOP completed on a ring reset under it";
    } catch (const spyre::Error& e) {
        EXPECT_EQ(e.kind(), spyre::ErrorKind::DeviceLost) << e.what();
        EXPECT_NE(std::string(e.what()).find("was reset while the CB ring"), std::string::npos) << e.what();
    }
}

// A device mapping a child inherits across fork() is the child's own from
// then on: private zero pages at the same address. A store there reached
// the parent's live device memory (found probing from outside, through an
// orchestration buffer and a Python view, 4 of 4).
TEST_F(MockDeviceTest, AForkedChildsDeviceMappingsArePrivateZeros) {
    Function fn = Function::Open(Vf(1));
    MappedRegion mem = fn.MapRegion(SPYRE_REGION_DEVMEM);
    std::memset(mem.data(), 0x42, 4096);
    const int rc = spyre::test::InChild([&] {
        if (!std::all_of(mem.data(), mem.data() + 4096, [](uint8_t b) { return b == 0; })) return 1;
        std::memset(mem.data(), 0xEE, 4096);  // stays in the child
        return mem.data()[4095] == 0xEE ? 0 : 2;
    });
    EXPECT_EQ(rc, 0) << "1: the child saw the parent's bytes, 2: its own store was lost, 255: it crashed";
    EXPECT_TRUE(std::all_of(mem.data(), mem.data() + 4096, [](uint8_t b) { return b == 0x42; }));
    EXPECT_EQ(fn.ReadRegion(SPYRE_REGION_DEVMEM, 0, 4096), std::vector<uint8_t>(4096, 0x42));
}

TEST_F(MockDeviceTest, ResetClearsRingErrorsAndCounters) {
    Function fn = Function::Open(Pf());
    {
        CommandRing ring(fn);
        RunNops(ring, WaitMode::Poll, 10);
        EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_NOPS), 10u);
    }
    const uint64_t resets = fn.Read64(SPYRE_REG_CNT_RESETS);
    fn.Reset();
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_NOPS), 0u);
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_RESETS), resets + 1);
    EXPECT_FALSE(fn.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_RING_ENABLED);
    // The sysfs reset file does the same.
    std::ofstream(Pf().sysfs_dir / "reset") << "1";
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_RESETS), resets + 2);
    // Anything but 1 is refused, and a number past every width is ERANGE
    // as in sriov_numvfs (it was EINVAL there: found probing from outside).
    const auto write_reset = [&](const std::string& text) {
        const int fd = ::open((Pf().sysfs_dir / "reset").c_str(), O_WRONLY);
        const ssize_t n = ::write(fd, text.data(), text.size());
        const int e = errno;
        ::close(fd);
        return n < 0 ? -e : 0;
    };
    EXPECT_EQ(write_reset("2"), -EINVAL);
    EXPECT_EQ(write_reset("x"), -EINVAL);
    EXPECT_EQ(write_reset(std::string(100, '9')), -ERANGE);
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_RESETS), resets + 2);
    CommandRing ring(fn);  // usable again
    RunNops(ring, WaitMode::Blocking, 5);
}

TEST_F(MockDeviceTest, SriovNumvfsFollowsLinuxRules) {
    const auto numvfs = Pf().sysfs_dir / "sriov_numvfs";
    EXPECT_EQ(ReadText(numvfs), "2\n");
    EXPECT_EQ(ReadText(Pf().sysfs_dir / "sriov_totalvfs"), "16\n");
    auto write = [&](const std::string& text) {
        int fd = ::open(numvfs.c_str(), O_WRONLY);
        ssize_t n = ::write(fd, text.data(), text.size());
        int e = errno;
        ::close(fd);
        return n < 0 ? -e : 0;
    };
    EXPECT_EQ(write("3"), -EBUSY);   // must go through 0
    EXPECT_EQ(write("17"), -ERANGE);
    EXPECT_EQ(write("x"), -EINVAL);
    {
        Function vf = Function::Open(Vf(1));
        EXPECT_EQ(write("0"), -EBUSY);  // a VF is in use
    }
    EXPECT_EQ(write("0"), 0);
    EXPECT_EQ(root().Functions().size(), 1u);
    EXPECT_EQ(write("5"), 0);
    EXPECT_EQ(root().Functions().size(), 6u);
    Function vf5 = Function::Open(Vf(5));
    CommandRing ring(vf5);
    RunNops(ring, WaitMode::Adaptive, 20);
    // VFs split the card memory; each sees only its own slice.
    EXPECT_EQ(vf5.Read64(SPYRE_REG_MEM_SIZE), vf5.device_info().mem_size);
    EXPECT_LT(vf5.Read64(SPYRE_REG_MEM_SIZE), 4ull << 30);
    EXPECT_GT(vf5.Read64(SPYRE_REG_MEM_BASE), 0u);
}

// A daemon stopped (SIGSTOP) while a process holds one of its functions:
// closing the function used to wait for ever in the hand-over's ioctl, a
// FUSE request the stopped daemon never reads. Close now gives up once the
// heartbeat has stood still for the bound, and the function is free for
// the next owner once the daemon goes on.
TEST_F(MockDeviceTest, ClosingAFunctionOfAStoppedDaemonEndsWithinTheHeartbeatBound) {
    spyre::test::ScopedEnv bound("SPYRE_HEARTBEAT_TIMEOUT_MS", "500");
    const spyre::test::ResumeAtScopeEnd go_on(daemon());
    std::optional<Function> fn;
    fn.emplace(Function::Open(Vf(1)));
    ASSERT_FALSE(fn->lost());
    daemon().Signal(SIGSTOP);
    ASSERT_TRUE(spyre::test::WaitUntilStopped(daemon().pid())) << "the daemon did not stop";
    auto closed = std::async(std::launch::async, [&] { fn.reset(); });
    // The bound and a period or two; 20 s tells a hang from a slow machine.
    const bool ended = closed.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    daemon().Signal(SIGCONT);  // lets a hung close finish, so the test can fail rather than hang
    ASSERT_TRUE(ended) << "closing a function waits for its stopped daemon";
    closed.get();

    // The daemon went on: the function is handed over (by the request it
    // now reads, or by the node's close) and opens again. The hand-over
    // reaches the daemon after close() returns, so a few looks may find it
    // still held.
    std::optional<Function> again;
    for (int look = 0; look < 500 && !again; ++look) {
        try {
            again.emplace(Function::Open(Vf(1)));
        } catch (const spyre::Error& e) {
            ASSERT_EQ(e.kind(), spyre::ErrorKind::Busy) << e.what();
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    ASSERT_TRUE(again.has_value()) << "the function stayed held after its daemon went on";
    EXPECT_TRUE(again->Alive());
    EXPECT_EQ(again->Read32(SPYRE_REG_MAGIC), SPYRE_MAGIC);
}

// A request made while running (a reset, a trapped register, the register
// dump) to a daemon that stopped fails as DeviceLost within the heartbeat's
// bound instead of waiting for the daemon, and the function then counts as
// lost: later requests fail at once.
TEST_F(MockDeviceTest, TrappedRequestsToAStoppedDaemonFailAsDeviceLostWithinTheHeartbeatBound) {
    spyre::test::ScopedEnv bound("SPYRE_HEARTBEAT_TIMEOUT_MS", "500");
    const spyre::test::ResumeAtScopeEnd go_on(daemon());
    Function fn = Function::Open(Vf(1));
    EXPECT_EQ(fn.ReadTrapped32(SPYRE_REG_MAGIC), SPYRE_MAGIC);  // answered while the daemon runs
    daemon().Signal(SIGSTOP);
    ASSERT_TRUE(spyre::test::WaitUntilStopped(daemon().pid())) << "the daemon did not stop";
    auto reset = std::async(std::launch::async, [&]() -> std::optional<spyre::Error> {
        try {
            fn.Reset();
        } catch (const spyre::Error& e) {
            return e;
        }
        return std::nullopt;
    });
    // The bound and a period or two; 20 s tells a hang from a slow machine.
    const bool ended = reset.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    if (!ended) daemon().Signal(SIGCONT);  // lets a hung reset finish, so the test can fail rather than hang
    ASSERT_TRUE(ended) << "a reset waits for its stopped daemon";
    const std::optional<spyre::Error> e = reset.get();
    ASSERT_TRUE(e.has_value()) << "a reset of a stopped daemon succeeded";
    EXPECT_EQ(e->kind(), spyre::ErrorKind::DeviceLost) << e->what();
    EXPECT_NE(std::string(e->what()).find("stopped responding"), std::string::npos) << e->what();
    EXPECT_TRUE(fn.lost());

    // Given up on: each later request fails at once, without a round trip.
    const auto start = std::chrono::steady_clock::now();
    for (auto request : std::initializer_list<std::function<void()>>{
             [&] { fn.ReadTrapped32(SPYRE_REG_STATUS); },
             [&] { fn.Write32(SPYRE_REG_ERR_CLEAR, 1); },
             [&] { (void)fn.RegisterDump(); },
         }) {
        try {
            request();
            ADD_FAILURE() << "a request to a lost function succeeded";
        } catch (const spyre::Error& lost) {
            EXPECT_EQ(lost.kind(), spyre::ErrorKind::DeviceLost) << lost.what();
        }
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// What a function's regions are, and the objects that map them, are asked
// of the daemon once, at open: a daemon stopped later cannot hold a caller
// that maps or describes a region. Before, RegionInfo, MapRegion and
// OpenRegionFile (and so Orchestrator::Create) each asked it again and
// waited in the FUSE request for as long as it stayed stopped, unkillable
// (found probing from outside).
TEST_F(MockDeviceTest, RegionsAreDescribedAndMappedWithoutAskingAStoppedDaemon) {
    const spyre::test::ResumeAtScopeEnd go_on(daemon());
    Function fn = Function::Open(Vf(1));
    const uint64_t mem = fn.device_info().mem_size;
    daemon().Signal(SIGSTOP);
    ASSERT_TRUE(spyre::test::WaitUntilStopped(daemon().pid())) << "the daemon did not stop";
    auto asked = std::async(std::launch::async, [&] {
        const spyre_region_info bar2 = fn.RegionInfo(SPYRE_REGION_BAR2);
        EXPECT_EQ(bar2.size, uint64_t(SPYRE_BAR2_SIZE));
        EXPECT_EQ(fn.RegionInfo(SPYRE_REGION_DEVMEM).size, mem);
        const MappedRegion devmem = fn.MapRegion(SPYRE_REGION_DEVMEM);
        EXPECT_EQ(devmem.size(), mem);
        static_cast<volatile uint8_t*>(devmem.data())[mem - 1] = 0x5a;  // the mapping works
        const RegionFile file = fn.OpenRegionFile(SPYRE_REGION_DEVMEM);
        uint8_t last = 0;
        EXPECT_EQ(::pread(file.fd, &last, 1, off_t(file.offset + mem - 1)), 1);
        EXPECT_EQ(last, 0x5a);
        ::close(file.fd);
        EXPECT_SPYRE_ERROR(fn.RegionInfo(1), InvalidArgument, "region 1 is none of the function's");
        EXPECT_SPYRE_ERROR(fn.MapRegion(SPYRE_REGION_CONFIG), Unsupported, "cannot be mapped");
    });
    // 20 s tells a hang from a slow machine.
    const bool ended = asked.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    if (!ended) daemon().Signal(SIGCONT);  // lets the calls finish, so the test fails rather than hangs
    ASSERT_TRUE(ended) << "describing or mapping a region waits for the stopped daemon";
    asked.get();
    daemon().Signal(SIGCONT);  // before the function closes: its release asks the daemon
}

// Discovery and opening ask the daemon before the driver knows its process
// or heartbeat: to a daemon that stopped they end within the heartbeat's
// bound too, as DeviceLost, and an open given up on does not leave the
// function held once the daemon goes on.
TEST_F(MockDeviceTest, OpeningAFunctionOfAStoppedDaemonFailsAsDeviceLostWithinTheHeartbeatBound) {
    spyre::test::ScopedEnv bound("SPYRE_HEARTBEAT_TIMEOUT_MS", "500");
    const spyre::test::ResumeAtScopeEnd go_on(daemon());
    const FunctionInfo vf = Vf(1), other = Vf(2);
    daemon().Signal(SIGSTOP);
    ASSERT_TRUE(spyre::test::WaitUntilStopped(daemon().pid())) << "the daemon did not stop";
    // `must_fail`: the call asks the daemon (the kernel may answer a look
    // at the tree from its cache); `at_once`: an earlier call was given up
    // on and is still unanswered, so this one is not asked at all.
    auto bounded = [&](const char* what, std::function<void()> call, bool must_fail, bool at_once) {
        const auto start = std::chrono::steady_clock::now();
        auto done = std::async(std::launch::async, [call]() -> std::optional<spyre::Error> {
            try {
                call();
            } catch (const spyre::Error& e) {
                return e;
            }
            return std::nullopt;
        });
        // The bound and a period or two; 20 s tells a hang from a slow machine.
        if (done.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
            daemon().Signal(SIGCONT);  // lets the hung call finish, so the test can fail rather than hang
            done.wait();
            ADD_FAILURE() << what << " waits for its stopped daemon";
            return;
        }
        const std::optional<spyre::Error> e = done.get();
        if (!e) {
            EXPECT_FALSE(must_fail) << what << " of a stopped daemon succeeded";
            return;
        }
        EXPECT_EQ(e->kind(), spyre::ErrorKind::DeviceLost) << what << ": " << e->what();
        const std::string words = at_once ? "still has none" : "did not answer within 500 ms";
        EXPECT_NE(std::string(e->what()).find(words), std::string::npos) << e->what();
        if (at_once)
            EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(400))
                << what << " waited, though an earlier request to the daemon is still unanswered";
    };
    bounded("opening a function", [&] { Function::Open(vf); }, true, false);
    bounded("listing the functions", [&] { (void)root().Functions(); }, true, true);
    bounded("reading a function's status", [&] { (void)spyre::driver::ReadFunctionStatus(other); }, true, true);
    // spyre-regdump's read (it waited for ever: found from outside).
    bounded("dumping a function's registers", [&] { (void)spyre::driver::DumpRegisters(other); }, true, true);
    // spyre-regdump given the node's path: its look at the path waited for
    // ever (found from outside). The kernel may answer the look from its
    // cache, and the function's files then ask the daemon.
    bounded("finding a function by its node's path",
            [&] { (void)spyre::driver::FunctionAtPath(other.dev_node.string()); }, false, false);

    // A child forked now has no thread that waits for the open's answer:
    // it must not inherit the mark, or it would never ask the daemon again.
    int resumed[2];
    ASSERT_EQ(::pipe(resumed), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::close(resumed[1]);
        char c;
        if (::read(resumed[0], &c, 1) != 1) ::_exit(3);
        try {
            (void)spyre::driver::ReadFunctionStatus(other);
            ::_exit(0);
        } catch (const spyre::Error& e) {
            ::_exit(std::string(e.what()).find("still has none") != std::string::npos ? 1 : 2);
        }
    }
    ::close(resumed[0]);
    daemon().Signal(SIGCONT);
    ASSERT_EQ(::write(resumed[1], "r", 1), 1);
    ::close(resumed[1]);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the forked child (1: refused as unanswered; 2: another error; 3: no go)";

    // The open given up on ends on its own thread once the daemon answers
    // it, and closes what it opened: the function opens again. Until then
    // an open is refused at once (the earlier one is unanswered) or finds
    // the function still held.
    std::optional<Function> again;
    for (int look = 0; look < 500 && !again; ++look) {
        try {
            again.emplace(Function::Open(vf));
        } catch (const spyre::Error& e) {
            const bool unanswered = e.kind() == spyre::ErrorKind::DeviceLost &&
                                    std::string(e.what()).find("still has none") != std::string::npos;
            ASSERT_TRUE(e.kind() == spyre::ErrorKind::Busy || unanswered) << e.what();
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    ASSERT_TRUE(again.has_value()) << "an open given up on left the function held";
    EXPECT_EQ(again->Read32(SPYRE_REG_MAGIC), SPYRE_MAGIC);
}

// The same from the process's side: a process that holds a function when
// its daemon stops, and then closes it and exits, ends (the close's
// hand-over request, which the daemon never read, dies with it).
TEST_F(MockDeviceTest, AProcessEndsThoughItsDaemonStoppedWhileItHeldAFunction) {
    spyre::test::ScopedEnv bound("SPYRE_HEARTBEAT_TIMEOUT_MS", "500");
    const spyre::test::ResumeAtScopeEnd go_on(daemon());
    int opened[2], go[2];
    ASSERT_EQ(::pipe(opened), 0);
    ASSERT_EQ(::pipe(go), 0);
    const FunctionInfo vf = Vf(1);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        int status = 0;
        try {
            Function fn = Function::Open(vf);
            char c = 1;
            if (::write(opened[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) status = 3;
        } catch (...) {
            status = 2;
        }
        ::_exit(status);  // after ~Function
    }
    ::close(opened[1]);
    ::close(go[0]);
    char c = 0;
    ASSERT_EQ(::read(opened[0], &c, 1), 1) << "the child could not open the function";
    daemon().Signal(SIGSTOP);
    ASSERT_TRUE(spyre::test::WaitUntilStopped(daemon().pid())) << "the daemon did not stop";
    ASSERT_EQ(::write(go[1], &c, 1), 1);
    int status = 0;
    pid_t ended = 0;
    for (int look = 0; look < 2000 && ended == 0; ++look) {  // 20 s: a hang, not a slow machine
        ended = ::waitpid(child, &status, WNOHANG);
        if (ended == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    daemon().Signal(SIGCONT);
    if (ended == 0) {
        ::waitpid(child, &status, 0);  // it can end now
        FAIL() << "a process whose daemon stopped could not end";
    }
    ::close(opened[0]);
    ::close(go[1]);
    ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A loop that only submits and reaps (no Wait, no register access) learns
// of a daemon killed without a word too: it went on for good, Submit and
// Reap telling it nothing (found probing from outside). DeviceLost comes
// within DeviceQueue::kCallsPerProbe calls; the watchdog bounds the loop.
TEST_F(MockDeviceTest, ASubmitAndReapLoopFailsWithDeviceLostOnceTheDaemonIsKilled) {
    Function fn = Function::Open(Vf(1));
    CommandRing ring(fn);
    TaskQueue tasks(fn, 0);
    RunNops(ring, WaitMode::Poll, 4);
    daemon().Signal(SIGKILL);
    ASSERT_TRUE(spyre::test::WaitForExit(daemon().pid())) << "the daemon outlived SIGKILL";
    spyre::test::Watchdog watchdog(std::chrono::seconds(60), "submit and reap loops on a dead device");
    auto expect_lost = [&](const char* what, const std::function<void()>& step) {
        SCOPED_TRACE(what);
        try {
            for (;;) step();  // until the queue notices
        } catch (const spyre::Error& e) {
            EXPECT_EQ(e.kind(), spyre::ErrorKind::DeviceLost) << e.what();
            EXPECT_NE(std::string(e.what()).find(fn.pci_address()), std::string::npos) << e.what();
        }
    };
    Completion c;
    uint64_t tag = 0;
    expect_lost("CommandRing Submit and Reap", [&] {
        if (ring.InFlight() < 8) ring.Submit(std::array{NopCb(++tag)});
        (void)ring.Reap({&c, 1});
    });
    spyre_cqe done;
    expect_lost("TaskQueue Reap", [&] { (void)tasks.Reap({&done, 1}); });
    expect_lost("TaskQueue Submit", [&] { (void)tasks.Submit({}); });
}

// A mount whose daemon was killed answers ENOTCONN until it is unmounted:
// opening it said "no spyre device tree ... is spyre-mockdev mounted
// there?" (NotFound), which sends the user looking for a missing mount.
TEST_F(MockDeviceTest, AMountWhoseDaemonDiedIsDeviceLostSayingSo) {
    daemon().Signal(SIGKILL);
    ASSERT_TRUE(spyre::test::WaitForExit(daemon().pid()));
    try {
        DeviceRoot root(daemon().mount());
        FAIL() << "a dead mount opened";
    } catch (const spyre::Error& e) {
        EXPECT_EQ(e.kind(), spyre::ErrorKind::DeviceLost) << e.what();
        EXPECT_NE(std::string(e.what()).find("is a mount whose daemon is gone"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("fusermount3 -u " + daemon().mount().string()), std::string::npos)
            << e.what();
    }
}

// A signal the program handles interrupts the driver's look at its daemon
// (poll on the daemon's pidfd: EINTR). It was taken for the daemon's exit
// and the function marked lost for good, while the daemon ran (found
// probing from outside: about one device in ten under a signal every
// 0.2 ms). The look is made again.
namespace {
std::atomic<long> g_signals_handled{0};
void CountSignal(int) { g_signals_handled.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

TEST_F(MockDeviceTest, AHandledSignalDoesNotMarkALiveDeviceLost) {
    Function fn = Function::Open(Vf(1));
    struct sigaction handler {}, old {};
    handler.sa_handler = CountSignal;
    sigemptyset(&handler.sa_mask);
    handler.sa_flags = SA_RESTART;
    ASSERT_EQ(::sigaction(SIGUSR1, &handler, &old), 0);
    const pthread_t looker = ::pthread_self();
    std::atomic<bool> stop{false};
    std::thread sender([&] {
        while (!stop.load()) {
            ::pthread_kill(looker, SIGUSR1);
            std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
    });
    bool alive = true;
    long looks = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (alive && std::chrono::steady_clock::now() < end) alive = fn.Alive(), ++looks;
    stop = true;
    sender.join();
    ::sigaction(SIGUSR1, &old, nullptr);
    EXPECT_TRUE(alive) << "taken for lost after " << looks << " looks and " << g_signals_handled.load() << " signals";
    EXPECT_GT(g_signals_handled.load(), 0);
    EXPECT_EQ(fn.Read32(SPYRE_REG_MAGIC), SPYRE_MAGIC);
}
