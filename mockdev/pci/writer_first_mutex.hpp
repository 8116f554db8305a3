// SPDX-License-Identifier: Apache-2.0
//
// A shared mutex whose waiting writer goes before the readers that come
// after it. Any process may read a card's files, each read holding the
// card's holder lock shared (Card::KeepingHolders): with glibc's default
// rwlock (std::shared_mutex), new readers keep getting in while a writer
// waits, so enough reading threads could hold off an open or a release
// for as long as they read. Not recursive: a thread holding it shared must
// not take it again (a writer waiting between would wait for that thread).
#pragma once

#include <pthread.h>

namespace spyre::mockdev {

class WriterFirstMutex {
public:
    WriterFirstMutex() {
        pthread_rwlockattr_t attr;
        pthread_rwlockattr_init(&attr);
        pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&lock_, &attr);
        pthread_rwlockattr_destroy(&attr);
    }
    ~WriterFirstMutex() { pthread_rwlock_destroy(&lock_); }
    WriterFirstMutex(const WriterFirstMutex&) = delete;
    WriterFirstMutex& operator=(const WriterFirstMutex&) = delete;

    void lock() { pthread_rwlock_wrlock(&lock_); }
    bool try_lock() { return pthread_rwlock_trywrlock(&lock_) == 0; }
    void unlock() { pthread_rwlock_unlock(&lock_); }
    void lock_shared() { pthread_rwlock_rdlock(&lock_); }
    bool try_lock_shared() { return pthread_rwlock_tryrdlock(&lock_) == 0; }
    void unlock_shared() { pthread_rwlock_unlock(&lock_); }

private:
    pthread_rwlock_t lock_;
};

}  // namespace spyre::mockdev
