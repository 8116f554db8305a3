// SPDX-License-Identifier: Apache-2.0
//
// Card-wide policy: set by the daemon (command line) and by the PF through a
// trapped register write, never read back from a register a function can
// store to through its mapping. The device model reads it only from here.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

namespace spyre::mockdev {

// What the watchdog bound may be set to, by --watchdog-ms or the PF's
// holder: 1 ms to an hour. 0 or more would let CBs run without bound.
constexpr uint32_t kWatchdogMsMin = 1;
constexpr uint32_t kWatchdogMsMax = 3'600'000;

struct CardPolicy {
    // Bound on one CB's (or task's) run time; WATCHDOG_MS mirrors it.
    std::atomic<uint32_t> watchdog_ms{10000};
    // Set by the card: after the PF's holder changed the policy, brings every
    // function's mapped WATCHDOG_MS up to date (a driver reads its registers
    // through its mapping, which no trap refreshes).
    std::function<void()> mirror_everywhere;
};

}  // namespace spyre::mockdev
