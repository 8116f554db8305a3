/* SPDX-License-Identifier: Apache-2.0 */
/* The kernel builder from C (spyre/compiler/kernel_builder.hpp in C++):
 * device programs by kind and shape, as program images (the binary format
 * of spyre/uapi/spyre_program.h) that pto_register_program (spyre/pto.h)
 * registers for a runtime's tasks: a task's parameters, in order, are the
 * program's operands (inputs, then outputs).
 *
 *   spyre_kernel_spec add = {.kind = SPYRE_KERNEL_ADD, .dtype = SPYRE_DTYPE_FP32, .rank = 1, .shape = {256}};
 *   uint8_t image[4096];
 *   int64_t n = spyre_build_kernel(&add, image, sizeof image);
 *   if (n < 0 || pto_register_program(rt, KERNEL_ADD, image, (uint64_t)n) < 0) ... pto_last_error() ...
 *
 * Errors are a negative errno and this thread's last error
 * (pto_last_error, pto_last_error_info). */
#ifndef SPYRE_COMPILER_KERNEL_BUILDER_H
#define SPYRE_COMPILER_KERNEL_BUILDER_H

#include <stdint.h>

#include "spyre/uapi/spyre_program.h" /* SPYRE_DTYPE_* */
#include "spyre/export.h"

SPYRE_API_BEGIN

#ifdef __cplusplus
extern "C" {
#endif

enum {
    SPYRE_KERNEL_MATMUL = 1,        /* C[M,N] = A[M,K] * B[K,N]; shape = {M, K, N}, rank 3 */
    SPYRE_KERNEL_MATMUL_ACCUMULATE, /* C += A * B (C is read too: submit it INOUT) */
    SPYRE_KERNEL_ADD,               /* C = A op B, all of `shape` */
    SPYRE_KERNEL_SUB,
    SPYRE_KERNEL_MUL,
    SPYRE_KERNEL_DIV,
    SPYRE_KERNEL_RELU,              /* Y = max(X, 0) */
    SPYRE_KERNEL_GELU,
    SPYRE_KERNEL_COPY,              /* Y = X */
    SPYRE_KERNEL_FILL,              /* Y = value */
};

#define SPYRE_KERNEL_MAX_OPERANDS 4

typedef struct spyre_kernel_spec {
    int32_t kind;   /* SPYRE_KERNEL_* */
    int32_t dtype;  /* SPYRE_DTYPE_*: FP32 or FP16 for arithmetic */
    int32_t rank;   /* of shape: 1 to 4 (3 for a matmul) */
    int64_t shape[4];
    /* Per operand (inputs, then outputs), for a 2-D operand that is a tile
     * of a bigger row-major matrix: the elements from one of its rows to
     * the next (the matrix's width). 0: its own width (dense). */
    int64_t row_stride[SPYRE_KERNEL_MAX_OPERANDS];
    double value;   /* SPYRE_KERNEL_FILL */
} spyre_kernel_spec;

/* Builds `spec`'s program image into image[0, capacity) and returns its
 * size in bytes; with a smaller capacity (0 included) nothing is written
 * and the size is returned all the same. A negative errno for a bad spec. */
int64_t spyre_build_kernel(const spyre_kernel_spec* spec, void* image, uint64_t capacity);

#ifdef __cplusplus
}
#endif

SPYRE_API_END

#endif /* SPYRE_COMPILER_KERNEL_BUILDER_H */
