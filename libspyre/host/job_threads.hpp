// SPDX-License-Identifier: Apache-2.0
// Host threads that run jobs in FIFO order: one per device (its chip tasks
// run one at a time, in placement order) and the SubWorker pool. Idle
// threads sleep on a condition variable (these machines have 2 cores).
#pragma once

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

private:
    void Loop();
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    bool stop_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace spyre::host
