// SPDX-License-Identifier: Apache-2.0
// Small device programs the tests run as orchestration tasks.
#pragma once

#include <cstdint>
#include <vector>

#include "spyre/device/device.hpp"
#include "spyre/memory/device_buffer.hpp"
#include "spyre/plan/program_image.hpp"

namespace spyre::test {

// C = A op B over 256 floats (op: SPYRE_PROG_OP_ADD, _MUL, ...), operands
// A, B, C relocated from argument slots 0, 1, 2: one uploaded copy serves
// any number of tasks.
inline std::vector<uint8_t> ElementwiseProgram256(uint16_t opcode) {
    ProgramImage program;
    spyre_program_op op{};
    op.opcode = opcode;
    for (uint16_t i = 0; i < 4; ++i) op.operands[i] = i < 3 ? i : SPYRE_OPERAND_NONE;
    program.ops.push_back(op);
    for (uint16_t i = 0; i < 3; ++i) {
        spyre_program_operand o{};
        o.dtype = SPYRE_DTYPE_FP32;
        o.rank = 1;
        o.layout = SPYRE_LAYOUT_STRIDED;
        o.shape[0] = 256;
        o.strides[0] = 1;
        program.operands.push_back(o);
        program.relocs.push_back(spyre_program_reloc{i, i, 0});
    }
    program.slot_count = 3;
    return program.Encode();
}

inline std::vector<uint8_t> AddProgram256() { return ElementwiseProgram256(SPYRE_PROG_OP_ADD); }

// `program` copied into a fresh buffer of `dev` (through its default
// stream, waited for); the buffer's device address is what
// RegisterDeviceKernel takes.
inline DeviceBuffer UploadProgram(Device& dev, const std::vector<uint8_t>& program) {
    DeviceBuffer buffer = dev.AllocateBuffer(program.size());
    dev.default_stream().CopyToDevice(program.data(), buffer.handle(), program.size());
    dev.default_stream().Synchronize();
    return buffer;
}

}  // namespace spyre::test
