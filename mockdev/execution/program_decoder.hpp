// SPDX-License-Identifier: Apache-2.0
//
// Decoding and validation of program binaries (spyre_program.h). The device
// runs nothing it has not decoded here first: every header field, table,
// operand descriptor, op and relocation is checked, sizes and shape products
// are overflow-checked, and every operand's bytes must lie inside the
// function's memory window. Self-contained (the contract and the C++ standard
// library only) so the fuzz target can build it with clang's libFuzzer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "spyre/uapi/spyre_errors.h"
#include "spyre/uapi/spyre_program.h"

namespace spyre::mockdev {

// A validated operand descriptor and what the device derived from it.
struct Operand {
    spyre_program_operand desc;
    uint32_t element_size = 0;  // bytes
    uint64_t elements = 0;      // product of the shape
    uint64_t extent = 0;        // bytes from desc.addr past its last element (last stick for STICK)
};

struct DecodedProgram {
    spyre_program_header header{};
    std::vector<spyre_program_op> ops;
    std::vector<Operand> operands;
    std::vector<spyre_program_reloc> relocs;
};

// Why a program was refused: a SPYRE_ERR_* code, the device address at fault
// for ADDR_RANGE and MISALIGNED (0 otherwise), and a short reason for logs.
struct ProgramFault {
    uint16_t code = SPYRE_ERR_NONE;
    uint64_t addr = 0;
    const char* what = "";
    explicit operator bool() const { return code != SPYRE_ERR_NONE; }
};

// Checks one operand descriptor for a function whose memory window is
// [0, window) and fills `out` with it, its element count and its extent.
// DecodeProgram checks every operand with it, in index order; a task's
// relocation checks the operands it gave new addresses (the only part of a
// decoded program an address can make invalid).
ProgramFault CheckOperand(const spyre_program_operand& desc, uint64_t window, Operand& out);

// Decodes the program `bytes` (exactly its total_size) for a function whose
// memory window is [0, window). On success `out` holds the program; on a
// fault its contents are unspecified.
ProgramFault DecodeProgram(std::span<const uint8_t> bytes, uint64_t window, DecodedProgram& out);

// OVERLAP (3.2) if an op's output overlaps an input whose other elements
// it reads (matmul, reductions, a permuting copy), or an input that is not
// the output itself (same descriptor) for the ops that read each output
// element's own inputs only (elementwise, activations, softmax along a
// line, a plain copy). Needs the operands' final addresses: a task's
// program is checked after its relocation.
ProgramFault CheckOverlaps(const DecodedProgram& program);

}  // namespace spyre::mockdev
