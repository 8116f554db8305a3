// SPDX-License-Identifier: Apache-2.0
#include "execution/program_decoder.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "spyre/uapi/spyre_program_rules.hpp"

namespace spyre::mockdev {

namespace {

constexpr uint32_t kHeaderSize = sizeof(spyre_program_header);

ProgramFault Fault(uint16_t code, const char* what, uint64_t addr = 0) { return ProgramFault{code, addr, what}; }

ProgramFault Fault(const uapi::ProgramProblem& p) { return ProgramFault{p.code, 0, p.what}; }

ProgramFault CheckHeader(std::span<const uint8_t> bytes, const spyre_program_header& h) {
    if (h.magic != SPYRE_PROGRAM_MAGIC) return Fault(SPYRE_ERR_PROGRAM_MAGIC, "bad magic");
    if (h.version != SPYRE_PROGRAM_VERSION) return Fault(SPYRE_ERR_PROGRAM_VERSION, "unsupported version");
    if (h.header_size != kHeaderSize) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "header_size");
    if (h.total_size != bytes.size()) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "total_size is not the program size");
    if (h.checksum != uapi::ProgramChecksum(bytes.data(), bytes.size()))
        return Fault(SPYRE_ERR_PROGRAM_CHECKSUM, "checksum mismatch");
    if (const char* problem = uapi::ProgramLayoutProblem(h)) return Fault(SPYRE_ERR_PROGRAM_FORMAT, problem);
    return {};
}

}  // namespace

ProgramFault CheckOperand(const spyre_program_operand& d, uint64_t window, Operand& out) {
    out.desc = d;
    if (const uapi::ProgramProblem p = uapi::OperandFieldsProblem(d)) return Fault(p);
    out.element_size = spyre_dtype_size(d.dtype);
    uint64_t elements = 1;  // fits: OperandFieldsProblem checked it
    for (unsigned i = 0; i < d.rank; ++i) elements *= d.shape[i];
    // Rows of a stick operand (the innermost dim) start on a stick and fill whole sticks.
    if (d.addr % spyre_operand_align(&d) != 0)
        return Fault(SPYRE_ERR_MISALIGNED,
                     d.layout == SPYRE_LAYOUT_STICK ? "stick operand not 128-aligned" : "operand not element-aligned", d.addr);
    if (!spyre_stick_strides_ok(&d))
        return Fault(SPYRE_ERR_MISALIGNED, "stick operand rows do not fill whole sticks (innermost stride 1)", d.addr);
    // The contract's extent (uapi/spyre_program.h), which the host's checks use too.
    out.extent = spyre_operand_extent(&d);
    if (out.extent == 0) return Fault(SPYRE_ERR_SHAPE, "extent overflows");
    out.elements = elements;
    if (d.addr > window || out.extent > window - d.addr)
        return Fault(SPYRE_ERR_ADDR_RANGE, "operand outside the function's memory", d.addr);
    return {};
}

namespace {

// CORRECT's addresses: its target and input table in the window.
ProgramFault CheckCorrect(const spyre_program_op& op, uint64_t window) {
    const auto& c = op.u.correct;
    if (c.target_addr % SPYRE_PROGRAM_ALIGN != 0) return Fault(SPYRE_ERR_MISALIGNED, "correction target", c.target_addr);
    if (c.input_addr % sizeof(uint64_t) != 0) return Fault(SPYRE_ERR_MISALIGNED, "correction input table", c.input_addr);
    if (c.target_addr > window || window - c.target_addr < kHeaderSize)
        return Fault(SPYRE_ERR_ADDR_RANGE, "correction target outside the function's memory", c.target_addr);
    if (c.input_addr > window || (window - c.input_addr) / sizeof(uint64_t) < c.entry_count)
        return Fault(SPYRE_ERR_ADDR_RANGE, "correction input outside the function's memory", c.input_addr);
    return {};
}

ProgramFault CheckOp(const spyre_program_op& op, std::span<const spyre_program_operand> descs, uint64_t window) {
    if (const uapi::ProgramProblem p = uapi::OpProblem(op, descs)) return Fault(p);
    return op.opcode == SPYRE_PROG_OP_CORRECT ? CheckCorrect(op, window) : ProgramFault{};
}

ProgramFault CheckRelocations(const DecodedProgram& p) {
    if (const uapi::ProgramProblem problem = uapi::RelocationsProblem(p.relocs, p.operands.size(), p.header.slot_count))
        return Fault(problem);
    return {};
}

template <typename Record>
void ReadTable(std::span<const uint8_t> bytes, uint32_t offset, uint32_t count, std::vector<Record>& out) {
    out.resize(count);
    if (count) std::memcpy(out.data(), bytes.data() + offset, size_t(count) * sizeof(Record));
}

}  // namespace

ProgramFault CheckOverlaps(const DecodedProgram& program) {
    auto overlap = [](const Operand& a, const Operand& b) {
        return a.desc.addr < b.desc.addr + b.extent && b.desc.addr < a.desc.addr + a.extent;
    };
    auto same = [](const Operand& a, const Operand& b) { return std::memcmp(&a.desc, &b.desc, sizeof a.desc) == 0; };
    for (const spyre_program_op& op : program.ops) {
        int inputs = 1, output = 1;
        bool element_local = true;  // output element i reads input element i only
        switch (op.opcode) {
        case SPYRE_PROG_OP_MATMUL: inputs = 2, output = 2, element_local = false; break;
        case SPYRE_PROG_OP_ADD:
        case SPYRE_PROG_OP_SUB:
        case SPYRE_PROG_OP_MUL:
        case SPYRE_PROG_OP_DIV: inputs = 2, output = 2; break;
        case SPYRE_PROG_OP_RELU:
        case SPYRE_PROG_OP_GELU:
        case SPYRE_PROG_OP_SOFTMAX: break;  // a line is read whole before it is written
        case SPYRE_PROG_OP_REDUCE_SUM:
        case SPYRE_PROG_OP_REDUCE_MAX: element_local = false; break;
        case SPYRE_PROG_OP_COPY:  // a plain copy only: a transpose reads elsewhere
            for (uint8_t i = 0; i < program.operands[op.operands[1]].desc.rank; ++i)
                element_local = element_local && op.u.copy.perm[i] == i;
            break;
        default: continue;  // FILL writes only; CORRECT has no operands
        }
        const Operand& out = program.operands[op.operands[output]];
        for (int i = 0; i < inputs; ++i) {
            const Operand& in = program.operands[op.operands[i]];
            if (overlap(in, out) && !(element_local && same(in, out)))
                return Fault(SPYRE_ERR_OVERLAP, element_local ? "an input overlaps the output without being it"
                                                              : "the output overlaps an input the op reads whole");
        }
    }
    return {};
}

ProgramFault DecodeProgram(std::span<const uint8_t> bytes, uint64_t window, DecodedProgram& out) {
    if (bytes.size() < kHeaderSize) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "shorter than the header");
    std::memcpy(&out.header, bytes.data(), kHeaderSize);
    if (ProgramFault f = CheckHeader(bytes, out.header)) return f;
    const spyre_program_header& h = out.header;

    std::vector<spyre_program_operand> descs;
    ReadTable(bytes, h.operands_offset, h.operand_count, descs);
    out.operands.resize(h.operand_count);
    for (size_t i = 0; i < h.operand_count; ++i)
        if (ProgramFault f = CheckOperand(descs[i], window, out.operands[i])) return f;

    ReadTable(bytes, h.ops_offset, h.op_count, out.ops);
    for (const spyre_program_op& op : out.ops)
        if (ProgramFault f = CheckOp(op, descs, window)) return f;

    ReadTable(bytes, h.relocs_offset, h.reloc_count, out.relocs);
    return CheckRelocations(out);
}

}  // namespace spyre::mockdev
