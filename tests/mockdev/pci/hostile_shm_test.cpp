// SPDX-License-Identifier: Apache-2.0
// Hostile use of the shared-memory objects behind the mapped regions
// (docs/security.md, "Hostile use of the shared-memory objects"):
// - a process that creates files in /dev/shm under the names the daemon
//   would give a function's next objects cannot remove that function.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mock_fixture.hpp"
#include "spyre/mock/spyre_mock.h"

using namespace spyre;
using namespace spyre::driver;
using spyre::test::MockDeviceTest;

namespace {

constexpr size_t kBytes = 64 << 10;

// Runs `body` in a child process and returns its exit code (255 if it died).
int InChild(const std::function<int()>& body) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(body());
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
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

// Retries Function::Open while the daemon has not yet seen a dead holder's close.
std::optional<Function> OpenWhenFree(const FunctionInfo& info) {
    for (int i = 0; i < 500; ++i) {
        try {
            return Function::Open(info);
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::Busy) throw;
            ::usleep(10000);
        }
    }
    return std::nullopt;
}

}  // namespace

// Another user, holding nothing, creates in /dev/shm (writable by all) the
// names the daemon used to give VF 1's next objects: `<prefix>.c0.f1.<kind>.<n>`.
// Exclusive creation then failed and the hand-over removed the function.
// Names now end in random bits: hand-overs go on and the function stays.
TEST_F(MockDeviceTest, SquattedObjectNamesDoNotRemoveAFunction) {
    const std::string lead = "/dev/shm/" + daemon().shm_prefix() + ".c0.f1.";
    std::vector<std::string> squatted;
    for (int n = 0; n <= 40; ++n)
        for (const char* kind : {"mem", "regs", "ring"}) squatted.push_back(lead + kind + "." + std::to_string(n));
    const int made = InChild([&] {
        if (::geteuid() == 0 && (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0))
            return 2;
        int count = 0;
        for (const std::string& path : squatted) {
            const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
            if (fd >= 0) ++count, ::close(fd);
        }
        return count >= 100 ? 0 : 1;  // those of generation 0 existed already (before the fix)
    });
    ASSERT_EQ(made, 0) << "the squatter could not create its files";

    for (int round = 0; round < 3; ++round) {  // each close and open hands the function over
        std::optional<Function> vf = OpenWhenFree(Vf(1));
        ASSERT_TRUE(vf.has_value()) << "round " << round;
        for (uint32_t region : {SPYRE_REGION_BAR0, SPYRE_REGION_BAR4, SPYRE_REGION_DEVMEM}) {
            const std::string name = Shm(*vf, region).shm_name;
            EXPECT_EQ(("/dev/shm" + name).rfind(lead, 0), 0u) << name;  // still found by the prefix
            EXPECT_EQ(std::find(squatted.begin(), squatted.end(), "/dev/shm" + name), squatted.end()) << name;
        }
        ExpectCopyRoundTrip(*vf, uint8_t(0x50 + round));
    }
    EXPECT_TRUE(std::filesystem::exists(Vf(1).dev_node));
    for (const std::string& path : squatted) ::unlink(path.c_str());
}
