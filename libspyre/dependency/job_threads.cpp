// SPDX-License-Identifier: Apache-2.0
#include "dependency/job_threads.hpp"

#include <pthread.h>

#include <algorithm>
#include <string>
#include <utility>

#include "spyre/error.hpp"

namespace spyre::dependency {

namespace {
thread_local int tl_index = 0;
thread_local JobThreads* tl_pool = nullptr;
// A lone thread's jobs taken out of the queue in one batch and not yet
// run: RunOneQueued on that thread (a job that waits) takes from here first.
thread_local std::deque<JobThreads::Job>* tl_batch = nullptr;
}  // namespace

int JobThreads::CurrentIndex() noexcept { return tl_index; }
JobThreads* JobThreads::Current() noexcept { return tl_pool; }

bool JobThreads::RunOneQueued(const std::function<bool(const void* item)>& skip) {
    auto wanted = [&](const Job& j) { return !skip || !skip(j.item); };
    Job job;
    auto in_batch = tl_batch ? std::find_if(tl_batch->begin(), tl_batch->end(), wanted) : std::deque<Job>::iterator();
    if (tl_batch && in_batch != tl_batch->end()) {
        job = std::move(*in_batch);
        tl_batch->erase(in_batch);
    } else {
        std::lock_guard lock(mu_);
        const auto it = std::find_if(jobs_.begin(), jobs_.end(), wanted);
        if (it == jobs_.end()) return false;
        job = std::move(*it);
        jobs_.erase(it);
        queued_.store(jobs_.size(), std::memory_order_release);
    }
    job.run();  // nested in a job this thread runs: it counts in running_ already
    return true;
}

bool JobThreads::RunOneOf(const void* owner) {
    Job job;
    {
        std::lock_guard lock(mu_);
        if (!HasRoom()) return false;
        auto it = std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.owner == owner; });
        if (it == jobs_.end()) return false;
        TakeRoom();
        job = std::move(*it);
        jobs_.erase(it);
        queued_.store(jobs_.size(), std::memory_order_release);
    }
    RunAsHelper(job);
    return true;
}

bool JobThreads::TakeOneOf(const void* owner, const std::function<bool(const void* item)>& want, Job& out) {
    std::lock_guard lock(mu_);
    auto it = std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.owner == owner && want(j.item); });
    if (it == jobs_.end()) return false;
    out = std::move(*it);
    jobs_.erase(it);
    queued_.store(jobs_.size(), std::memory_order_release);
    return true;
}

bool JobThreads::RunHere(Job& job) {
    {
        std::lock_guard lock(mu_);
        if (!HasRoom()) return false;
        TakeRoom();
    }
    RunAsHelper(job);
    return true;
}

bool JobThreads::HasRoom() const noexcept {
    return running_.load(std::memory_order_relaxed) < count_ && !stop_.load(std::memory_order_relaxed);
}

void JobThreads::TakeRoom() noexcept {
    running_.fetch_add(1, std::memory_order_relaxed);
    ++helpers_;
}

void JobThreads::RunAsHelper(Job& job) {
    // As one of the pool's threads: a job that waits on a nested run runs
    // this pool's queued jobs (RunOneQueued), and the trace names its track.
    JobThreads* const pool = std::exchange(tl_pool, this);
    const int index = std::exchange(tl_index, kHelperIndex);
    std::deque<Job>* const batch = std::exchange(tl_batch, nullptr);
    job.run();
    tl_pool = pool, tl_index = index, tl_batch = batch;
    std::lock_guard lock(mu_);
    running_.fetch_sub(1, std::memory_order_relaxed);
    --helpers_;
    // Under the lock, as PostAll: the destructor may be waiting for this
    // helper, and a pool thread for the room it leaves when jobs are
    // queued. With none queued no pool thread wants the room, and waking
    // one (or keeping a looking one awake) for nothing would cost a
    // core's worth of spinning per job run here (RunHere).
    if (!jobs_.empty() || stop_.load(std::memory_order_relaxed)) wake_.Notify();
}

JobThreads::JobThreads(int threads, std::string name) : count_(threads) {
    try {
        threads_.reserve(size_t(std::max(threads, 0)));
        for (int i = 0; i < threads; ++i) {
            threads_.emplace_back([this, i] { Loop(i); });
            const std::string thread_name = (name + "-" + std::to_string(i)).substr(0, 15);
            pthread_setname_np(threads_.back().native_handle(), thread_name.c_str());
        }
    } catch (const std::exception& e) {  // out of threads or memory: the ones made stop, nothing aborts
        const size_t made = threads_.size();
        Stop();
        throw Error(ErrorKind::OutOfMemory, "cannot start " + std::to_string(threads) + " host threads (" +
                                                std::to_string(made) + " started): " + e.what());
    }
}

JobThreads::~JobThreads() { Stop(); }

void JobThreads::Stop() noexcept {
    {
        std::unique_lock lock(mu_);
        stop_.store(true, std::memory_order_release);
        wake_.NotifyAll();
        // A waiter's job may end the last run while the waiter is still in
        // RunOneOf: it leaves under the lock.
        while (helpers_ != 0) wake_.SleepUnlocked(lock, [&] { return helpers_ == 0; }, std::chrono::seconds(1));
    }
    for (auto& t : threads_) t.join();
    threads_.clear();
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

void JobThreads::Post(std::function<void()> run, const void* owner) { Post(Job{std::move(run), owner}); }

void JobThreads::Post(Job job) {
    std::vector<Job> one;
    one.push_back(std::move(job));
    PostAll(one);
}

void JobThreads::Loop(int index) {
    tl_index = index;
    tl_pool = this;
    std::deque<Job> batch;  // kept: swapping storage with jobs_ allocates nothing
    tl_batch = &batch;
    std::unique_lock lock(mu_);
    for (;;) {
        // Nothing queued, or every thread's room taken (waiters run jobs too).
        if (jobs_.empty() || running_.load(std::memory_order_relaxed) >= count_) {
            if (stop_.load(std::memory_order_relaxed) && jobs_.empty()) return;  // stopped and drained
            lock.unlock();
            if (!LookBeforeSleeping([&] { return Runnable(); }))
                wake_.SleepUnless([&] { return Runnable(); }, std::chrono::seconds(1));
            lock.lock();
            continue;
        }
        running_.fetch_add(1, std::memory_order_relaxed);
        if (count_ == 1) {
            // Alone in its pool: everything queued is its own to run, in
            // order, for one lock instead of one per job.
            batch.swap(jobs_);
            queued_.store(0, std::memory_order_release);
            lock.unlock();
            while (!batch.empty()) {  // a job that waits may run the next ones (RunOneQueued)
                Job job = std::move(batch.front());
                batch.pop_front();
                job.run();
            }
        } else {
            Job job = std::move(jobs_.front());
            jobs_.pop_front();
            queued_.store(jobs_.size(), std::memory_order_release);
            lock.unlock();
            job.run();
        }
        lock.lock();
        running_.fetch_sub(1, std::memory_order_relaxed);
    }
}

}  // namespace spyre::dependency
