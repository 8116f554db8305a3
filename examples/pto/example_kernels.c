/* SPDX-License-Identifier: Apache-2.0 */
/* The seed 004 examples' kernels, built with the kernel builder's C API and
 * registered with pto_register_program: what a C program needs besides the
 * orchestration functions. */
#include <stdlib.h>

#include <spyre/compiler/kernel_builder.h>

#include "kernels.h"

/* Builds `spec` and registers it as `kernel_id`. */
static int32_t build_and_register(Runtime* rt, int32_t kernel_id, const spyre_kernel_spec* spec) {
    int64_t size = spyre_build_kernel(spec, NULL, 0);
    if (size < 0) return (int32_t)size;
    void* image = malloc((size_t)size);
    if (!image) return -12; /* ENOMEM */
    int64_t built = spyre_build_kernel(spec, image, (uint64_t)size);
    int32_t r = built < 0 ? (int32_t)built : pto_register_program(rt, kernel_id, image, (uint64_t)size);
    free(image);
    return r;
}

int32_t register_pipeline_kernels(Runtime* rt) {
    spyre_kernel_spec spec = {.kind = SPYRE_KERNEL_ADD, .dtype = SPYRE_DTYPE_FP32, .rank = 1, .shape = {PIPELINE_ELEMENTS}};
    int32_t r = build_and_register(rt, KERNEL_ADD, &spec);
    if (r < 0) return r;
    spec.kind = SPYRE_KERNEL_MUL;
    return build_and_register(rt, KERNEL_MUL, &spec);
}

/* A tile's extent along a dimension of `size` for the edge bit `edge` set or not. */
static int64_t extent(int64_t size, int64_t tile, int edge) { return edge ? size % tile : tile; }

/* Whether an M x K x N matmul has tiles with these edge bits: an edge tile
 * where a size is not a multiple of the tile, a full one where it holds
 * at least one tile. */
static int has_tiles(int64_t M, int64_t K, int64_t N, int edges) {
    return ((edges & TILE_EDGE_M) ? M % TILE_M != 0 : M >= TILE_M) &&
           ((edges & TILE_EDGE_K) ? K % TILE_K != 0 : K >= TILE_K) &&
           ((edges & TILE_EDGE_N) ? N % TILE_N != 0 : N >= TILE_N);
}

int32_t register_matmul_kernels(Runtime* rt, int64_t M, int64_t K, int64_t N) {
    for (int edges = 0; edges < 8; ++edges) {
        if (!has_tiles(M, K, N, edges)) continue;
        const int64_t tm = extent(M, TILE_M, edges & TILE_EDGE_M), tk = extent(K, TILE_K, edges & TILE_EDGE_K),
                      tn = extent(N, TILE_N, edges & TILE_EDGE_N);
        /* The tiles of A and B in place (row strides K and N); C_tile dense. */
        spyre_kernel_spec gemm = {.kind = SPYRE_KERNEL_MATMUL, .dtype = SPYRE_DTYPE_FP32, .rank = 3,
                                  .shape = {tm, tk, tn}, .row_stride = {K, N, tn}};
        int32_t r = build_and_register(rt, KERNEL_GEMM + edges, &gemm);
        if (r < 0) return r;
        gemm.kind = SPYRE_KERNEL_MATMUL_ACCUMULATE;
        if ((r = build_and_register(rt, KERNEL_GEMM_ACC + edges, &gemm)) < 0) return r;
    }
    /* The copy of C_tile into C depends on the M and N edges only. */
    for (int em = 0; em <= TILE_EDGE_M; em += TILE_EDGE_M)
        for (int en = 0; en <= TILE_EDGE_N; en += TILE_EDGE_N) {
            if (!has_tiles(M, TILE_K, N, em | en)) continue;
            const int64_t tm = extent(M, TILE_M, em), tn = extent(N, TILE_N, en);
            spyre_kernel_spec copy = {.kind = SPYRE_KERNEL_COPY, .dtype = SPYRE_DTYPE_FP32, .rank = 2,
                                      .shape = {tm, tn}, .row_stride = {tn, N}};
            int32_t r = build_and_register(rt, KERNEL_COPY + (em | en), &copy);
            if (r < 0) return r;
        }
    return 0;
}
