// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/config_space.hpp"

#include <cstring>
#include <string>

#include "spyre/error.hpp"
#include "spyre/uapi/spyre_pci.h"

namespace spyre::driver {

namespace {

template <typename T>
T Load(std::span<const uint8_t> c, size_t offset) {
    T v;
    std::memcpy(&v, c.data() + offset, sizeof v);
    return v;
}

[[noreturn]] void Malformed(const std::string& why) {
    throw Error(ErrorKind::ProtocolError, "malformed config space: " + why);
}

}  // namespace

PciConfig DecodeConfig(std::span<const uint8_t> c) {
    if (c.size() < SPYRE_CONFIG_SIZE)
        Malformed(std::to_string(c.size()) + " bytes, expected " + std::to_string(SPYRE_CONFIG_SIZE));
    PciConfig p;
    p.vendor_id = Load<uint16_t>(c, SPYRE_CFG_VENDOR_ID);
    p.device_id = Load<uint16_t>(c, SPYRE_CFG_DEVICE_ID);
    p.command = Load<uint16_t>(c, SPYRE_CFG_COMMAND);
    p.status = Load<uint16_t>(c, SPYRE_CFG_STATUS);
    p.revision = c[SPYRE_CFG_REVISION];
    p.class_code = Load<uint32_t>(c, SPYRE_CFG_REVISION) >> 8;
    p.header_type = c[SPYRE_CFG_HEADER_TYPE] & 0x7F;
    if (p.header_type != 0) Malformed("header type " + std::to_string(p.header_type) + " is not 0");
    p.subsystem_vendor_id = Load<uint16_t>(c, SPYRE_CFG_SUBSYS_VENDOR_ID);
    p.subsystem_id = Load<uint16_t>(c, SPYRE_CFG_SUBSYS_ID);

    for (unsigned n = 0; n < 6; ++n) {
        uint32_t lo = Load<uint32_t>(c, SPYRE_CFG_BAR(n));
        if (lo == 0 || (lo & 1)) continue;  // unimplemented, or an I/O BAR (spyre has none)
        PciBar bar;
        bar.is_64bit = ((lo >> 1) & 3) == 2;
        bar.prefetchable = lo & SPYRE_BAR_MEM_PREFETCH;
        bar.address = lo & ~0xFull;
        if (bar.is_64bit) {
            if (n == 5) Malformed("64-bit BAR5 has no upper half");
            bar.address |= uint64_t(Load<uint32_t>(c, SPYRE_CFG_BAR(n + 1))) << 32;
        }
        p.bars[n] = bar;
        if (bar.is_64bit) ++n;
    }

    // Standard capability list: bounded walk so a loop cannot hang us.
    if (p.status & SPYRE_CFG_STATUS_CAP_LIST) {
        uint8_t ptr = c[SPYRE_CFG_CAP_PTR] & 0xFC;
        for (int hops = 0; ptr; ++hops) {
            if (hops > 48 || ptr < 0x40) Malformed("capability list loops or points into the header");
            if (c[ptr] == SPYRE_PCI_CAP_ID_EXP) p.has_pcie_cap = true;
            ptr = c[ptr + 1] & 0xFC;
        }
    }
    // Extended capabilities start at 0x100 and exist only behind a PCIe cap.
    if (p.has_pcie_cap) {
        uint32_t off = 0x100;
        for (int hops = 0; off; ++hops) {
            if (hops > 64 || off < 0x100 || off + 4 > SPYRE_CONFIG_SIZE) Malformed("extended capability list is broken");
            uint32_t header = Load<uint32_t>(c, off);
            if (header == 0) break;
            if ((header & 0xFFFF) == SPYRE_PCI_EXT_CAP_ID_SRIOV) {
                if (off + sizeof(spyre_sriov_cap) > SPYRE_CONFIG_SIZE) Malformed("SR-IOV capability leaves config space");
                spyre_sriov_cap cap;
                std::memcpy(&cap, c.data() + off, sizeof cap);
                p.sriov = SriovInfo{cap.total_vfs, cap.num_vfs, cap.first_vf_offset, cap.vf_stride, cap.vf_device_id,
                                    (cap.control & SPYRE_SRIOV_CTRL_VF_ENABLE) != 0};
            }
            off = header >> 20;
        }
    }
    return p;
}

}  // namespace spyre::driver
