// SPDX-License-Identifier: Apache-2.0
//
// Programs on the device: LAUNCH runs a resident program binary, CORRECT
// patches one (program correction, seed 001 Example 2). Both read device
// memory through the function's window only, and both work on a private
// copy of the program, so a driver writing to it meanwhile changes nothing.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
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

    // A task (spyre_task.h) on the calling core: loads the program at `addr`
    // (decoded once per distinct program bytes, see cache_), gives a private
    // copy of its decode the argument table's entries as the relocated
    // operands' addresses (the program in memory is never written), checks
    // those operands as LAUNCH checks any and runs its ops with their chunks
    // inline. No card turn: tasks share the card core by core. One executor
    // per core: its buffers are that core's private state.
    CbOutcome RunTask(uint64_t addr, uint64_t size, uint64_t args_addr, uint64_t arg_count, const Budget& budget);

    // Programs this executor has decoded in full (checksum and every table),
    // rather than found in its cache (for tests).
    uint64_t decodes() const { return decodes_; }
    // Distinct programs whose decodes the executor keeps.
    static constexpr size_t kCachedPrograms = 8;

private:
    // Kernel faults (watchdog, abort) name the program in ERR_ADDR.
    CbOutcome RunOp(const DecodedProgram& program, const spyre_program_op& op, uint64_t program_addr,
                    const Budget& budget, bool one_core = false);
    // Writes the u64 table at `input_addr` (entry_count entries, which must
    // be the slot_count of `loaded`, the decode of `bytes`) into the
    // relocated operands of `bytes`, re-seals and decodes it into `relocated`:
    // the new addresses are validated as any program's are.
    CbOutcome Relocate(uint64_t program_addr, uint64_t input_addr, uint64_t entry_count, std::vector<uint8_t>& bytes,
                       const DecodedProgram& loaded, DecodedProgram& relocated) const;
    // A task's relocation, on the decode: `relocated` is `loaded` with the
    // table's entries as its relocated operands' addresses, those operands
    // checked in index order. The same outcome as Relocate's (the bytes
    // re-sealed and decoded again) without a checksum and a decode per task:
    // an operand's address is all a relocation changes, and only the
    // operand's own checks (alignment, the window) read it.
    CbOutcome RelocateDecoded(uint64_t program_addr, uint64_t input_addr, uint64_t entry_count,
                              const DecodedProgram& loaded, DecodedProgram& relocated);
    // Maps every operand of `program` (validated) to its bytes.
    CbOutcome MapOperands(const DecodedProgram& program);
    // Copies the program at `addr` out of device memory into `bytes` and
    // decodes it, or takes the cached decode of the same bytes. `program`
    // points at the cache's decode: valid until the next Load, or, within a
    // launch, until the launch ends (superseded_).
    CbOutcome Load(uint64_t addr, uint64_t size, std::vector<uint8_t>& bytes, const DecodedProgram*& program);

    DeviceMemory memory_;
    CardCores& compute_;
    // Reused between CBs (the function's server thread is their only user).
    std::vector<uint8_t> bytes_;
    DecodedProgram task_program_;
    std::vector<uint8_t*> operand_data_;
    std::vector<uint8_t> target_bytes_;
    DecodedProgram target_;
    std::vector<uint8_t> relocated_;  // RelocateDecoded's marks, by operand
    // The last kCachedPrograms distinct programs that decoded, byte for byte
    // as they were read. Decoding is a function of the bytes alone (and of
    // the window, fixed for the executor), so a launch of the same bytes
    // again, the usual case, takes this decode instead of a CRC and a check
    // of every table: a 64-byte program's CRC alone cost about 170 ns, as
    // much as a NOP round trip. Several, not one: a core's tasks alternate
    // between a DAG's kernels (Example 2's GEMM, GEMM_ACC and COPY), and
    // with one entry every switch cost a CRC and a decode of the 560-byte
    // program, as much as a fifth of a 64^3 tile's GEMM.
    // A LAUNCH runs the cached decode itself, without a copy and without a
    // reference count (two locked instructions a launch): a CORRECT op of
    // the running program may load another program into the cache, and the
    // decode it replaces waits in superseded_ until the launch ends.
    struct CachedProgram {
        std::vector<uint8_t> bytes;
        std::unique_ptr<const DecodedProgram> decoded;
        uint64_t used = 0;  // use_clock_ at its last use: the least recent goes first
    };
    std::array<CachedProgram, kCachedPrograms> cache_;
    uint64_t use_clock_ = 0;
    uint64_t decodes_ = 0;
    bool launching_ = false;
    std::vector<std::unique_ptr<const DecodedProgram>> superseded_;
};

}  // namespace spyre::mockdev
