// SPDX-License-Identifier: Apache-2.0
// Bounds the daemon's log lines about refused accesses. Every refusal is
// logged, naming both pids (docs/security.md), but a process that holds
// nothing could otherwise fill the disk with them: 16 threads hammering a
// held function's files wrote 88,000 lines in 24 s (probe of 6 Dec). A
// token bucket: kBurst lines at once, kPerSecond a second after; the
// refusals left out are counted and said with the next line.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>

#include "log.hpp"

namespace spyre::mockdev {

class RefusalLog {
public:
    using Clock = std::chrono::steady_clock;
    static constexpr double kBurst = 20;
    static constexpr double kPerSecond = 10;

    // Whether to log a refusal made at `now`; if so, `*left_out` is how
    // many were not logged since the last line that was.
    bool Admit(Clock::time_point now, uint64_t* left_out) {
        std::lock_guard lock(mu_);
        if (started_) {
            const double seconds = std::chrono::duration<double>(now - last_).count();
            if (seconds > 0) tokens_ = std::min(kBurst, tokens_ + seconds * kPerSecond);
        }
        started_ = true;
        last_ = std::max(last_, now);
        if (tokens_ < 1) {
            ++left_out_;
            return false;
        }
        tokens_ -= 1;
        *left_out = left_out_;
        left_out_ = 0;
        return true;
    }

    static RefusalLog& Instance() {
        static RefusalLog log;
        return log;
    }

private:
    std::mutex mu_;
    double tokens_ = kBurst;
    bool started_ = false;
    Clock::time_point last_{};
    uint64_t left_out_ = 0;
};

}  // namespace spyre::mockdev

// LOG_WARN for a refused access, within the daemon's bound (RefusalLog).
#define LOG_REFUSAL(...)                                                                                           \
    do {                                                                                                           \
        uint64_t left_out_ = 0;                                                                                    \
        if (::spyre::mockdev::RefusalLog::Instance().Admit(::spyre::mockdev::RefusalLog::Clock::now(), &left_out_)) { \
            if (left_out_ != 0)                                                                                    \
                LOG_WARN("%llu more refused access(es) not logged (at most %d lines a second)",                  \
                         static_cast<unsigned long long>(left_out_), int(::spyre::mockdev::RefusalLog::kPerSecond)); \
            LOG_WARN(__VA_ARGS__);                                                                                 \
        }                                                                                                          \
    } while (0)
