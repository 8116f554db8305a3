// SPDX-License-Identifier: Apache-2.0
// A recording started by SPYRE_TRACE is written when the process ends by
// SIGTERM or SIGINT too (mpirun ends a job's other ranks with SIGTERM when
// one fails; a user stops a run with Ctrl-C), and when it crashes (abort,
// an uncaught exception, a fault): the trace is most wanted exactly then,
// and the exit handlers that write it do not run. Writing a file is not
// async-signal-safe, so the handler only writes the signal's number into a
// pipe; a thread of its own writes the trace, then ends the process with
// the same signal under its default action (so the exit status still says
// "killed by SIGTERM", or SIGSEGV with its core dump). The signalled
// thread waits in its handler meanwhile, while the saver writes: a program
// that raised SIGTERM itself and returned from main would otherwise exit
// under the saver. A saver stuck on a lock the waiting thread holds must
// not turn the signal into a hang: once it writes nothing for a while, a
// crashed thread removes the unfinished file and ends the process, and a
// SIGTERM or SIGINT thread goes on (the lock is freed, the saver ends the
// process). A signal the program handles (or ignores) already at load is
// left alone, and a handler the program installs later replaces this one.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <thread>

#include "spyre/error.hpp"
#include "trace/recorder.hpp"
#include "trace/trace_file.hpp"

namespace spyre::trace::detail {

namespace {

constexpr std::array<int, 2> kSignals = {SIGTERM, SIGINT};
constexpr std::array<int, 5> kCrashSignals = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
// How long a signalled thread waits for the trace: while the saver writes
// events, up to kSaverCapMs; kSaverStillMs once it writes none (stuck on a
// lock the signalled thread holds, or not started).
constexpr int kSaverStillMs = 5000;
constexpr int kSaverCapMs = 120'000;

int g_pipe[2] = {-1, -1};
pid_t g_pid = 0;  // the process that installed the handler (a forked child is not it)
std::atomic<pid_t> g_saver_tid{0};  // the saver thread: a crash there has nobody to wait for
std::atomic<bool> g_saved{false};    // the saver is done: a crashed thread waits no longer

// Whether the saver wrote the trace, waited for as said at kSaverStillMs.
bool WaitForTheSaver() {
    const timespec slice{0, 10'000'000};
    uint64_t seen = g_events_written.load(std::memory_order_relaxed);
    for (int waited = 0, still = 0; waited < kSaverCapMs && still < kSaverStillMs; waited += 10) {
        if (g_saved.load()) return true;
        nanosleep(&slice, nullptr);
        const uint64_t now = g_events_written.load(std::memory_order_relaxed);
        still = now == seen ? still + 10 : 0;
        seen = now;
    }
    return g_saved.load();
}

// Tells the saver thread: false when this process has none (a child forked
// without exec, a saver gone) or this is the saver itself.
bool TellTheSaver(int sig) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    return getpid() == g_pid && gettid() != g_saver_tid.load(std::memory_order_relaxed) &&
           write(g_pipe[1], &byte, 1) == 1;
}

// SIGTERM, SIGINT: the saver writes the trace and ends the process.
void OnSignal(int sig) {
    const int saved = errno;
    if (!TellTheSaver(sig)) {  // nobody to write the trace: end as if unhandled
        signal(sig, SIG_DFL);
        raise(sig);
    } else {
        (void)WaitForTheSaver();
    }
    errno = saved;
}

// A crash: the saver is told, and this thread waits until it has written
// the trace; then the signal takes its default action: raised again
// (abort), or, pending once the handler returns, delivered (a fault re-run).
void OnCrash(int sig) {
    const int saved = errno;
    if (TellTheSaver(sig) && !WaitForTheSaver()) TraceFile::UndoUnfinished();
    signal(sig, SIG_DFL);
    raise(sig);
    errno = saved;
}

void SaveThenEnd() {
    g_saver_tid.store(gettid(), std::memory_order_relaxed);
    unsigned char byte = 0;
    for (;;) {
        const ssize_t n = read(g_pipe[0], &byte, 1);
        if (n == 1) break;
        if (n < 0 && errno == EINTR) continue;
        return;  // the pipe is gone: nothing to save for
    }
    try {
        Stop();
    } catch (const Error& e) {
        // Said, as at a normal exit (a signal lost it without a word:
        // found probing); the process still ends by its signal.
        std::fprintf(stderr, "spyre: SPYRE_TRACE: %s; the trace is lost\n", e.message().c_str());
    } catch (...) {
        std::fprintf(stderr, "spyre: SPYRE_TRACE: the trace could not be written; the trace is lost\n");
    }
    const int sig = byte;
    // The process-wide signal below waits for a thread that does not block
    // it: a crashed thread (blocking its own in the handler) ends itself.
    g_saved.store(true);
    signal(sig, SIG_DFL);
    kill(getpid(), sig);
}

}  // namespace

void SaveOnTerminatingSignals() noexcept {
    if (g_pid != 0) return;  // once per process
    if (pipe2(g_pipe, O_CLOEXEC) != 0) return;
    g_pid = getpid();
    // The thread takes no signal itself (it must be free to write the trace).
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
        std::thread(SaveThenEnd).detach();
    } catch (...) {
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        return;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    const auto install = [](int sig, void (*handler)(int), int flags) {
        struct sigaction current {};
        if (sigaction(sig, nullptr, &current) != 0) return;
        if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) return;  // the program's
        struct sigaction mine {};
        mine.sa_handler = handler;
        sigemptyset(&mine.sa_mask);
        mine.sa_flags = flags;
        sigaction(sig, &mine, nullptr);
    };
    for (const int sig : kSignals) install(sig, OnSignal, SA_RESTART);
    for (const int sig : kCrashSignals) install(sig, OnCrash, 0);
}

}  // namespace spyre::trace::detail
