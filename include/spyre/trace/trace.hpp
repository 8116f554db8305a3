// SPDX-License-Identifier: Apache-2.0
// A timeline of what the stack did, in the Chrome trace-event JSON format
// (Perfetto and chrome://tracing open it): host API calls on each thread,
// each stream's operations, control blocks on the device (from the
// completion records' device timestamps), DMA transfers, flow arrows from
// an enqueue to its operation, and counters. docs/trace.md lists the tracks.
//
// Recording starts with SPYRE_TRACE=path.json in the environment (when the
// library loads) or with Start(); the file is written by Stop() or when the
// process exits. Off, each probe costs one predictable branch on a relaxed
// load; on, a probe appends a fixed-size record to its thread's buffer, and
// nothing is formatted before Stop.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::trace {

namespace detail {
extern std::atomic<bool> g_enabled;
uint64_t NowNs() noexcept;
void ApiSpan(const char* name, uint64_t start_ns, uint64_t end_ns) noexcept;
// The start of the innermost Scope of this thread (0: none): work the call
// enqueues is stamped with it rather than with another clock read.
inline thread_local uint64_t tl_scope_start = 0;
template <typename Clock>
uint64_t ScopeStartOr(Clock clock) noexcept {
    return tl_scope_start ? tl_scope_start : clock();
}
}  // namespace detail

inline bool Enabled() noexcept { return detail::g_enabled.load(std::memory_order_relaxed); }

// Starts recording into `path`. A recording already running is first
// written to its own file, as Stop() writes it. Throws
// spyre::Error(InvalidArgument) if the file cannot be created (checked now,
// not at Stop).
void Start(const std::string& path);

// SPYRE_TRACE's path for this process: "%p" becomes the process id and
// "%r" the MPI rank (OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK; 0 when
// none is set). One of several MPI ranks whose path names neither gets
// ".rank<r>" before its extension, so ranks never write one file.
std::string ProcessTracePath(const std::string& path);

// Stops recording and writes the file; returns the events written (0 when
// nothing was recording). Throws spyre::Error(Io...) if the write fails.
size_t Stop();

// A span of the calling thread for as long as the object lives. `name`
// must outlive the recording (a string literal).
class Scope {
public:
    explicit Scope(const char* name) noexcept : name_(name) {
        if (Enabled()) [[unlikely]] {
            start_ = detail::NowNs();
            outer_ = detail::tl_scope_start;
            detail::tl_scope_start = start_;
        }
    }
    ~Scope() {
        if (start_ != 0) [[unlikely]] {
            detail::ApiSpan(name_, start_, detail::NowNs());
            detail::tl_scope_start = outer_;
        }
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

private:
    const char* name_;
    uint64_t start_ = 0;
    uint64_t outer_ = 0;
};

}  // namespace spyre::trace

#define SPYRE_TRACE_CONCAT2(a, b) a##b
#define SPYRE_TRACE_CONCAT(a, b) SPYRE_TRACE_CONCAT2(a, b)
// A span named `name` (a string literal) on the calling thread's track.
#define SPYRE_TRACE_SCOPE(name) ::spyre::trace::Scope SPYRE_TRACE_CONCAT(spyre_trace_scope_, __LINE__)(name)
SPYRE_API_END
