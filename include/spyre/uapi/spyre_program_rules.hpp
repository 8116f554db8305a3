// SPDX-License-Identifier: Apache-2.0
// The rules of a program's records (uapi/spyre_program.h) that do not depend
// on where its operands are: the card checks them at every task and faults
// with the code given; the host checks them when it registers a program, so
// that an image the card would refuse at every task is refused once, when
// it is registered. One definition for both, in the order the card checks:
// each operand, then each op, then the relocations (an operand's address,
// its alignment and its window are the card's to check, between).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "spyre/uapi/spyre_errors.h"
#include "spyre/uapi/spyre_program.h"

namespace spyre::uapi {

// What is wrong with a record: a SPYRE_ERR_* code (0: nothing) and why.
struct ProgramProblem {
    uint16_t code = 0;
    const char* what = nullptr;
    explicit operator bool() const noexcept { return code != 0; }
};

namespace program_rules {

inline bool AllZero(const void* p, size_t n) noexcept {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::all_of(b, b + n, [](uint8_t v) { return v == 0; });
}
inline bool IsFloat(uint8_t dtype) noexcept { return dtype == SPYRE_DTYPE_FP16 || dtype == SPYRE_DTYPE_FP32; }
inline bool SameShape(const spyre_program_operand& a, const spyre_program_operand& b) noexcept {
    return a.rank == b.rank && std::equal(a.shape, a.shape + a.rank, b.shape);
}
// Bytes of the op's parameter area from `from` on are zero.
inline bool ParamsZeroFrom(const spyre_program_op& op, size_t from) noexcept {
    return AllZero(reinterpret_cast<const uint8_t*>(&op.u) + from, sizeof op.u - from);
}

inline ProgramProblem Matmul(const spyre_program_operand& a, const spyre_program_operand& b,
                             const spyre_program_operand& c) noexcept {
    if (a.rank != 2 || b.rank != 2 || c.rank != 2) return {SPYRE_ERR_SHAPE, "matmul operands are not 2-d"};
    if (a.shape[1] != b.shape[0] || a.shape[0] != c.shape[0] || b.shape[1] != c.shape[1])
        return {SPYRE_ERR_SHAPE, "matmul shapes do not chain"};
    return {};
}

inline ProgramProblem Broadcast(const spyre_program_operand& a, const spyre_program_operand& b,
                                const spyre_program_operand& c) noexcept {
    if (a.rank != c.rank || b.rank != c.rank) return {SPYRE_ERR_SHAPE, "elementwise ranks differ"};
    for (unsigned i = 0; i < c.rank; ++i) {
        const uint64_t n = c.shape[i];
        if ((a.shape[i] != n && a.shape[i] != 1) || (b.shape[i] != n && b.shape[i] != 1))
            return {SPYRE_ERR_SHAPE, "elementwise shapes do not broadcast"};
    }
    return {};
}

inline ProgramProblem Reduce(const spyre_program_op& op, const spyre_program_operand& x,
                             const spyre_program_operand& y) noexcept {
    const uint32_t axis = op.u.axis.axis;
    if (axis >= x.rank) return {SPYRE_ERR_SHAPE, "axis out of range"};
    if (y.rank != x.rank) return {SPYRE_ERR_SHAPE, "reduce ranks differ"};
    for (unsigned i = 0; i < x.rank; ++i)
        if (y.shape[i] != (i == axis ? 1 : x.shape[i])) return {SPYRE_ERR_SHAPE, "reduce output shape"};
    return {};
}

inline ProgramProblem Copy(const spyre_program_op& op, const spyre_program_operand& x,
                           const spyre_program_operand& y) noexcept {
    const unsigned rank = x.rank;
    const uint8_t* perm = op.u.copy.perm;
    bool seen[SPYRE_PROGRAM_MAX_RANK] = {};
    for (unsigned i = 0; i < rank; ++i) {
        if (perm[i] >= rank || seen[perm[i]]) return {SPYRE_ERR_PROGRAM_FORMAT, "copy perm is not a permutation"};
        seen[perm[i]] = true;
    }
    if (!AllZero(perm + rank, SPYRE_PROGRAM_MAX_RANK - rank)) return {SPYRE_ERR_PROGRAM_FORMAT, "copy perm past the rank"};
    if (y.rank != rank) return {SPYRE_ERR_SHAPE, "copy ranks differ"};
    for (unsigned i = 0; i < rank; ++i)
        if (y.shape[i] != x.shape[perm[i]]) return {SPYRE_ERR_SHAPE, "copy output is not the permuted shape"};
    return {};
}

inline ProgramProblem Fill(const spyre_program_op& op, const spyre_program_operand& y) noexcept {
    const unsigned bits = unsigned(spyre_dtype_size(y.dtype)) * 8;
    if (bits < 64 && (op.u.fill.value >> bits) != 0) return {SPYRE_ERR_PROGRAM_FORMAT, "fill value wider than the dtype"};
    return {};
}

}  // namespace program_rules

// Operands an op takes, in order; -1 for an opcode the device does not know.
inline int ProgramOpArity(uint16_t opcode) noexcept {
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

// An operand descriptor's fields: reserved zero, a known dtype and layout, a
// rank of 1..8 with nothing past it, no zero dimension, a shape whose
// elements and last offset fit 64 bits. (Its address, alignment and extent
// in the window come next, on the card.)
inline ProgramProblem OperandFieldsProblem(const spyre_program_operand& d) noexcept {
    using program_rules::AllZero;
    if (d.reserved0 != 0 || d.reserved1 != 0) return {SPYRE_ERR_PROGRAM_FORMAT, "reserved operand field"};
    if (spyre_dtype_size(d.dtype) == 0) return {SPYRE_ERR_PROGRAM_FORMAT, "unknown dtype"};
    if (d.layout != SPYRE_LAYOUT_STRIDED && d.layout != SPYRE_LAYOUT_STICK)
        return {SPYRE_ERR_PROGRAM_FORMAT, "unknown layout"};
    if (d.rank == 0 || d.rank > SPYRE_PROGRAM_MAX_RANK) return {SPYRE_ERR_SHAPE, "rank out of 1..8"};
    const unsigned rank = d.rank;
    if (!AllZero(d.shape + rank, (SPYRE_PROGRAM_MAX_RANK - rank) * sizeof(uint64_t)) ||
        !AllZero(d.strides + rank, (SPYRE_PROGRAM_MAX_RANK - rank) * sizeof(uint64_t)))
        return {SPYRE_ERR_PROGRAM_FORMAT, "shape or stride past the rank"};
    uint64_t elements = 1, last = 0;  // last: the element offset of the last element
    for (unsigned i = 0; i < rank; ++i) {
        uint64_t step;
        if (d.shape[i] == 0) return {SPYRE_ERR_SHAPE, "zero dimension"};
        if (__builtin_mul_overflow(elements, d.shape[i], &elements) ||
            __builtin_mul_overflow(d.shape[i] - 1, d.strides[i], &step) || __builtin_add_overflow(last, step, &last))
            return {SPYRE_ERR_SHAPE, "shape overflows"};
    }
    return {};
}

// An op's fields and its operands' kinds and shapes: a known opcode,
// reserved zero, operand slots up to its arity naming operands and the rest
// SPYRE_OPERAND_NONE, unused parameters zero, valid flags, one dtype across
// its operands (fp16 or fp32 but for COPY), and the shapes its kind needs.
// For CORRECT only its reserved field: its addresses are the card's to check.
inline ProgramProblem OpProblem(const spyre_program_op& op, std::span<const spyre_program_operand> operands) noexcept {
    namespace r = program_rules;
    const uint16_t code = op.opcode;
    const int arity = ProgramOpArity(code);
    if (arity < 0) return {SPYRE_ERR_UNKNOWN_OP, "unknown op"};
    if (op.reserved0 != 0) return {SPYRE_ERR_PROGRAM_FORMAT, "reserved op field"};
    const spyre_program_operand* o[4] = {};
    for (int i = 0; i < 4; ++i) {
        const uint16_t index = op.operands[i];
        if (i >= arity) {
            if (index != SPYRE_OPERAND_NONE) return {SPYRE_ERR_PROGRAM_FORMAT, "operand slot beyond the op's arity"};
        } else if (index >= operands.size()) {
            return {SPYRE_ERR_PROGRAM_FORMAT, "operand index out of range"};
        } else {
            o[i] = &operands[index];
        }
    }
    const bool params_ok = [&] {
        switch (code) {
        case SPYRE_PROG_OP_SOFTMAX:
        case SPYRE_PROG_OP_REDUCE_SUM:
        case SPYRE_PROG_OP_REDUCE_MAX: return r::ParamsZeroFrom(op, offsetof(decltype(op.u), axis.reserved));
        case SPYRE_PROG_OP_COPY: return r::ParamsZeroFrom(op, sizeof op.u.copy);
        case SPYRE_PROG_OP_FILL: return r::ParamsZeroFrom(op, sizeof op.u.fill);
        case SPYRE_PROG_OP_CORRECT: return r::ParamsZeroFrom(op, sizeof op.u.correct);
        default: return r::ParamsZeroFrom(op, 0);
        }
    }();
    if (!params_ok) return {SPYRE_ERR_PROGRAM_FORMAT, "unused op parameter is not zero"};
    if (op.flags & ~(code == SPYRE_PROG_OP_MATMUL ? SPYRE_PROG_OPF_ACCUMULATE : 0u))
        return {SPYRE_ERR_PROGRAM_FORMAT, "op flag not valid for the op"};
    if (arity >= 2) {
        const uint8_t dtype = o[arity - 1]->dtype;
        for (int i = 0; i < arity; ++i)
            if (o[i]->dtype != dtype) return {SPYRE_ERR_PROGRAM_FORMAT, "operand dtypes differ"};
        if (code != SPYRE_PROG_OP_COPY && !r::IsFloat(dtype))
            return {SPYRE_ERR_PROGRAM_FORMAT, "op needs fp16 or fp32 operands"};
    }
    switch (code) {
    case SPYRE_PROG_OP_MATMUL: return r::Matmul(*o[0], *o[1], *o[2]);
    case SPYRE_PROG_OP_ADD:
    case SPYRE_PROG_OP_SUB:
    case SPYRE_PROG_OP_MUL:
    case SPYRE_PROG_OP_DIV: return r::Broadcast(*o[0], *o[1], *o[2]);
    case SPYRE_PROG_OP_RELU:
    case SPYRE_PROG_OP_GELU:
        return r::SameShape(*o[0], *o[1]) ? ProgramProblem{} : ProgramProblem{SPYRE_ERR_SHAPE, "output shape differs"};
    case SPYRE_PROG_OP_SOFTMAX:
        if (op.u.axis.axis >= o[0]->rank) return {SPYRE_ERR_SHAPE, "axis out of range"};
        return r::SameShape(*o[0], *o[1]) ? ProgramProblem{} : ProgramProblem{SPYRE_ERR_SHAPE, "output shape differs"};
    case SPYRE_PROG_OP_REDUCE_SUM:
    case SPYRE_PROG_OP_REDUCE_MAX: return r::Reduce(op, *o[0], *o[1]);
    case SPYRE_PROG_OP_COPY: return r::Copy(op, *o[0], *o[1]);
    case SPYRE_PROG_OP_FILL: return r::Fill(op, *o[0]);
    case SPYRE_PROG_OP_CORRECT:
        return op.u.correct.reserved != 0 ? ProgramProblem{SPYRE_ERR_PROGRAM_FORMAT, "reserved correct field"}
                                          : ProgramProblem{};
    default: return {SPYRE_ERR_UNKNOWN_OP, "unknown op"};
    }
}

// The relocations: reserved zero, each naming an operand (at most once) and
// an input-table slot below `slot_count`.
inline ProgramProblem RelocationsProblem(std::span<const spyre_program_reloc> relocs, size_t operand_count,
                                         uint16_t slot_count) {
    std::vector<bool> relocated(operand_count);
    for (const spyre_program_reloc& r : relocs) {
        if (r.reserved != 0) return {SPYRE_ERR_PROGRAM_FORMAT, "reserved relocation field"};
        if (r.operand >= operand_count) return {SPYRE_ERR_RELOCATION, "relocation names no operand"};
        if (r.slot >= slot_count) return {SPYRE_ERR_RELOCATION, "relocation slot beyond slot_count"};
        if (relocated[r.operand]) return {SPYRE_ERR_RELOCATION, "operand relocated twice"};
        relocated[r.operand] = true;
    }
    return {};
}

}  // namespace spyre::uapi
