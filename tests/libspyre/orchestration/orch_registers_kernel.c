/* SPDX-License-Identifier: Apache-2.0 */
/* An orchestration function loaded with pto_run_library that registers a
 * host kernel of its own library (kernel 77: out = 3 * in) and submits one
 * task of it; the caller submits more after the call returned. */
#include <stdint.h>

#include "spyre/pto.h"

static uint32_t times_three(void* const* b, const uint64_t* s, int32_t n, void* user) {
    (void)n, (void)user;
    const float* in = b[0];
    float* out = b[1];
    for (uint64_t i = 0; i < s[1] / sizeof(float); ++i) out[i] = 3.0f * in[i];
    return 0;
}

/* args: in, out (256 floats each). */
void register_times_three(Runtime* rt, uint64_t* args) {
    if (pto_register_host_kernel(rt, 77, times_three, NULL) != 0) return;
    float* in = (float*)(uintptr_t)args[0];
    float* out = (float*)(uintptr_t)args[1];
    pto_submit_task(rt, 77, WORKER_HOST, (TaskParam[]){{PARAM_INPUT, in, 1024}, {PARAM_OUTPUT, out, 1024}}, 2);
}
