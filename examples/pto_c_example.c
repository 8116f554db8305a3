/* SPDX-License-Identifier: Apache-2.0 */
/* Seed 004's Example 1 from C alone: open a device, build and register the
 * kernels, run the seed's orchestration function on the card's cores, and
 * check the result. Built against an installed libspyre with
 * `cc app.c $(pkg-config --cflags-only-I --libs libspyre)`. */
#include <stdio.h>

#include <spyre/compiler/kernel_builder.h>
#include <spyre/pto.h>

enum { KERNEL_ADD = 1, KERNEL_MUL = 2 };

/* The seed's Example 1, handing its result to the caller in args[3]. */
static void simple_orch(Runtime* rt, uint64_t* args) {
    float *A = (float*)args[0], *B = (float*)args[1], *C = (float*)args[2];
    int32_t t0 = pto_submit_task(rt, KERNEL_ADD, WORKER_VECTOR,
        (TaskParam[]){{PARAM_INPUT, A, 1024}, {PARAM_INPUT, B, 1024}, {PARAM_OUTPUT, NULL, 1024}}, 3);
    void* t0_out = pto_task_output(rt, t0, 0);
    int32_t t1 = pto_submit_task(rt, KERNEL_MUL, WORKER_VECTOR,
        (TaskParam[]){{PARAM_INPUT, t0_out, 1024}, {PARAM_INPUT, C, 1024}, {PARAM_OUTPUT, NULL, 1024}}, 3);
    *(float**)args[3] = pto_task_output(rt, t1, 0);
}

/* Builds a 256-float kernel of `kind` and registers it as `kernel_id`. */
static int register_kernel(Runtime* rt, int32_t kernel_id, int32_t kind) {
    spyre_kernel_spec spec = {.kind = kind, .dtype = SPYRE_DTYPE_FP32, .rank = 1, .shape = {256}};
    unsigned char image[4096];
    int64_t size = spyre_build_kernel(&spec, image, sizeof image);
    if (size < 0 || size > (int64_t)sizeof image) return -1;
    return pto_register_program(rt, kernel_id, image, (uint64_t)size);
}

int main(void) {
    /* The environment's default function: a mounted spyre-mockdev, a real
     * card, or a private mock started for this process. */
    Runtime* rt = pto_runtime_create(NULL, 64, 1 << 20);
    if (!rt || register_kernel(rt, KERNEL_ADD, SPYRE_KERNEL_ADD) < 0 || register_kernel(rt, KERNEL_MUL, SPYRE_KERNEL_MUL) < 0) {
        fprintf(stderr, "example 1: %s\n", pto_last_error());
        return 1;
    }
    float host[768], got[256];
    for (int i = 0; i < 256; ++i) host[i] = (float)i, host[256 + i] = 0.5f, host[512 + i] = (float)(i % 5);
    float* abc = pto_alloc(rt, sizeof host); /* A, B, C in the function's memory */
    float *A = abc, *B = abc + 256, *C = abc + 512, *result = NULL;
    if (!abc || pto_copy_in(rt, abc, host, sizeof host) < 0) { /* by DMA */
        fprintf(stderr, "example 1: %s\n", pto_last_error());
        return 1;
    }
    uint64_t args[] = {(uint64_t)A, (uint64_t)B, (uint64_t)C, (uint64_t)&result};
    pto_scope_begin(rt); /* keeps the result, an implicit output, after the run's wait */
    if (pto_run(rt, simple_orch, args) < 0) {
        pto_error_info e;
        pto_last_error_info(&e);
        fprintf(stderr, "example 1: %s failed: %s\n", e.call, e.message);
        return 1;
    }
    int wrong = pto_copy_out(rt, got, result, sizeof got) < 0;
    for (int i = 0; i < 256; ++i) wrong += got[i] != (host[i] + host[256 + i]) * host[512 + i];
    pto_scope_end(rt);
    pto_free(rt, abc);
    pto_runtime_destroy(rt);
    printf("example 1 from C: %s\n", wrong ? "WRONG" : "OK");
    return wrong != 0;
}
