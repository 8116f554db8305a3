/* SPDX-License-Identifier: Apache-2.0 */
/* Seed 004, Example 2: a parallel tiled matmul with explicit allocation and
 * a scope per output tile. The K partial products of a tile accumulate into
 * one C_tile: the first GEMM writes it (OUTPUT), the others add to it
 * (INOUT), so they serialise on the tile (write-after-write and
 * read-after-write on one region), while different tiles' tasks share
 * nothing and run in parallel on the card's cores. Every call is checked:
 * on a failure the function stops, and pto_run reports that call's error
 * (it ends the scopes left open). docs/orchestration.md. */
#include "kernels.h"

void matmul_orch(Runtime* rt, uint64_t* args) {
    float *A = (float*)args[0], *B = (float*)args[1], *C = (float*)args[2];
    int M = (int)args[3], K = (int)args[4], N = (int)args[5];

    /* A tile inside a row-major matrix spans its rows at the matrix's row
     * stride: the regions the tasks read and write, for the dependencies. */
    const uint64_t a_span = ((uint64_t)(TILE_M - 1) * K + TILE_K) * sizeof(float);
    const uint64_t b_span = ((uint64_t)(TILE_K - 1) * N + TILE_N) * sizeof(float);
    const uint64_t c_span = ((uint64_t)(TILE_M - 1) * N + TILE_N) * sizeof(float);

    for (int i = 0; i < M; i += TILE_M) {
        for (int j = 0; j < N; j += TILE_N) {
            if (pto_scope_begin(rt) < 0) return;

            /* Explicit allocation for the shared output tile */
            size_t tile_size = TILE_M * TILE_N * sizeof(float);
            void* C_tile = pto_alloc(rt, tile_size);
            if (!C_tile) return;

            for (int k = 0; k < K; k += TILE_K) {
                TaskParam params[] = {
                    {PARAM_INPUT, &A[(size_t)i * K + k], a_span},
                    {PARAM_INPUT, &B[(size_t)k * N + j], b_span},
                    {k == 0 ? PARAM_OUTPUT : PARAM_INOUT,
                     .region = {.buffer_ptr = C_tile, .offset = 0, .size = tile_size}},
                };
                if (pto_submit_task(rt, k == 0 ? KERNEL_GEMM : KERNEL_GEMM_ACC, WORKER_CUBE, params, 3) < 0) return;
            }

            /* Copy result to final output */
            if (pto_submit_task(rt, KERNEL_COPY, WORKER_VECTOR,
                    (TaskParam[]){
                        {PARAM_INPUT,  C_tile, tile_size},
                        {PARAM_OUTPUT, &C[(size_t)i * N + j], c_span}
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
