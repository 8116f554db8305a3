// SPDX-License-Identifier: Apache-2.0
// Shared (non-private) futex calls on words in shared memory: the doorbell
// and the completion interrupt of the contract are futex words.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdint>

namespace spyre::driver {

// Sleeps while *word == expected, at most `timeout`. Spurious returns happen.
inline void FutexWait(uint32_t* word, uint32_t expected, std::chrono::nanoseconds timeout) {
    timespec ts{static_cast<time_t>(timeout.count() / 1000000000), static_cast<long>(timeout.count() % 1000000000)};
    ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void FutexWake(uint32_t* word, int count = INT_MAX) {
    ::syscall(SYS_futex, word, FUTEX_WAKE, count, nullptr, nullptr, 0);
}

}  // namespace spyre::driver
