/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel ids and tile sizes shared by the seed 004 examples' orchestration
 * functions (C, as the seed writes them) and the program that registers the
 * kernels and runs them (pto_examples.cpp). */
#ifndef SPYRE_EXAMPLES_PTO_KERNELS_H
#define SPYRE_EXAMPLES_PTO_KERNELS_H

#include <spyre/pto.h>

enum {
    KERNEL_ADD = 1,      /* C[256] = A + B, fp32 */
    KERNEL_MUL = 2,      /* C[256] = A * B, fp32 */
    KERNEL_GEMM = 3,     /* C_tile = A_tile * B_tile (tiles inside row-major A[M,K], B[K,N]) */
    KERNEL_GEMM_ACC = 4, /* C_tile += A_tile * B_tile */
    KERNEL_COPY = 5,     /* C[i.., j..] (row stride N) = C_tile */
};

#define PIPELINE_ELEMENTS 256 /* 1024 bytes of fp32, as in the seed */
#define TILE_M 64
#define TILE_K 64
#define TILE_N 64

#ifdef __cplusplus
extern "C" {
#endif
/* Example 1: a sequential pipeline with implicit outputs. args: A, B, C
 * (fp32[256] each), then the address where the result's pointer is stored. */
void simple_orch(Runtime* rt, uint64_t* args);
/* Example 2: a tiled matmul, a scope and an explicit tile per output tile.
 * args: A, B, C, M, K, N (multiples of the tile sizes). */
void matmul_orch(Runtime* rt, uint64_t* args);
#ifdef __cplusplus
}
#endif

#endif
