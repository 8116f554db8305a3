// SPDX-License-Identifier: Apache-2.0
// AdaptiveMutex: glibc's adaptive mutex (PTHREAD_MUTEX_ADAPTIVE_NP), which
// spins a little before it sleeps. The task graph's and the level-3
// dispatcher's locks are held for a few hundred nanoseconds at a time by a
// submitter and its executors on other cores; a plain mutex put each
// contender to sleep and woke it with a futex call, which cost more than the
// critical section it waited for.
#pragma once

#include <pthread.h>

namespace spyre {

class AdaptiveMutex {
public:
    AdaptiveMutex() {
        pthread_mutexattr_t attr;
        pthread_mutexattr_init(&attr);
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
        pthread_mutex_init(&mu_, &attr);
        pthread_mutexattr_destroy(&attr);
    }
    ~AdaptiveMutex() { pthread_mutex_destroy(&mu_); }
    AdaptiveMutex(const AdaptiveMutex&) = delete;
    AdaptiveMutex& operator=(const AdaptiveMutex&) = delete;

    void lock() noexcept { pthread_mutex_lock(&mu_); }
    bool try_lock() noexcept { return pthread_mutex_trylock(&mu_) == 0; }
    void unlock() noexcept { pthread_mutex_unlock(&mu_); }

private:
    pthread_mutex_t mu_;
};

}  // namespace spyre
