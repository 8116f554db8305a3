// SPDX-License-Identifier: Apache-2.0
// What an app may choose about the driver beneath a Device or a Host (the DMA
// path, how waits wait, the private mock, the kind of function) without
// including the driver level (spyre/driver/*.hpp): DeviceOptions and
// HostOptions hold these by value.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "spyre/export.h"

SPYRE_API_BEGIN
namespace spyre::driver {

enum class FunctionKind { PF, VF };

// How completion waits wait (the CB ring, Synchronize).
enum class WaitMode {
    Poll,      // spin on the completion ring: lowest latency, burns a core
    Adaptive,  // spin for a short budget, then block
    Blocking,  // sleep on the completion interrupt right away
};
const char* ToString(WaitMode mode) noexcept;

// IoUring: every chunk is an io_uring request. Engines: every chunk is a
// memcpy by a copy engine; also what runs where io_uring is unavailable.
enum class DmaBackend { IoUring, Engines, Fallback = Engines };
// The default path, chosen by measurement (docs/dma.md): the copy engines,
// since the kernel's tmpfs copy runs at about half a memcpy here.
inline constexpr DmaBackend kDefaultDmaBackend = DmaBackend::Engines;
const char* ToString(DmaBackend backend) noexcept;

struct DmaOptions {
    // The path for chunks; nullopt = kDefaultDmaBackend. The environment
    // variable SPYRE_DMA=io_uring|engines|fallback overrides it.
    std::optional<DmaBackend> backend;
    // Where io_uring is asked for but its set-up fails (seccomp, old
    // kernels): false = run on the copy engines (backend() and
    // backend_reason() say so), true = throw Unsupported.
    bool require_io_uring = false;
    uint64_t chunk_bytes = 4ull << 20;     // size of the chunks of a large copy
    unsigned queue_depth = 16;             // io_uring submission queue entries per ring
    uint64_t inline_threshold = 1ull << 20; // copies up to this size use the fast path
    // Called once each time a copy (ticket) completes, successfully or not,
    // after its completion is visible to Poll and Wait: on a worker or
    // completion thread of the queue, in a thread waiting in Wait (which
    // copies its ticket's chunks that no worker has started), or in the calling thread before
    // HostToDevice/DeviceToHost/DeviceToDevice returns for a copy done there
    // (so possibly before the caller has the ticket). Meant for waking a
    // thread; it must be thread-safe, must not throw, and must stay callable
    // until the queue is destroyed. It may call Poll.
    std::function<void()> on_complete;
};

// A private spyre-mockdev (MockDaemon, spyre/driver/mock_daemon.hpp).
struct MockOptions {
    int cards = 1;
    int vfs = 2;
    std::string mem = "128G";          // per card; sparse, costs only what is touched
    std::string log_level;             // empty: SPYRE_LOG_LEVEL if set, else warn (docs/logging.md)
    std::filesystem::path mount;       // empty: a fresh directory under $TMPDIR
    std::string shm_prefix;            // empty: unique per daemon
    // More spyre-mockdev options, after the ones Start gives (among them
    // "--cpus all", or SPYRE_MOCK_CPUS: the daemon runs on every CPU, not
    // on this process's binding; {"--cpus", "inherit"} or a list here
    // overrides both).
    std::vector<std::string> extra_args;  // (a NUL byte in any string here is InvalidArgument)
    // How long the start waits for the daemon to be ready: positive
    // (InvalidArgument otherwise); Timeout when it runs out.
    std::chrono::milliseconds start_timeout{15000};
};

}  // namespace spyre::driver
SPYRE_API_END
