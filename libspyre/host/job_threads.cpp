// SPDX-License-Identifier: Apache-2.0
#include "job_threads.hpp"

namespace spyre::host {

namespace {
thread_local int tl_index = 0;
}  // namespace

int JobThreads::CurrentIndex() noexcept { return tl_index; }

JobThreads::JobThreads(int threads) : count_(threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { Loop(i); });
}

JobThreads::~JobThreads() {
    {
        std::lock_guard lock(mu_);
        stop_.store(true, std::memory_order_release);
        wake_.NotifyAll();
    }
    for (auto& t : threads_) t.join();
}

// The wake-up is sent under the lock: a job posted may end the last run in
// flight, and the Worker may then destroy this pool (its destructor takes
// the lock first) while a poster that had released the lock still
// woke its threads (TSan found it: a SubWorker thread posting a chip task
// to a device's pool during Shutdown).
void JobThreads::PostAll(std::vector<Job>& jobs) {
    if (jobs.empty()) return;
    std::lock_guard lock(mu_);
    for (Job& job : jobs) jobs_.push_back(std::move(job));
    queued_.store(jobs_.size(), std::memory_order_release);
    wake_.Notify();
    jobs.clear();
}

void JobThreads::Post(Job job) {
    std::vector<Job> one;
    one.push_back(std::move(job));
    PostAll(one);
}

void JobThreads::Loop(int index) {
    tl_index = index;
    std::deque<Job> batch;  // kept: swapping storage with jobs_ allocates nothing
    std::unique_lock lock(mu_);
    for (;;) {
        if (jobs_.empty()) {
            if (stop_.load(std::memory_order_relaxed)) return;  // stopped and drained
            lock.unlock();
            if (!LookBeforeSleeping([&] { return Runnable(); }))
                wake_.SleepUnless([&] { return Runnable(); }, std::chrono::seconds(1));
            lock.lock();
            continue;
        }
        if (count_ == 1) {
            // Alone in its pool: everything queued is its own to run, in
            // order, for one lock instead of one per job.
            batch.swap(jobs_);
            queued_.store(0, std::memory_order_release);
            lock.unlock();
            for (Job& job : batch) job();
            batch.clear();
            lock.lock();
            continue;
        }
        Job job = std::move(jobs_.front());
        jobs_.pop_front();
        queued_.store(jobs_.size(), std::memory_order_release);
        lock.unlock();
        job();
        lock.lock();
    }
}

}  // namespace spyre::host
