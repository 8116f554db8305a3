// SPDX-License-Identifier: Apache-2.0
// How apps find a device: SPYRE_DEV_ROOT, FLEX_DEVICE, SPYRE_DEVICES and the
// embedded private spyre-mockdev.
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <filesystem>

#include "mock_fixture.hpp"

using namespace spyre::driver;
using spyre::test::MockDeviceTest;

namespace {

// Sets environment variables for one test and restores them afterwards.
class EnvGuard {
public:
    void Set(const char* name, const char* value) {
        const char* old = std::getenv(name);
        saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
        if (value) ::setenv(name, value, 1); else ::unsetenv(name);
    }
    ~EnvGuard() {
        for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
            if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1); else ::unsetenv(it->first.c_str());
        }
    }

private:
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace

TEST_F(MockDeviceTest, SpyreDevRootAndFlexDeviceChooseTheFunction) {
    EnvGuard env;
    env.Set("SPYRE_DEV_ROOT", root().path().c_str());
    env.Set("FLEX_DEVICE", "VF");
    auto e = DeviceEnvironment::Acquire();
    EXPECT_FALSE(e.embedded());
    EXPECT_EQ(e.DefaultFunction().pci_address, "0000:01:00.1");
    env.Set("FLEX_DEVICE", "PF");
    EXPECT_EQ(DeviceEnvironment::Acquire().DefaultFunction().pci_address, "0000:01:00.0");
    env.Set("SPYRE_DEVICES", "0000:01:00.2");
    env.Set("FLEX_DEVICE", nullptr);
    EXPECT_SPYRE_ERROR(DeviceEnvironment::Acquire().DefaultFunction(), NotFound, "no visible spyre PF");
    Function fn = DeviceEnvironment::Acquire().Open("0");
    EXPECT_EQ(fn.pci_address(), "0000:01:00.2");
}

TEST(DeviceEnvironment, BadFlexDeviceAndMissingRootAreClearErrors) {
    EnvGuard env;
    env.Set("FLEX_DEVICE", "GPU");
    EXPECT_SPYRE_ERROR(DeviceEnvironment::Acquire(), InvalidArgument, "FLEX_DEVICE=GPU");
    env.Set("FLEX_DEVICE", nullptr);
    env.Set("SPYRE_DEV_ROOT", "/nonexistent/root");
    EXPECT_SPYRE_ERROR(DeviceEnvironment::Acquire(), NotFound, "/nonexistent/root");
    if (!DeviceRoot::Looks(kDefaultDeviceRoot)) {
        env.Set("SPYRE_DEV_ROOT", nullptr);
        env.Set("FLEX_DEVICE", "PF");
        EXPECT_SPYRE_ERROR(DeviceEnvironment::Acquire(), NotFound, "FLEX_DEVICE=MOCK");
    }
}

TEST(DeviceEnvironment, NoRootStartsAPrivateMockForTheAppsLifetime) {
    SPYRE_REQUIRE_FUSE();
    EnvGuard env;
    env.Set("SPYRE_DEV_ROOT", nullptr);
    env.Set("SPYRE_DEVICES", nullptr);
    env.Set("FLEX_DEVICE", "MOCK");  // MOCK: private mock even if /run/spyre exists
    std::filesystem::path mount;
    {
        auto e = DeviceEnvironment::Acquire({.vfs = 1, .mem = "1G"});
        EXPECT_TRUE(e.embedded());
        mount = e.root().path();
        EXPECT_TRUE(spyre::test::IsMounted(mount.string()));
        Function fn = e.Open();
        EXPECT_FALSE(fn.is_vf());
        CommandRing ring(fn);
        ring.Submit(std::array{NopCb(42)});
        Completion c;
        ring.Wait({&c, 1}, 1);
        EXPECT_TRUE(c.ok());
        EXPECT_EQ(c.user_data, 42u);
    }
    EXPECT_FALSE(spyre::test::IsMounted(mount.string()));
    EXPECT_FALSE(std::filesystem::exists(mount));
}

// Options the daemon refuses (exit code SPYRE_MOCK_EXIT_USAGE) are the
// caller's mistake: InvalidArgument naming them, not "DeviceLost: exited
// with code 2"; nothing is left mounted.
TEST(MockDaemon, OptionsTheDaemonRefusesAreInvalidArguments) {
    SPYRE_REQUIRE_FUSE();
    // More memory than the address space (was DeviceLost: "exited with code 1", the reservation failed).
    const std::vector<MockOptions> bad = {{.cards = 0}, {.vfs = -1}, {.mem = "garbage"}, {.cards = 1000},
                                          {.mem = "99999T"}, {.cards = 9, .mem = "8T"}};
    for (const MockOptions& o : bad) {
        try {
            MockDaemon::Start(o);
            ADD_FAILURE() << "started with cards " << o.cards << ", vfs " << o.vfs << ", mem " << o.mem;
        } catch (const spyre::Error& e) {
            EXPECT_EQ(e.kind(), spyre::ErrorKind::InvalidArgument) << e.what();
            EXPECT_NE(std::string(e.what()).find("spyre-mockdev refused its options (cards " + std::to_string(o.cards)),
                      std::string::npos)
                << e.what();
        }
    }
    MockDaemon good = MockDaemon::Start({.vfs = 0, .mem = "256M"});  // sane options still start
    EXPECT_TRUE(spyre::test::IsMounted(good.mount().string()));
}

// A start_timeout of 0 (or less) gave the daemon no time and read as a lost
// device: it is InvalidArgument naming the option, before anything starts.
// A positive bound that runs out is a Timeout (error.hpp: "a bounded wait
// ran out"), not DeviceLost.
TEST(MockDaemon, AStartTimeoutOfZeroIsInvalidAndOneThatRunsOutIsATimeout) {
    SPYRE_REQUIRE_FUSE();
    for (const auto bound : {std::chrono::milliseconds(0), std::chrono::milliseconds(-5)})
        EXPECT_SPYRE_ERROR(MockDaemon::Start({.vfs = 0, .mem = "64M", .start_timeout = bound}), InvalidArgument,
                           "MockOptions::start_timeout is " + std::to_string(bound.count()) +
                               " ms: the daemon's start needs a positive bound");
    EXPECT_SPYRE_ERROR(MockDaemon::Start({.vfs = 0, .mem = "64M", .start_timeout = std::chrono::milliseconds(1)}), Timeout,
                       "spyre-mockdev did not become ready within 1 ms");
    MockDaemon good = MockDaemon::Start({.vfs = 0, .mem = "64M"});
    EXPECT_TRUE(spyre::test::IsMounted(good.mount().string()));
}

// A daemon option holding a NUL was cut there on the command line, the rest
// dropped without a word ("64M\0..." made a 64 MiB card: found probing
// from outside): InvalidArgument, before anything starts.
TEST(MockDaemon, AnOptionHoldingANulIsInvalid) {
    using namespace std::string_literals;
    EXPECT_SPYRE_ERROR(MockDaemon::Start({.vfs = 0, .mem = "64M\0 and more"s}), InvalidArgument,
                       "MockOptions: '64M...' holds a NUL byte");
    EXPECT_SPYRE_ERROR(MockDaemon::Start({.vfs = 0, .mem = "64M", .extra_args = {"--cores\0x"s, "4"}}),
                       InvalidArgument, "MockOptions: '--cores...' holds a NUL byte");
}

// Starting a mock must not write-protect the app's memory: with fork() every
// private page became copy-on-write, and the first write to each (the
// destination of a device-to-host copy) took a page fault, 0.02x memcpy for
// the first 64 MiB copy on this VM. Counted in faults, not time.
TEST(MockDaemon, StartingTheMockLeavesTheAppsPagesWritableWithoutFaults) {
    SPYRE_REQUIRE_FUSE();
#if defined(__SANITIZE_THREAD__)
    // TSan's runtime turns every vfork() into a fork(), so the pages are
    // copy-on-write under it whatever MockDaemon does.
    GTEST_SKIP() << "ThreadSanitizer replaces vfork with fork";
#endif
    constexpr size_t kPages = 4096;
    const size_t page = size_t(::sysconf(_SC_PAGESIZE));
    void* p = ::mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    ::madvise(p, kPages * page, MADV_NOHUGEPAGE);  // one fault per 4 KiB page, whatever THP says
    auto* bytes = static_cast<volatile uint8_t*>(p);
    for (size_t i = 0; i < kPages; ++i) bytes[i * page] = 1;  // faulted in before the mock starts
    {
        MockDaemon daemon = MockDaemon::Start({.vfs = 0, .mem = "256M"});
        rusage before{}, after{};
        ::getrusage(RUSAGE_SELF, &before);
        for (size_t i = 0; i < kPages; ++i) bytes[i * page] = 2;
        ::getrusage(RUSAGE_SELF, &after);
        // Other threads of the process may fault a little meanwhile; fork made it one per page.
        EXPECT_LT(after.ru_minflt - before.ru_minflt, long(kPages / 4)) << "pages written after MockDaemon::Start faulted";
    }
    ::munmap(p, kPages * page);
}
