/* SPDX-License-Identifier: Apache-2.0 */
/* Seed 004's two examples from C alone on a device (a private mock): the
 * runtime opened with pto_runtime_create, the kernels built with
 * spyre_build_kernel (the tile kernels with the big matrices' row strides)
 * and registered with pto_register_program, the seed's orchestration
 * functions (examples/pto/pipeline_orch.c and matmul_orch.c) run with
 * pto_run, and the results checked against plain C loops. Also: a program
 * file, and what a bad image, spec or file gets. Exit status 0 = pass. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pto/kernels.h"
#include "spyre/compiler/kernel_builder.h"
#include "spyre/pto.h"

static int failures;
#define CHECK(cond)                                                                                   \
    do {                                                                                              \
        if (!(cond)) {                                                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond,   \
                    pto_last_error());                                                                \
            ++failures;                                                                               \
        }                                                                                             \
    } while (0)

static void Example1(Runtime* rt) {
    CHECK(register_pipeline_kernels(rt) == 0);
    float* abc = pto_alloc(rt, 3 * PIPELINE_ELEMENTS * sizeof(float));
    CHECK(abc != NULL);
    if (!abc) return;
    float *A = abc, *B = A + PIPELINE_ELEMENTS, *C = B + PIPELINE_ELEMENTS, *result = NULL;
    for (int i = 0; i < PIPELINE_ELEMENTS; ++i) A[i] = (float)i * 0.25f, B[i] = 3.0f - (float)i, C[i] = (float)(i % 9);
    uint64_t args[] = {(uint64_t)A, (uint64_t)B, (uint64_t)C, (uint64_t)&result};
    CHECK(pto_scope_begin(rt) == 0);
    CHECK(pto_run(rt, simple_orch, args) == 0);
    CHECK(result != NULL);
    for (int i = 0; result && i < PIPELINE_ELEMENTS; ++i) CHECK(result[i] == (A[i] + B[i]) * C[i]);
    CHECK(pto_scope_end(rt) == 0);
    CHECK(pto_free(rt, abc) == 0);
}

/* On a runtime of its own: its kernels are those of these sizes. */
static void Example2(int M, int K, int N) {
    Runtime* rt = pto_runtime_create(NULL, 64, 4 << 20);
    CHECK(rt != NULL);
    if (!rt) return;
    CHECK(register_matmul_kernels(rt, M, K, N) == 0);
    /* A, B and C outside the heap ring: they live through the whole run. */
    float* A = malloc(sizeof(float) * (size_t)(M * K));
    float* B = malloc(sizeof(float) * (size_t)(K * N));
    float* want = calloc((size_t)(M * N), sizeof(float));
    for (int i = 0; i < M * K; ++i) A[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (int i = 0; i < K * N; ++i) B[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < M; ++i)
        for (int k = 0; k < K; ++k)
            for (int j = 0; j < N; ++j) want[i * N + j] += A[i * K + k] * B[k * N + j];
    /* The device's matrices from the function's allocator: they live
     * through the whole run (in the heap ring they would pin its tail). */
    float* dA = pto_device_malloc(rt, sizeof(float) * (uint64_t)(M * K + K * N + M * N));
    CHECK(dA != NULL);
    if (dA) {
        float *dB = dA + M * K, *dC = dB + K * N;
        memcpy(dA, A, sizeof(float) * (size_t)(M * K));
        memcpy(dB, B, sizeof(float) * (size_t)(K * N));
        uint64_t args[] = {(uint64_t)dA, (uint64_t)dB, (uint64_t)dC, (uint64_t)M, (uint64_t)K, (uint64_t)N};
        CHECK(pto_run(rt, matmul_orch, args) == 0);
        double worst = 0;
        for (int i = 0; i < M * N; ++i) worst = fmax(worst, fabs(dC[i] - want[i]));
        if (worst > 1e-3) fprintf(stderr, "Example 2 %dx%dx%d: worst error %g\n", M, K, N, worst);
        CHECK(worst <= 1e-3);
        CHECK(pto_device_free(rt, dA) == 0);
        CHECK(pto_device_free(rt, dA) == -EINVAL);
    }
    free(A), free(B), free(want);
    CHECK(pto_runtime_destroy(rt) == 0);
}

int main(int argc, char** argv) {
    (void)argc;
    Runtime* rt = pto_runtime_create(NULL, 64, 4 << 20);
    CHECK(rt != NULL);
    if (!rt) return 1;
    Example1(rt);
    Example2(128, 256, 192);
    Example2(100, 130, 70); /* edge tiles along every dimension */
    Example2(5, 3, 200);    /* no full tile along M and K */

    /* A program from a file (argv[1]: a scratch path), and bad input. */
    spyre_kernel_spec relu = {.kind = SPYRE_KERNEL_RELU, .dtype = SPYRE_DTYPE_FP32, .rank = 1, .shape = {64}};
    unsigned char image[4096];
    int64_t n = spyre_build_kernel(&relu, image, sizeof image);
    CHECK(n > 0);
    FILE* f = fopen(argv[1], "wb");
    CHECK(f && fwrite(image, 1, (size_t)n, f) == (size_t)n);
    if (f) fclose(f);
    CHECK(pto_register_program_file(rt, 40, argv[1]) == 0);
    CHECK(pto_register_program_file(rt, 41, "/nonexistent/program.bin") == -ENOENT);
    CHECK(strstr(pto_last_error(), "cannot open program file /nonexistent/program.bin") != NULL);
    /* Sized before it is read: an endless or huge file is refused at once. */
    CHECK(pto_register_program_file(rt, 41, "/dev/zero") == -EINVAL);
    CHECK(strstr(pto_last_error(), "program file /dev/zero is not a regular file") != NULL);
    CHECK(pto_register_program_file(rt, 41, "/tmp") == -EINVAL);
    CHECK(strstr(pto_last_error(), "is not a regular file") != NULL);
    /* A file whose size reads 0 (/proc) is read to its end: its bytes are
     * no program (it said "is empty"). */
    CHECK(pto_register_program_file(rt, 41, "/proc/self/status") == -EINVAL);
    CHECK(strstr(pto_last_error(), "program file /proc/self/status is not a program image: not a program: bad magic") != NULL);
    f = fopen(argv[1], "r+b");
    CHECK(f && fseek(f, (long)SPYRE_PROGRAM_MAX_SIZE, SEEK_SET) == 0 && fputc(0, f) == 0);
    if (f) fclose(f);
    CHECK(pto_register_program_file(rt, 41, argv[1]) == -EINVAL);
    CHECK(strstr(pto_last_error(), "a program has at most 1048576") != NULL);
    memset(image, 0x5a, 64);
    CHECK(pto_register_program(rt, 42, image, 64) == -EINVAL);
    CHECK(strstr(pto_last_error(), "is not a program image") != NULL);
    CHECK(pto_register_plan(rt, 43, "/nonexistent/plan", 0) < 0);
    spyre_kernel_spec bad = relu;
    bad.kind = 99;
    CHECK(spyre_build_kernel(&bad, image, sizeof image) == -EINVAL);
    CHECK(strstr(pto_last_error(), "unknown kernel kind 99") != NULL);
    bad = relu;
    bad.row_stride[0] = 128; /* a 1-D operand */
    CHECK(spyre_build_kernel(&bad, image, sizeof image) == -EINVAL);
    CHECK(strstr(pto_last_error(), "needs a 2-D operand") != NULL);
    /* A row stride whose operand would span more than 2^64 bytes: the host's
     * size checks would read its extent as 0 and pass every parameter. */
    bad = relu;
    bad.rank = 2;
    bad.shape[0] = 4;
    bad.shape[1] = 8;
    bad.row_stride[0] = INT64_MAX;
    CHECK(spyre_build_kernel(&bad, image, sizeof image) == -EINVAL);
    CHECK(strstr(pto_last_error(), "makes it span more than 2^64 bytes") != NULL);
    CHECK(spyre_build_kernel(NULL, image, sizeof image) == -EINVAL);

    /* A runtime on host memory has no device for programs. */
    Runtime* host = pto_runtime_create_host(1 << 20, 8, 4096);
    CHECK(pto_register_program(host, 1, image, (uint64_t)n) == -ENOTSUP);
    CHECK(pto_device_malloc(host, 64) == NULL && pto_last_error_info(NULL) == -ENOTSUP);
    CHECK(pto_runtime_destroy(host) == 0);

    CHECK(pto_runtime_destroy(rt) == 0);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("seed 004's examples from C: all checks passed\n");
    return failures ? 1 : 0;
}
