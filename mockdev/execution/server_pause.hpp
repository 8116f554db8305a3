// SPDX-License-Identifier: Apache-2.0
//
// A pause of a queue lane (the CB ring's, the task queues'). The pausing
// thread holds the server's exec mutex and waits until the server's thread
// has parked on it: until the pause ends the server touches nothing, so its
// registers and pages may be replaced meanwhile (a reset, a change of
// owner). Seeing the server awake is not enough: a server just out of its
// futex sleep still writes STATUS, CNT_WAKEUPS and device_sleeping, which
// would land in the next owner's fresh pages. Outside Park the server takes
// the mutex only through Enter, which never waits for it.
#pragma once

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <mutex>

#include "log.hpp"
#include "spyre/common/futex.hpp"

namespace spyre::mockdev {

class ServerPause {
public:
    bool requested() const { return requested_.load(); }

    // Server thread, on seeing requested(): waits on `exec_mutex` (the
    // pausing thread holds it) until the pause ends.
    void Park(std::mutex& exec_mutex) {
        Parked().store(1);
        FutexWake(&parked_, INT_MAX, FutexScope::Private);
        std::lock_guard wait_for_resume(exec_mutex);
        Parked().store(0);
    }

    // Server thread: the exec mutex for a turn of work, or an empty lock if
    // a pause holds it (the server then goes round to Park). A server that
    // waited for the mutex here would never park: the pause waited out
    // kParkLimit and then changed what the server had read without the
    // server having parked (TSan: the task queues cleared while the server read them).
    std::unique_lock<std::mutex> Enter(std::mutex& exec_mutex) {
        return std::unique_lock<std::mutex>(exec_mutex, std::try_to_lock);
    }

    // Pausing thread, holding the exec mutex: asks for the pause and waits
    // until the server parks, calling `wake` (out of its sleep) between
    // looks. `gone` tells that the server's thread has ended or is ending.
    template <typename Wake, typename Gone>
    void Begin(Wake&& wake, Gone&& gone) {
        // Only now that the mutex is ours: a server seeing the request
        // earlier would take and drop the mutex in a loop and could starve us.
        requested_.store(true);
        const auto deadline = std::chrono::steady_clock::now() + kParkLimit;
        while (Parked().load() == 0 && !gone()) {
            wake();
            if (std::chrono::steady_clock::now() > deadline) {
                LOG_ERROR("a device queue server did not stop for a pause within %lld ms",
                          static_cast<long long>(kParkLimit.count()));
                return;
            }
            FutexWait(&parked_, 0, kParkRetry, FutexScope::Private);
        }
    }

    void End() { requested_.store(false); }

private:
    static constexpr std::chrono::microseconds kParkRetry{20};
    static constexpr std::chrono::milliseconds kParkLimit{5000};

    std::atomic_ref<uint32_t> Parked() { return std::atomic_ref<uint32_t>(parked_); }

    std::atomic<bool> requested_{false};
    alignas(4) uint32_t parked_ = 0;  // private futex word: 1 while the server waits out a pause
};

}  // namespace spyre::mockdev
