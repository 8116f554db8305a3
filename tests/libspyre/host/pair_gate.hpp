// SPDX-License-Identifier: Apache-2.0
// A gate for chip functions that must be in flight two at once: each caller
// waits (10 s at most, then Timeout naming `what`) until the other of its
// pair has arrived. Run one at a time, a pair never completes.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "spyre/error.hpp"

namespace spyre::l3 {

inline void WaitForPartner(std::atomic<int>& arrived, const std::string& what) {
    const int pair_complete = (arrived.fetch_add(1) + 2) / 2 * 2;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < pair_complete) {
        if (std::chrono::steady_clock::now() > deadline)
            throw Error(ErrorKind::Timeout, "the other " + what + " never started beside this one");
        std::this_thread::yield();
    }
}

}  // namespace spyre::l3
