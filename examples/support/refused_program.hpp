// SPDX-License-Identifier: Apache-2.0
// A device program the device refuses when a task runs it, for examples and
// tests of device faults. Registration decodes a program (a bad image is
// refused there), so a fault needs a well-formed one the card will not run.
#pragma once

#include <cstdint>
#include <vector>

#include "spyre/plan/program_image.hpp"

namespace spyre {

// A well-formed program of `slots` argument slots whose one op the device
// does not know: registration takes it, and the device fails every task of
// it with SPYRE_ERR_UNKNOWN_OP.
inline std::vector<uint8_t> RefusedProgram(uint16_t slots) {
    ProgramImage program;
    spyre_program_op op{};
    op.opcode = 0x77;  // no SPYRE_PROG_OP_*
    for (uint16_t& o : op.operands) o = SPYRE_OPERAND_NONE;
    program.ops.push_back(op);
    program.slot_count = slots;
    return program.Encode();
}

}  // namespace spyre
