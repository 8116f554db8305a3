// SPDX-License-Identifier: Apache-2.0
//
// The device clock: what completion records carry as timestamps
// (CLOCK_MONOTONIC in nanoseconds, comparable with the host's clock). The
// mock stamps completions with it and the trace stamps host events with it,
// so device and host spans need no alignment (docs/trace.md).
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

inline uint64_t DeviceClockNs() noexcept {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// A steady_clock reading on the device clock: libstdc++'s steady_clock is
// CLOCK_MONOTONIC, so a time already read serves without a second read.
inline uint64_t DeviceClockNs(std::chrono::steady_clock::time_point t) noexcept {
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

}  // namespace spyre
SPYRE_API_END
