/* SPDX-License-Identifier: Apache-2.0 */
/* An orchestration function as the seed writes it (Example 1), compiled to
 * a shared object that pto_run_library loads by name. Kernel ids are the
 * caller's: 1 = ADD, 2 = MUL. */
#include <stddef.h>

#include "spyre/pto.h"

enum { KERNEL_ADD = 1, KERNEL_MUL = 2 };

void simple_orch(Runtime* rt, uint64_t* args) {
    float *A = (float*)(uintptr_t)args[0], *B = (float*)(uintptr_t)args[1], *C = (float*)(uintptr_t)args[2];
    float* D = (float*)(uintptr_t)args[3];

    int32_t t0 = pto_submit_task(rt, KERNEL_ADD, WORKER_VECTOR,
        (TaskParam[]){
            {PARAM_INPUT,  A, 1024},
            {PARAM_INPUT,  B, 1024},
            {PARAM_OUTPUT, NULL, 1024}  /* implicit allocation */
        }, 3);

    void* t0_out = pto_task_output(rt, t0, 0);

    pto_submit_task(rt, KERNEL_MUL, WORKER_VECTOR,
        (TaskParam[]){
            {PARAM_INPUT,  t0_out, 1024},
            {PARAM_INPUT,  C, 1024},
            {PARAM_OUTPUT, .region = {.buffer_ptr = D, .offset = 0, .size = 1024}}
        }, 3);
}
