// SPDX-License-Identifier: Apache-2.0
#include "heartbeat_watch.hpp"

#include <cerrno>
#include <cstdlib>

#include "spyre/error.hpp"

namespace spyre::driver {

std::chrono::milliseconds HeartbeatWatch::BoundFromEnvironment() {
    const char* env = std::getenv("SPYRE_HEARTBEAT_TIMEOUT_MS");
    if (!env || !*env) return kDefaultBound;
    char* end = nullptr;
    errno = 0;
    const unsigned long long ms = std::strtoull(env, &end, 10);
    const bool number = *env >= '0' && *env <= '9' && end && *end == '\0' && errno == 0;
    if (!number || (ms != 0 && (ms < uint64_t(kMinBound.count()) || ms > 86400000ull)))
        throw Error(ErrorKind::InvalidArgument,
                    std::string("SPYRE_HEARTBEAT_TIMEOUT_MS=") + env + " is not 0 (never) or a number of milliseconds from " +
                        std::to_string(kMinBound.count()) + " to 86400000");
    return std::chrono::milliseconds(ms);
}

bool HeartbeatWatch::Still(uint32_t beat, int64_t now_ns) {
    std::lock_guard lock(mu_);
    if (!seen_ || beat != beat_ || now_ns - last_look_ns_ > bound_ns_ / 2) {
        seen_ = true;
        beat_ = beat;
        since_ns_ = now_ns;
    }
    last_look_ns_ = now_ns;
    return now_ns - since_ns_ >= bound_ns_;
}

}  // namespace spyre::driver
