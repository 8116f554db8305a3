// SPDX-License-Identifier: Apache-2.0
// After a multi-threaded call, OpenBLAS's worker threads spin for about
// 0.1 s (2^28 TSC cycles by default) before they sleep. A measurement that
// starts in that window shares the CPUs with them: on a 2-CPU machine the
// mock card's cores then get about half of theirs. A benchmark that times
// the device right after the host BLAS makes the workers sleep as soon as a
// call ends (OpenBLAS's shortest timeout), so each call wakes them, as a
// call in a program that does other work between its BLAS calls does; and
// it may time the BLAS as a loop of back-to-back calls sees it (spinning
// workers) last, when nothing else is timed after it.
#pragma once

#include <cstdlib>

extern "C" {
// OpenBLAS (Debian's libopenblas0-pthread exports both): re-reads the
// OPENBLAS_* variables, and stops the worker threads, which the next call
// starts again with the timeout read.
void openblas_read_env(void);
int blas_thread_shutdown_(void);
}

namespace spyre::bench {

// Stops the workers at once (the next call starts them again).
inline void StopHostBlasWorkers() { blas_thread_shutdown_(); }

// Stops the workers and sets how long they spin after each later call:
// 2^4 cycles (the shortest OpenBLAS takes) or its default 2^28.
inline void SetHostBlasWorkersSpin(bool spin) {
    setenv("OPENBLAS_THREAD_TIMEOUT", spin ? "28" : "4", 1);
    openblas_read_env();
    StopHostBlasWorkers();
}

}  // namespace spyre::bench
