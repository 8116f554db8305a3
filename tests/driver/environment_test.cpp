// SPDX-License-Identifier: Apache-2.0
// How apps find a device: SPYRE_DEV_ROOT, FLEX_DEVICE, SPYRE_DEVICES and the
// embedded private spyre-mockdev.
#include <stdlib.h>

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
