// SPDX-License-Identifier: Apache-2.0
// One program per class of malformation, each derived from a valid relu
// program, with the fault the device must report. The decoder unit test and
// the device fault test both walk this list.
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/uapi/spyre_errors.h"

namespace spyre::test {

struct Malformed {
    std::string name;
    std::vector<uint8_t> program;
    uint16_t code;
    // ERR_ADDR the device reports: the bad address for ADDR_RANGE and
    // MISALIGNED; else 0, meaning the program's own address.
    uint64_t bad_addr = 0;
};

// The valid program: relu fp32 [4, 40] from `base` to `base + 1024`.
inline std::vector<uint8_t> ValidRelu(uint64_t base) {
    const uint64_t addrs[] = {base, base + 1024};
    return KernelBuilder().Relu({4, 40}, DType::FP32).Bind(addrs);
}

// Every class of malformed program for a function with memory [0, window);
// `base` is where ValidRelu's tensors sit.
inline std::vector<Malformed> MalformedPrograms(uint64_t base, uint64_t window) {
    std::vector<Malformed> out;
    const std::vector<uint8_t> valid = ValidRelu(base);

    // Framing faults: edit the bytes, keep (or break) the checksum on purpose.
    auto header = [&](const std::string& name, uint16_t code, const std::function<void(spyre_program_header&)>& edit,
                      bool reseal) {
        std::vector<uint8_t> p = valid;
        spyre_program_header h;
        std::memcpy(&h, p.data(), sizeof h);
        edit(h);
        std::memcpy(p.data(), &h, sizeof h);
        if (reseal) {
            h.checksum = uapi::ProgramChecksum(p.data(), p.size());
            std::memcpy(p.data(), &h, sizeof h);
        }
        out.push_back({name, p, code});
    };
    header("bad magic", SPYRE_ERR_PROGRAM_MAGIC, [](auto& h) { h.magic ^= 1; }, true);
    header("version 2", SPYRE_ERR_PROGRAM_VERSION, [](auto& h) { h.version = 2; }, true);
    header("header_size 32", SPYRE_ERR_PROGRAM_FORMAT, [](auto& h) { h.header_size = 32; }, true);
    header("total_size past the program", SPYRE_ERR_PROGRAM_FORMAT, [](auto& h) { h.total_size += 8; }, true);
    header("reserved header flags", SPYRE_ERR_PROGRAM_FORMAT, [](auto& h) { h.flags = 1; }, true);
    header("op table past the end", SPYRE_ERR_PROGRAM_FORMAT, [](auto& h) { h.ops_offset = h.total_size - 8; }, true);
    header("misaligned operand table", SPYRE_ERR_PROGRAM_FORMAT, [](auto& h) { h.operands_offset += 4; }, true);
    header("tables overlap", SPYRE_ERR_PROGRAM_FORMAT, [](auto& h) { h.operands_offset = h.ops_offset; }, true);
    header("stale checksum", SPYRE_ERR_PROGRAM_CHECKSUM, [](auto& h) { h.slot_count = 3; }, false);
    {
        std::vector<uint8_t> p = valid;
        p.resize(p.size() - 8);
        out.push_back({"truncated", p, SPYRE_ERR_PROGRAM_FORMAT});
        out.push_back({"shorter than a header", std::vector<uint8_t>(valid.begin(), valid.begin() + 40),
                       SPYRE_ERR_PROGRAM_FORMAT});
    }

    // Content faults: edit the tables and re-seal, so only the content is wrong.
    auto edit = [&](const std::string& name, uint16_t code, const std::function<void(ProgramImage&)>& f,
                    uint64_t bad_addr = 0) {
        ProgramImage image = ProgramImage::Decode(valid);
        f(image);
        out.push_back({name, image.Encode(), code, bad_addr});
    };
    auto& x = edit;  // shorter lines below
    x("unknown op", SPYRE_ERR_UNKNOWN_OP, [](auto& p) { p.ops[0].opcode = 0x77; });
    x("reserved op field", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) { p.ops[0].reserved0 = 1; });
    x("flag the op does not take", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) { p.ops[0].flags = SPYRE_PROG_OPF_ACCUMULATE; });
    x("unused op parameter", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) { p.ops[0].u.raw[3] = 1; });
    x("operand beyond the op's arity", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) { p.ops[0].operands[2] = 0; });
    x("operand index out of range", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) { p.ops[0].operands[1] = 9; });
    x("unknown dtype", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) { p.operands[0].dtype = 9; });
    x("dtypes differ", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) { p.operands[1].dtype = SPYRE_DTYPE_FP16; });
    x("integer relu", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) {
        p.operands[0].dtype = p.operands[1].dtype = SPYRE_DTYPE_INT32;
    });
    x("unknown layout", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) { p.operands[0].layout = 7; });
    x("reserved operand field", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) { p.operands[1].reserved1 = 1; });
    x("rank 0", SPYRE_ERR_SHAPE, [](auto& p) { p.operands[0].rank = 0; });
    x("rank 9", SPYRE_ERR_SHAPE, [](auto& p) { p.operands[0].rank = 9; });
    x("dim past the rank", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) { p.operands[0].shape[5] = 1; });
    x("zero dim", SPYRE_ERR_SHAPE, [](auto& p) { p.operands[0].shape[1] = 0; });
    x("element count overflows", SPYRE_ERR_SHAPE, [](auto& p) {
        for (auto& o : p.operands) {
            o.shape[0] = o.shape[1] = 1ull << 33;
            o.strides[0] = 0;
            o.strides[1] = 0;
        }
    });
    x("extent overflows", SPYRE_ERR_SHAPE, [](auto& p) { p.operands[0].strides[0] = 1ull << 62; });
    x("output shape differs", SPYRE_ERR_SHAPE, [](auto& p) { p.operands[1].shape[1] = 41; });
    x("softmax axis out of range", SPYRE_ERR_SHAPE, [](auto& p) {
        p.ops[0].opcode = SPYRE_PROG_OP_SOFTMAX;
        p.ops[0].u.axis.axis = 2;
    });
    x("operand past the window", SPYRE_ERR_ADDR_RANGE, [&](auto& p) { p.operands[0].addr = window - 64; }, window - 64);
    x("operand at 2^63", SPYRE_ERR_ADDR_RANGE, [](auto& p) { p.operands[1].addr = 1ull << 63; }, 1ull << 63);
    x("fp32 operand not 4-aligned", SPYRE_ERR_MISALIGNED, [&](auto& p) { p.operands[0].addr = base + 2; }, base + 2);
    x("stick operand not 128-aligned", SPYRE_ERR_MISALIGNED, [&](auto& p) {
        p.operands[0].layout = SPYRE_LAYOUT_STICK;
        p.operands[0].strides[0] = 64;
        p.operands[0].addr = base + 64;
    }, base + 64);
    x("stick rows not whole sticks", SPYRE_ERR_MISALIGNED, [&](auto& p) {
        p.operands[0].layout = SPYRE_LAYOUT_STICK;  // rows of 40 fp32 are 160 bytes
    }, base);
    x("relocation names no operand", SPYRE_ERR_RELOCATION, [](auto& p) { p.relocs[0].operand = 5; });
    x("relocation slot beyond slot_count", SPYRE_ERR_RELOCATION, [](auto& p) { p.relocs[0].slot = 2; });
    x("operand relocated twice", SPYRE_ERR_RELOCATION, [](auto& p) { p.relocs[1].operand = 0; });
    x("reserved relocation field", SPYRE_ERR_PROGRAM_FORMAT, [](auto& p) { p.relocs[0].reserved = 1; });
    return out;
}

}  // namespace spyre::test
