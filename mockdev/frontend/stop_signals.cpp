// SPDX-License-Identifier: Apache-2.0
#include "frontend/stop_signals.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace spyre::mockdev {
namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};

// Written by the handler: one process has one set of stop signals.
volatile sig_atomic_t g_write_fd = -1;

void OnStopSignal(int sig) {
    const int saved = errno;
    const unsigned char byte = static_cast<unsigned char>(sig);
    const int fd = g_write_fd;
    if (fd >= 0) {
        ssize_t ignored = ::write(fd, &byte, 1);  // non-blocking: a full pipe has a stop waiting already
        (void)ignored;
    }
    errno = saved;
}

}  // namespace

StopSignals::StopSignals() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
    read_fd_ = fds[0];
    g_write_fd = fds[1];
    struct sigaction action {};
    action.sa_handler = OnStopSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int sig : kStopSignals) ::sigaction(sig, &action, nullptr);
}

// The pipe stays open until the process ends: a handler running on another
// thread at this moment may still write to it.
StopSignals::~StopSignals() {
    for (int sig : kStopSignals) ::signal(sig, SIG_IGN);
}

}  // namespace spyre::mockdev
