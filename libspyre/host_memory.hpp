// SPDX-License-Identifier: Apache-2.0
// What this host can hold at most: its RAM and swap. A request past it is
// refused (OutOfMemory) before it is made: with overcommit the allocation
// may succeed and touching it bring the OOM killer, and under ASan a
// throwing operator new aborts instead of throwing.
#pragma once

#include <sys/sysinfo.h>

#include <cstdint>
#include <limits>

namespace spyre::detail {

// RAM + swap in bytes; the largest uint64_t when sysinfo fails.
inline uint64_t HostMemoryBytes() noexcept {
    struct sysinfo si {};
    if (::sysinfo(&si) != 0) return std::numeric_limits<uint64_t>::max();
    return (uint64_t(si.totalram) + uint64_t(si.totalswap)) * si.mem_unit;
}

}  // namespace spyre::detail
