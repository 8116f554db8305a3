/* SPDX-License-Identifier: Apache-2.0 */
/* Seed 004's Example 1 as the seed writes it: no scope, t0's implicit
 * output read right after t0 is submitted and passed to the next task. One
 * line differs: the seed reads rt->task_descriptors[t0].packed_buffer_base,
 * which an opaque Runtime spells pto_task_output(rt, t0, 0). Kernel ids are
 * the caller's: 1 = ADD, 2 = MUL. */
#include "example1_verbatim.h"

enum { KERNEL_ADD = 1, KERNEL_MUL = 2 };

void simple_orch_verbatim(Runtime* rt, uint64_t* args) {
    float *A = (float*)args[0], *B = (float*)args[1], *C = (float*)args[2];

    // Task outputs implicitly allocated, addresses returned in task descriptor
    int32_t t0 = pto_submit_task(rt, KERNEL_ADD, WORKER_VECTOR,
        (TaskParam[]){
            {PARAM_INPUT,  A, 1024},
            {PARAM_INPUT,  B, 1024},
            {PARAM_OUTPUT, NULL, 1024}  // Implicit allocation
        }, 3);

    // Get output address from task descriptor
    void* t0_out = pto_task_output(rt, t0, 0);

    pto_submit_task(rt, KERNEL_MUL, WORKER_VECTOR,
        (TaskParam[]){
            {PARAM_INPUT,  t0_out, 1024},
            {PARAM_INPUT,  C, 1024},
            {PARAM_OUTPUT, NULL, 1024}
        }, 3);
}
