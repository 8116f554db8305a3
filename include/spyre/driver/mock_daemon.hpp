// SPDX-License-Identifier: Apache-2.0
// Starts and stops a private spyre-mockdev: used by apps that find no device
// (the embedded default) and by every integration test fixture.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "spyre/driver_options.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::driver {

class MockDaemon {
public:
    // Spawns spyre-mockdev in its own process group (it also dies with this
    // process) and returns once the mount is live. Throws spyre::Error.
    static MockDaemon Start(MockOptions options = {});

    MockDaemon(MockDaemon&& other) noexcept;
    MockDaemon& operator=(MockDaemon&& other) noexcept;
    MockDaemon(const MockDaemon&) = delete;
    MockDaemon& operator=(const MockDaemon&) = delete;
    ~MockDaemon();

    const std::filesystem::path& mount() const noexcept { return mount_; }
    const std::string& shm_prefix() const noexcept { return shm_prefix_; }
    pid_t pid() const noexcept { return pid_; }
    bool running() const noexcept { return pid_ > 0; }

    // SIGTERM, then SIGKILL after a grace period; unmounts a stale mount,
    // removes leftover shared memory and the mount directory if it made it.
    // Returns the daemon's exit status as from waitpid (or -1 if not running).
    // It returns once the daemon has ended; a thread of its own reaps it
    // (mock_daemon.cpp says why). In a child forked since Start, the daemon
    // is the parent's: Stop (and the destructor) only let go of the child's
    // copy of the lifeline, and return -1.
    int Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

    // Sends a signal to the daemon without cleaning up (tests use it to
    // simulate a crash); Stop() still cleans up afterwards.
    void Signal(int sig) const;

    // Where spyre-mockdev is found: $SPYRE_MOCKDEV, next to the running
    // program, the build tree, the install prefix, then $PATH.
    static std::filesystem::path FindExecutable();

private:
    MockDaemon() = default;
    void Cleanup();

    pid_t pid_ = -1;
    pid_t started_by_ = -1;  // the process that started it: the only one that stops it
    int lifeline_ = -1;  // the write end of the daemon's --exit-with-fd pipe
    std::filesystem::path mount_;
    std::string shm_prefix_;
    bool own_mount_dir_ = false;
};

}  // namespace spyre::driver
SPYRE_API_END
