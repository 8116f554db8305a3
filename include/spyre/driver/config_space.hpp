// SPDX-License-Identifier: Apache-2.0
// Decoding a function's 4 KiB PCI configuration space (the `config` file).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::driver {

struct PciBar {
    uint64_t address = 0;    // bus address (flag bits removed)
    bool is_64bit = false;
    bool prefetchable = false;
};

struct SriovInfo {
    uint16_t total_vfs = 0;
    uint16_t num_vfs = 0;
    uint16_t first_vf_offset = 0;
    uint16_t vf_stride = 0;
    uint16_t vf_device_id = 0;
    bool vf_enabled = false;
};

struct PciConfig {
    uint16_t vendor_id = 0;
    uint16_t device_id = 0;
    uint16_t command = 0;
    uint16_t status = 0;
    uint8_t revision = 0;
    uint32_t class_code = 0;       // base << 16 | sub << 8 | prog-if
    uint8_t header_type = 0;
    uint16_t subsystem_vendor_id = 0;
    uint16_t subsystem_id = 0;
    std::array<std::optional<PciBar>, 6> bars;  // BAR n (the upper half of a 64-bit BAR is folded in)
    bool has_pcie_cap = false;
    std::optional<SriovInfo> sriov;
};

// Throws spyre::Error(ProtocolError) for a short buffer, a header type other
// than 0, or a capability list that loops or leaves config space.
PciConfig DecodeConfig(std::span<const uint8_t> config);

}  // namespace spyre::driver
SPYRE_API_END
