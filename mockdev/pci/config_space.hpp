// SPDX-License-Identifier: Apache-2.0
//
// The 4 KiB PCI configuration space of a mock function, built from the
// layout in spyre_pci.h. A pure function of its inputs so tests can decode it.
#pragma once

#include <array>
#include <cstdint>

#include "spyre/uapi/spyre_pci.h"

namespace spyre::mockdev {

struct ConfigSpaceParams {
    unsigned card = 0;      // 0-based card index
    unsigned fn = 0;        // 0 = PF, i = VF i
    uint16_t num_vfs = 0;   // PF only: VFs currently enabled (SR-IOV NumVFs)
};

using ConfigSpace = std::array<uint8_t, SPYRE_CONFIG_SIZE>;

ConfigSpace BuildConfigSpace(const ConfigSpaceParams& params);

// Made-up bus address of BAR `bar` (0, 2 or 4) of a function. Each BAR is
// aligned to its size and function fn's BAR sits at VF-BAR base + (fn-1) * size,
// as the PF's SR-IOV capability describes for real VFs.
uint64_t BarAddress(unsigned card, unsigned fn, unsigned bar);

}  // namespace spyre::mockdev
