/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spyre hardware contract: program binaries.
 *
 * A program is what a LAUNCH CB runs: a header, a table of ops, a table of
 * operand descriptors (tensors in device memory) and a relocation table (the
 * operand addresses that program correction patches). All tables are arrays
 * of fixed-size little-endian records at 8-byte aligned offsets inside the
 * program. The device validates every field before it executes anything.
 *
 * Addresses are function-relative: offsets into the submitting function's
 * memory window [0, MEM_SIZE).
 */
#ifndef SPYRE_UAPI_SPYRE_PROGRAM_H
#define SPYRE_UAPI_SPYRE_PROGRAM_H

#include <stdint.h>
#include "spyre_pci.h"

#define SPYRE_PROGRAM_MAGIC         0x47525053u /* "SPRG" little-endian */
#define SPYRE_PROGRAM_VERSION       1u
#define SPYRE_PROGRAM_ALIGN         8u          /* programs and their tables are 8-byte aligned */
#define SPYRE_PROGRAM_MAX_SIZE      (1u << 20)  /* bytes; bounds what the device copies per launch */
#define SPYRE_PROGRAM_MAX_RANK      8u
#define SPYRE_STICK_BYTES           128u        /* device layout unit (seed 002) */
#define SPYRE_OPERAND_NONE          0xFFFFu     /* unused operand slot of an op */

/* Element types (spyre_program_operand.dtype). */
#define SPYRE_DTYPE_FP16            1u /* IEEE 754 binary16 */
#define SPYRE_DTYPE_BF16            2u /* bfloat16 */
#define SPYRE_DTYPE_FP32            3u /* IEEE 754 binary32 */
#define SPYRE_DTYPE_INT8            4u
#define SPYRE_DTYPE_INT32           5u

/* Bytes per element, 0 for an unknown dtype. */
static inline uint32_t spyre_dtype_size(uint32_t dtype) {
    switch (dtype) {
    case SPYRE_DTYPE_FP16: case SPYRE_DTYPE_BF16: return 2;
    case SPYRE_DTYPE_FP32: case SPYRE_DTYPE_INT32: return 4;
    case SPYRE_DTYPE_INT8: return 1;
    default: return 0;
    }
}

/* Operand layouts (spyre_program_operand.layout). */
#define SPYRE_LAYOUT_STRIDED        1u /* any strides (in elements), element-aligned address */
#define SPYRE_LAYOUT_STICK          2u /* 128-byte sticks: address 128-aligned, innermost stride 1,
                                          every other stride a whole number of sticks */

/* Program ops (spyre_program_op.opcode) and their operands, in order. */
#define SPYRE_PROG_OP_MATMUL        0x01u /* A[M,K], B[K,N], C[M,N]: C = A*B (C += A*B with ACCUMULATE) */
#define SPYRE_PROG_OP_ADD           0x10u /* A, B, C: C = A + B, A and B broadcast to C */
#define SPYRE_PROG_OP_SUB           0x11u /* C = A - B */
#define SPYRE_PROG_OP_MUL           0x12u /* C = A * B */
#define SPYRE_PROG_OP_DIV           0x13u /* C = A / B */
#define SPYRE_PROG_OP_RELU          0x20u /* X, Y: Y = max(X, 0) */
#define SPYRE_PROG_OP_GELU          0x21u /* X, Y: Y = X/2 * (1 + erf(X/sqrt 2)) */
#define SPYRE_PROG_OP_SOFTMAX       0x30u /* X, Y: softmax along u.axis */
#define SPYRE_PROG_OP_REDUCE_SUM    0x31u /* X, Y: Y = sum along u.axis (Y keeps the dim, size 1) */
#define SPYRE_PROG_OP_REDUCE_MAX    0x32u /* X, Y: Y = max along u.axis */
#define SPYRE_PROG_OP_COPY          0x40u /* X, Y: Y[i] = X[perm(i)]; identity perm = copy */
#define SPYRE_PROG_OP_FILL          0x41u /* Y: every element = u.fill.value */
#define SPYRE_PROG_OP_CORRECT       0x50u /* no operands: program correction (u.correct) */

/* Op flags (spyre_program_op.flags). */
#define SPYRE_PROG_OPF_ACCUMULATE   (1u << 0) /* MATMUL only: C += A*B, so K can be tiled */

struct spyre_program_header {
    uint32_t magic;           /* 0x00 SPYRE_PROGRAM_MAGIC */
    uint16_t version;         /* 0x04 SPYRE_PROGRAM_VERSION */
    uint16_t header_size;     /* 0x06 sizeof(struct spyre_program_header) */
    uint32_t total_size;      /* 0x08 bytes of the whole program, header included */
    uint32_t checksum;        /* 0x0C CRC-32 (zlib's crc32) of all total_size bytes, this field read as 0 */
    uint32_t flags;           /* 0x10 reserved, must be 0 */
    uint16_t op_count;        /* 0x14 0 is valid: an empty program */
    uint16_t operand_count;   /* 0x16 */
    uint16_t reloc_count;     /* 0x18 */
    uint16_t slot_count;      /* 0x1A u64 entries of the correction input table */
    uint32_t ops_offset;      /* 0x1C op_count x spyre_program_op */
    uint32_t operands_offset; /* 0x20 operand_count x spyre_program_operand */
    uint32_t relocs_offset;   /* 0x24 reloc_count x spyre_program_reloc */
    uint64_t reserved[3];     /* 0x28 must be 0 */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_program_header) == 64, "program header is 64 bytes");

/* A tensor in device memory. Element (i0..i{rank-1}) sits at
 * addr + sum(ik * strides[k]) * dtype size. */
struct spyre_program_operand {
    uint64_t addr;            /* 0x00 device address (function-relative) */
    uint8_t  dtype;           /* 0x08 SPYRE_DTYPE_* */
    uint8_t  rank;            /* 0x09 1..SPYRE_PROGRAM_MAX_RANK */
    uint8_t  layout;          /* 0x0A SPYRE_LAYOUT_* */
    uint8_t  reserved0;       /* 0x0B must be 0 */
    uint32_t reserved1;       /* 0x0C must be 0 */
    uint64_t shape[SPYRE_PROGRAM_MAX_RANK];   /* 0x10 every dim >= 1; dims past rank 0 */
    uint64_t strides[SPYRE_PROGRAM_MAX_RANK]; /* 0x50 in elements; past rank 0 */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_program_operand) == 144, "operand descriptor is 144 bytes");

/* Whether an operand's strides keep a SPYRE_LAYOUT_STICK operand's rows in
 * whole sticks: innermost stride 1, every outer stride a whole number of
 * sticks. The device faults such an operand MISALIGNED otherwise; the host
 * applies the same rule before it enqueues. 1 for other layouts and for an
 * unknown dtype or a rank outside 1..SPYRE_PROGRAM_MAX_RANK (other checks
 * refuse those). */
static inline int spyre_stick_strides_ok(const struct spyre_program_operand* d) {
    const uint64_t element = spyre_dtype_size(d->dtype);
    unsigned i;
    if (d->layout != SPYRE_LAYOUT_STICK || element == 0 || d->rank == 0 || d->rank > SPYRE_PROGRAM_MAX_RANK) return 1;
    if (d->strides[d->rank - 1] != 1) return 0;
    for (i = 0; i + 1 < d->rank; ++i)
        if (d->strides[i] % (SPYRE_STICK_BYTES / element) != 0) return 0;
    return 1;
}

/* The alignment an operand's address needs: a stick for SPYRE_LAYOUT_STICK
 * (rows start on a stick), one element otherwise. The device faults an
 * operand MISALIGNED otherwise; the host checks a task's parameters, which
 * become the operands' addresses, against it before it submits. 0 for an
 * unknown dtype (other checks refuse it). */
static inline uint64_t spyre_operand_align(const struct spyre_program_operand* d) {
    return d->layout == SPYRE_LAYOUT_STICK ? SPYRE_STICK_BYTES : spyre_dtype_size(d->dtype);
}

/* Bytes an operand spans from its address: to past its last element, and
 * for SPYRE_LAYOUT_STICK to the end of the stick its rows' last element is
 * in (rows fill whole sticks). 0 when the descriptor has no extent: an
 * unknown dtype or layout, a rank outside 1..SPYRE_PROGRAM_MAX_RANK, a zero
 * dimension, a stick operand whose innermost stride is not 1, or a span
 * past 2^64 bytes. The device's own checks of a descriptor come first
 * (alignment, reserved fields); this is the extent they stand on. */
static inline uint64_t spyre_operand_extent(const struct spyre_program_operand* d) {
    const uint64_t element = spyre_dtype_size(d->dtype);
    uint64_t last = 0, step = 0, end = 0, bytes = 0;
    unsigned i;
    if (element == 0 || d->rank == 0 || d->rank > SPYRE_PROGRAM_MAX_RANK) return 0;
    if (d->layout != SPYRE_LAYOUT_STRIDED && d->layout != SPYRE_LAYOUT_STICK) return 0;
    for (i = 0; i < d->rank; ++i) {
        if (d->shape[i] == 0) return 0;
        if (__builtin_mul_overflow(d->shape[i] - 1, d->strides[i], &step) || __builtin_add_overflow(last, step, &last))
            return 0;
    }
    end = last + 1;
    if (end == 0) return 0;
    if (d->layout == SPYRE_LAYOUT_STICK) {
        const uint64_t per_stick = SPYRE_STICK_BYTES / element;
        const uint64_t row = d->shape[d->rank - 1];
        if (d->strides[d->rank - 1] != 1) return 0;
        /* last >= row - 1 with an innermost stride of 1 */
        end = last - (row - 1) + (row + per_stick - 1) / per_stick * per_stick;
        if (end < last) return 0;
    }
    if (__builtin_mul_overflow(end, element, &bytes)) return 0;
    return bytes;
}

struct spyre_program_op {
    uint16_t opcode;          /* 0x00 SPYRE_PROG_OP_* */
    uint16_t flags;           /* 0x02 SPYRE_PROG_OPF_* */
    uint32_t reserved0;       /* 0x04 must be 0 */
    uint16_t operands[4];     /* 0x08 operand indices in the op's order; unused: SPYRE_OPERAND_NONE */
    union {                   /* 0x10 parameters; bytes an op does not use must be 0 */
        uint64_t raw[6];
        struct {
            uint32_t axis;    /* SOFTMAX, REDUCE_*: dimension of X */
            uint32_t reserved;
        } axis;
        struct {
            uint8_t perm[SPYRE_PROGRAM_MAX_RANK]; /* COPY: Y dim i is X dim perm[i]; past rank 0 */
        } copy;
        struct {
            uint64_t value;   /* FILL: the element's bits in Y's dtype, in the low bytes */
        } fill;
        struct {
            uint64_t target_addr; /* CORRECT: program whose relocations are patched */
            uint64_t input_addr;  /* the u64 address table (8-byte aligned) */
            uint32_t entry_count; /* table entries: the target's slot_count */
            uint32_t reserved;
        } correct;
    } u;
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_program_op) == 64, "op record is 64 bytes");

/* Program correction writes input-table entry `slot` into operand `operand`'s addr. */
struct spyre_program_reloc {
    uint16_t operand;         /* 0x00 operand index; each operand is relocated at most once */
    uint16_t slot;            /* 0x02 entry of the input table, < slot_count */
    uint32_t reserved;        /* 0x04 must be 0 */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_program_reloc) == 8, "relocation entry is 8 bytes");

#ifdef __cplusplus
#include <array>
#include <cstddef>
#include <cstring>

static_assert(offsetof(spyre_program_header, magic) == 0x00, "");
static_assert(offsetof(spyre_program_header, version) == 0x04, "");
static_assert(offsetof(spyre_program_header, header_size) == 0x06, "");
static_assert(offsetof(spyre_program_header, total_size) == 0x08, "");
static_assert(offsetof(spyre_program_header, checksum) == 0x0C, "");
static_assert(offsetof(spyre_program_header, flags) == 0x10, "");
static_assert(offsetof(spyre_program_header, op_count) == 0x14, "");
static_assert(offsetof(spyre_program_header, operand_count) == 0x16, "");
static_assert(offsetof(spyre_program_header, reloc_count) == 0x18, "");
static_assert(offsetof(spyre_program_header, slot_count) == 0x1A, "");
static_assert(offsetof(spyre_program_header, ops_offset) == 0x1C, "");
static_assert(offsetof(spyre_program_header, operands_offset) == 0x20, "");
static_assert(offsetof(spyre_program_header, relocs_offset) == 0x24, "");
static_assert(offsetof(spyre_program_header, reserved) == 0x28, "");
static_assert(offsetof(spyre_program_operand, addr) == 0x00, "");
static_assert(offsetof(spyre_program_operand, dtype) == 0x08, "");
static_assert(offsetof(spyre_program_operand, rank) == 0x09, "");
static_assert(offsetof(spyre_program_operand, layout) == 0x0A, "");
static_assert(offsetof(spyre_program_operand, shape) == 0x10, "");
static_assert(offsetof(spyre_program_operand, strides) == 0x50, "");
static_assert(offsetof(spyre_program_op, opcode) == 0x00, "");
static_assert(offsetof(spyre_program_op, flags) == 0x02, "");
static_assert(offsetof(spyre_program_op, operands) == 0x08, "");
static_assert(offsetof(spyre_program_op, u) == 0x10, "");
static_assert(offsetof(spyre_program_op, u.correct.input_addr) == 0x18, "");
static_assert(offsetof(spyre_program_op, u.correct.entry_count) == 0x20, "");
static_assert(offsetof(spyre_program_reloc, slot) == 0x02, "");

namespace spyre::uapi {

inline constexpr std::array<uint32_t, 256> kCrc32Table = [] {
    std::array<uint32_t, 256> table{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        table[i] = c;
    }
    return table;
}();

// CRC-32 (IEEE 802.3, reflected; the same value as zlib's crc32), continued from `crc`.
inline uint32_t Crc32(uint32_t crc, const uint8_t* data, size_t len) noexcept {
    crc = ~crc;
    for (size_t i = 0; i < len; ++i) crc = kCrc32Table[(crc ^ data[i]) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

// The checksum a program of `size` bytes must carry: CRC-32 of the whole
// program with the checksum field read as zero (so it covers the header too).
inline uint32_t ProgramChecksum(const uint8_t* program, size_t size) noexcept {
    constexpr size_t at = offsetof(spyre_program_header, checksum);
    if (size < sizeof(spyre_program_header)) return Crc32(0, program, size);
    const uint8_t zero[4] = {0, 0, 0, 0};
    uint32_t crc = Crc32(0, program, at);
    crc = Crc32(crc, zero, sizeof zero);
    return Crc32(crc, program + at + 4, size - at - 4);
}

// What is wrong with a program header's reserved fields and table layout
// (nullptr when nothing), as the card checks it after the checksum: flags
// and reserved zero; each table inside the program past the header and
// 8-byte aligned, an empty one at offset 0; no two tables overlapping.
inline const char* ProgramLayoutProblem(const spyre_program_header& h) noexcept {
    if (h.flags != 0 || h.reserved[0] != 0 || h.reserved[1] != 0 || h.reserved[2] != 0) return "reserved header field";
    struct Table {
        uint64_t offset, len;
    };
    auto fits = [&](uint32_t offset, uint32_t count, size_t record) {
        if (count == 0) return offset == 0;
        return offset >= sizeof(spyre_program_header) && offset % SPYRE_PROGRAM_ALIGN == 0 &&
               uint64_t(offset) + uint64_t(count) * record <= h.total_size;
    };
    if (!fits(h.ops_offset, h.op_count, sizeof(spyre_program_op)) ||
        !fits(h.operands_offset, h.operand_count, sizeof(spyre_program_operand)) ||
        !fits(h.relocs_offset, h.reloc_count, sizeof(spyre_program_reloc)))
        return "table outside the program or misaligned";
    const Table t[3] = {{h.ops_offset, uint64_t(h.op_count) * sizeof(spyre_program_op)},
                        {h.operands_offset, uint64_t(h.operand_count) * sizeof(spyre_program_operand)},
                        {h.relocs_offset, uint64_t(h.reloc_count) * sizeof(spyre_program_reloc)}};
    auto disjoint = [](Table a, Table b) {
        return a.len == 0 || b.len == 0 || a.offset + a.len <= b.offset || b.offset + b.len <= a.offset;
    };
    if (!disjoint(t[0], t[1]) || !disjoint(t[0], t[2]) || !disjoint(t[1], t[2])) return "tables overlap";
    return nullptr;
}

}  // namespace spyre::uapi
#endif

#endif /* SPYRE_UAPI_SPYRE_PROGRAM_H */
