// SPDX-License-Identifier: Apache-2.0
#include "forked.hpp"

#include <pthread.h>

#include <atomic>

#include "spyre/error.hpp"

namespace spyre::detail {

namespace {
std::atomic<uint64_t> g_fork_generation{0};
// Registered when the library loads, so the check on every enqueue and wait
// is one load (a function-local static added its guard's load to it).
const bool g_fork_hook_registered = [] {
    ::pthread_atfork(nullptr, nullptr, [] { g_fork_generation.fetch_add(1, std::memory_order_relaxed); });
    return true;
}();
}  // namespace

uint64_t ForkGeneration() noexcept { return g_fork_generation.load(std::memory_order_relaxed); }

void MadeInProcess::Throw(const char* call, const char* what, const char* again) const {
    Throw(made_by_, call, what, std::string("the ") + what + "'s threads stayed with the parent", again);
}

void MadeInProcess::Throw(pid_t made_by, const char* call, const char* what, const std::string& because,
                          const char* again) {
    throw Error(ErrorKind::InvalidArgument, std::string(call) + ": this " + what + " was created by process " +
                                                std::to_string(made_by) + " before it forked: process " +
                                                std::to_string(::getpid()) + " (a child) cannot use it, since " +
                                                because + "; " + again);
}

}  // namespace spyre::detail
