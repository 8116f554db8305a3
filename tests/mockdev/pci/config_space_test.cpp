// SPDX-License-Identifier: Apache-2.0
// Decodes the config space spyre-mockdev builds, as a driver would.
#include <gtest/gtest.h>

#include <cstring>

#include "pci/config_space.hpp"
#include "spyre/uapi/spyre_regs.h"

namespace spyre::mockdev {
namespace {

template <typename T>
T Get(const ConfigSpace& cs, unsigned offset) {
    T v;
    std::memcpy(&v, cs.data() + offset, sizeof v);
    return v;
}

uint64_t Bar64(const ConfigSpace& cs, unsigned bar) {
    return (uint64_t(Get<uint32_t>(cs, SPYRE_CFG_BAR(bar) + 4)) << 32) | (Get<uint32_t>(cs, SPYRE_CFG_BAR(bar)) & ~0xFu);
}

spyre_sriov_cap Sriov(const ConfigSpace& cs) {
    spyre_sriov_cap cap;
    std::memcpy(&cap, cs.data() + SPYRE_CFG_SRIOV_CAP, sizeof cap);
    return cap;
}

TEST(MockdevConfigSpace, PfIdentity) {
    const ConfigSpace cs = BuildConfigSpace({0, 0, 0});
    EXPECT_EQ(cs[0], 0x14);  // what `xxd -l 4 config` shows: 14 10 a7 06
    EXPECT_EQ(cs[1], 0x10);
    EXPECT_EQ(cs[2], 0xa7);
    EXPECT_EQ(cs[3], 0x06);
    EXPECT_EQ(Get<uint16_t>(cs, SPYRE_CFG_VENDOR_ID), SPYRE_PCI_VENDOR_IBM);
    EXPECT_EQ(Get<uint16_t>(cs, SPYRE_CFG_DEVICE_ID), SPYRE_PCI_DEVICE_PF);
    EXPECT_EQ(Get<uint16_t>(cs, SPYRE_CFG_COMMAND), SPYRE_CFG_COMMAND_MEMORY | SPYRE_CFG_COMMAND_MASTER);
    EXPECT_EQ(Get<uint16_t>(cs, SPYRE_CFG_STATUS) & SPYRE_CFG_STATUS_CAP_LIST, SPYRE_CFG_STATUS_CAP_LIST);
    EXPECT_EQ(Get<uint8_t>(cs, SPYRE_CFG_REVISION), SPYRE_PCI_REVISION);
    const uint32_t class_code = Get<uint8_t>(cs, SPYRE_CFG_CLASS_CODE) | Get<uint8_t>(cs, SPYRE_CFG_CLASS_CODE + 1) << 8 |
                                Get<uint8_t>(cs, SPYRE_CFG_CLASS_CODE + 2) << 16;
    EXPECT_EQ(class_code, SPYRE_PCI_CLASS_CODE);
    EXPECT_EQ(Get<uint8_t>(cs, SPYRE_CFG_HEADER_TYPE), 0);
    EXPECT_EQ(Get<uint16_t>(cs, SPYRE_CFG_SUBSYS_VENDOR_ID), SPYRE_PCI_VENDOR_IBM);
    EXPECT_EQ(Get<uint16_t>(cs, SPYRE_CFG_SUBSYS_ID), SPYRE_PCI_SUBSYS_ID);
}

TEST(MockdevConfigSpace, BarsAre64BitSizeAlignedAndDistinct) {
    const ConfigSpace pf = BuildConfigSpace({0, 0, 0});
    const ConfigSpace vf = BuildConfigSpace({0, 1, 0});
    const ConfigSpace other_card = BuildConfigSpace({1, 0, 0});
    const struct {
        unsigned bar;
        uint64_t size;
        bool prefetch;
    } bars[] = {{SPYRE_BAR_REGS, SPYRE_BAR0_SIZE, false}, {SPYRE_BAR_MEM, SPYRE_BAR2_SIZE, true},
                {SPYRE_BAR_RING, SPYRE_BAR4_SIZE, false}};
    for (const auto& b : bars) {
        SCOPED_TRACE(b.bar);
        const uint32_t low = Get<uint32_t>(pf, SPYRE_CFG_BAR(b.bar));
        EXPECT_EQ(low & 0x1u, 0u) << "memory BAR";
        EXPECT_EQ(low & 0x6u, SPYRE_BAR_MEM_64BIT);
        EXPECT_EQ((low & SPYRE_BAR_MEM_PREFETCH) != 0, b.prefetch);
        for (const ConfigSpace* cs : {&pf, &vf, &other_card}) {
            EXPECT_NE(Bar64(*cs, b.bar), 0u);
            EXPECT_EQ(Bar64(*cs, b.bar) % b.size, 0u) << "size-aligned";
        }
        EXPECT_NE(Bar64(pf, b.bar), Bar64(vf, b.bar));
        EXPECT_NE(Bar64(pf, b.bar), Bar64(other_card, b.bar));
        EXPECT_EQ(Bar64(pf, b.bar), BarAddress(0, 0, b.bar));
    }
    // No two BARs of any two functions of a card overlap.
    for (unsigned f = 0; f <= SPYRE_SRIOV_TOTAL_VFS; ++f)
        for (unsigned g = 0; g <= SPYRE_SRIOV_TOTAL_VFS; ++g)
            for (const auto& a : bars)
                for (const auto& b : bars) {
                    if (f == g && a.bar == b.bar) continue;
                    const uint64_t a0 = BarAddress(0, f, a.bar), b0 = BarAddress(0, g, b.bar);
                    EXPECT_TRUE(a0 + a.size <= b0 || b0 + b.size <= a0) << f << ":" << a.bar << " vs " << g << ":" << b.bar;
                }
    // BARs 1, 3, 5 hold the upper halves; nothing past BAR5 in the header.
    EXPECT_EQ(Get<uint32_t>(pf, SPYRE_CFG_BAR(1)), uint32_t(BarAddress(0, 0, 0) >> 32));
}

TEST(MockdevConfigSpace, PcieCapability) {
    const ConfigSpace cs = BuildConfigSpace({0, 0, 0});
    EXPECT_EQ(Get<uint8_t>(cs, SPYRE_CFG_CAP_PTR), SPYRE_CFG_PCIE_CAP);
    EXPECT_EQ(Get<uint8_t>(cs, SPYRE_CFG_PCIE_CAP), SPYRE_PCI_CAP_ID_EXP);
    EXPECT_EQ(Get<uint8_t>(cs, SPYRE_CFG_PCIE_CAP + 1), 0) << "last capability";
    EXPECT_EQ(Get<uint16_t>(cs, SPYRE_CFG_PCIE_CAP + 2) & 0xF, 2) << "capability version 2";
    EXPECT_NE(Get<uint32_t>(cs, SPYRE_CFG_PCIE_CAP + 4) & (1u << 28), 0u) << "function level reset";
}

TEST(MockdevConfigSpace, SriovCapabilityWithoutVfs) {
    const spyre_sriov_cap cap = Sriov(BuildConfigSpace({0, 0, 0}));
    EXPECT_EQ(cap.header & 0xFFFF, SPYRE_PCI_EXT_CAP_ID_SRIOV);
    EXPECT_EQ((cap.header >> 16) & 0xF, SPYRE_PCI_EXT_CAP_VERSION);
    EXPECT_EQ(cap.header >> 20, 0u) << "last extended capability";
    EXPECT_EQ(cap.total_vfs, SPYRE_SRIOV_TOTAL_VFS);
    EXPECT_EQ(cap.initial_vfs, SPYRE_SRIOV_TOTAL_VFS);
    EXPECT_EQ(cap.num_vfs, 0);
    EXPECT_EQ(cap.control, 0);
    EXPECT_EQ(cap.first_vf_offset, SPYRE_SRIOV_FIRST_VF_OFFSET);
    EXPECT_EQ(cap.vf_stride, SPYRE_SRIOV_VF_STRIDE);
    EXPECT_EQ(cap.vf_device_id, SPYRE_PCI_DEVICE_VF);
    EXPECT_EQ(cap.supported_page_sizes, 0x553u);
    EXPECT_EQ(cap.system_page_size, 1u);
}

TEST(MockdevConfigSpace, SriovCapabilityWithVfs) {
    const spyre_sriov_cap cap = Sriov(BuildConfigSpace({2, 0, 3}));
    EXPECT_EQ(cap.num_vfs, 3);
    EXPECT_EQ(cap.control, SPYRE_SRIOV_CTRL_VF_ENABLE | SPYRE_SRIOV_CTRL_VF_MSE);
    // VF BARs: VF1's address; VF i sits at base + (i - 1) * size.
    for (unsigned bar : {SPYRE_BAR_REGS, SPYRE_BAR_MEM, SPYRE_BAR_RING}) {
        const uint64_t base = (uint64_t(cap.vf_bar[bar + 1]) << 32) | (cap.vf_bar[bar] & ~0xFu);
        EXPECT_EQ(base, BarAddress(2, 1, bar));
        const uint64_t size = bar == SPYRE_BAR_REGS ? SPYRE_BAR0_SIZE : bar == SPYRE_BAR_MEM ? SPYRE_BAR2_SIZE : SPYRE_BAR4_SIZE;
        EXPECT_EQ(BarAddress(2, 3, bar), base + 2 * size);
        EXPECT_EQ(cap.vf_bar[bar] & 0x6u, SPYRE_BAR_MEM_64BIT);
    }
}

TEST(MockdevConfigSpace, VfIdentityAndNoSriov) {
    const ConfigSpace cs = BuildConfigSpace({0, 5, 0});
    EXPECT_EQ(Get<uint16_t>(cs, SPYRE_CFG_VENDOR_ID), SPYRE_PCI_VENDOR_IBM);
    EXPECT_EQ(Get<uint16_t>(cs, SPYRE_CFG_DEVICE_ID), SPYRE_PCI_DEVICE_VF);
    EXPECT_EQ(Get<uint32_t>(cs, SPYRE_CFG_SRIOV_CAP), 0u) << "empty extended capability list";
    for (unsigned off = SPYRE_CFG_SRIOV_CAP; off < SPYRE_CONFIG_SIZE; ++off) ASSERT_EQ(cs[off], 0) << off;
    EXPECT_EQ(Get<uint8_t>(cs, SPYRE_CFG_PCIE_CAP), SPYRE_PCI_CAP_ID_EXP);
}

}  // namespace
}  // namespace spyre::mockdev
