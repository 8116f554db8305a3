/* SPDX-License-Identifier: Apache-2.0 */
/* Seed 004, Example 2: a parallel tiled matmul with explicit allocation and
 * a scope per output tile. The K partial products of a tile accumulate into
 * one C_tile: the first GEMM writes it (OUTPUT), the others add to it
 * (INOUT), so they serialise on the tile (write-after-write and
 * read-after-write on one region), while different tiles' tasks share
 * nothing and run in parallel on the card's cores. Tiles at an edge of a
 * size that is not a multiple of the tile are smaller and run kernels of
 * their own (kernels.h). Every call is checked: on a failure the function
 * stops, and pto_run reports that call's error (it ends the scopes left
 * open). docs/orchestration.md. */
#include "kernels.h"

static int min_int(int a, int b) { return a < b ? a : b; }

void matmul_orch(Runtime* rt, uint64_t* args) {
    float *A = (float*)args[0], *B = (float*)args[1], *C = (float*)args[2];
    int M = (int)args[3], K = (int)args[4], N = (int)args[5];

    for (int i = 0; i < M; i += TILE_M) {
        const int tm = min_int(TILE_M, M - i);
        for (int j = 0; j < N; j += TILE_N) {
            const int tn = min_int(TILE_N, N - j);
            if (pto_scope_begin(rt) < 0) return;

            /* Explicit allocation for the shared output tile */
            size_t tile_size = (size_t)tm * tn * sizeof(float);
            void* C_tile = pto_alloc(rt, tile_size);
            if (!C_tile) return;

            for (int k = 0; k < K; k += TILE_K) {
                const int tk = min_int(TILE_K, K - k);
                const int edges = (tm < TILE_M ? TILE_EDGE_M : 0) | (tk < TILE_K ? TILE_EDGE_K : 0) |
                                  (tn < TILE_N ? TILE_EDGE_N : 0);
                /* A tile inside a row-major matrix spans its rows at the
                 * matrix's row stride: the regions for the dependencies. */
                TaskParam params[] = {
                    {PARAM_INPUT, &A[(size_t)i * K + k], ((uint64_t)(tm - 1) * K + tk) * sizeof(float)},
                    {PARAM_INPUT, &B[(size_t)k * N + j], ((uint64_t)(tk - 1) * N + tn) * sizeof(float)},
                    {k == 0 ? PARAM_OUTPUT : PARAM_INOUT,
                     .region = {.buffer_ptr = C_tile, .offset = 0, .size = tile_size}},
                };
                if (pto_submit_task(rt, (k == 0 ? KERNEL_GEMM : KERNEL_GEMM_ACC) + edges, WORKER_CUBE, params, 3) < 0)
                    return;
            }

            /* Copy result to final output */
            if (pto_submit_task(rt, KERNEL_COPY + (tm < TILE_M ? TILE_EDGE_M : 0) + (tn < TILE_N ? TILE_EDGE_N : 0),
                    WORKER_VECTOR,
                    (TaskParam[]){
                        {PARAM_INPUT,  C_tile, tile_size},
                        {PARAM_OUTPUT, &C[(size_t)i * N + j], ((uint64_t)(tm - 1) * N + tn) * sizeof(float)}
                    }, 2) < 0)
                return;

            /* Signal no more references will be added to C_tile */
            if (pto_free(rt, C_tile) < 0) return;

            /* C_tile freed after copy completes (-EIO: a task of the scope
             * failed; pto_run reports it once its tasks are done) */
            if (pto_scope_end(rt) < 0) return;
        }
    }
}
