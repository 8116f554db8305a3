// SPDX-License-Identifier: Apache-2.0
// Runs seed 004's Example 1, verbatim, at depth 0 round after round on a
// fresh runtime, as the seed's orchestration thread would, and checks every
// round's result. Without a scope nothing but the depth-0 rule keeps t0's
// output alive between its submission and the next one's, so a fast kernel
// shows whether the rule holds.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstring>
#include <string>

#include "example1_verbatim.h"

namespace spyre::test {

// `rt` is fresh (task ids start at 0) with kernel 1 = ADD and 2 = MUL over
// 256 floats; A, B, C are 256 floats each in its memory. Returns "" or what
// went wrong first.
inline std::string RunExample1Verbatim(Runtime* rt, float* A, float* B, float* C, int rounds) {
    for (int i = 0; i < 256; ++i) A[i] = float(i) * 0.5f, B[i] = 1.0f - float(i), C[i] = float(i % 7) - 3.0f;
    float want[256];
    for (int i = 0; i < 256; ++i) want[i] = (A[i] + B[i]) * C[i];
    uint64_t args[] = {uint64_t(uintptr_t(A)), uint64_t(uintptr_t(B)), uint64_t(uintptr_t(C))};
    for (int round = 0; round < rounds; ++round) {
        simple_orch_verbatim(rt, args);
        const std::string error = pto_last_error();  // the function's, if a call of it failed
        const int32_t t1 = 2 * round + 1;  // the round's second task
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        int32_t state;
        while ((state = pto_task_state(rt, t1)) > 0 && state < PTO_TASK_COMPLETED) {
            if (std::chrono::steady_clock::now() > deadline) return "round " + std::to_string(round) + ": task never completed";
            sched_yield();
        }
        if (state < 0)
            return "round " + std::to_string(round) + ": the second task was refused: " + error;
        // Its submitting thread (this one) holds it.
        const auto* out = static_cast<const float*>(pto_task_output(rt, t1, 0));
        if (!out) return "round " + std::to_string(round) + ": no output: " + pto_last_error();
        if (std::memcmp(out, want, sizeof want) != 0) return "round " + std::to_string(round) + ": wrong result";
        // The result's address was asked for: its task is held until a wait.
        if (pto_wait_all(rt) != 0) return "round " + std::to_string(round) + ": pto_wait_all: " + pto_last_error();
    }
    return "";
}

}  // namespace spyre::test
