/* SPDX-License-Identifier: Apache-2.0 */
/* Seed 004, Example 1: a sequential pipeline with implicit allocation,
 * (A + B) * C. The outputs come from the heap ring; the second task finds
 * its producer through the first one's output address. */
#include "kernels.h"

void simple_orch(Runtime* rt, uint64_t* args) {
    float *A = (float*)args[0], *B = (float*)args[1], *C = (float*)args[2];
    const uint64_t bytes = PIPELINE_ELEMENTS * sizeof(float);

    int32_t t0 = pto_submit_task(rt, KERNEL_ADD, WORKER_VECTOR,
        (TaskParam[]){
            {PARAM_INPUT,  A, bytes},
            {PARAM_INPUT,  B, bytes},
            {PARAM_OUTPUT, NULL, bytes}  /* implicit allocation */
        }, 3);
    if (t0 < 0) return;  /* pto_run reports the failed call */

    /* The seed reads rt->task_descriptors[t0].packed_buffer_base. Without a
     * scope, t0 stays live until a later task of this thread reads its
     * output (the depth-0 rule, docs/orchestration.md). */
    void* t0_out = pto_task_output(rt, t0, 0);
    if (!t0_out) return;

    int32_t t1 = pto_submit_task(rt, KERNEL_MUL, WORKER_VECTOR,
        (TaskParam[]){
            {PARAM_INPUT,  t0_out, bytes},
            {PARAM_INPUT,  C, bytes},
            {PARAM_OUTPUT, NULL, bytes}
        }, 3);
    if (t1 < 0) return;
    /* The result lives as long as its task: until a task reads it or this
     * thread waits, or until the end of a scope the caller holds around the
     * run (pto_examples.cpp does). */
    *(void**)args[3] = pto_task_output(rt, t1, 0);
}
