// SPDX-License-Identifier: Apache-2.0
// Internal: process-private futex waits on std::atomic<uint32_t> words, for
// the scheduler's wake-up and for Synchronize.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

namespace spyre {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex words are plain u32");

inline void FutexWaitFor(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
    timespec ts{static_cast<time_t>(timeout.count() / 1000000000), static_cast<long>(timeout.count() % 1000000000)};
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

inline void FutexWakeAll(std::atomic<uint32_t>* word) {
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
}

// True on the scheduler thread (host callbacks run there).
bool SchedulerThreadActive();

}  // namespace spyre
