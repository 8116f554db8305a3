// SPDX-License-Identifier: Apache-2.0
#include "pci/pci_address.hpp"

#include <cstdio>

#include "spyre/uapi/spyre_pci.h"

namespace spyre::mockdev {

std::string PciAddress::ToString() const {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", unsigned(domain), unsigned(bus), unsigned(device),
                  unsigned(function));
    return buf;
}

PciAddress FunctionAddress(unsigned card, unsigned fn) {
    unsigned devfn = fn == 0 ? 0 : SPYRE_SRIOV_FIRST_VF_OFFSET + (fn - 1) * SPYRE_SRIOV_VF_STRIDE;
    return PciAddress{uint16_t(SPYRE_PCI_DOMAIN), uint8_t(SPYRE_PCI_FIRST_BUS + card), uint8_t(devfn >> 3),
                      uint8_t(devfn & 7)};
}

std::optional<FunctionSlot> ParseFunctionAddress(std::string_view text) {
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    int consumed = 0;
    std::string s(text);
    if (std::sscanf(s.c_str(), "%4x:%2x:%2x.%1x%n", &domain, &bus, &device, &function, &consumed) != 4 ||
        size_t(consumed) != s.size() || domain != SPYRE_PCI_DOMAIN || bus < SPYRE_PCI_FIRST_BUS || device > 31 ||
        function > 7)
        return std::nullopt;
    unsigned card = bus - SPYRE_PCI_FIRST_BUS;
    unsigned devfn = device << 3 | function;
    unsigned fn = 0;
    if (devfn != 0) {
        if (devfn < SPYRE_SRIOV_FIRST_VF_OFFSET || (devfn - SPYRE_SRIOV_FIRST_VF_OFFSET) % SPYRE_SRIOV_VF_STRIDE != 0)
            return std::nullopt;
        fn = (devfn - SPYRE_SRIOV_FIRST_VF_OFFSET) / SPYRE_SRIOV_VF_STRIDE + 1;
    }
    // The round trip rejects other spellings (upper case, short fields, "0x").
    if (FunctionAddress(card, fn).ToString() != text) return std::nullopt;
    return FunctionSlot{card, fn};
}

}  // namespace spyre::mockdev
