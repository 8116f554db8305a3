// SPDX-License-Identifier: Apache-2.0
// What a device program does with each argument slot of its task: the
// operand a relocation points at the slot, how many bytes that operand
// spans, and whether an op writes it. The runtime checks a task's
// parameters against these at submit (docs/orchestration.md, "Device
// programs"): the device only checks that an operand lies in the
// function's memory, so a region smaller than the operand, or a written
// operand passed as INPUT, would silently touch other buffers or run
// without the dependency the write needs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "spyre/plan/program_image.hpp"
#include "spyre/pto.h"

namespace spyre::orchestration {

struct SlotUse {
    uint16_t slot = 0;
    uint16_t operand = 0;
    uint64_t bytes = 0;  // spyre_operand_extent; 0 if the descriptor has none (the device refuses it)
    uint64_t align = 1;  // spyre_operand_align: the parameter's device address must be a multiple
    bool written = false;
    uint8_t dtype = 0;  // the operand's SPYRE_DTYPE_*
    std::string shape;  // "fp32 [128, 128]", for messages
};

// "INPUT", "OUTPUT", "INOUT" for a PARAM_* kind; "?" for anything else.
const char* ParamKindName(int32_t kind);

// A program's argument slots as a task must fill them.
struct ProgramSlots {
    int32_t count = -1;         // the image's slot_count: a task passes exactly this many; -1 unknown
    std::vector<SlotUse> uses;  // one per relocation of the image
};

ProgramSlots SlotsOf(const ProgramImage& image);

// `image` decoded (ProgramImage::Decode, as pto_register_program and
// LoadExecutionPlan do) and checked as the device would check it when a
// task runs it (every operand a slot becomes spans bytes): its slots.
// InvalidArgument "<what> is not a program image: ..." or "<what>:
// operand ..." otherwise, so a bad program is refused when it is
// registered, not by every task of it.
ProgramSlots CheckedSlots(std::span<const uint8_t> image, const std::string& what);

// The same for the program image at the start of `memory` (bytes of the
// function's memory from the program's address on): its header's size
// must fit in `memory`.
ProgramSlots SlotsAt(std::span<const uint8_t> memory, const std::string& what);

// "operand 2 (fp32 [4, 8]) spans no bytes the device can address: ...":
// why a use with no extent (bytes 0) can never run.
std::string NoExtent(const SlotUse& u);

// What is wrong with a task of kernel `kernel_id` whose parameter i has a
// region of sizes[i] bytes at device address addresses[i] (0 for an
// implicit output: its heap block is aligned for any operand) and kind
// kinds[i] (PARAM_*): another number of parameters than the program's
// slots (the device refuses it with RELOCATION), an operand with no extent
// (SHAPE), a region smaller than an operand or at an address the operand
// cannot start at (MISALIGNED), or a written operand passed as INPUT. Empty
// when nothing is.
std::string SlotUseError(int32_t kernel_id, const ProgramSlots& slots, std::span<const uint64_t> sizes,
                         std::span<const uint64_t> addresses, std::span<const int32_t> kinds);

}  // namespace spyre::orchestration
