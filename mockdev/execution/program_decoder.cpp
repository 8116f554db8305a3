// SPDX-License-Identifier: Apache-2.0
#include "execution/program_decoder.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace spyre::mockdev {

namespace {

constexpr uint32_t kHeaderSize = sizeof(spyre_program_header);

ProgramFault Fault(uint16_t code, const char* what, uint64_t addr = 0) { return ProgramFault{code, addr, what}; }

bool Zero(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::all_of(b, b + n, [](uint8_t v) { return v == 0; });
}

bool MulOverflows(uint64_t a, uint64_t b, uint64_t& out) { return __builtin_mul_overflow(a, b, &out); }
bool AddOverflows(uint64_t a, uint64_t b, uint64_t& out) { return __builtin_add_overflow(a, b, &out); }

bool IsFloat(uint8_t dtype) { return dtype == SPYRE_DTYPE_FP16 || dtype == SPYRE_DTYPE_FP32; }

// Operands an op takes, in order; -1 for an opcode the device does not know.
int Arity(uint16_t opcode) {
    switch (opcode) {
    case SPYRE_PROG_OP_MATMUL:
    case SPYRE_PROG_OP_ADD:
    case SPYRE_PROG_OP_SUB:
    case SPYRE_PROG_OP_MUL:
    case SPYRE_PROG_OP_DIV: return 3;
    case SPYRE_PROG_OP_RELU:
    case SPYRE_PROG_OP_GELU:
    case SPYRE_PROG_OP_SOFTMAX:
    case SPYRE_PROG_OP_REDUCE_SUM:
    case SPYRE_PROG_OP_REDUCE_MAX:
    case SPYRE_PROG_OP_COPY: return 2;
    case SPYRE_PROG_OP_FILL: return 1;
    case SPYRE_PROG_OP_CORRECT: return 0;
    default: return -1;
    }
}

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
    if (d.reserved0 != 0 || d.reserved1 != 0) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "reserved operand field");
    out.element_size = spyre_dtype_size(d.dtype);
    if (out.element_size == 0) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "unknown dtype");
    if (d.layout != SPYRE_LAYOUT_STRIDED && d.layout != SPYRE_LAYOUT_STICK)
        return Fault(SPYRE_ERR_PROGRAM_FORMAT, "unknown layout");
    if (d.rank == 0 || d.rank > SPYRE_PROGRAM_MAX_RANK) return Fault(SPYRE_ERR_SHAPE, "rank out of 1..8");
    const unsigned rank = d.rank;
    if (!Zero(d.shape + rank, (SPYRE_PROGRAM_MAX_RANK - rank) * sizeof(uint64_t)) ||
        !Zero(d.strides + rank, (SPYRE_PROGRAM_MAX_RANK - rank) * sizeof(uint64_t)))
        return Fault(SPYRE_ERR_PROGRAM_FORMAT, "shape or stride past the rank");

    uint64_t elements = 1;
    uint64_t last = 0;  // element offset of the last element
    for (unsigned i = 0; i < rank; ++i) {
        uint64_t step;
        if (d.shape[i] == 0) return Fault(SPYRE_ERR_SHAPE, "zero dimension");
        if (MulOverflows(elements, d.shape[i], elements) || MulOverflows(d.shape[i] - 1, d.strides[i], step) ||
            AddOverflows(last, step, last))
            return Fault(SPYRE_ERR_SHAPE, "shape overflows");
    }
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

bool SameShape(const spyre_program_operand& a, const spyre_program_operand& b) {
    return a.rank == b.rank && std::equal(a.shape, a.shape + a.rank, b.shape);
}

// Bytes of the op's parameter area from `from` on must be zero.
bool ParamsZeroFrom(const spyre_program_op& op, size_t from) {
    return Zero(reinterpret_cast<const uint8_t*>(&op.u) + from, sizeof op.u - from);
}

ProgramFault CheckMatmul(const Operand& a, const Operand& b, const Operand& c) {
    if (a.desc.rank != 2 || b.desc.rank != 2 || c.desc.rank != 2) return Fault(SPYRE_ERR_SHAPE, "matmul operands are not 2-d");
    const uint64_t* A = a.desc.shape;
    const uint64_t* B = b.desc.shape;
    const uint64_t* C = c.desc.shape;
    if (A[1] != B[0] || A[0] != C[0] || B[1] != C[1]) return Fault(SPYRE_ERR_SHAPE, "matmul shapes do not chain");
    return {};
}

ProgramFault CheckBroadcast(const Operand& a, const Operand& b, const Operand& c) {
    if (a.desc.rank != c.desc.rank || b.desc.rank != c.desc.rank) return Fault(SPYRE_ERR_SHAPE, "elementwise ranks differ");
    for (unsigned i = 0; i < c.desc.rank; ++i) {
        const uint64_t n = c.desc.shape[i];
        if ((a.desc.shape[i] != n && a.desc.shape[i] != 1) || (b.desc.shape[i] != n && b.desc.shape[i] != 1))
            return Fault(SPYRE_ERR_SHAPE, "elementwise shapes do not broadcast");
    }
    return {};
}

ProgramFault CheckReduce(const spyre_program_op& op, const Operand& x, const Operand& y) {
    const uint32_t axis = op.u.axis.axis;
    if (axis >= x.desc.rank) return Fault(SPYRE_ERR_SHAPE, "axis out of range");
    if (y.desc.rank != x.desc.rank) return Fault(SPYRE_ERR_SHAPE, "reduce ranks differ");
    for (unsigned i = 0; i < x.desc.rank; ++i)
        if (y.desc.shape[i] != (i == axis ? 1 : x.desc.shape[i])) return Fault(SPYRE_ERR_SHAPE, "reduce output shape");
    return {};
}

ProgramFault CheckCopy(const spyre_program_op& op, const Operand& x, const Operand& y) {
    const unsigned rank = x.desc.rank;
    const uint8_t* perm = op.u.copy.perm;
    bool seen[SPYRE_PROGRAM_MAX_RANK] = {};
    for (unsigned i = 0; i < rank; ++i) {
        if (perm[i] >= rank || seen[perm[i]]) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "copy perm is not a permutation");
        seen[perm[i]] = true;
    }
    if (!Zero(perm + rank, SPYRE_PROGRAM_MAX_RANK - rank)) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "copy perm past the rank");
    if (y.desc.rank != rank) return Fault(SPYRE_ERR_SHAPE, "copy ranks differ");
    for (unsigned i = 0; i < rank; ++i)
        if (y.desc.shape[i] != x.desc.shape[perm[i]]) return Fault(SPYRE_ERR_SHAPE, "copy output is not the permuted shape");
    return {};
}

ProgramFault CheckFill(const spyre_program_op& op, const Operand& y) {
    const unsigned bits = y.element_size * 8;
    if (bits < 64 && (op.u.fill.value >> bits) != 0) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "fill value wider than the dtype");
    return {};
}

ProgramFault CheckCorrect(const spyre_program_op& op, uint64_t window) {
    const auto& c = op.u.correct;
    if (c.reserved != 0) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "reserved correct field");
    if (c.target_addr % SPYRE_PROGRAM_ALIGN != 0) return Fault(SPYRE_ERR_MISALIGNED, "correction target", c.target_addr);
    if (c.input_addr % sizeof(uint64_t) != 0) return Fault(SPYRE_ERR_MISALIGNED, "correction input table", c.input_addr);
    if (c.target_addr > window || window - c.target_addr < kHeaderSize)
        return Fault(SPYRE_ERR_ADDR_RANGE, "correction target outside the function's memory", c.target_addr);
    if (c.input_addr > window || (window - c.input_addr) / sizeof(uint64_t) < c.entry_count)
        return Fault(SPYRE_ERR_ADDR_RANGE, "correction input outside the function's memory", c.input_addr);
    return {};
}

// Operand kinds and shapes as the op needs them.
ProgramFault CheckOpSemantics(const spyre_program_op& op, const Operand* o[], uint64_t window) {
    const uint16_t code = op.opcode;
    const bool params_ok = [&] {
        switch (code) {
        case SPYRE_PROG_OP_SOFTMAX:
        case SPYRE_PROG_OP_REDUCE_SUM:
        case SPYRE_PROG_OP_REDUCE_MAX: return ParamsZeroFrom(op, offsetof(decltype(op.u), axis.reserved));
        case SPYRE_PROG_OP_COPY: return ParamsZeroFrom(op, sizeof op.u.copy);
        case SPYRE_PROG_OP_FILL: return ParamsZeroFrom(op, sizeof op.u.fill);
        case SPYRE_PROG_OP_CORRECT: return ParamsZeroFrom(op, sizeof op.u.correct);
        default: return ParamsZeroFrom(op, 0);
        }
    }();
    if (!params_ok) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "unused op parameter is not zero");
    if (op.flags & ~(code == SPYRE_PROG_OP_MATMUL ? SPYRE_PROG_OPF_ACCUMULATE : 0u))
        return Fault(SPYRE_ERR_PROGRAM_FORMAT, "op flag not valid for the op");

    const int arity = Arity(code);
    if (arity >= 2) {
        const uint8_t dtype = o[arity - 1]->desc.dtype;
        for (int i = 0; i < arity; ++i)
            if (o[i]->desc.dtype != dtype) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "operand dtypes differ");
        if (code != SPYRE_PROG_OP_COPY && !IsFloat(dtype))
            return Fault(SPYRE_ERR_PROGRAM_FORMAT, "op needs fp16 or fp32 operands");
    }
    switch (code) {
    case SPYRE_PROG_OP_MATMUL: return CheckMatmul(*o[0], *o[1], *o[2]);
    case SPYRE_PROG_OP_ADD:
    case SPYRE_PROG_OP_SUB:
    case SPYRE_PROG_OP_MUL:
    case SPYRE_PROG_OP_DIV: return CheckBroadcast(*o[0], *o[1], *o[2]);
    case SPYRE_PROG_OP_RELU:
    case SPYRE_PROG_OP_GELU:
        return SameShape(o[0]->desc, o[1]->desc) ? ProgramFault{} : Fault(SPYRE_ERR_SHAPE, "output shape differs");
    case SPYRE_PROG_OP_SOFTMAX:
        if (op.u.axis.axis >= o[0]->desc.rank) return Fault(SPYRE_ERR_SHAPE, "axis out of range");
        return SameShape(o[0]->desc, o[1]->desc) ? ProgramFault{} : Fault(SPYRE_ERR_SHAPE, "output shape differs");
    case SPYRE_PROG_OP_REDUCE_SUM:
    case SPYRE_PROG_OP_REDUCE_MAX: return CheckReduce(op, *o[0], *o[1]);
    case SPYRE_PROG_OP_COPY: return CheckCopy(op, *o[0], *o[1]);
    case SPYRE_PROG_OP_FILL: return CheckFill(op, *o[0]);
    case SPYRE_PROG_OP_CORRECT: return CheckCorrect(op, window);
    default: return Fault(SPYRE_ERR_UNKNOWN_OP, "unknown op");
    }
}

ProgramFault CheckOp(const spyre_program_op& op, const std::vector<Operand>& operands, uint64_t window) {
    const int arity = Arity(op.opcode);
    if (arity < 0) return Fault(SPYRE_ERR_UNKNOWN_OP, "unknown op");
    if (op.reserved0 != 0) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "reserved op field");
    const Operand* o[4] = {};
    for (int i = 0; i < 4; ++i) {
        const uint16_t index = op.operands[i];
        if (i >= arity) {
            if (index != SPYRE_OPERAND_NONE) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "operand slot beyond the op's arity");
        } else if (index >= operands.size()) {
            return Fault(SPYRE_ERR_PROGRAM_FORMAT, "operand index out of range");
        } else {
            o[i] = &operands[index];
        }
    }
    return CheckOpSemantics(op, o, window);
}

ProgramFault CheckRelocations(const DecodedProgram& p) {
    std::vector<bool> relocated(p.operands.size());
    for (const spyre_program_reloc& r : p.relocs) {
        if (r.reserved != 0) return Fault(SPYRE_ERR_PROGRAM_FORMAT, "reserved relocation field");
        if (r.operand >= p.operands.size()) return Fault(SPYRE_ERR_RELOCATION, "relocation names no operand");
        if (r.slot >= p.header.slot_count) return Fault(SPYRE_ERR_RELOCATION, "relocation slot beyond slot_count");
        if (relocated[r.operand]) return Fault(SPYRE_ERR_RELOCATION, "operand relocated twice");
        relocated[r.operand] = true;
    }
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

    out.operands.resize(h.operand_count);
    for (size_t i = 0; i < h.operand_count; ++i) {
        spyre_program_operand desc;
        std::memcpy(&desc, bytes.data() + h.operands_offset + i * sizeof desc, sizeof desc);
        if (ProgramFault f = CheckOperand(desc, window, out.operands[i])) return f;
    }

    ReadTable(bytes, h.ops_offset, h.op_count, out.ops);
    for (const spyre_program_op& op : out.ops)
        if (ProgramFault f = CheckOp(op, out.operands, window)) return f;

    ReadTable(bytes, h.relocs_offset, h.reloc_count, out.relocs);
    return CheckRelocations(out);
}

}  // namespace spyre::mockdev
