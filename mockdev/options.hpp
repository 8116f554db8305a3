// SPDX-License-Identifier: Apache-2.0
//
// spyre-mockdev's settings (from the command line) and its exit codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "log.hpp"

namespace spyre::mockdev {

// Documented in the --help footer; scripts and the driver's spawner rely on them.
enum ExitCode : int {
    kExitOk = 0,
    kExitInternal = 1,
    kExitUsage = 2,
    kExitMountPoint = 3,
    kExitShmPrefixInUse = 4,
    kExitFuseMount = 5,
};

struct Options {
    std::string mount;             // canonical absolute path once checked
    unsigned cards = 1;            // 1..16
    unsigned vfs = 0;              // VFs enabled per card at start, 0..16
    uint64_t mem_size = 128ull << 30;  // per card, sparse
    std::string shm_prefix;        // empty: "spyre-<pid of the serving process>"
    bool foreground = false;
    LogLevel log_level = LogLevel::Info;
    int ready_fd = -1;             // written "ready\n" and closed once the mount is live
    unsigned poll_us = 50;         // server spin budget before it sleeps
    unsigned cores = 0;            // compute workers per card; 0 = min(32, hardware threads)
    unsigned watchdog_ms = 10000;  // WATCHDOG_MS: bound on one CB's run time
};

constexpr size_t kShmPrefixMax = 32;

}  // namespace spyre::mockdev
