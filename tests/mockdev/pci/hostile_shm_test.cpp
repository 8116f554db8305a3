// SPDX-License-Identifier: Apache-2.0
// Hostile use of the shared-memory objects behind the mapped regions
// (docs/security.md, "Hostile use of the shared-memory objects"):
// - a holder that shrinks an object it was handed (ftruncate) loses its own
//   bytes, while the daemon, and every other function, goes on;
// - a process that creates files in /dev/shm under the names the daemon
//   would give a function's next objects cannot remove that function;
// - a process of the daemon's group cannot list the objects of a held
//   function (they are in the daemon's directory, which does not list).
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "mock_fixture.hpp"
#include "spyre/mock/spyre_mock.h"

using namespace spyre;
using namespace spyre::driver;
using spyre::test::MockDeviceTest;
using spyre::test::InChild;
using spyre::test::OpenWhenFree;
using spyre::test::ShmPath;

namespace {

constexpr size_t kBytes = 64 << 10;
constexpr uid_t kNobody = 65534;

// In a child, as root: becomes user and group nobody with `groups` as its
// supplementary groups. False if it could not.
bool BecomeNobody(const std::vector<gid_t>& groups) {
    return ::setgroups(groups.size(), groups.data()) == 0 && ::setresgid(kNobody, kNobody, kNobody) == 0 &&
           ::setresuid(kNobody, kNobody, kNobody) == 0;
}

// A process that died stays a zombie until reaped: only a running one counts.
bool Running(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat(std::istreambuf_iterator<char>(f), {});
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

std::string ReadText(const std::filesystem::path& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

// The `name value` line of a stats text, or -1.
long long StatsValue(const std::string& stats, const std::string& name) {
    const size_t at = stats.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stoll(stats.substr(at + name.size() + 2));
}

spyre_mock_region_shm Shm(const Function& fn, uint32_t index) {
    spyre_mock_region_shm m{};
    m.argsz = sizeof m;
    m.index = index;
    EXPECT_EQ(::ioctl(fn.fd(), SPYRE_MOCK_IOC_REGION_SHM, &m), 0);
    return m;
}

Completion RunCb(CommandRing& ring, const spyre_cb& cb) {
    ring.Submit(std::array{cb});
    Completion c;
    ring.Wait({&c, 1}, 1, {.mode = WaitMode::Blocking});
    return c;
}

std::vector<uint8_t> Pattern(uint8_t seed) {
    std::vector<uint8_t> bytes(kBytes);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(seed + i * 7 + (i >> 8));
    return bytes;
}

// A VF computes: a pattern goes in by DMA, a COPY CB copies it inside the
// VF's memory, and the copy comes back byte for byte.
void ExpectCopyRoundTrip(Function& vf, uint8_t seed) {
    const AllocatorOptions one{.mode = AllocatorMode::VF, .vf_regions = 1, .vf_region_sizes = {64ull << 20}};
    SpyreAllocator alloc(vf, one);
    DmaQueue queue(vf);
    DMAEngine dma(alloc, queue);
    CommandRing ring(vf);
    auto src = alloc.Allocate(kBytes), dst = alloc.Allocate(kBytes);
    const std::vector<uint8_t> pattern = Pattern(seed);
    dma.Wait(dma.CopyToDevice(pattern.data(), src.handle, kBytes));
    const Completion c =
        RunCb(ring, CopyCb(alloc.DeviceAddress(src.handle, kBytes), alloc.DeviceAddress(dst.handle, kBytes), kBytes));
    EXPECT_EQ(c.status, SPYRE_ERR_NONE) << vf.pci_address();
    std::vector<uint8_t> back(kBytes);
    dma.Wait(dma.CopyFromDevice(back.data(), dst.handle, kBytes));
    EXPECT_TRUE(back == pattern) << vf.pci_address() << ": the copy differs";
}

struct Shrink {
    const char* name;
    unsigned fn;      // 0 = PF, i = VF i
    uint32_t region;  // the object shrunk: BAR0 registers, BAR4 rings, DEVMEM memory
};

// The hostile holder, in a child: holds `info`, shrinks its object of
// `region` to 0 bytes as a driver could, makes the daemon use it, and exits
// without closing anything: exit code 0 if all it asked of the device worked.
[[noreturn]] void ShrinkAsHolder(const FunctionInfo& info, uint32_t region) {
    ::alarm(60);  // a daemon that died may leave this child waiting
    try {
        Function fn = Function::Open(info);
        const bool pf = !info.is_vf;
        std::optional<SpyreAllocator> alloc;
        std::optional<CommandRing> ring;
        if (region == SPYRE_REGION_DEVMEM && !pf) {  // set up while the registers and rings are whole
            alloc.emplace(fn, AllocatorOptions{.mode = AllocatorMode::VF, .vf_regions = 1, .vf_region_sizes = {64ull << 20}});
            ring.emplace(fn);
        }
        const spyre_mock_region_shm m = Shm(fn, region);
        const int fd = ::open(ShmPath(m.shm_name).c_str(), O_RDWR);
        if (fd < 0 || ::ftruncate(fd, 0) != 0) ::_exit(2);
        ::close(fd);
        // No destructor runs from here on: this process's own mapping of the
        // shrunk object faults too. The kernel closes the node at _exit.
        if (region != SPYRE_REGION_DEVMEM) {
            ::usleep(300000);  // the heartbeat and the lanes touch the doorbell page
            (void)ReadText(info.sysfs_dir / "stats");  // the daemon reads the registers
            ::_exit(0);
        }
        if (pf) {  // a trapped store into the card view, where the PF's object is mapped
            const std::vector<uint8_t> bytes = Pattern(0x3C);
            fn.WriteRegion(SPYRE_REGION_DEVMEM, 4096, bytes);
            ::_exit(fn.ReadRegion(SPYRE_REGION_DEVMEM, 4096, kBytes) == bytes ? 0 : 4);
        }
        // The device reads and writes the shrunk memory: zeros now, its own.
        auto src = alloc->Allocate(kBytes), dst = alloc->Allocate(kBytes);
        const Completion c = RunCb(
            *ring, CopyCb(alloc->DeviceAddress(src.handle, kBytes), alloc->DeviceAddress(dst.handle, kBytes), kBytes));
        ::_exit(c.status == SPYRE_ERR_NONE ? 0 : 5);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hostile holder: %s\n", e.what());
        ::_exit(3);
    }
}

class ShrunkObjectTest : public MockDeviceTest, public ::testing::WithParamInterface<Shrink> {};

}  // namespace

// A holder shrinks one of its function's objects to nothing (the daemon maps
// it MAP_SHARED, so its next access used to take SIGBUS and the whole daemon
// died). The daemon sizes the object back and goes on: the other VF, held
// all along, computes correctly, the shrunk function serves its next owner,
// and its stats count the repair.
TEST_P(ShrunkObjectTest, TheDaemonAndTheOtherFunctionsGoOn) {
    const Shrink shrink = GetParam();
    const FunctionInfo victim = shrink.fn == 0 ? Pf() : Vf(shrink.fn);
    Function other = Function::Open(Vf(2));
    ExpectCopyRoundTrip(other, 0x11);

    EXPECT_EQ(InChild([&]() -> int { ShrinkAsHolder(victim, shrink.region); }), 0);

    ASSERT_TRUE(Running(daemon().pid())) << "the daemon died";
    ExpectCopyRoundTrip(other, 0x22);
    std::optional<Function> again = OpenWhenFree(victim);
    ASSERT_TRUE(again.has_value());
    if (victim.is_vf) {
        ExpectCopyRoundTrip(*again, 0x33);
    } else {
        const std::vector<uint8_t> bytes = Pattern(0x44);
        again->WriteRegion(SPYRE_REGION_DEVMEM, 0, bytes);
        EXPECT_EQ(again->ReadRegion(SPYRE_REGION_DEVMEM, 0, kBytes), bytes);
    }
    EXPECT_GE(StatsValue(ReadText(victim.sysfs_dir / "stats"), "shm_repairs"), 1);
    EXPECT_EQ(StatsValue(ReadText(Vf(2).sysfs_dir / "stats"), "shm_repairs"), 0);
    EXPECT_TRUE(Running(daemon().pid()));
}

INSTANTIATE_TEST_SUITE_P(EachObject, ShrunkObjectTest,
                         ::testing::Values(Shrink{"VfRing", 1, SPYRE_REGION_BAR4}, Shrink{"VfRegs", 1, SPYRE_REGION_BAR0},
                                           Shrink{"VfMem", 1, SPYRE_REGION_DEVMEM},
                                           Shrink{"PfMem", 0, SPYRE_REGION_DEVMEM}),
                         [](const auto& info) { return std::string(info.param.name); });

// A holder grows its memory object 64 MiB past its slice (ftruncate) to
// fill /dev/shm pages the card does not count, and could keep them mapped
// after it let go (found probing from outside). The card's heartbeat cuts
// the object back to its size and counts a repair; the function goes on.
TEST_F(MockDeviceTest, AHolderThatGrowsItsMemoryObjectHasItCutBack) {
    Function vf = Function::Open(Vf(1));
    ExpectCopyRoundTrip(vf, 0x51);
    const spyre_mock_region_shm m = Shm(vf, SPYRE_REGION_DEVMEM);
    const int fd = ::open(ShmPath(m.shm_name).c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    struct stat st {};
    ASSERT_EQ(::fstat(fd, &st), 0);
    const off_t size = st.st_size;
    ASSERT_EQ(::ftruncate(fd, size + (64 << 20)), 0) << std::strerror(errno);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (::fstat(fd, &st) == 0 && st.st_size != size && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ::close(fd);
    EXPECT_EQ(st.st_size, size) << "the grown object was not cut back";
    EXPECT_GE(StatsValue(ReadText(Vf(1).sysfs_dir / "stats"), "shm_repairs"), 1);
    ExpectCopyRoundTrip(vf, 0x52);
    EXPECT_TRUE(Running(daemon().pid()));
}

// Another user, holding nothing, creates in /dev/shm (writable by all) the
// names the daemon used to give VF 1's next objects: `<prefix>.c0.f1.<kind>.<n>`.
// Exclusive creation then failed and the hand-over removed the function.
// Names now end in random bits, in the daemon's own directory, where no
// other user can create anything: hand-overs go on and the function stays.
TEST_F(MockDeviceTest, SquattedObjectNamesDoNotRemoveAFunction) {
    const std::string old_lead = "/dev/shm/" + daemon().shm_prefix() + ".c0.f1.";
    const std::string lead = daemon().shm_prefix() + ".d/c0f1.";  // names as the ioctl gives them
    std::vector<std::string> squatted;
    for (int n = 0; n <= 40; ++n)
        for (const char* kind : {"mem", "regs", "ring"}) squatted.push_back(old_lead + kind + "." + std::to_string(n));
    const int made = InChild([&] {
        const bool other_user = ::geteuid() == 0;
        if (other_user && !BecomeNobody({})) return 2;
        int count = 0;
        for (const std::string& path : squatted) {
            const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
            if (fd >= 0) ++count, ::close(fd);
        }
        if (other_user)  // nor in the directory, whatever the name
            for (const char* kind : {"mem", "regs", "ring"}) {
                const int fd = ::open(ShmPath(lead + kind + ".0").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
                if (fd >= 0 || errno != EACCES) return 3;
            }
        return count >= 100 ? 0 : 1;  // those of generation 0 existed already (before the random names)
    });
    ASSERT_EQ(made, 0) << "the squatter could not create its files, or could in the daemon's directory";

    for (int round = 0; round < 3; ++round) {  // each close and open hands the function over
        std::optional<Function> vf = OpenWhenFree(Vf(1));
        ASSERT_TRUE(vf.has_value()) << "round " << round;
        for (uint32_t region : {SPYRE_REGION_BAR0, SPYRE_REGION_BAR4, SPYRE_REGION_DEVMEM}) {
            const std::string name = Shm(*vf, region).shm_name;
            EXPECT_EQ(name.rfind(lead, 0), 0u) << name;  // still found under the prefix
            EXPECT_EQ(std::find(squatted.begin(), squatted.end(), ShmPath(name)), squatted.end()) << name;
        }
        ExpectCopyRoundTrip(*vf, uint8_t(0x50 + round));
    }
    EXPECT_TRUE(std::filesystem::exists(Vf(1).dev_node));
    for (const std::string& path : squatted) ::unlink(path.c_str());
}

// A process of the daemon's group (user nobody, its groups set to the
// device nodes' group) that holds nothing lists /dev/shm: the names of every
// held function's objects used to be there, to open and read or write
// another tenant's memory. They are in the daemon's directory now, which
// the group may enter, not list: no name shows, the directory does not
// list, nothing can be made in it, and a name told (as the ioctl tells the
// holder) still opens. The holder maps and computes as before.
TEST_F(MockDeviceTest, TheDaemonsGroupCannotListAHeldFunctionsObjects) {
    if (::geteuid() != 0) GTEST_SKIP() << "becoming user nobody needs root";
    std::optional<Function> vf = OpenWhenFree(Vf(1));
    ASSERT_TRUE(vf.has_value());
    ExpectCopyRoundTrip(*vf, 0x60);
    std::vector<std::string> names;
    for (uint32_t region : {SPYRE_REGION_BAR0, SPYRE_REGION_BAR4, SPYRE_REGION_DEVMEM})
        names.push_back(Shm(*vf, region).shm_name);
    struct stat node {};
    ASSERT_EQ(::stat(Vf(1).dev_node.c_str(), &node), 0);
    const std::string dir = ShmPath(daemon().shm_prefix() + ".d");

    const int code = InChild([&] {
        if (!BecomeNobody({node.st_gid})) return 2;
        DIR* shm = ::opendir("/dev/shm");
        if (!shm) return 3;
        bool listed = false;
        while (const dirent* e = ::readdir(shm))
            for (const std::string& name : names)
                listed |= name.substr(name.rfind('/') + 1) == e->d_name;  // the object's own name
        ::closedir(shm);
        if (listed) return 4;
        errno = 0;
        if (DIR* d = ::opendir(dir.c_str()); d || errno != EACCES) return 5;
        if (const int fd = ::open((dir + "/squat").c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600); fd >= 0 || errno != EACCES)
            return 6;
        const int fd = ::open(ShmPath(names[0]).c_str(), O_RDWR);  // the group's access is by name
        if (fd < 0) return 7;
        ::close(fd);
        return 0;
    });
    EXPECT_EQ(code, 0) << "2: could not become nobody, 3: /dev/shm unreadable, 4: an object's name is listed, "
                          "5: the directory lists (or is missing), 6: the directory takes new files, "
                          "7: a name told does not open";
    struct stat st {};
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0710u);
    EXPECT_EQ(st.st_gid, node.st_gid);
    ExpectCopyRoundTrip(*vf, 0x61);
}
