// SPDX-License-Identifier: Apache-2.0
//
// spyre-mockdev's settings (from the command line) and its exit codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "frontend/cpu_affinity.hpp"
#include "log.hpp"
#include "spyre/mock/spyre_mock.h"

namespace spyre::mockdev {

// Documented in the --help footer; the values are the mock transport's
// (spyre/mock/spyre_mock.h), which scripts and the driver's spawner read.
enum ExitCode : int {
    kExitOk = SPYRE_MOCK_EXIT_OK,
    kExitInternal = SPYRE_MOCK_EXIT_INTERNAL,
    kExitUsage = SPYRE_MOCK_EXIT_USAGE,
    kExitMountPoint = SPYRE_MOCK_EXIT_MOUNT_POINT,
    kExitShmPrefixInUse = SPYRE_MOCK_EXIT_SHM_PREFIX_IN_USE,
    kExitFuseMount = SPYRE_MOCK_EXIT_FUSE_MOUNT,
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
    int exit_with_fd = -1;         // stop (as on SIGTERM) once it reads end of file: the spawner is gone
    unsigned poll_us = 50;         // server spin budget before it sleeps
    unsigned cores = 0;            // compute workers per card; 0 = min(32, hardware threads)
    unsigned watchdog_ms = 10000;  // WATCHDOG_MS: bound on one CB's run time
    bool remove_mount_dir = false;  // rmdir the mount point after unmounting (a spawner's private one)
    CpuChoice cpus;                 // where the daemon's threads run (--cpus; default: inherit)
};

constexpr size_t kShmPrefixMax = 32;
// The longest name the driver is told (card 15, VF 16, the registers) fits
// the mock transport's field with its NUL (Function's ShmName, NewShmFile).
static_assert(kShmPrefixMax + sizeof(".d/c15f16.regs.0123456789abcdef") <= SPYRE_MOCK_SHM_NAME_MAX);

}  // namespace spyre::mockdev
