// SPDX-License-Identifier: Apache-2.0
// A program that records (SPYRE_TRACE, set by the test) and waits to be
// ended by a signal: trace_test's SignalledProcess tests start it.
//   trace_signal_helper            records a span, says "ready", waits
//   trace_signal_helper own        the same after installing its own SIGTERM
//                                  handler, which exits with status 7
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "spyre/trace/trace.hpp"

namespace {
void OwnHandler(int) { _exit(7); }
}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "own") == 0) signal(SIGTERM, OwnHandler);
    {
        SPYRE_TRACE_SCOPE("before_the_signal");
        usleep(1000);
    }
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) pause();
}
