// SPDX-License-Identifier: Apache-2.0
// A program that records (SPYRE_TRACE, set by the test) and waits to be
// ended by a signal: trace_test's SignalledProcess tests start it.
//   trace_signal_helper            records a span, says "ready", waits
//   trace_signal_helper own        the same after installing its own SIGTERM
//                                  handler, which exits with status 7
//   trace_signal_helper fork       records a span, forks a child (no exec),
//                                  says "child <pid>" and exits 0; the child
//                                  records a span and exits 0 once the
//                                  parent is gone (its pipe closed)
//   trace_signal_helper small      records 1,000 spans under a file-size
//                                  limit of 8 KiB and exits 0: the trace
//                                  cannot be written whole at exit
//   trace_signal_helper small_signal  the same, then raises SIGTERM
//   trace_signal_helper abort|throw|segv
//                                  records a span, then crashes: abort(),
//                                  an uncaught exception, a store to null
//   trace_signal_helper raise      records a span and 200,000 more (a trace
//                                  that takes a while to write), raises
//                                  SIGTERM itself and returns 0 from main
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "spyre/trace/trace.hpp"

namespace {
void OwnHandler(int) { _exit(7); }
bool g_forked_child = false;
}  // namespace

// LeakSanitizer's check at exit takes every lock of the allocator; in a
// child forked while another thread of the parent held one (the recording's
// threads allocate) it waits for ever. A forked child's leaks are the
// parent's anyway: not checked there.
extern "C" int __lsan_is_turned_off() { return g_forked_child ? 1 : 0; }

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "own") == 0) signal(SIGTERM, OwnHandler);
    if (argc > 1 && (std::strcmp(argv[1], "small") == 0 || std::strcmp(argv[1], "small_signal") == 0)) {
        signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails (EFBIG) instead of ending the process
        const rlimit limit{8192, 8192};
        if (setrlimit(RLIMIT_FSIZE, &limit) != 0) return 1;
        for (int i = 0; i < 1000; ++i) SPYRE_TRACE_SCOPE("filling");
        if (std::strcmp(argv[1], "small_signal") == 0) raise(SIGTERM);
        return 0;
    }
    {
        SPYRE_TRACE_SCOPE("before_the_signal");
        usleep(1000);
    }
    if (argc > 1 && std::strcmp(argv[1], "raise") == 0) {
        for (int i = 0; i < 200'000; ++i) SPYRE_TRACE_SCOPE("filling");
        raise(SIGTERM);
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "abort") == 0) std::abort();
    if (argc > 1 && std::strcmp(argv[1], "throw") == 0) throw std::runtime_error("uncaught");
    if (argc > 1 && std::strcmp(argv[1], "segv") == 0) {
        volatile int* volatile nowhere = nullptr;
        *nowhere = 1;
    }
    if (argc > 1 && std::strcmp(argv[1], "fork") == 0) {
        int gate[2];
        if (pipe(gate) != 0) return 1;
        const pid_t child = fork();
        if (child == 0) {
            g_forked_child = true;
            close(gate[1]);
            char c;
            while (read(gate[0], &c, 1) > 0) {
            }
            {
                SPYRE_TRACE_SCOPE("in_the_child");
                usleep(1000);
            }
            std::exit(0);
        }
        close(gate[0]);
        std::printf("child %d\n", int(child));
        std::fflush(stdout);
        return 0;  // the trace is written at exit; then the gate closes
    }
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) pause();
}
