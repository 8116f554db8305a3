// SPDX-License-Identifier: Apache-2.0
//
// Futex wait/wake on words in shared memory. The words live in shm objects
// mapped by other processes, so these are the shared (non-private) futex ops.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>

namespace spyre::mockdev {

// Sleeps while *word == expected, at most `timeout`. Returns false on timeout.
inline bool FutexWait(uint32_t* word, uint32_t expected, std::chrono::nanoseconds timeout) {
    timespec ts{};
    ts.tv_sec = time_t(timeout.count() / 1'000'000'000);
    ts.tv_nsec = long(timeout.count() % 1'000'000'000);
    long rc = ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
    return !(rc == -1 && errno == ETIMEDOUT);
}

inline void FutexWake(uint32_t* word, int count = INT_MAX) {
    ::syscall(SYS_futex, word, FUTEX_WAKE, count, nullptr, nullptr, 0);
}

}  // namespace spyre::mockdev
