// SPDX-License-Identifier: Apache-2.0
// OpenBLAS's kernels for the CPU it runs on. Debian 12's OpenBLAS (0.3.21,
// built with DYNAMIC_ARCH) takes an Intel CPU model it does not know, such
// as Sapphire or Emerald Rapids, for a Prescott and runs its SSE3 kernels
// (OpenBLAS issue 4267, fixed in 0.3.25): sgemm 3-5x slower than the
// AVX-512 kernels the CPU can run. OpenBLAS reads OPENBLAS_CORETYPE once,
// when it loads, so a program that finds itself on that fallback runs
// itself again with the core its CPU supports named. A core the user named
// is kept. For the programs that link OpenBLAS (the mock card, whose cores
// compute with it, and the benchmarks and examples that measure it).
#pragma once

#include <cblas.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace spyre::openblas {

// The OpenBLAS core to name for a CPU that OpenBLAS detected as `detected`,
// given what the CPU (and the OS) support; nullptr: keep OpenBLAS's choice.
// Only the Prescott fallback is overridden: a core OpenBLAS recognised is
// its own to choose.
inline const char* CoreToName(const char* detected, bool avx512_skylake_set, bool avx2_fma) noexcept {
    if (detected == nullptr || std::strcmp(detected, "Prescott") != 0) return nullptr;
    if (avx512_skylake_set) return "SkylakeX";
    if (avx2_fma) return "Haswell";
    return nullptr;
}

// The core to name on this CPU, with this OpenBLAS; nullptr: none.
inline const char* CoreForThisCpu() noexcept {
    __builtin_cpu_init();
    // What OpenBLAS's SkylakeX kernels use; libgcc also checks the OS saves the AVX-512 state.
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return CoreToName(openblas_get_corename(), avx512, avx2);
}

// Runs the program again (same pid, same arguments) with OPENBLAS_CORETYPE
// set when OpenBLAS fell back to Prescott on a CPU with AVX2 or AVX-512 and
// the variable is unset; returns when nothing is to be done or the exec
// failed (the program then goes on with the slow kernels, after a warning).
// Call it first in main(), before any thread starts.
inline void RunAgainWithTheCpusKernels(char** argv) noexcept {
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;  // the user's, or this run's second start
    const char* core = CoreForThisCpu();
    if (core == nullptr) return;
    // The file's own path, not /proc/self/exe: the process's name (comm,
    // what ps and pgrep show) is the basename of the path exec'd.
    char path[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0) return;
    path[n] = '\0';
    if (::setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
    ::execv(path, argv);
    std::fprintf(stderr,
                 "warning: could not start again with OPENBLAS_CORETYPE=%s (%s): OpenBLAS keeps its Prescott kernels\n",
                 core, std::strerror(errno));
}

}  // namespace spyre::openblas
