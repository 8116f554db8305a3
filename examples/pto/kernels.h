/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel ids and tile sizes shared by the seed 004 examples' orchestration
 * functions (C, as the seed writes them), and the C calls that build and
 * register their kernels on a runtime (example_kernels.c). */
#ifndef SPYRE_EXAMPLES_PTO_KERNELS_H
#define SPYRE_EXAMPLES_PTO_KERNELS_H

#include <spyre/pto.h>

#define PIPELINE_ELEMENTS 256 /* 1024 bytes of fp32, as in the seed */
/* Example 2's tile, the seed's: 128^3. At 64^3 a tile GEMM does an eighth
 * of the work for more than a quarter of the time (OpenBLAS packs and
 * calls per tile), and eight times the tasks each pay the runtime and the
 * task queue: 512^3 in 64^3 tiles cost 5.6 ms of one core in the GEMMs
 * alone, against 4.5 ms in 128^3 tiles and 3.6 ms whole
 * (docs/orchestration.md). */
#ifndef EXAMPLE2_TILE /* a build may set another, to compare */
#define EXAMPLE2_TILE 128
#endif
#define TILE_M EXAMPLE2_TILE
#define TILE_K EXAMPLE2_TILE
#define TILE_N EXAMPLE2_TILE

/* A tile at the bottom, far or right edge of a matrix whose M, K or N is not
 * a multiple of the tile is smaller: its kernels are kernels of their own,
 * one per combination of these bits. */
#define TILE_EDGE_M 1
#define TILE_EDGE_K 2
#define TILE_EDGE_N 4

enum {
    KERNEL_ADD = 1,       /* C[256] = A + B, fp32 */
    KERNEL_MUL = 2,       /* C[256] = A * B, fp32 */
    KERNEL_GEMM = 16,     /* + edges: C_tile = A_tile * B_tile (tiles inside row-major A[M,K], B[K,N]) */
    KERNEL_GEMM_ACC = 24, /* + edges: C_tile += A_tile * B_tile */
    KERNEL_COPY = 32,     /* + edges (M and N only): C[i.., j..] (row stride N) = C_tile */
};

#ifdef __cplusplus
extern "C" {
#endif
/* Example 1: a sequential pipeline with implicit outputs. args: A, B, C
 * (fp32[256] each), then the address where the result's pointer is stored. */
void simple_orch(Runtime* rt, uint64_t* args);
/* Example 2: a tiled matmul, a scope and an explicit tile per output tile.
 * args: A, B, C, M, K, N (any sizes >= 1). */
void matmul_orch(Runtime* rt, uint64_t* args);

/* Builds Example 1's kernels (ADD, MUL over 256 floats) and registers them
 * on `rt`; 0 or the failed call's negative errno (pto_last_error says why). */
int32_t register_pipeline_kernels(Runtime* rt);
/* Builds Example 2's tile kernels for an M x K x N matmul (every kind of
 * edge tile those sizes have) and registers them on `rt`. */
int32_t register_matmul_kernels(Runtime* rt, int64_t M, int64_t K, int64_t N);
#ifdef __cplusplus
}
#endif

#endif
