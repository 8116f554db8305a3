// SPDX-License-Identifier: Apache-2.0
// Isolation between functions outside the control-block path: what a
// function can map, who may use the sysfs-like files of a held function,
// and that memory is scrubbed before it changes hands.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mock_fixture.hpp"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/mock/spyre_mock.h"

using namespace spyre;
using namespace spyre::driver;
using spyre::test::MockDeviceTest;
using spyre::test::InChild;
using spyre::test::OpenWhenFree;

namespace {

// pread/pwrite of `len` bytes at `offset`: 0 or errno.
int FileAccess(const std::string& path, bool write, uint64_t offset, size_t len) {
    const int fd = ::open(path.c_str(), write ? O_WRONLY : O_RDONLY);
    if (fd < 0) return errno;
    std::vector<uint8_t> buf(len, 0xAB);
    const ssize_t n = write ? ::pwrite(fd, buf.data(), len, off_t(offset)) : ::pread(fd, buf.data(), len, off_t(offset));
    const int err = n < 0 ? errno : 0;
    ::close(fd);
    return err;
}

int WriteText(const std::string& path, const std::string& text) {
    const int fd = ::open(path.c_str(), O_WRONLY);
    if (fd < 0) return errno;
    const int err = ::write(fd, text.data(), text.size()) < 0 ? errno : 0;
    ::close(fd);
    return err;
}

std::string ReadText(const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

uint64_t ObjectSize(const char* shm_name) {
    const int fd = ::open(spyre::test::ShmPath(shm_name).c_str(), O_RDONLY);
    if (fd < 0) return 0;
    struct stat st {};
    ::fstat(fd, &st);
    ::close(fd);
    return uint64_t(st.st_size);
}

// The mock transport's answer for a region, asked on the held device node.
spyre_mock_region_shm Shm(const Function& fn, uint32_t index) {
    spyre_mock_region_shm m{};
    m.argsz = sizeof m;
    m.index = index;
    EXPECT_EQ(::ioctl(fn.fd(), SPYRE_MOCK_IOC_REGION_SHM, &m), 0);
    return m;
}

bool AllZero(const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != 0) return false;
    return true;
}

// pwrite of `bytes` at `offset` of `path`: 0 or errno.
int FileWrite(const std::string& path, uint64_t offset, const std::vector<uint8_t>& bytes) {
    const int fd = ::open(path.c_str(), O_WRONLY);
    if (fd < 0) return errno;
    const int err = ::pwrite(fd, bytes.data(), bytes.size(), off_t(offset)) < 0 ? errno : 0;
    ::close(fd);
    return err;
}

// pread of `len` bytes at `offset` of `path` (empty if refused).
std::vector<uint8_t> FileRead(const std::string& path, uint64_t offset, size_t len) {
    std::vector<uint8_t> buf(len);
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return {};
    const ssize_t n = ::pread(fd, buf.data(), len, off_t(offset));
    ::close(fd);
    return n == ssize_t(len) ? buf : std::vector<uint8_t>{};
}

// A 32-bit word of a file (0 if unreadable).
uint32_t FileRead32(const std::string& path, uint64_t offset) {
    uint32_t v = 0;
    const auto b = FileRead(path, offset, sizeof v);
    if (b.size() == sizeof v) std::memcpy(&v, b.data(), sizeof v);
    return v;
}

// A process (`holder`, reaped when this returns) opens the function's node
// and exits, while a worker it forked keeps the node's file, as after fork
// without exec, until the descriptor returned is closed; -1 on failure.
int HoldThroughAWorker(const FunctionInfo& fn, pid_t* holder) {
    int keep[2];
    if (::pipe(keep) != 0) return -1;
    const pid_t pid = ::fork();
    if (pid == 0) {
        if (::open(fn.dev_node.c_str(), O_RDWR) < 0) ::_exit(1);
        if (::fork() == 0) {
            ::close(keep[1]);
            char c;
            (void)!::read(keep[0], &c, 1);
            ::_exit(0);
        }
        ::_exit(0);
    }
    ::close(keep[0]);
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ::close(keep[1]);
        return -1;
    }
    *holder = pid;
    return keep[1];
}

std::vector<uint8_t> Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(b, b + n);
}

}  // namespace

// Each function's memory is an object of its own: a VF's object holds its
// slice and nothing else, so mapping "its own region" cannot reach another
// function. The PF maps its own part and reaches VF memory through the device.
TEST_F(MockDeviceTest, EachFunctionMapsOnlyItsOwnMemory) {
    Function pf = Function::Open(Pf());
    Function vf1 = Function::Open(Vf(1));
    Function vf2 = Function::Open(Vf(2));
    const spyre_mock_region_shm r_pf = Shm(pf, SPYRE_REGION_DEVMEM);
    const spyre_mock_region_shm r1 = Shm(vf1, SPYRE_REGION_DEVMEM);
    const spyre_mock_region_shm r2 = Shm(vf2, SPYRE_REGION_DEVMEM);
    const uint64_t vf_mem = vf1.device_info().mem_size;

    EXPECT_STRNE(r1.shm_name, r2.shm_name);
    EXPECT_STRNE(r1.shm_name, r_pf.shm_name);
    EXPECT_EQ(r1.shm_offset, 0u);
    EXPECT_EQ(r1.mmap_size, vf_mem);
    EXPECT_EQ(ObjectSize(r1.shm_name), vf_mem);  // the whole object is the VF's memory
    EXPECT_EQ(ObjectSize(r2.shm_name), vf_mem);
    // The PF maps slice 0 (its own memory while VFs exist).
    EXPECT_EQ(r_pf.mmap_size, vf1.Read64(SPYRE_REG_MEM_BASE));
    // BAR2 is a window onto the same own object.
    EXPECT_STREQ(Shm(vf1, SPYRE_REGION_BAR2).shm_name, r1.shm_name);

    MappedRegion m1 = vf1.MapRegion(SPYRE_REGION_DEVMEM);
    MappedRegion m2 = vf2.MapRegion(SPYRE_REGION_DEVMEM);
    std::memset(m1.data(), 0x5A, 1 << 20);
    EXPECT_TRUE(AllZero(m2.data(), 1 << 20));
    // The PF sees VF 1's bytes through the device, at the VF's card address.
    const auto seen = pf.ReadRegion(SPYRE_REGION_DEVMEM, vf1.Read64(SPYRE_REG_MEM_BASE), 4096);
    EXPECT_EQ(seen, std::vector<uint8_t>(4096, 0x5A));
    // And VF 2's own trapped view is untouched.
    EXPECT_EQ(vf2.ReadRegion(SPYRE_REGION_DEVMEM, 0, 4096), std::vector<uint8_t>(4096, 0));
}

// While a function's device node is held, its resource files and reset serve
// only the holder (and the PF's holder); register and doorbell-page reads
// stay open to everyone (spyre-regdump).
TEST_F(MockDeviceTest, SysfsFilesOfAHeldFunctionServeOnlyItsHolder) {
    const FunctionInfo vf = Vf(1);
    const std::string res0 = (vf.sysfs_dir / "resource0").string();
    const std::string res2 = (vf.sysfs_dir / "resource2").string();
    const std::string res4 = (vf.sysfs_dir / "resource4").string();
    const std::string reset = (vf.sysfs_dir / "reset").string();

    // Not held: file permissions decide (root here).
    EXPECT_EQ(InChild([&] { return FileAccess(res2, false, 0, 64); }), 0);

    Function held = Function::Open(vf);
    EXPECT_EQ(InChild([&] { return FileAccess(res2, false, 0, 64); }), EBUSY);
    EXPECT_EQ(InChild([&] { return FileAccess(res2, true, 0, 64); }), EBUSY);
    EXPECT_EQ(InChild([&] { return FileAccess(res4, true, 0, 4); }), EBUSY);  // the doorbell
    EXPECT_EQ(InChild([&] { return FileAccess(res4, false, 4096, 64); }), EBUSY);  // the rings
    EXPECT_EQ(InChild([&] { return FileAccess(res0, true, SPYRE_REG_CONTROL, 4); }), EBUSY);
    EXPECT_EQ(InChild([&] { return WriteText(reset, "1\n"); }), EBUSY);
    // A truncate is a write too (it changes nothing, and said 0 as if done).
    for (const std::string& file : {res0, res2, res4, reset}) {
        EXPECT_EQ(InChild([&] { return ::truncate(file.c_str(), 0) == 0 ? 0 : errno; }), EBUSY) << file;
        EXPECT_EQ(InChild([&] {
                      const int fd = ::open(file.c_str(), O_WRONLY | O_TRUNC);
                      const int err = fd < 0 ? errno : 0;
                      if (fd >= 0) ::close(fd);
                      return err;
                  }),
                  EBUSY)
            << file;
    }
    EXPECT_EQ(::truncate(reset.c_str(), 0), 0);  // the holder's `echo 1 > reset` truncates first
    // What carries no data stays readable.
    EXPECT_EQ(InChild([&] { return FileAccess(res0, false, 0, SPYRE_REG_FILE_SIZE); }), 0);
    EXPECT_EQ(InChild([&] { return FileAccess(res4, false, 0, sizeof(spyre_doorbell_page)); }), 0);
    EXPECT_EQ(InChild([&] { return DumpRegisters(vf).empty() ? 1 : 0; }), 0);
    // The holder itself may.
    EXPECT_EQ(FileAccess(res2, false, 0, 64), 0);
    EXPECT_EQ(WriteText(reset, "1\n"), 0);
    // So may the holder of the card's PF, which sees the whole card.
    EXPECT_EQ(InChild([&] {
                  try {
                      Function pf = Function::Open(Pf());
                      return FileAccess(res2, false, 0, 64);
                  } catch (const Error&) {
                      return 254;
                  }
              }),
              0);
    // The ring still works for the holder after all of that.
    CommandRing ring(held);
    ring.Submit(std::array{NopCb(7)});
    Completion c;
    ring.Wait({&c, 1}, 1);
    EXPECT_TRUE(c.ok());
}

// The PF's resource2 spans the card memory, VF slices included: while a VF
// is held, a process that holds neither it nor the PF is refused any range
// reaching into the VF's slice (it read and overwrote the holder's bytes
// there), and keeps the rest of the PF's window.
TEST_F(MockDeviceTest, ThePfsResource2DoesNotReachAHeldVfsSlice) {
    const FunctionInfo vf = Vf(1);
    const std::string pf_res2 = (Pf().sysfs_dir / "resource2").string();
    std::optional<Function> owner(Function::Open(vf));
    Function& held = *owner;
    const uint64_t base = held.Read64(SPYRE_REG_MEM_BASE), size = held.device_info().mem_size;
    ASSERT_GT(base, 4096u);
    held.WriteRegion(SPYRE_REGION_DEVMEM, 0, std::vector<uint8_t>(64, 0x5A));

    EXPECT_EQ(InChild([&] { return FileAccess(pf_res2, false, base, 64); }), EBUSY);
    EXPECT_EQ(InChild([&] { return FileAccess(pf_res2, true, base, 64); }), EBUSY);
    EXPECT_EQ(InChild([&] { return FileAccess(pf_res2, false, base - 32, 64); }), EBUSY);  // straddling its start
    EXPECT_EQ(InChild([&] { return FileAccess(pf_res2, true, base + size - 32, 64); }), EBUSY);  // and its end
    EXPECT_EQ(held.ReadRegion(SPYRE_REGION_DEVMEM, 0, 64), std::vector<uint8_t>(64, 0x5A));  // untouched
    // The PF's own slice stays open to it, and the VF's holder reaches its own bytes.
    EXPECT_EQ(InChild([&] { return FileAccess(pf_res2, false, 0, 64); }), 0);
    EXPECT_EQ(FileAccess(pf_res2, false, base, 64), 0);
    // So does the PF's holder, which sees the whole card.
    EXPECT_EQ(InChild([&] {
                  try {
                      Function pf = Function::Open(Pf());
                      return FileAccess(pf_res2, false, base, 64);
                  } catch (const Error&) {
                      return 254;
                  }
              }),
              0);
    // Once let go, file permissions decide again.
    owner.reset();
    EXPECT_EQ(InChild([&] { return FileAccess(pf_res2, false, base, 64); }), 0);
}

// While a process holds the PF, a VF nobody holds is the PF holder's memory
// (the PF reaches every slice through the device): the VF's files serve
// that holder alone. A process holding nothing read the PF owner's bytes
// in the slice through the VF's resource2 and overwrote them (found probing
// from outside), though the PF's own resource2 refused the same range.
TEST_F(MockDeviceTest, AnUnheldVfsFilesServeOnlyThePfsHolderWhileThePfIsHeld) {
    const FunctionInfo vf = Vf(2);
    const std::string res2 = (vf.sysfs_dir / "resource2").string();
    const std::string reset = (vf.sysfs_dir / "reset").string();
    const std::string res0 = (vf.sysfs_dir / "resource0").string();
    std::optional<Function> pf(Function::Open(Pf()));
    uint64_t base = 0;
    const auto reg = FileRead(res0, SPYRE_REG_MEM_BASE, 8);
    ASSERT_EQ(reg.size(), 8u);
    std::memcpy(&base, reg.data(), 8);
    const std::vector<uint8_t> secret(16, 0xC5);
    pf->WriteRegion(SPYRE_REGION_DEVMEM, base + 64, secret);

    EXPECT_EQ(InChild([&] { return FileAccess(res2, false, 64, 16); }), EBUSY);
    EXPECT_EQ(InChild([&] { return FileAccess(res2, true, 64, 16); }), EBUSY);
    EXPECT_EQ(InChild([&] { return WriteText(reset, "1\n"); }), EBUSY);
    EXPECT_EQ(pf->ReadRegion(SPYRE_REGION_DEVMEM, base + 64, 16), secret);  // untouched
    // What carries no data stays readable; the PF's holder reaches the slice.
    EXPECT_EQ(InChild([&] { return FileAccess(res0, false, 0, SPYRE_REG_FILE_SIZE); }), 0);
    EXPECT_EQ(FileRead(res2, 64, 16), secret);
    // Let go of, the PF takes its bytes along, and file permissions decide again.
    pf.reset();
    EXPECT_EQ(InChild([&] { return FileAccess(res2, false, 64, 16); }), 0);
    EXPECT_EQ(FileRead(res2, 64, 16), std::vector<uint8_t>(16, 0));
}

// stats.json is for everyone, but the holder's addresses (region bases, the
// faulting address and user_data) are values only for the holder, and null
// for anyone else while the function is held.
TEST_F(MockDeviceTest, StatsJsonShowsAddressesOnlyToTheHolder) {
    const FunctionInfo vf = Vf(1);
    const std::string path = (vf.sysfs_dir / "stats.json").string();
    auto read = [&] {
        std::ifstream in(path);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    // 0: the reader sees values; 1: it sees nulls; 2: neither (unreadable or changed format).
    auto visibility = [](const std::string& j) {
        const bool values = j.find("\"private_visible\": true") != std::string::npos &&
                            j.find("\"addr\": 0,") != std::string::npos;
        const bool nulls = j.find("\"private_visible\": false") != std::string::npos &&
                           j.find("\"addr\": null,") != std::string::npos && j.find("\"user_data\": null") != std::string::npos;
        return values ? 0 : nulls ? 1 : 2;
    };
    EXPECT_EQ(visibility(read()), 0) << read();  // nobody holds it
    Function held = Function::Open(vf);
    EXPECT_EQ(visibility(read()), 0) << read();  // the holder
    EXPECT_EQ(InChild([&] { return visibility(read()); }), 1);  // anyone else
    const std::string mine = read();
    EXPECT_NE(mine.find("\"pid\": " + std::to_string(::getpid())), std::string::npos) << mine;
}

// The registers a holder writes freely (SCRATCH, REGION_ARG) are its data,
// hidden from other readers like its addresses: everyone read them through
// resource0 and regs (found probing from outside).
TEST_F(MockDeviceTest, WhatAHolderWritesInItsFreeRegistersIsHiddenFromOthers) {
    const FunctionInfo vf = Vf(1);
    const std::string res0 = (vf.sysfs_dir / "resource0").string();
    auto reg32 = [&](uint32_t offset) {
        const auto bytes = FileRead(res0, offset, 4);
        uint32_t v = 0xdeadbeef;
        if (bytes.size() == 4) std::memcpy(&v, bytes.data(), 4);
        return v;
    };
    auto regs_line = [&](const char* name) {  // "SCRATCH ... 0x..." from the regs text
        std::ifstream in(vf.sysfs_dir / "regs");
        for (std::string line; std::getline(in, line);)
            if (line.rfind(name, 0) == 0) return line;
        return std::string();
    };
    Function held = Function::Open(vf);
    held.Write32(SPYRE_REG_SCRATCH, 0x5ec2e7u);
    held.Write32(SPYRE_REG_REGION_ARG, 0x1234u);
    EXPECT_EQ(reg32(SPYRE_REG_SCRATCH), 0x5ec2e7u);  // the holder
    EXPECT_EQ(reg32(SPYRE_REG_REGION_ARG), 0x1234u);
    EXPECT_EQ(InChild([&] { return int(reg32(SPYRE_REG_SCRATCH)); }), 0);
    EXPECT_EQ(InChild([&] { return int(reg32(SPYRE_REG_REGION_ARG)); }), 0);
    EXPECT_EQ(InChild([&] { return regs_line("SCRATCH").find("5ec2e7") == std::string::npos ? 0 : 1; }), 0);
    EXPECT_NE(regs_line("SCRATCH").find("5ec2e7"), std::string::npos) << regs_line("SCRATCH");
}

// A holder's process name is any bytes: one that is not UTF-8 (comm cuts a
// UTF-8 name mid-character at 15 bytes) shows as U+FFFD in stats.json. It
// made the JSON writer throw inside the file system's read, which ended
// the daemon and every tenant's device (found probing from outside).
TEST_F(MockDeviceTest, AHolderNamedInBytesThatAreNotUtf8LeavesStatsJsonReadable) {
    const FunctionInfo vf = Vf(1);
    const std::string path = (vf.sysfs_dir / "stats.json").string();
    auto read = [](const std::string& p) {
        std::ifstream in(p);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    char old_name[16] = {};
    ASSERT_EQ(::prctl(PR_GET_NAME, old_name), 0);
    ASSERT_EQ(::prctl(PR_SET_NAME, "spyre\xe6\x97"), 0);  // the first two bytes of a 3-byte character
    std::string seen;
    {
        Function held = Function::Open(vf);
        seen = read(path);
    }
    ::prctl(PR_SET_NAME, old_name);
    EXPECT_NE(seen.find("\"name\": \"spyre\xef\xbf\xbd"), std::string::npos) << seen;
    // The daemon is still there: the files of this function and another serve.
    EXPECT_NE(read(path).find("\"holder\": null"), std::string::npos);
    EXPECT_NE(read((Vf(2).sysfs_dir / "stats.json").string()).find("\"kind\": \"VF\""), std::string::npos);
}

// A new owner of a function gets zeroed memory, registers and rings, and a
// mapping the old owner kept is no longer the device's memory.
TEST_F(MockDeviceTest, MemoryIsScrubbedWhenTheFunctionChangesHands) {
    const FunctionInfo vf = Vf(2);
    constexpr size_t kBytes = 1 << 20;
    MappedRegion stale;
    {
        Function first = Function::Open(vf);
        stale = first.MapRegion(SPYRE_REGION_DEVMEM);
        std::memset(stale.data(), 0xC3, kBytes);
        first.Write32(SPYRE_REG_SCRATCH, 0xDEADBEEF);
        // The reset counter too: the daemon read it from the old register
        // file at the hand-over and gave it, plus one, to the next owner,
        // 64 bits the old holder chose (found probing from outside).
        MappedRegion regs = first.MapRegion(SPYRE_REGION_BAR0);
        const uint64_t chosen = 0x5345435245541111ull;
        std::memcpy(regs.data() + SPYRE_REG_CNT_RESETS, &chosen, sizeof chosen);
    }
    Function second = Function::Open(vf);
    MappedRegion now = second.MapRegion(SPYRE_REGION_DEVMEM);
    EXPECT_TRUE(AllZero(now.data(), kBytes));
    EXPECT_EQ(second.ReadRegion(SPYRE_REGION_DEVMEM, 0, 4096), std::vector<uint8_t>(4096, 0));
    EXPECT_EQ(second.Read32(SPYRE_REG_SCRATCH), 0u);
    uint64_t resets = 0;
    const std::vector<uint8_t> counter = second.ReadRegion(SPYRE_REGION_BAR0, SPYRE_REG_CNT_RESETS, 8);
    std::memcpy(&resets, counter.data(), sizeof resets);
    EXPECT_LT(resets, 1000u) << "the reset counter carried the old holder's value: " << std::hex << resets;
    // The old mapping and the new memory are apart, both ways.
    std::memset(now.data(), 0x11, 4096);
    EXPECT_EQ(stale.data()[0], 0xC3);
    std::memset(stale.data(), 0x77, 4096);
    EXPECT_EQ(now.data()[0], 0x11);
    EXPECT_EQ(second.ReadRegion(SPYRE_REGION_DEVMEM, 0, 1)[0], 0x11);
}

// The same when the holder dies without closing anything.
TEST_F(MockDeviceTest, MemoryIsScrubbedAfterTheHolderDies) {
    const FunctionInfo vf = Vf(1);
    ASSERT_EQ(InChild([&] {
                  Function fn = Function::Open(vf);
                  MappedRegion m = fn.MapRegion(SPYRE_REGION_DEVMEM);
                  std::memset(m.data(), 0x9E, 1 << 20);
                  ::_exit(0);  // no destructors: the kernel closes the node
                  return 0;
              }),
              0);
    // The daemon sees the release a moment later.
    std::optional<Function> next;
    for (int i = 0; i < 500 && !next; ++i) {
        try {
            next.emplace(Function::Open(vf));
        } catch (const Error& e) {
            ASSERT_EQ(e.kind(), ErrorKind::Busy) << e.what();
            ::usleep(10000);
        }
    }
    ASSERT_TRUE(next);
    MappedRegion m = next->MapRegion(SPYRE_REGION_DEVMEM);
    EXPECT_TRUE(AllZero(m.data(), 1 << 20));
}

// The holder is killed (and reaped, or still exiting): an open right after
// waits for the kernel's release of its file to reach the daemon (it used
// to be Busy for 20-250 ms, until that release came) and gets the function,
// scrubbed. A holder still unmapping its memory counted as running, and
// the open was Busy at once (found probing from outside: 36 in 40).
TEST_F(MockDeviceTest, AnOpenRightAfterTheHolderIsKilledGetsTheFunction) {
    const FunctionInfo vf = Vf(1);
    for (int round = 0; round < 10; ++round) {
        const bool reap_first = round % 2 == 0;
        SCOPED_TRACE(reap_first ? "reaped first" : "still exiting");
        int ready[2];
        ASSERT_EQ(::pipe(ready), 0);
        const pid_t holder = ::fork();
        ASSERT_GE(holder, 0);
        if (holder == 0) {
            ::close(ready[0]);
            try {
                Function fn = Function::Open(vf);
                MappedRegion m = fn.MapRegion(SPYRE_REGION_DEVMEM);
                std::memset(m.data(), 0x5C, reap_first ? 4096 : m.size());  // all of it: a longer exit
                if (::write(ready[1], "h", 1) != 1) ::_exit(1);
                for (;;) ::pause();
            } catch (...) {
                ::_exit(1);
            }
        }
        ::close(ready[1]);
        char byte = 0;
        ASSERT_EQ(::read(ready[0], &byte, 1), 1) << "the holder did not open the function";
        ::close(ready[0]);
        ASSERT_EQ(::kill(holder, SIGKILL), 0);
        int status = 0;
        if (reap_first) {
            ASSERT_EQ(::waitpid(holder, &status, 0), holder);
        }
        std::optional<Function> next;
        EXPECT_NO_THROW(next.emplace(Function::Open(vf))) << "round " << round;  // no retry: the daemon waits
        if (!reap_first) {
            ASSERT_EQ(::waitpid(holder, &status, 0), holder);
        }
        if (next) {
            EXPECT_EQ(next->ReadRegion(SPYRE_REGION_DEVMEM, 0, 4096), std::vector<uint8_t>(4096, 0)) << "round " << round;
        }
    }
}

// SR-IOV reconfiguration: what the PF left in what becomes a VF's slice, and
// what a VF had before the VFs were disabled, never reach the next VF.
TEST_F(MockDeviceTest, MemoryIsScrubbedAcrossSriovChanges) {
    const std::string numvfs = (Pf().sysfs_dir / "sriov_numvfs").string();
    uint64_t vf1_base = 0;
    {
        Function vf1 = Function::Open(Vf(1));
        vf1_base = vf1.Read64(SPYRE_REG_MEM_BASE);
        MappedRegion m = vf1.MapRegion(SPYRE_REGION_DEVMEM);
        std::memset(m.data(), 0x42, 4096);
    }
    ASSERT_EQ(WriteText(numvfs, "0"), 0);
    {
        // With no VFs the PF maps the whole card: it writes where VF 1 will be.
        Function pf = Function::Open(Pf());
        MappedRegion m = pf.MapRegion(SPYRE_REGION_DEVMEM);
        ASSERT_GE(m.size(), vf1_base + 4096);
        EXPECT_TRUE(AllZero(m.data() + vf1_base, 4096));  // VF 1's old bytes are gone
        std::memset(m.data() + vf1_base, 0x24, 4096);
    }
    ASSERT_EQ(WriteText(numvfs, "2"), 0);
    Function vf1 = Function::Open(Vf(1));
    ASSERT_EQ(vf1.Read64(SPYRE_REG_MEM_BASE), vf1_base);
    EXPECT_EQ(vf1.ReadRegion(SPYRE_REGION_DEVMEM, 0, 4096), std::vector<uint8_t>(4096, 0));
}

// The PF's work in flight addresses the whole card and an enable does not
// wait for it: while a process holds the PF, only it changes the VF count.
TEST_F(MockDeviceTest, OnlyThePfsHolderChangesTheVfCountWhileItHoldsThePf) {
    const std::string numvfs = (Pf().sysfs_dir / "sriov_numvfs").string();
    {
        Function pf = Function::Open(Pf());
        EXPECT_EQ(InChild([&] { return WriteText(numvfs, "0"); }), EBUSY);
        EXPECT_EQ(ReadText(numvfs), "2\n");
        ASSERT_EQ(WriteText(numvfs, "0"), 0);  // the holder's own moment
        EXPECT_EQ(InChild([&] { return WriteText(numvfs, "2"); }), EBUSY);
        EXPECT_EQ(ReadText(numvfs), "0\n");
    }
    EXPECT_EQ(InChild([&] { return WriteText(numvfs, "2"); }), 0);  // nobody holds the PF: nothing of it runs
    EXPECT_EQ(ReadText(numvfs), "2\n");
}

// While nobody holds a function, file permissions decide who writes it (its
// resource files), and the PF's owner reaches its slice through the device.
// Whatever was written so, the next owner starts from zeros: memory, rings.
TEST_F(MockDeviceTest, ANewOwnerStartsFromZerosWhateverWasWrittenWhileUnheld) {
    const FunctionInfo vf = Vf(1);
    const std::vector<uint8_t> seed(64, 0x5E), zeros(64, 0);
    ASSERT_EQ(InChild([&] { return FileWrite((vf.sysfs_dir / "resource2").string(), 0x1000, seed); }), 0);
    ASSERT_EQ(InChild([&] { return FileWrite((vf.sysfs_dir / "resource4").string(), 4096, seed); }), 0);
    uint64_t base = 0;
    {
        Function fn = Function::Open(vf);
        base = fn.Read64(SPYRE_REG_MEM_BASE);
        EXPECT_EQ(fn.ReadRegion(SPYRE_REGION_DEVMEM, 0x1000, 64), zeros);
        MappedRegion m = fn.MapRegion(SPYRE_REGION_DEVMEM);
        EXPECT_TRUE(AllZero(m.data() + 0x1000, 64));
        EXPECT_EQ(fn.ReadRegion(SPYRE_REGION_BAR4, 4096, 64), zeros);
    }
    // The PF's owner writes the unheld VF's slice and still holds the PF
    // when the VF gets its next owner.
    int wrote[2], done[2];
    ASSERT_EQ(::pipe(wrote), 0);
    ASSERT_EQ(::pipe(done), 0);
    const pid_t pf_owner = ::fork();
    if (pf_owner == 0) {
        ::close(done[1]);
        const int fd = ::open(Pf().dev_node.c_str(), O_RDWR);
        const bool ok = fd >= 0 && ::pwrite(fd, seed.data(), seed.size(),
                                            off_t(SPYRE_REGION_OFFSET(SPYRE_REGION_DEVMEM) + base + 0x2000)) == 64;
        (void)!::write(wrote[1], ok ? "y" : "n", 1);
        char c;
        (void)!::read(done[0], &c, 1);
        ::_exit(0);
    }
    ::close(wrote[1]);
    ::close(done[0]);
    char said = 0;
    ASSERT_EQ(::read(wrote[0], &said, 1), 1);
    EXPECT_EQ(said, 'y');
    {
        Function fn = Function::Open(vf);
        EXPECT_EQ(fn.ReadRegion(SPYRE_REGION_DEVMEM, 0x2000, 64), zeros);
    }
    ::close(done[1]);
    ::close(wrote[0]);
    ::waitpid(pf_owner, nullptr, 0);
}

// The PF's owner reaches every VF slice. When it lets go, what it left in
// the slices of VFs that nobody holds goes with its own memory; a held VF's
// slice is its holder's and stays as it is (mapping included).
TEST_F(MockDeviceTest, WhatThePfsOwnerLeftInUnheldVfSlicesGoesWithIt) {
    // VF 2 is held; VF 1's slice is nobody's (and inside the PF's 2 GiB resource2).
    Function vf2 = Function::Open(Vf(2));
    const uint64_t base2 = vf2.Read64(SPYRE_REG_MEM_BASE);
    uint64_t base1 = 0;
    const auto reg = FileRead((Vf(1).sysfs_dir / "resource0").string(), SPYRE_REG_MEM_BASE, 8);
    ASSERT_EQ(reg.size(), 8u);
    std::memcpy(&base1, reg.data(), 8);
    ASSERT_LT(base1 + 4096, uint64_t(SPYRE_BAR2_SIZE));
    MappedRegion m2 = vf2.MapRegion(SPYRE_REGION_DEVMEM);
    std::memset(m2.data(), 0x11, 64);
    const std::vector<uint8_t> left(64, 0xF0), zeros(64, 0);
    ASSERT_EQ(InChild([&] {
                  const int fd = ::open(Pf().dev_node.c_str(), O_RDWR);
                  if (fd < 0) return errno;
                  const uint64_t devmem = SPYRE_REGION_OFFSET(SPYRE_REGION_DEVMEM);
                  if (::pwrite(fd, left.data(), 64, off_t(devmem + base1 + 0x40)) != 64) return 100;
                  if (::pwrite(fd, left.data(), 64, off_t(devmem + base2 + 0x40)) != 64) return 101;
                  spyre_release_req req{};
                  req.argsz = sizeof req;
                  return ::ioctl(fd, SPYRE_IOC_RELEASE, &req) == 0 ? 0 : errno;  // handed over when it returns
              }),
              0);
    EXPECT_EQ(FileRead((Pf().sysfs_dir / "resource2").string(), base1 + 0x40, 64), zeros);
    EXPECT_EQ(FileRead((Vf(1).sysfs_dir / "resource2").string(), 0x40, 64), zeros);
    // VF 2's slice: its bytes and what the PF's owner wrote there for it.
    EXPECT_EQ(vf2.ReadRegion(SPYRE_REGION_DEVMEM, 0, 64), std::vector<uint8_t>(64, 0x11));
    EXPECT_EQ(vf2.ReadRegion(SPYRE_REGION_DEVMEM, 0x40, 64), left);
    m2.data()[0] = 0x22;
    EXPECT_EQ(vf2.ReadRegion(SPYRE_REGION_DEVMEM, 0, 1)[0], 0x22);
}

// The card's watchdog is the PF holder's to set. Through the PF's resource0
// anyone else is refused, also while nobody holds the PF (a VF's holder set
// it to 1 ms and failed another tenant's CBs, or lifted it); the holder sets
// it within what --watchdog-ms accepts, other values are ignored.
TEST_F(MockDeviceTest, OnlyThePfsHolderSetsTheCardWatchdog) {
    const std::string pf_res0 = (Pf().sysfs_dir / "resource0").string();
    auto watchdog = [&] {
        uint32_t v = 0;
        const auto b = FileRead(pf_res0, SPYRE_REG_WATCHDOG_MS, 4);
        if (b.size() == 4) std::memcpy(&v, b.data(), 4);
        return v;
    };
    auto set = [&](uint32_t v) {
        std::vector<uint8_t> b(4);
        std::memcpy(b.data(), &v, 4);
        return FileWrite(pf_res0, SPYRE_REG_WATCHDOG_MS, b);
    };
    ASSERT_EQ(watchdog(), 10000u);
    EXPECT_EQ(InChild([&] { return set(1); }), EACCES);  // holds nothing
    {
        Function vf1 = Function::Open(Vf(1));
        EXPECT_EQ(set(1), EACCES);  // holds a VF
        EXPECT_EQ(set(0xFFFFFFFFu), EACCES);
    }
    EXPECT_EQ(watchdog(), 10000u);
    Function pf = Function::Open(Pf());
    EXPECT_EQ(InChild([&] { return set(1); }), EBUSY);  // as any write to a held function's file
    EXPECT_EQ(set(2000), 0);
    EXPECT_EQ(watchdog(), 2000u);
    EXPECT_EQ(set(0xFFFFFFFFu), 0);  // out of range: ignored
    pf.WriteTrapped32(SPYRE_REG_WATCHDOG_MS, 3600001);
    EXPECT_EQ(watchdog(), 2000u);
    pf.WriteTrapped32(SPYRE_REG_WATCHDOG_MS, 3600000);  // the bound itself is fine
    EXPECT_EQ(watchdog(), 3600000u);
}

// The holder is a process, not a pid: after the holder exits while a child
// it forked keeps the node open, a process that gets the holder's pid again
// is refused like anyone else.
TEST_F(MockDeviceTest, AProcessThatReusesADeadHoldersPidIsNotTheHolder) {
    const FunctionInfo vf = Vf(1);
    const std::string res2 = (vf.sysfs_dir / "resource2").string();
    // The kernel hands out the pid after the one written to ns_last_pid.
    auto next_pid_after = [](pid_t pid) {
        std::FILE* f = std::fopen("/proc/sys/kernel/ns_last_pid", "w");
        if (!f) return false;
        const bool ok = std::fprintf(f, "%d", int(pid)) > 0;
        return std::fclose(f) == 0 && ok;
    };
    if (!next_pid_after(::getpid())) GTEST_SKIP() << "cannot choose pids here (ns_last_pid)";
    pid_t holder = 0;
    const int keep = HoldThroughAWorker(vf, &holder);  // the worker holds the node until this closes
    ASSERT_GE(keep, 0);
    EXPECT_EQ(InChild([&] { return FileAccess(res2, false, 0, 64); }), EBUSY);  // still held, by a dead pid
    // Start times count clock ticks (10 ms): the reuser starts ticks later.
    ::usleep(50000);
    int reused = -1;  // what the process with the holder's pid got: 0 or errno
    // Other processes of a loaded machine take pids too, between the write
    // and our fork: a few hundred tries (a fork each, about a millisecond).
    for (int attempt = 0; attempt < 500 && reused < 0; ++attempt) {
        if (!next_pid_after(holder - 1)) break;
        const int rc = InChild([&] { return ::getpid() == holder ? FileAccess(res2, false, 0, 64) : 254; });
        if (rc != 254) reused = rc;
    }
    ::close(keep);  // the worker lets go
    if (reused < 0) GTEST_SKIP() << "pid " << holder << " was not handed out again in 500 forks (a busy machine)";
    EXPECT_EQ(reused, EBUSY);
    EXPECT_TRUE(OpenWhenFree(vf));
}

// Stores into the doorbell page and rings are whole aligned 32-bit words
// (the device reads them atomically); anything else is refused.
TEST_F(MockDeviceTest, UnalignedRingWritesAreRefused) {
    Function fn = Function::Open(Vf(1));
    const std::vector<uint8_t> three(3, 0xFF);
    EXPECT_SPYRE_ERROR(fn.WriteRegion(SPYRE_REGION_BAR4, 1, three), InvalidArgument, "trapped write of region 4");
    EXPECT_SPYRE_ERROR(fn.WriteRegion(SPYRE_REGION_BAR4, 0, three), InvalidArgument, "trapped write of region 4");
    EXPECT_EQ(FileAccess((Vf(1).sysfs_dir / "resource4").string(), true, 2, 4), EINVAL);
    // Aligned words still work, and the ring is unharmed.
    CommandRing ring(fn);
    ring.Submit(std::array{NopCb(1)});
    Completion c;
    ring.Wait({&c, 1}, 1);
    EXPECT_TRUE(c.ok());
    // Unaligned reads of registers are served whole (word by word).
    const auto bytes = fn.ReadRegion(SPYRE_REGION_BAR0, SPYRE_REG_MAGIC + 1, 6);
    uint32_t magic = SPYRE_MAGIC;
    EXPECT_EQ(std::memcmp(bytes.data(), reinterpret_cast<uint8_t*>(&magic) + 1, 3), 0);
}

// Anyone may write an unheld function's resource files; the daemon checks
// the holder, then writes. An open that took the function between the two
// used to get that write in its fresh memory. A writer that loops on
// resource2 while the function changes hands never reaches a new owner's
// memory: the check and the write run whole before or after the hand-over.
TEST_F(MockDeviceTest, AWriteRacingAnOpenNeverLandsInTheNewOwnersMemory) {
    const FunctionInfo vf = Vf(1);
    const std::string res2 = (vf.sysfs_dir / "resource2").string();
    constexpr size_t kBytes = 128 << 10;
    const pid_t writer = ::fork();
    ASSERT_GE(writer, 0);
    if (writer == 0) {
        const int fd = ::open(res2.c_str(), O_WRONLY);
        if (fd < 0) ::_exit(1);
        std::vector<uint8_t> garbage(kBytes, 0xEE);
        for (;;) (void)!::pwrite(fd, garbage.data(), garbage.size(), 0);  // EBUSY while held
    }
    constexpr int kRounds = 400;  // before the fix, 4 of 400 opens found the bytes
    int dirty = 0;
    for (int round = 0; round < kRounds; ++round) {
        Function fn = Function::Open(vf);
        MappedRegion m = fn.MapRegion(SPYRE_REGION_DEVMEM);
        if (!AllZero(m.data(), kBytes)) ++dirty;
    }
    ::kill(writer, SIGKILL);
    ::waitpid(writer, nullptr, 0);
    EXPECT_EQ(dirty, 0) << "of " << kRounds << " opens, these found the other process's bytes";
}

// A daemon in a pid namespace of its own sees an opener outside it as pid 0
// (FUSE has no pid for it there). Such an opener was recorded as holder pid
// 0, which every check read as "nobody holds it"; its open is refused now.
TEST(PidNamespaces, AnOpenerTheDaemonCannotSeeIsRefused) {
    SPYRE_REQUIRE_FUSE();
    if (::access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/unshare";
    if (std::system("/usr/bin/unshare --pid --fork /bin/true >/dev/null 2>&1") != 0)
        GTEST_SKIP() << "pid namespaces are unavailable here (unshare --pid refused)";
    const std::string real = spyre::driver::MockDaemon::FindExecutable().string();
    char dir[] = "/tmp/spyre-pidns-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    const std::string wrapper = std::string(dir) + "/spyre-mockdev";
    {
        std::ofstream w(wrapper);
        w << "#!/bin/sh\nexec /usr/bin/unshare --pid --fork '" << real << "' \"$@\"\n";
    }
    ASSERT_EQ(::chmod(wrapper.c_str(), 0755), 0);
    {
        spyre::test::ScopedEnv env("SPYRE_MOCKDEV", wrapper.c_str());
        spyre::driver::MockDaemon daemon = spyre::driver::MockDaemon::Start({.cards = 1, .vfs = 1, .mem = "1G"});
        const spyre::driver::DeviceRoot root(daemon.mount());
        const auto functions = root.Functions();
        ASSERT_FALSE(functions.empty());
        const int fd = ::open(functions.back().dev_node.c_str(), O_RDWR);
        const int err = errno;
        if (fd >= 0) ::close(fd);
        EXPECT_LT(fd, 0) << "an opener the daemon cannot see got the node";
        EXPECT_EQ(err, EPERM);
    }
    std::filesystem::remove_all(dir);
}

// An opener in a child pid namespace of the daemon's (a container that
// shares the mount and /dev/shm): the daemon sees it, but the daemon's pid
// names nobody there, so the driver took the live daemon for dead and the
// open failed DeviceLost (or watched whichever process had that pid
// there; found probing from outside). The device info says which pid
// namespace the daemon is in; from another one the driver does not watch
// the pid, and the heartbeat tells the daemon's loss.
TEST_F(MockDeviceTest, AnOpenerInAChildPidNamespaceUsesItsFunction) {
    const int rc = spyre::test::InChild([&] {
        if (::unshare(CLONE_NEWPID) != 0) return 77;  // not permitted here
        return spyre::test::InChild([&] {  // the first process of the new namespace
            try {
                Function fn = Function::Open(Vf(1));
                CommandRing ring(fn);
                ring.Submit(std::array{NopCb(5)});
                Completion c;
                ring.Wait({&c, 1}, 1);
                if (!c.ok()) return 2;
                const std::vector<uint8_t> bytes(4096, 0x6D);
                fn.WriteRegion(SPYRE_REGION_DEVMEM, 0, bytes);
                return fn.ReadRegion(SPYRE_REGION_DEVMEM, 0, 4096) == bytes && fn.Alive() ? 0 : 3;
            } catch (const Error& e) {
                std::fprintf(stderr, "in the namespace: %s\n", e.what());
                return e.kind() == ErrorKind::DeviceLost ? 4 : 1;
            }
        });
    });
    if (rc == 77) GTEST_SKIP() << "pid namespaces are unavailable here (unshare(CLONE_NEWPID) refused)";
    EXPECT_EQ(rc, 0) << "4: the live daemon was taken for lost, 1: another error, 2/3: the ring or memory failed";
    Function fn = Function::Open(Vf(1));  // handed back, and scrubbed
    EXPECT_EQ(fn.ReadRegion(SPYRE_REGION_DEVMEM, 0, 4096), std::vector<uint8_t>(4096, 0));
}

// A process that holds nothing may write an unheld PF's files (file
// permissions decide), but the PF's CBs and tasks address the whole card,
// held VFs' slices included: it enabled the PF's ring through resource0,
// wrote CBs into resource4 and rang the doorbell, and a COPY from a held VF's
// slice into the PF's slice 0 read the VF's bytes back through the PF's
// resource2 (COPY_INLINE and tasks overwrote them too; found probing from
// outside). An unheld function runs nothing: its ring cannot be enabled and
// its task queues are not served, in either direction.
TEST_F(MockDeviceTest, AProcessHoldingNothingCannotReachAHeldVfThroughTheUnheldPfsQueues) {
    const FunctionInfo pf_info = Pf();
    const std::string res0 = (pf_info.sysfs_dir / "resource0").string();
    const std::string res2 = (pf_info.sysfs_dir / "resource2").string();
    const std::string res4 = (pf_info.sysfs_dir / "resource4").string();
    Function vf = Function::Open(Vf(1));
    const uint64_t base = vf.Read64(SPYRE_REG_MEM_BASE);
    ASSERT_LT(base + (1 << 20), uint64_t(SPYRE_BAR2_SIZE));  // the VF's slice is inside the PF's resource2
    const std::vector<uint8_t> secret(4096, 0x5B), kept(4096, 0x3C), zeros(4096, 0);
    vf.WriteRegion(SPYRE_REGION_DEVMEM, 0x1000, secret);  // what must not be read
    vf.WriteRegion(SPYRE_REGION_DEVMEM, 0x3000, kept);    // what must not be overwritten

    // PF-relative addresses in slice 0 (the PF's own memory, open to the child).
    constexpr uint64_t kRingDst = 0x2000, kTaskDst = 0x10000, kTaskSrc = 0x20000, kProgram = 0x40000,
                       kReadArgs = 0x50000, kWriteArgs = 0x50040;
    const BuiltKernel copy = KernelBuilder().Copy({64, 16}, DType::FP32);  // 4 KiB in, 4 KiB out
    ASSERT_EQ(copy.inputs[0].bytes, 4096u);
    // The geometry the registers publish (the contract's defaults); task queue 0.
    ASSERT_EQ(FileRead32(res0, SPYRE_REG_SQ_OFFSET), SPYRE_DEFAULT_SQ_OFFSET);
    ASSERT_EQ(FileRead32(res0, SPYRE_REG_TQ_OFFSET), SPYRE_DEFAULT_TQ_OFFSET);
    ASSERT_EQ(FileRead32(res0, SPYRE_REG_TQ_DB_OFFSET), SPYRE_DEFAULT_TQ_DB_OFFSET);
    const uint64_t ring_cq_tail = SPYRE_DEFAULT_DB_OFFSET + SPYRE_DB_CQ_TAIL;
    const uint64_t task_cq_tail = SPYRE_DEFAULT_TQ_DB_OFFSET + SPYRE_TDB_CQ_TAIL(0);

    // The child holds nothing; it answers what CONTROL's enable got (0 or
    // errno; 100+ for a step it could not take at all).
    const int enable = InChild([&] {
        const uint32_t on = SPYRE_CONTROL_RING_ENABLE;
        const int enable_err = FileWrite(res0, SPYRE_REG_CONTROL, Bytes(&on, 4));
        // Whatever the enable said: the CBs, the tasks and both doorbells.
        const spyre_cb read_vf = CopyCb(base + 0x1000, kRingDst, 64, 1);
        spyre_cb inline_cb = CopyCb(0, base + 0x3000, 64, 2);
        inline_cb.opcode = SPYRE_OP_COPY_INLINE;
        inline_cb.slots = SPYRE_CB_INLINE_SLOTS(64);
        std::vector<uint8_t> ring = Bytes(&read_vf, sizeof read_vf);
        const std::vector<uint8_t> inline_bytes = Bytes(&inline_cb, sizeof inline_cb);
        ring.insert(ring.end(), inline_bytes.begin(), inline_bytes.end());
        ring.insert(ring.end(), 64, 0xEE);  // the payload slot
        if (FileWrite(res4, SPYRE_DEFAULT_SQ_OFFSET, ring) != 0) return 100;
        const uint32_t ring_tail = 3;
        if (FileWrite(res4, SPYRE_DEFAULT_DB_OFFSET + SPYRE_DB_SQ_TAIL, Bytes(&ring_tail, 4)) != 0) return 101;

        if (FileWrite(res2, kProgram, copy.program) != 0) return 102;
        if (FileWrite(res2, kTaskSrc, std::vector<uint8_t>(4096, 0xEE)) != 0) return 103;
        const uint64_t read_args[2] = {base + 0x1000, kTaskDst}, write_args[2] = {kTaskSrc, base + 0x3000};
        if (FileWrite(res2, kReadArgs, Bytes(read_args, sizeof read_args)) != 0) return 104;
        if (FileWrite(res2, kWriteArgs, Bytes(write_args, sizeof write_args)) != 0) return 105;
        const spyre_cb tasks[2] = {TaskCb(11, kProgram, kReadArgs, 2), TaskCb(12, kProgram, kWriteArgs, 2)};
        if (FileWrite(res4, SPYRE_DEFAULT_TQ_OFFSET, Bytes(tasks, sizeof tasks)) != 0) return 106;
        const uint32_t task_tail = 2;
        if (FileWrite(res4, SPYRE_DEFAULT_TQ_DB_OFFSET + SPYRE_TDB_SQ_TAIL(0), Bytes(&task_tail, 4)) != 0) return 107;
        return enable_err;
    });
    EXPECT_EQ(enable, EACCES) << "an unheld PF's ring was enabled (or a step failed: 100+)";
    // Had they run, both queues would have completed within this wait.
    for (int i = 0; i < 100; ++i) {
        if (FileRead32(res4, ring_cq_tail) == 2 && FileRead32(res4, task_cq_tail) == 2) break;
        ::usleep(10000);
    }
    EXPECT_EQ(FileRead32(res4, ring_cq_tail), 0u) << "the unheld PF's ring ran CBs";
    EXPECT_EQ(FileRead32(res4, task_cq_tail), 0u) << "the unheld PF's task queue ran tasks";
    EXPECT_EQ(FileRead(res2, kRingDst, 64), std::vector<uint8_t>(64, 0)) << "a COPY read the VF's bytes";
    EXPECT_EQ(FileRead(res2, kTaskDst, 4096), zeros) << "a task read the VF's bytes";
    EXPECT_EQ(vf.ReadRegion(SPYRE_REGION_DEVMEM, 0x1000, 4096), secret);
    EXPECT_EQ(vf.ReadRegion(SPYRE_REGION_DEVMEM, 0x3000, 4096), kept) << "a COPY_INLINE or a task wrote the VF";

    // The daemon goes on: the VF's holder copies on its ring, and the PF's
    // next holder gets empty queues that work (what was left there never runs).
    {
        CommandRing ring(vf);
        ring.Submit(std::array{CopyCb(0x1000, 0x5000, 4096, 21)});
        Completion c;
        ring.Wait({&c, 1}, 1);
        EXPECT_TRUE(c.ok());
        EXPECT_EQ(vf.ReadRegion(SPYRE_REGION_DEVMEM, 0x5000, 4096), secret);
    }
    EXPECT_EQ(InChild([&] {
                  try {
                      Function pf = Function::Open(pf_info);
                      CommandRing ring(pf);
                      ring.Submit(std::array{NopCb(31)});
                      Completion c;
                      ring.Wait({&c, 1}, 1);
                      TaskQueue tq(pf, 0);
                      const spyre_cb nop = NopCb(32);
                      tq.Submit(std::span(&nop, 1));
                      spyre_cqe done{};
                      const size_t got = tq.Wait(std::span(&done, 1), 1);
                      return c.ok() && c.user_data == 31 && got == 1 && done.user_data == 32 &&
                                     done.status == SPYRE_ERR_NONE
                                 ? 0
                                 : 1;
                  } catch (const Error&) {
                      return 254;
                  }
              }),
              0);
    EXPECT_EQ(vf.ReadRegion(SPYRE_REGION_DEVMEM, 0x1000, 4096), secret);
    EXPECT_EQ(vf.ReadRegion(SPYRE_REGION_DEVMEM, 0x3000, 4096), kept);
}

// The holder of a node exits while a child it forked keeps the node's
// file: the daemon's wait for a dead holder's release never ends there.
// Every open of that node used to sleep 1 s in a FUSE worker before its
// EBUSY, so a flood of such opens held every worker: other tenants' file
// reads took seconds and a device open failed with DeviceLost. Now at most
// one open waits for a dead holder, once: the flood gets EBUSY at once and
// everyone else is served meanwhile.
TEST_F(MockDeviceTest, OpensOfANodeADeadHoldersChildKeepsDoNotHoldUpTheDaemon) {
    const FunctionInfo vf = Vf(1);
    pid_t holder = 0;
    const int keep = HoldThroughAWorker(vf, &holder);  // the worker holds the node until this closes
    ASSERT_GE(keep, 0);

    constexpr int kThreads = 16;
    std::atomic<bool> stop{false};
    std::atomic<int> opens{0}, not_busy{0};
    std::vector<std::thread> flood;
    for (int t = 0; t < kThreads; ++t)
        flood.emplace_back([&] {
            while (!stop.load()) {
                const int fd = ::open(vf.dev_node.c_str(), O_RDWR | O_CLOEXEC);
                if (fd >= 0 || errno != EBUSY) not_busy.fetch_add(1);
                if (fd >= 0) ::close(fd);
                opens.fetch_add(1);
                ::usleep(20000);
            }
        });
    ::usleep(200000);  // the flood is on

    // Another tenant, meanwhile: a device open, a round trip on its ring,
    // and reads of another function's files.
    const auto start = std::chrono::steady_clock::now();
    std::string failed;
    int reads = 0;
    try {
        Function other = Function::Open(Vf(2));
        CommandRing ring(other);
        ring.Submit(std::array{NopCb(1)});
        Completion c;
        ring.Wait({&c, 1}, 1);
        if (!c.ok()) failed = "the NOP failed";
        for (int i = 0; i < 10; ++i)
            if (!ReadText((Pf().sysfs_dir / "stats").string()).empty()) ++reads;
    } catch (const Error& e) {
        failed = e.what();
    }
    const auto took = std::chrono::steady_clock::now() - start;
    const int flood_opens_meanwhile = opens.load();
    stop.store(true);
    for (auto& t : flood) t.join();
    ::close(keep);  // the worker lets go

    EXPECT_EQ(failed, "");
    EXPECT_EQ(reads, 10);
    // Generous: with the flood holding every worker the device open alone
    // took 10 s and more (DeviceLost); here it takes milliseconds.
    EXPECT_LT(took, std::chrono::seconds(5))
        << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
    EXPECT_GE(flood_opens_meanwhile, kThreads);
    EXPECT_EQ(not_busy.load(), 0) << "of " << opens.load() << " opens of the held node";
    EXPECT_TRUE(OpenWhenFree(vf));  // the node serves its next owner once the child lets go
}
