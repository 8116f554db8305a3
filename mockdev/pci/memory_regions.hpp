// SPDX-License-Identifier: Apache-2.0
//
// The memory region table of one function: large regions of its memory that
// the device grants to the function's owner, who carves allocations from
// them. The table is small (SPYRE_REGION_MAX_ENTRIES, as on the real card)
// and its contents are published in BAR0 for the driver and for dumps.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "pci/register_file.hpp"

namespace spyre::mockdev {

class RegionTable {
public:
    // Regions are granted from [0, grantable) of the function's memory.
    RegionTable(RegisterFile& regs, uint64_t grantable);

    // Executes a REGION_CMD write (argument from REGION_ARG) and publishes
    // the result and the table in the registers.
    void Command(uint32_t cmd);
    // Forgets every region (the device node changed owner).
    void Clear();
    // Moves the upper bound; refused (false) while a region lies beyond it.
    bool SetGrantable(uint64_t grantable);
private:
    struct Entry {
        uint64_t base = 0;
        uint64_t size = 0;  // 0 = unused
    };
    uint32_t Alloc(uint64_t size, uint32_t& index);
    uint64_t Largest() const;
    // First aligned gap of `size` bytes, or UINT64_MAX.
    uint64_t FindGap(uint64_t size) const;
    void Publish();  // with mutex_ held

    RegisterFile& regs_;
    mutable std::mutex mutex_;
    uint64_t grantable_;
    std::array<Entry, SPYRE_REGION_MAX_ENTRIES> entries_{};
};

}  // namespace spyre::mockdev
