// SPDX-License-Identifier: Apache-2.0
// Discovery over a hand-made device tree (no daemon): filtering of foreign
// functions, ordering, selectors and SPYRE_DEVICES.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "spyre/driver/discovery.hpp"
#include "spyre/error.hpp"

namespace fs = std::filesystem;
using spyre::driver::DeviceRoot;

class DiscoveryTest : public ::testing::Test {
protected:
    void SetUp() override {
        char templ[] = "/tmp/spyre-discovery-XXXXXX";
        root_ = ::mkdtemp(templ);
        Add("0000:01:00.1", "0x1014", "0x06a8");
        Add("0000:01:00.0", "0x1014", "0x06a7");
        Add("0000:02:00.0", "0x1014", "0x06a7");
        Add("0000:03:00.0", "0x8086", "0x1234");  // someone else's device
        ::unsetenv("SPYRE_DEVICES");
    }
    void TearDown() override {
        fs::remove_all(root_);
        ::unsetenv("SPYRE_DEVICES");
    }
    void Add(const std::string& addr, const std::string& vendor, const std::string& device) {
        fs::path d = root_ / "bus/pci/devices" / addr;
        fs::create_directories(d);
        std::ofstream(d / "vendor") << vendor << "\n";
        std::ofstream(d / "device") << device << "\n";
    }
    fs::path root_;
};

TEST_F(DiscoveryTest, ListsSpyreFunctionsSortedByAddress) {
    auto fns = DeviceRoot(root_).Functions();
    ASSERT_EQ(fns.size(), 3u);
    EXPECT_EQ(fns[0].pci_address, "0000:01:00.0");
    EXPECT_FALSE(fns[0].is_vf);
    EXPECT_EQ(fns[1].pci_address, "0000:01:00.1");
    EXPECT_TRUE(fns[1].is_vf);
    EXPECT_EQ(fns[1].dev_node, root_ / "dev/spyre/0000:01:00.1");
}

// A real sysfs: a function bound to vfio-pci is opened through its IOMMU
// group; one bound to another driver (or none) stays the mock's kind.
TEST_F(DiscoveryTest, FunctionsBoundToVfioPciGoThroughTheirGroup) {
    const fs::path pci = root_ / "bus/pci/devices";
    fs::create_directories(root_ / "bus/pci/drivers/vfio-pci");
    fs::create_directories(root_ / "bus/pci/drivers/other");
    fs::create_directories(root_ / "kernel/iommu_groups/42");
    fs::create_symlink("../../../bus/pci/drivers/vfio-pci", pci / "0000:01:00.1/driver");
    fs::create_symlink("../../../kernel/iommu_groups/42", pci / "0000:01:00.1/iommu_group");
    fs::create_symlink("../../../bus/pci/drivers/other", pci / "0000:02:00.0/driver");
    fs::create_symlink("../../../kernel/iommu_groups/42", pci / "0000:02:00.0/iommu_group");
    auto fns = DeviceRoot(root_).Functions();
    ASSERT_EQ(fns.size(), 3u);
    EXPECT_EQ(fns[0].transport, spyre::driver::Transport::Mock);
    EXPECT_EQ(fns[1].transport, spyre::driver::Transport::Vfio);
    EXPECT_EQ(fns[1].dev_node, fs::path("/dev/vfio/42"));
    EXPECT_EQ(fns[2].transport, spyre::driver::Transport::Mock) << "bound to another driver";
    EXPECT_EQ(fns[2].dev_node, root_ / "dev/spyre/0000:02:00.0");
}

TEST_F(DiscoveryTest, FindsByIndexFullAndShortAddress) {
    DeviceRoot root(root_);
    EXPECT_EQ(root.Find("2").pci_address, "0000:02:00.0");
    EXPECT_EQ(root.Find("01:00.1").pci_address, "0000:01:00.1");
    EXPECT_EQ(root.Find("0000:01:00.0").device_id, 0x06a7);
}

TEST_F(DiscoveryTest, RejectsUnknownSelectors) {
    DeviceRoot root(root_);
    try {
        root.Find("7");
        FAIL();
    } catch (const spyre::Error& e) {
        EXPECT_EQ(e.kind(), spyre::ErrorKind::NotFound);
        EXPECT_NE(std::string(e.what()).find("3 spyre function(s)"), std::string::npos) << e.what();
    }
    EXPECT_THROW(root.Find("0000:03:00.0"), spyre::Error);  // not a spyre function
    EXPECT_THROW(root.Find(""), spyre::Error);
}

TEST_F(DiscoveryTest, SpyreDevicesFiltersAndOrders) {
    ::setenv("SPYRE_DEVICES", "0000:02:00.0, 0", 1);
    auto fns = DeviceRoot(root_).Functions();
    ASSERT_EQ(fns.size(), 2u);
    EXPECT_EQ(fns[0].pci_address, "0000:02:00.0");
    EXPECT_EQ(fns[1].pci_address, "0000:01:00.0");
}

// An entry that names no function, or one named twice, is refused with the
// entry and what there is: skipping it would leave the app on devices its
// user did not choose. (Before: "9" and "foo" were skipped, and "1,1"
// listed one function twice.)
TEST_F(DiscoveryTest, SpyreDevicesRefusesEntriesThatNameNothingOrTwice) {
    auto refused = [&](const char* value, spyre::ErrorKind kind, const char* says) {
        ::setenv("SPYRE_DEVICES", value, 1);
        try {
            DeviceRoot(root_).Functions();
            ADD_FAILURE() << value << " was accepted";
        } catch (const spyre::Error& e) {
            EXPECT_EQ(e.kind(), kind) << value << ": " << e.what();
            EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << value << ": " << e.what();
        }
    };
    refused("0, 9", spyre::ErrorKind::NotFound, "SPYRE_DEVICES entry '9': index out of range: 3 spyre function(s)");
    refused("2,foo", spyre::ErrorKind::InvalidArgument, "SPYRE_DEVICES entry 'foo': not an index or a PCI address");
    refused("0000:07:00.0", spyre::ErrorKind::NotFound, "entry '0000:07:00.0': no such function: 3 spyre function(s)");
    refused("1,1", spyre::ErrorKind::InvalidArgument, "entry '1' names 0000:01:00.1 a second time");
    refused("01:00.0,0", spyre::ErrorKind::InvalidArgument, "entry '0' names 0000:01:00.0 a second time");
    // An empty entry was skipped: "0,,2" chose two functions, and " " none.
    refused("0,,2", spyre::ErrorKind::InvalidArgument, "SPYRE_DEVICES='0,,2': entry 2 is empty");
    refused("0,", spyre::ErrorKind::InvalidArgument, "SPYRE_DEVICES='0,': entry 2 is empty");
    refused(" ", spyre::ErrorKind::InvalidArgument, "SPYRE_DEVICES=' ': entry 1 is empty");
    // sscanf's %x took these as addresses, which then named nothing (NotFound).
    // (A list's entries are trimmed: " 01:00.1" there is 01:00.1.)
    for (const char* bad : {"0x0:01:00.1", "+000:01:00.1", "-1:00.1", "1:0.1", "01:00.8", "123456789012"})
        refused(bad, spyre::ErrorKind::InvalidArgument, "not an index or a PCI address");
    ::unsetenv("SPYRE_DEVICES");
    for (const std::string bad : {"01:00", " 01:00.1", "1:0.1"}) {
        try {
            DeviceRoot(root_).Find(bad);
            ADD_FAILURE() << bad << " was accepted";
        } catch (const spyre::Error& e) {
            EXPECT_EQ(e.kind(), spyre::ErrorKind::InvalidArgument) << e.what();
            EXPECT_NE(std::string(e.what()).find("device selector '" + bad + "' is not an index or a PCI address"),
                      std::string::npos)
                << e.what();
        }
    }
}

TEST(Discovery, MissingRootIsNotFound) {
    try {
        DeviceRoot("/nonexistent/spyre");
        FAIL();
    } catch (const spyre::Error& e) {
        EXPECT_EQ(e.kind(), spyre::ErrorKind::NotFound);
        EXPECT_NE(std::string(e.what()).find("/nonexistent/spyre"), std::string::npos);
    }
}
