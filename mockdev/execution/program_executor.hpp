// SPDX-License-Identifier: Apache-2.0
//
// Programs on the device: LAUNCH runs a resident program binary, CORRECT
// patches one (program correction, seed 001 Example 2). Both read device
// memory through the function's window only, and both work on a private
// copy of the program, so a driver writing to it meanwhile changes nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "execution/budget.hpp"
#include "execution/cb_outcome.hpp"
#include "execution/card_cores.hpp"
#include "execution/device_memory.hpp"
#include "execution/program_decoder.hpp"

namespace spyre::mockdev {

class ProgramExecutor {
public:
    ProgramExecutor(DeviceMemory memory, CardCores& compute) : memory_(memory), compute_(compute) {}

    // Validates the program of `size` bytes at `addr`, takes the card and
    // runs the ops in order. Result: the number of ops run.
    CbOutcome Launch(uint64_t addr, uint64_t size, const Budget& budget);

    // Writes entry `slot` of the u64 table at `input_addr` into the address
    // of every operand the target program relocates from that slot, then
    // re-checksums it. The target must be a valid program before and after;
    // if not, it is left untouched. Result: the relocations patched.
    CbOutcome Correct(uint64_t target_addr, uint64_t input_addr, uint64_t entry_count);

private:
    // Kernel faults (watchdog, abort) name the program in ERR_ADDR.
    CbOutcome RunOp(const spyre_program_op& op, uint64_t program_addr, const Budget& budget);
    // Copies the program at `addr` out of device memory and decodes it.
    CbOutcome Load(uint64_t addr, uint64_t size, std::vector<uint8_t>& bytes, DecodedProgram& program) const;

    DeviceMemory memory_;
    CardCores& compute_;
    // Reused between CBs (the function's engine thread is their only user).
    std::vector<uint8_t> bytes_;
    DecodedProgram program_;
    std::vector<uint8_t*> operand_data_;
    std::vector<uint8_t> target_bytes_;
    DecodedProgram target_;
};

}  // namespace spyre::mockdev
