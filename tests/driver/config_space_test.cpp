// SPDX-License-Identifier: Apache-2.0
// Config-space decoding on hand-built buffers, including malformed ones.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "spyre/driver/config_space.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre_pci.h"

using spyre::driver::DecodeConfig;

namespace {

struct Builder {
    std::vector<uint8_t> c = std::vector<uint8_t>(SPYRE_CONFIG_SIZE);
    template <typename T>
    void Put(size_t off, T v) { std::memcpy(c.data() + off, &v, sizeof v); }
};

Builder PfConfig() {
    Builder b;
    b.Put<uint16_t>(SPYRE_CFG_VENDOR_ID, SPYRE_PCI_VENDOR_IBM);
    b.Put<uint16_t>(SPYRE_CFG_DEVICE_ID, SPYRE_PCI_DEVICE_PF);
    b.Put<uint16_t>(SPYRE_CFG_STATUS, SPYRE_CFG_STATUS_CAP_LIST);
    b.Put<uint32_t>(SPYRE_CFG_REVISION, (SPYRE_PCI_CLASS_CODE << 8) | 1);
    b.Put<uint32_t>(SPYRE_CFG_BAR(0), 0x80000000u | SPYRE_BAR_MEM_64BIT);
    b.Put<uint32_t>(SPYRE_CFG_BAR(1), 0x38);
    b.Put<uint32_t>(SPYRE_CFG_BAR(2), SPYRE_BAR_MEM_64BIT | SPYRE_BAR_MEM_PREFETCH);
    b.Put<uint32_t>(SPYRE_CFG_BAR(3), 0x39);
    b.Put<uint8_t>(SPYRE_CFG_CAP_PTR, SPYRE_CFG_PCIE_CAP);
    b.Put<uint8_t>(SPYRE_CFG_PCIE_CAP, SPYRE_PCI_CAP_ID_EXP);
    spyre_sriov_cap cap{};
    cap.header = SPYRE_PCI_EXT_CAP_ID_SRIOV | (SPYRE_PCI_EXT_CAP_VERSION << 16);
    cap.total_vfs = 16;
    cap.num_vfs = 3;
    cap.control = SPYRE_SRIOV_CTRL_VF_ENABLE;
    cap.first_vf_offset = 1;
    cap.vf_stride = 1;
    cap.vf_device_id = SPYRE_PCI_DEVICE_VF;
    b.Put(SPYRE_CFG_SRIOV_CAP, cap);
    return b;
}

}  // namespace

TEST(ConfigDecode, DecodesIdentityBarsAndSriov) {
    auto p = DecodeConfig(PfConfig().c);
    EXPECT_EQ(p.vendor_id, 0x1014);
    EXPECT_EQ(p.device_id, 0x06a7);
    EXPECT_EQ(p.class_code, 0x120000u);
    EXPECT_EQ(p.revision, 1);
    ASSERT_TRUE(p.bars[0]);
    EXPECT_TRUE(p.bars[0]->is_64bit);
    EXPECT_FALSE(p.bars[0]->prefetchable);
    EXPECT_EQ(p.bars[0]->address, 0x3880000000ull);
    EXPECT_FALSE(p.bars[1]);  // upper half of BAR0
    ASSERT_TRUE(p.bars[2]);
    EXPECT_TRUE(p.bars[2]->prefetchable);
    EXPECT_TRUE(p.has_pcie_cap);
    ASSERT_TRUE(p.sriov);
    EXPECT_EQ(p.sriov->total_vfs, 16);
    EXPECT_EQ(p.sriov->num_vfs, 3);
    EXPECT_TRUE(p.sriov->vf_enabled);
    EXPECT_EQ(p.sriov->vf_device_id, 0x06a8);
}

TEST(ConfigDecode, RejectsShortBuffers) {
    std::vector<uint8_t> shortbuf(256);
    EXPECT_THROW(DecodeConfig(shortbuf), spyre::Error);
}

TEST(ConfigDecode, RejectsLoopingCapabilityList) {
    Builder b = PfConfig();
    b.Put<uint8_t>(SPYRE_CFG_PCIE_CAP + 1, SPYRE_CFG_PCIE_CAP);  // points at itself
    try {
        DecodeConfig(b.c);
        FAIL();
    } catch (const spyre::Error& e) {
        EXPECT_EQ(e.kind(), spyre::ErrorKind::ProtocolError);
        EXPECT_NE(std::string(e.what()).find("loops"), std::string::npos) << e.what();
    }
}

TEST(ConfigDecode, RejectsBrokenExtendedCapabilities) {
    Builder b = PfConfig();
    spyre_sriov_cap cap{};
    cap.header = SPYRE_PCI_EXT_CAP_ID_SRIOV | (0x100u << 20);  // next = itself
    b.Put(SPYRE_CFG_SRIOV_CAP, cap);
    EXPECT_THROW(DecodeConfig(b.c), spyre::Error);
}

TEST(ConfigDecode, WithoutCapabilitiesThereIsNoSriov) {
    Builder b = PfConfig();
    b.Put<uint16_t>(SPYRE_CFG_STATUS, 0);
    auto p = DecodeConfig(b.c);
    EXPECT_FALSE(p.has_pcie_cap);
    EXPECT_FALSE(p.sriov);
}
