// SPDX-License-Identifier: Apache-2.0
// A device program binary (uapi/spyre_program.h) as plain tables: what the
// kernel builder assembles, and what tools and tests read back to inspect a
// program. Encode lays the tables out and seals them with the checksum.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "spyre/uapi/spyre_program.h"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

struct ProgramImage {
    std::vector<spyre_program_op> ops;
    std::vector<spyre_program_operand> operands;
    std::vector<spyre_program_reloc> relocs;
    uint16_t slot_count = 0;  // entries of the correction input table

    // header | ops | operands | relocs, with total_size and checksum set.
    // Throws InvalidArgument if a table has more than 65535 records or the
    // program exceeds SPYRE_PROGRAM_MAX_SIZE.
    std::vector<uint8_t> Encode() const;

    // Reads the tables of a program. Checks the framing only (magic,
    // version, sizes, checksum, tables inside the program); the device
    // validates everything else. Throws InvalidArgument saying what is wrong.
    static ProgramImage Decode(std::span<const uint8_t> bytes);
};

// Points a correction program at the program it patches and at its input
// table (device addresses), and re-seals it. Throws InvalidArgument if
// `correction` is not a correction program.
void SetCorrectionTarget(std::vector<uint8_t>& correction, uint64_t target_addr, uint64_t input_addr);

}  // namespace spyre
SPYRE_API_END
