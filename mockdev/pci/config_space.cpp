// SPDX-License-Identifier: Apache-2.0
#include "pci/config_space.hpp"

#include <cstring>

#include "spyre/uapi/spyre_regs.h"

namespace spyre::mockdev {

namespace {

// Each card gets a 64 GiB window of bus addresses; inside it, all 17 functions'
// BAR2s come first (2 GiB each), then the BAR4s, then the BAR0s.
constexpr uint64_t kWindowBase = 0x40'0000'0000ull;
constexpr uint64_t kWindowSize = 64ull << 30;
constexpr uint64_t kBar4Area = 36ull << 30;
constexpr uint64_t kBar0Area = 37ull << 30;

// PCI Express capability fields (offsets relative to the capability).
constexpr unsigned kPcieCapsReg = 0x02;
constexpr unsigned kPcieDevCap = 0x04;
constexpr unsigned kPcieLinkCap = 0x0C;
constexpr unsigned kPcieLinkStatus = 0x12;
constexpr uint16_t kPcieCapVersion2Endpoint = 0x0002;
constexpr uint32_t kDevCapFlr = 1u << 28;
constexpr uint32_t kDevCapPayload256 = 0x1;
constexpr uint16_t kLink16GtX16 = 0x4 | (16 << 4);

constexpr uint32_t kSriovSupportedPageSizes = 0x553;  // 4K, 8K, 64K, 256K, 1M, 4M
constexpr uint32_t kSriovSystemPageSize = 0x1;        // 4 KiB

template <typename T>
void Put(ConfigSpace& cs, unsigned offset, T value) {
    std::memcpy(cs.data() + offset, &value, sizeof value);  // little-endian host
}

uint32_t BarFlags(unsigned bar) {
    return SPYRE_BAR_MEM_64BIT | (bar == SPYRE_BAR_MEM ? SPYRE_BAR_MEM_PREFETCH : 0u);
}

uint64_t BarSize(unsigned bar) {
    switch (bar) {
    case SPYRE_BAR_REGS: return SPYRE_BAR0_SIZE;
    case SPYRE_BAR_MEM: return SPYRE_BAR2_SIZE;
    default: return SPYRE_BAR4_SIZE;
    }
}

void PutBar(ConfigSpace& cs, unsigned offset, uint64_t address, uint32_t flags) {
    Put<uint32_t>(cs, offset, uint32_t(address) | flags);
    Put<uint32_t>(cs, offset + 4, uint32_t(address >> 32));
}

}  // namespace

uint64_t BarAddress(unsigned card, unsigned fn, unsigned bar) {
    uint64_t window = kWindowBase + card * kWindowSize;
    uint64_t area = bar == SPYRE_BAR_MEM ? 0 : bar == SPYRE_BAR_RING ? kBar4Area : kBar0Area;
    return window + area + fn * BarSize(bar);
}

ConfigSpace BuildConfigSpace(const ConfigSpaceParams& p) {
    const bool is_pf = p.fn == 0;
    ConfigSpace cs{};

    Put<uint16_t>(cs, SPYRE_CFG_VENDOR_ID, SPYRE_PCI_VENDOR_IBM);
    Put<uint16_t>(cs, SPYRE_CFG_DEVICE_ID, is_pf ? SPYRE_PCI_DEVICE_PF : SPYRE_PCI_DEVICE_VF);
    Put<uint16_t>(cs, SPYRE_CFG_COMMAND, SPYRE_CFG_COMMAND_MEMORY | SPYRE_CFG_COMMAND_MASTER);
    Put<uint16_t>(cs, SPYRE_CFG_STATUS, SPYRE_CFG_STATUS_CAP_LIST);
    Put<uint8_t>(cs, SPYRE_CFG_REVISION, SPYRE_PCI_REVISION);
    Put<uint8_t>(cs, SPYRE_CFG_CLASS_CODE, uint8_t(SPYRE_PCI_CLASS_CODE));
    Put<uint8_t>(cs, SPYRE_CFG_CLASS_CODE + 1, uint8_t(SPYRE_PCI_CLASS_CODE >> 8));
    Put<uint8_t>(cs, SPYRE_CFG_CLASS_CODE + 2, uint8_t(SPYRE_PCI_CLASS_CODE >> 16));
    Put<uint8_t>(cs, SPYRE_CFG_HEADER_TYPE, 0);
    for (unsigned bar : {SPYRE_BAR_REGS, SPYRE_BAR_MEM, SPYRE_BAR_RING})
        PutBar(cs, SPYRE_CFG_BAR(bar), BarAddress(p.card, p.fn, bar), BarFlags(bar));
    Put<uint16_t>(cs, SPYRE_CFG_SUBSYS_VENDOR_ID, SPYRE_PCI_VENDOR_IBM);
    Put<uint16_t>(cs, SPYRE_CFG_SUBSYS_ID, SPYRE_PCI_SUBSYS_ID);
    Put<uint8_t>(cs, SPYRE_CFG_CAP_PTR, SPYRE_CFG_PCIE_CAP);

    // PCI Express capability: the last entry of the standard list (next = 0).
    Put<uint8_t>(cs, SPYRE_CFG_PCIE_CAP, SPYRE_PCI_CAP_ID_EXP);
    Put<uint8_t>(cs, SPYRE_CFG_PCIE_CAP + 1, 0);
    Put<uint16_t>(cs, SPYRE_CFG_PCIE_CAP + kPcieCapsReg, kPcieCapVersion2Endpoint);
    Put<uint32_t>(cs, SPYRE_CFG_PCIE_CAP + kPcieDevCap, kDevCapFlr | kDevCapPayload256);
    Put<uint32_t>(cs, SPYRE_CFG_PCIE_CAP + kPcieLinkCap, kLink16GtX16);
    Put<uint16_t>(cs, SPYRE_CFG_PCIE_CAP + kPcieLinkStatus, kLink16GtX16);

    // Extended capabilities: the PF's SR-IOV capability is the only one; a VF's
    // zero header at 0x100 ends the (empty) list.
    if (is_pf) {
        spyre_sriov_cap sriov{};
        sriov.header = SPYRE_PCI_EXT_CAP_ID_SRIOV | (SPYRE_PCI_EXT_CAP_VERSION << 16);
        sriov.control = p.num_vfs ? uint16_t(SPYRE_SRIOV_CTRL_VF_ENABLE | SPYRE_SRIOV_CTRL_VF_MSE) : uint16_t(0);
        sriov.initial_vfs = SPYRE_SRIOV_TOTAL_VFS;
        sriov.total_vfs = SPYRE_SRIOV_TOTAL_VFS;
        sriov.num_vfs = p.num_vfs;
        sriov.first_vf_offset = SPYRE_SRIOV_FIRST_VF_OFFSET;
        sriov.vf_stride = SPYRE_SRIOV_VF_STRIDE;
        sriov.vf_device_id = SPYRE_PCI_DEVICE_VF;
        sriov.supported_page_sizes = kSriovSupportedPageSizes;
        sriov.system_page_size = kSriovSystemPageSize;
        for (unsigned bar : {SPYRE_BAR_REGS, SPYRE_BAR_MEM, SPYRE_BAR_RING}) {
            uint64_t vf1 = BarAddress(p.card, 1, bar);
            sriov.vf_bar[bar] = uint32_t(vf1) | BarFlags(bar);
            sriov.vf_bar[bar + 1] = uint32_t(vf1 >> 32);
        }
        std::memcpy(cs.data() + SPYRE_CFG_SRIOV_CAP, &sriov, sizeof sriov);
    }
    return cs;
}

}  // namespace spyre::mockdev
