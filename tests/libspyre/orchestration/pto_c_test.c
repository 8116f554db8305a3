/* SPDX-License-Identifier: Apache-2.0 */
/* The C API from C: both TaskParam spellings, implicit outputs read back
 * with pto_task_output, errors as negative errno plus a message, and
 * orchestration functions loaded from shared objects (argv[1]: Example 1;
 * argv[2]: one that registers a host kernel of its library). Host memory
 * runtime: no device needed. Exit status 0 = pass. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pto/kernels.h" /* seed 004 Example 2 (examples/pto/matmul_orch.c) */
#include "spyre/pto.h"

static int failures;
#define CHECK(cond)                                                             \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n",        \
                    __FILE__, __LINE__, #cond, pto_last_error());               \
            ++failures;                                                         \
        }                                                                       \
    } while (0)

static uint32_t add(void* const* b, const uint64_t* s, int32_t n, void* user) {
    (void)n, (void)user;
    const float *x = b[0], *y = b[1];
    float* out = b[2];
    for (uint64_t i = 0; i < s[2] / sizeof(float); ++i) out[i] = x[i] + y[i];
    return 0;
}

static uint32_t mul(void* const* b, const uint64_t* s, int32_t n, void* user) {
    (void)n, (void)user;
    const float *x = b[0], *y = b[1];
    float* out = b[2];
    for (uint64_t i = 0; i < s[2] / sizeof(float); ++i) out[i] = x[i] * y[i];
    return 0;
}

static uint32_t fails(void* const* b, const uint64_t* s, int32_t n, void* user) {
    (void)b, (void)s, (void)n;
    return *(uint32_t*)user;
}

/* An orchestration function that destroys its own runtime: refused. */
static void destroy_self(Runtime* rt, uint64_t* args) { args[0] = (uint64_t)(int64_t)pto_runtime_destroy(rt); }

/* pto_wait_all_progress: done must rise and end at total. */
struct Progress {
    int calls;
    int monotonic;
    uint64_t last_done, last_total;
};
static void OnProgress(uint64_t done, uint64_t total, void* user) {
    struct Progress* p = (struct Progress*)user;
    p->monotonic = (p->calls == 0 || done > p->last_done) && done <= total && (p->calls == 0 || p->monotonic);
    p->calls++;
    p->last_done = done;
    p->last_total = total;
}

int main(int argc, char** argv) {
    CHECK(pto_runtime_create_host(1 << 20, 0, 4096) == NULL);
    CHECK(strstr(pto_last_error(), "task ring size") != NULL);
    CHECK(pto_scope_begin(NULL) == -EINVAL);

    Runtime* rt = pto_runtime_create_host(1 << 20, 64, 1 << 16);
    CHECK(rt != NULL);
    if (!rt) return 1;
    CHECK(pto_register_host_kernel(rt, 1, add, NULL) == 0);
    CHECK(pto_register_host_kernel(rt, 2, mul, NULL) == 0);
    uint32_t code = 9;
    CHECK(pto_register_host_kernel(rt, 3, fails, &code) == 0);
    CHECK(pto_register_host_kernel(rt, 1, add, NULL) == -EINVAL);

    /* A, B, C, D: 256 floats each at the start of the runtime's memory. */
    float* A = pto_host_address(rt, 0, 4 * 1024);
    CHECK(A != NULL);
    float *B = A + 256, *C = B + 256, *D = C + 256;
    for (int i = 0; i < 256; ++i) A[i] = (float)i, B[i] = 1.0f, C[i] = 2.0f;

    /* Example 1, inline. */
    CHECK(pto_scope_begin(rt) == 0);
    int32_t t0 = pto_submit_task(rt, 1, WORKER_VECTOR,
        (TaskParam[]){{PARAM_INPUT, A, 1024}, {PARAM_INPUT, B, 1024}, {PARAM_OUTPUT, NULL, 1024}}, 3);
    CHECK(t0 >= 0);
    void* t0_out = pto_task_output(rt, t0, 0);
    CHECK(t0_out != NULL);
    int32_t t1 = pto_submit_task(rt, 2, WORKER_VECTOR,
        (TaskParam[]){{PARAM_INPUT, t0_out, 1024}, {PARAM_INPUT, C, 1024},
                      {PARAM_OUTPUT, .region = {.buffer_ptr = D, .offset = 0, .size = 1024}}}, 3);
    CHECK(t1 > t0);
    struct Progress progress = {0, 0, 0, 0};
    CHECK(pto_wait_all_progress(rt, OnProgress, &progress) == 0);
    CHECK(progress.calls >= 1 && progress.monotonic && progress.last_done == 2 && progress.last_total == 2);
    for (int i = 0; i < 256; ++i) CHECK(D[i] == 2.0f * ((float)i + 1.0f));
    CHECK(pto_scope_end(rt) == 0);
    CHECK(pto_task_state(rt, t1) == PTO_TASK_CONSUMED);

    /* Errors: a pointer outside the function's memory, a bad task id. */
    float outside[256];
    CHECK(pto_submit_task(rt, 1, WORKER_VECTOR,
        (TaskParam[]){{PARAM_INPUT, outside, 1024}, {PARAM_INPUT, B, 1024}, {PARAM_OUTPUT, NULL, 1024}}, 3) == -EINVAL);
    CHECK(strstr(pto_last_error(), "outside the function's memory") != NULL);
    CHECK(pto_task_output(rt, 12345, 0) == NULL);
    CHECK(pto_task_complete(rt, 12345) == -EINVAL);
    CHECK(pto_scope_end(rt) == -EINVAL);
    CHECK(strstr(pto_last_error(), "without an open scope") != NULL);
    uint64_t dev = 1;
    CHECK(pto_device_address(rt, B, &dev) == 0 && dev == 1024);
    CHECK(pto_device_address(rt, outside, &dev) == -EINVAL);

    /* pto_alloc / pto_free, and a failing kernel reported with its code. */
    void* buf = pto_alloc(rt, 512);
    CHECK(buf != NULL);
    CHECK(pto_alloc(rt, 0) == NULL);
    int32_t bad = pto_submit_task(rt, 3, WORKER_HOST, (TaskParam[]){{PARAM_OUTPUT, buf, 512}}, 1);
    CHECK(bad >= 0);
    CHECK(pto_free(rt, buf) == 0);
    CHECK(pto_free(rt, buf) == -EINVAL);
    CHECK(pto_wait_all(rt) == -EIO);
    CHECK(strstr(pto_last_error(), "host kernel return code 9") != NULL);

    /* The seed's Example 1 from a shared object. */
    if (argc > 1) {
        float* result = NULL;
        uint64_t args[] = {(uint64_t)(uintptr_t)A, (uint64_t)(uintptr_t)B, (uint64_t)(uintptr_t)C,
                           (uint64_t)(uintptr_t)&result};
        CHECK(pto_scope_begin(rt) == 0); /* keeps the result (an implicit output) after the run's wait */
        CHECK(pto_run_library(rt, argv[1], "simple_orch", args) == 0);
        CHECK(result != NULL);
        for (int i = 0; result && i < 256; ++i) CHECK(result[i] == 2.0f * ((float)i + 1.0f));
        CHECK(pto_scope_end(rt) == 0);
        CHECK(pto_run_library(rt, argv[1], "no_such_function", args) == -ENOENT);
        CHECK(strstr(pto_last_error(), "no_such_function") != NULL);
    }
    /* A host kernel the library's function registered runs after the call
     * returned: the library stays loaded for the runtime's life (it was
     * unloaded, and the next task of the kernel ran unmapped code). */
    if (argc > 2) {
        uint64_t args[] = {(uint64_t)(uintptr_t)A, (uint64_t)(uintptr_t)D};
        CHECK(pto_run_library(rt, argv[2], "register_times_three", args) == 0);
        for (int i = 0; i < 256; ++i) CHECK(D[i] == 3.0f * (float)i);
        for (int round = 0; round < 2; ++round) { /* loaded again: the same library, still open */
            CHECK(pto_submit_task(rt, 77, WORKER_HOST,
                                  (TaskParam[]){{PARAM_INPUT, B, 1024}, {PARAM_OUTPUT, D, 1024}}, 2) >= 0);
            CHECK(pto_wait_all(rt) == 0);
            for (int i = 0; i < 256; ++i) CHECK(D[i] == 3.0f);
            CHECK(pto_run_library(rt, argv[2], "no_such_function", args) == -ENOENT);
        }
    }
    /* The last error, structured: the failed task, its kernel, the code. */
    bad = pto_submit_task(rt, 3, WORKER_HOST, (TaskParam[]){{PARAM_OUTPUT, D, 1024}}, 1);
    CHECK(pto_wait_all(rt) == -EIO);
    pto_error_info info;
    CHECK(pto_last_error_info(&info) == -EIO);
    CHECK(info.code == -EIO && info.kind == PTO_ERROR_DEVICE_ERROR);
    CHECK(info.task_id == bad && info.kernel_id == 3 && info.device_code == 9);
    CHECK(strcmp(info.call, "pto_wait_all") == 0);
    CHECK(strstr(info.message, "host kernel return code 9") != NULL);
    CHECK(strstr(pto_last_error(), "[device pto") == NULL || strstr(pto_last_error(), "BAD_DEPENDENCY") == NULL);
    CHECK(pto_last_error_info(NULL) == -EIO);
    pto_clear_error();
    CHECK(pto_last_error_info(&info) == 0 && info.kind == PTO_ERROR_NONE && info.task_id == -1);
    CHECK(strcmp(info.message, "") == 0 && strcmp(pto_last_error(), "") == 0);
    CHECK(pto_alloc(rt, (size_t)-4) == NULL);
    CHECK(pto_last_error_info(&info) == -ENOMEM && info.kind == PTO_ERROR_OUT_OF_MEMORY && info.task_id == -1);
    CHECK(strcmp(info.call, "pto_alloc") == 0);

    /* pto_run reports the first call of the function that failed, even one
     * it ignored: Example 2 on a heap too small for its tile. */
    Runtime* small = pto_runtime_create_host(1 << 20, 64, 4096);
    CHECK(small != NULL);
    CHECK(pto_register_host_kernel(small, KERNEL_GEMM, add, NULL) == 0);
    uint64_t margs[] = {(uint64_t)(uintptr_t)A, (uint64_t)(uintptr_t)B, (uint64_t)(uintptr_t)C, 64, 64, 64};
    CHECK(pto_run(small, matmul_orch, margs) == -ENOMEM);
    CHECK(pto_last_error_info(&info) == -ENOMEM && strcmp(info.call, "pto_run") == 0);
    CHECK(strstr(info.message, "the orchestration function's pto_alloc failed") != NULL);
    /* ... and refuses to destroy the runtime from inside its function. */
    uint64_t self[] = {0};
    CHECK(pto_run(small, destroy_self, self) == 0 && (int32_t)self[0] == -EBUSY);
    CHECK(pto_runtime_destroy(small) == 0);

    /* An EXTERNAL task failed by the caller: its code is the caller's own,
     * not a device error's name. One nobody finished: destroy says so, and
     * destroys the runtime all the same. */
    Runtime* ext = pto_runtime_create_host(1 << 20, 16, 4096);
    CHECK(ext != NULL);
    CHECK(pto_register_host_kernel(ext, 1, add, NULL) == 0);
    CHECK(pto_register_host_kernel(ext, 7, add, NULL) == 0); /* EXTERNAL tasks name a registered kernel */
    void* x = pto_host_address(ext, 0, 256);
    int32_t failed = pto_submit_task(ext, 7, WORKER_EXTERNAL, (TaskParam[]){{PARAM_OUTPUT, x, 64}}, 1);
    CHECK(failed >= 0 && pto_task_fail(ext, failed, 5) == 0);
    CHECK(pto_wait_all(ext) == -EIO);
    CHECK(strstr(pto_last_error(), "failed with pto_task_fail code 5") != NULL);
    CHECK(strstr(pto_last_error(), "host code 5") != NULL && strstr(pto_last_error(), "ADDR_RANGE") == NULL);
    int32_t open = pto_submit_task(ext, 7, WORKER_EXTERNAL, (TaskParam[]){{PARAM_OUTPUT, x, 64}}, 1);
    CHECK(open >= 0);
    CHECK(pto_submit_task(ext, 1, WORKER_HOST,
                          (TaskParam[]){{PARAM_INPUT, x, 64}, {PARAM_INPUT, x, 64}, {PARAM_OUTPUT, (char*)x + 128, 64}},
                          3) >= 0);
    CHECK(pto_device_address(ext, x, NULL) == -EINVAL);
    CHECK(strstr(pto_last_error(), "device_address is NULL") != NULL);
    CHECK(pto_runtime_destroy(ext) == -EDEADLK);
    CHECK(strstr(pto_last_error(), "2 task(s) never finished") != NULL);
    CHECK(pto_wait_all(ext) == -EINVAL); /* destroyed */

    /* A ring of one slot runs tasks one at a time, but cannot hold a
     * depth-0 task beside the task that reads its outputs: the refusal says
     * that, not "read depth-0 outputs sooner" (an outside probe). */
    Runtime* one = pto_runtime_create_host(1 << 20, 1, 4096);
    CHECK(one != NULL);
    CHECK(pto_register_host_kernel(one, 1, add, NULL) == 0);
    float* in = pto_host_address(one, 0, 64);
    in[0] = 2.0f;
    int32_t first = pto_submit_task(one, 1, WORKER_HOST,
                                    (TaskParam[]){{PARAM_INPUT, in, 4}, {PARAM_INPUT, in, 4}, {PARAM_OUTPUT, NULL, 4}}, 3);
    CHECK(first >= 0);
    float* sum = pto_task_output(one, first, 0);
    CHECK(sum != NULL);
    CHECK(pto_submit_task(one, 1, WORKER_HOST,
                          (TaskParam[]){{PARAM_INPUT, sum, 4}, {PARAM_INPUT, sum, 4}, {PARAM_OUTPUT, NULL, 4}}, 3) == -EDEADLK);
    CHECK(strstr(pto_last_error(), "a ring of one slot cannot hold it beside a task that reads its outputs: create the "
                                   "runtime with a task ring of at least 2 slots") != NULL);
    CHECK(pto_wait_all(one) == 0);
    CHECK(pto_runtime_destroy(one) == 0);

    /* A destroyed runtime's handle is refused, never used, even once its
     * slot holds a new runtime; so is a handle that was never created. */
    CHECK(pto_runtime_destroy(rt) == 0);
    CHECK(pto_scope_begin(rt) == -EINVAL);
    CHECK(strstr(pto_last_error(), "not a live runtime") != NULL);
    CHECK(pto_submit_task(rt, 1, WORKER_VECTOR, (TaskParam[]){{PARAM_OUTPUT, NULL, 64}}, 1) == -EINVAL);
    CHECK(pto_runtime_destroy(rt) == -EINVAL);
    Runtime* again = pto_runtime_create_host(1 << 20, 8, 4096);
    CHECK(again != NULL && again != rt);
    CHECK(pto_wait_all(rt) == -EINVAL && pto_wait_all(again) == 0);
    CHECK(pto_wait_all((Runtime*)(uintptr_t)0x1234) == -EINVAL);
    CHECK(pto_runtime_destroy(again) == 0);
    CHECK(pto_runtime_destroy(NULL) == 0);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("pto C API: all checks passed\n");
    return failures ? 1 : 0;
}
