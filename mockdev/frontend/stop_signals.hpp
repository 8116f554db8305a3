// SPDX-License-Identifier: Apache-2.0
// The daemon's stop signals (SIGTERM, SIGINT, SIGHUP) as bytes on a pipe.
// A handler of our own takes them on whichever thread the kernel picks (a
// thread a library started before main has them unblocked, so blocking
// them in our threads is not enough) and writes the signal's number to
// the pipe; the FUSE loop's stopper reads it (FuseFs::Loop). Nothing is
// lost while the loop is not up yet: the byte waits in the pipe.
#pragma once

namespace spyre::mockdev {

class StopSignals {
public:
    // Installs the handler; throws std::system_error when the pipe cannot
    // be made.
    StopSignals();
    // Ignores the stop signals from here on: a second one must not kill a
    // teardown halfway.
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;

    // Readable once a stop signal came; each byte is a signal's number.
    int fd() const noexcept { return read_fd_; }

private:
    int read_fd_ = -1;
};

}  // namespace spyre::mockdev
