// SPDX-License-Identifier: Apache-2.0
//
// Whether a device's heartbeat (the doorbell page's `heartbeat`, contract
// 3.3) has stood still for longer than the driver allows: a device that
// stopped (a device model stopped with SIGSTOP, a wedged card) writes no
// GONE, and its process still exists, so this is how a waiter learns it
// will wait for ever.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace spyre::driver {

class HeartbeatWatch {
public:
    // SPYRE_HEARTBEAT_TIMEOUT_MS, or the default bound when it is unset.
    // InvalidArgument for a value that is not a number of milliseconds, 0
    // (never) or at least kMinBound. A result of 0 means: do not watch.
    static std::chrono::milliseconds BoundFromEnvironment();
    static constexpr std::chrono::milliseconds kDefaultBound{10000};
    // Three heartbeat periods: a shorter bound would blame a busy host.
    static constexpr std::chrono::milliseconds kMinBound{300};

    explicit HeartbeatWatch(std::chrono::milliseconds bound) : bound_ns_(int64_t(bound.count()) * 1000000) {}

    // Looks at `beat`, read at `now_ns` (steady clock): true when it has not
    // moved for the bound. A look that comes more than half the bound after
    // the one before starts the count again: the caller was not running
    // (its process stopped, the VM paused) and cannot tell how long the
    // device was still. Thread-safe.
    bool Still(uint32_t beat, int64_t now_ns);

    std::chrono::milliseconds bound() const noexcept {
        return std::chrono::milliseconds(bound_ns_ / 1000000);
    }

private:
    const int64_t bound_ns_;
    std::mutex mu_;
    bool seen_ = false;
    uint32_t beat_ = 0;
    int64_t since_ns_ = 0;      // when `beat_` was first seen
    int64_t last_look_ns_ = 0;
};

}  // namespace spyre::driver
