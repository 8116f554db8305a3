// SPDX-License-Identifier: Apache-2.0
// The waiting primitives every side of the stack uses: futex wait/wake on
// 32-bit words and the pause a spinning waiter issues between polls. Words in
// memory other processes map (the doorbell page, completion interrupts) need
// the shared futex ops; words private to one process use the cheaper private
// ops. Header-only and free of state, so the device (mockdev), the driver and
// the runtime all include it (docs/architecture.md).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

enum class FutexScope { Shared, Private };

// Sleeps while *word == expected, at most `timeout`. Returns false on
// timeout; spurious returns happen, so callers re-check their condition.
inline bool FutexWait(uint32_t* word, uint32_t expected, std::chrono::nanoseconds timeout,
                      FutexScope scope = FutexScope::Shared) {
    timespec ts{};
    ts.tv_sec = time_t(timeout.count() / 1'000'000'000);
    ts.tv_nsec = long(timeout.count() % 1'000'000'000);
    int op = scope == FutexScope::Private ? (FUTEX_WAIT | FUTEX_PRIVATE_FLAG) : FUTEX_WAIT;
    long rc = ::syscall(SYS_futex, word, op, expected, &ts, nullptr, 0);
    return !(rc == -1 && errno == ETIMEDOUT);
}

inline void FutexWake(uint32_t* word, int count = INT_MAX, FutexScope scope = FutexScope::Shared) {
    int op = scope == FutexScope::Private ? (FUTEX_WAKE | FUTEX_PRIVATE_FLAG) : FUTEX_WAKE;
    ::syscall(SYS_futex, word, op, count, nullptr, nullptr, 0);
}

// The same on a std::atomic<uint32_t> (the same bytes as a plain u32).
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex words are plain u32");
inline bool FutexWait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout,
                      FutexScope scope) {
    return FutexWait(reinterpret_cast<uint32_t*>(word), expected, timeout, scope);
}
inline void FutexWake(std::atomic<uint32_t>* word, FutexScope scope, int count = INT_MAX) {
    FutexWake(reinterpret_cast<uint32_t*>(word), count, scope);
}

// Spins of a polling waiter between two looks at the clock (timeouts, spin
// budgets): a read costs about 35 ns in a VM, as much as a NOP on the device.
inline constexpr uint32_t kSpinsPerClockRead = 64;

// What a spinning waiter does between two polls: tells the core to yield
// its pipeline to the other hyperthread and saves power.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
}

}  // namespace spyre
SPYRE_API_END
