// SPDX-License-Identifier: Apache-2.0
//
// A bound on a benchmark or example run: a hang is reported, not waited out.
// A HangWatchdog starts a thread that sleeps until the deadline; if the
// program has not finished (destroyed the watchdog) or made progress
// (called Phase(), which restarts the bound) by then, it prints which
// program hung and in which phase, and ends the process with exit code 124
// (as timeout(1) does). An embedded spyre-mockdev dies with the program
// (PR_SET_PDEATHSIG), so nothing is left behind.
//
// The bound can be changed without a rebuild: SPYRE_HANG_TIMEOUT_S=N (seconds,
// 0 disables the watchdog).
#pragma once

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace spyre::support {

class HangWatchdog {
public:
    static constexpr int kExitCode = 124;

    HangWatchdog(std::string program, std::chrono::seconds bound, std::string phase = "start")
        : program_(std::move(program)), bound_(BoundFromEnv(bound)), phase_(std::move(phase)) {
        if (bound_.count() == 0) return;
        deadline_ = Clock::now() + bound_;
        thread_ = std::thread([this] { Watch(); });
    }
    ~HangWatchdog() {
        {
            std::lock_guard lock(mu_);
            done_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
    }
    HangWatchdog(const HangWatchdog&) = delete;
    HangWatchdog& operator=(const HangWatchdog&) = delete;

    // Progress: names what runs now and gives it a fresh bound.
    void Phase(std::string what) {
        std::lock_guard lock(mu_);
        phase_ = std::move(what);
        deadline_ = Clock::now() + bound_;
    }

    std::chrono::seconds bound() const { return bound_; }

private:
    using Clock = std::chrono::steady_clock;

    static std::chrono::seconds BoundFromEnv(std::chrono::seconds fallback) {
        const char* v = std::getenv("SPYRE_HANG_TIMEOUT_S");
        if (!v || !*v) return fallback;
        char* end = nullptr;
        const long s = std::strtol(v, &end, 10);
        if (*end != '\0' || s < 0) {
            std::fprintf(stderr, "SPYRE_HANG_TIMEOUT_S=%s is not a number of seconds; using %llds\n", v,
                         static_cast<long long>(fallback.count()));
            return fallback;
        }
        return std::chrono::seconds(s);
    }

    void Watch() {
        std::unique_lock lock(mu_);
        while (!done_) {
            if (Clock::now() >= deadline_) {
                std::fprintf(stderr, "%s: HUNG: no progress for %llds in phase \"%s\"; exiting with %d\n",
                             program_.c_str(), static_cast<long long>(bound_.count()), phase_.c_str(), kExitCode);
                std::fflush(stdout);
                std::fflush(stderr);
                ::_exit(kExitCode);
            }
            cv_.wait_until(lock, deadline_);
        }
    }

    std::string program_;
    std::chrono::seconds bound_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::string phase_;
    Clock::time_point deadline_{};
    bool done_ = false;
    std::thread thread_;
};

}  // namespace spyre::support
