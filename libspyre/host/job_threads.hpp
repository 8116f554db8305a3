// SPDX-License-Identifier: Apache-2.0
// Host threads that run jobs in FIFO order: one per device (its chip tasks
// run one at a time, in placement order) and the SubWorker pool. A thread
// that runs out of jobs looks for the next one for kSpin (yielding the CPU
// between looks), then sleeps on a condition variable: a job posted soon
// after the last (the next run's, a consumer's) skips the wake-up, and an
// idle Worker burns no core (these machines have 2).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace spyre::host {

class JobThreads {
public:
    explicit JobThreads(int threads);
    ~JobThreads();  // runs what is queued, then joins
    JobThreads(const JobThreads&) = delete;
    JobThreads& operator=(const JobThreads&) = delete;

    // `job` must not throw (the scheduler's jobs catch everything).
    void Post(std::function<void()> job);

    static constexpr std::chrono::microseconds kSpin{50};

    // Which of its pool's threads runs the calling job (0..threads-1): the
    // trace names a SubWorker's track by it.
    static int CurrentIndex() noexcept;

private:
    void Loop(int index);
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    std::atomic<size_t> queued_{0};  // jobs_.size(), readable without the lock
    bool stop_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace spyre::host
