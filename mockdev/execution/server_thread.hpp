// SPDX-License-Identifier: Apache-2.0
//
// What the device's queue servers (the CB ring's, the task queues') share:
// how long they sleep and re-check, and how their threads start.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>

namespace spyre::mockdev {

// Bound on one futex sleep of a server: a lost wake-up (a driver that
// skipped the device_sleeping check) costs at most this much latency.
inline constexpr std::chrono::seconds kServerSleepTimeout{1};
// How often work held back by a full CQ is looked at again: the driver frees
// CQ space by writing cq_head, which wakes nobody.
inline constexpr std::chrono::microseconds kCqFullRetry{50};

// Starts `body` on a thread named `name` (15 characters kept) with every
// signal blocked from its first instruction on: signals belong to the FUSE
// loop's thread.
template <typename Body>
std::thread StartServerThread(const std::string& name, Body&& body) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    std::thread thread(std::forward<Body>(body));
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    pthread_setname_np(thread.native_handle(), name.substr(0, 15).c_str());
    return thread;
}

}  // namespace spyre::mockdev
