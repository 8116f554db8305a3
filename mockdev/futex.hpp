// SPDX-License-Identifier: Apache-2.0
//
// Futex wait/wake. Doorbell-page words live in shm objects mapped by other
// processes and need the shared futex ops; words private to the daemon use
// the cheaper private ops.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

namespace spyre::mockdev {

enum class FutexScope { Shared, Private };

inline int FutexOp(int op, FutexScope scope) { return scope == FutexScope::Private ? (op | FUTEX_PRIVATE_FLAG) : op; }

// Sleeps while *word == expected, at most `timeout`. Returns false on timeout.
inline bool FutexWait(uint32_t* word, uint32_t expected, std::chrono::nanoseconds timeout,
                      FutexScope scope = FutexScope::Shared) {
    timespec ts{};
    ts.tv_sec = time_t(timeout.count() / 1'000'000'000);
    ts.tv_nsec = long(timeout.count() % 1'000'000'000);
    long rc = ::syscall(SYS_futex, word, FutexOp(FUTEX_WAIT, scope), expected, &ts, nullptr, 0);
    return !(rc == -1 && errno == ETIMEDOUT);
}

inline void FutexWake(uint32_t* word, int count = INT_MAX, FutexScope scope = FutexScope::Shared) {
    ::syscall(SYS_futex, word, FutexOp(FUTEX_WAKE, scope), count, nullptr, nullptr, 0);
}

}  // namespace spyre::mockdev
