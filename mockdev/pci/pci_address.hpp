// SPDX-License-Identifier: Apache-2.0
//
// PCI addresses of the mock functions: card c is bus SPYRE_PCI_FIRST_BUS + c,
// its PF is 00.0 and VF i sits at the routing ID offset the SR-IOV capability
// advertises (FIRST_VF_OFFSET + (i - 1) * VF_STRIDE), as on real hardware.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace spyre::mockdev {

struct PciAddress {
    uint16_t domain = 0;
    uint8_t bus = 0;
    uint8_t device = 0;    // 0..31
    uint8_t function = 0;  // 0..7

    std::string ToString() const;  // "dddd:bb:dd.f", lowercase hex as in sysfs
    bool operator==(const PciAddress&) const = default;
};

// Address of function `fn` (0 = PF, i = VF i) of card `card` (0-based).
PciAddress FunctionAddress(unsigned card, unsigned fn);

// Inverse of FunctionAddress for names in the FUSE tree; nullopt if `text`
// is not a well-formed address of some card/function slot.
struct FunctionSlot {
    unsigned card;
    unsigned fn;
};
std::optional<FunctionSlot> ParseFunctionAddress(std::string_view text);

}  // namespace spyre::mockdev
