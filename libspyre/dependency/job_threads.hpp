// SPDX-License-Identifier: Apache-2.0
// Host threads that run jobs in the order they are posted: the one thread
// pool of both orchestration levels. The host level keeps one per device,
// one thread per chip task it runs at once, and one for the SubWorkers; the
// orchestration runtime's host executor (CpuWorker) runs its worker loops
// on one. (The dispatcher
// posts after releasing its lock, so tasks two threads made ready at the
// same moment may arrive in either order; only ready tasks are posted.) A
// thread that runs out of jobs looks for the next one for kSpin (pausing,
// then yielding the CPU between looks), then sleeps on an EventCount: a job
// posted soon after the last (the next run's, a consumer's) skips the
// wake-up, and an idle Worker burns no core (these machines have 2).
//
// A thread outside the pool that waits for a run (its waiter) may run that
// run's queued jobs itself (RunOneOf) while the pool has a thread's room:
// it is awake already, and a pool thread asleep would take a wake-up (15-25
// us on these VMs) to start them. Jobs running, the pool's and the
// waiters' together, never exceed the pool's threads, so a device runs no
// more chip tasks at once than it has lanes.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "spyre/common/eventcount.hpp"
#include "spyre/common/futex.hpp"
#include "spyre/common/spin.hpp"

namespace spyre::dependency {

class JobThreads {
public:
    // OutOfMemory when the threads cannot all start (those that did stop).
    // Thread i is named `name`-i (top -H, perf, a trace's tracks; cut to
    // the 15 characters Linux keeps).
    explicit JobThreads(int threads, std::string name = "spyre-jobs");
    ~JobThreads();  // runs what is queued, then joins
    JobThreads(const JobThreads&) = delete;
    JobThreads& operator=(const JobThreads&) = delete;

    // `run` must not throw (the dispatcher's jobs catch everything).
    // `owner` (the run a task belongs to) lets that run's waiter take it.
    struct Job {
        std::function<void()> run;
        const void* owner = nullptr;
        const void* item = nullptr;  // what it runs (the dispatcher's task), for RunOneQueued's `skip`
    };
    void Post(std::function<void()> run, const void* owner = nullptr);
    void Post(Job job);
    // All of `jobs`, in order, under one lock (emptied): a run's ready
    // tasks reach a device thread in one hand-over, not one each.
    void PostAll(std::vector<Job>& jobs);

    static constexpr std::chrono::microseconds kSpin{50};
    // Of kSpin, how long a looker only pauses between looks before it
    // yields the CPU between them: a yield is a system call, about a
    // microsecond here, which a hand-over within a few microseconds (the
    // next chip task, a run's end) would otherwise wait for.
    static constexpr std::chrono::microseconds kPauseSpin{5};

    // Looks for `ready()` for up to kSpin (pausing, then yielding); false
    // when it is still not ready and the caller should sleep.
    template <typename Ready>
    static bool LookBeforeSleeping(Ready&& ready) {
        return SpinFor(ready, {kPauseSpin, kSpin - kPauseSpin}).ready;
    }

    // Which of its pool's threads runs the calling job (0..threads-1, or
    // kHelperIndex for a waiter running it): the trace names a SubWorker's
    // track by it.
    static int CurrentIndex() noexcept;
    static constexpr int kHelperIndex = -1;
    // The pool whose thread is calling, or null.
    static JobThreads* Current() noexcept;

    // For a thread of this pool that waits for work its pool may have to
    // run (a SubWorker waiting on a run that needs a SubWorker): runs the
    // first queued job whose item `skip` (when set) does not name, on the
    // calling thread; false when there is none. The pool's other threads
    // may all be waiting the same way.
    bool RunOneQueued(const std::function<bool(const void* item)>& skip = {});
    // Whether a job is queued for RunOneQueued (lock-free look).
    bool HasQueued() const noexcept { return queued_.load(std::memory_order_acquire) != 0; }

    // For a thread outside the pool waiting on `owner`: runs the first
    // queued job of `owner` on the calling thread, as one of the pool's
    // threads (JobThreads::Current() is this pool meanwhile), if fewer jobs
    // run than the pool has threads. False when it ran none.
    bool RunOneOf(const void* owner);
    // Takes the first queued job of `owner` whose item `want` accepts out
    // of the queue, whatever the pool's room (the caller runs it on its own
    // thread or posts it elsewhere: a chip task that is to fail or to move
    // to another device). False when none is queued.
    bool TakeOneOf(const void* owner, const std::function<bool(const void* item)>& want, Job& out);
    // Runs `job` on the calling thread, as RunOneOf runs a queued one,
    // when fewer jobs run than the pool has threads; false (the job left
    // as it was) otherwise: post it then. For a job cheaper to run than to
    // hand over (a chip task that submits nothing, dependency::RunCost).
    bool RunHere(Job& job);
    // Whether RunOneOf might find a job: some are queued and the pool has
    // room (lock-free look).
    bool MayRunOne() const noexcept {
        return queued_.load(std::memory_order_acquire) != 0 && running_.load(std::memory_order_acquire) < count_;
    }

private:
    void Stop() noexcept;  // runs what is queued, then joins
    void Loop(int index);
    // mu_ held: whether a helper may run a job (fewer run than count_,
    // not stopping), and counting one in.
    bool HasRoom() const noexcept;
    void TakeRoom() noexcept;
    void RunAsHelper(Job& job);  // counted in: runs it, then gives the room back
    // Whether a thread has a reason to take the lock (lock-free look).
    bool Runnable() const noexcept { return MayRunOne() || stop_.load(std::memory_order_acquire); }
    std::mutex mu_;
    EventCount wake_;
    std::deque<Job> jobs_;
    std::atomic<size_t> queued_{0};  // jobs_.size(), readable without the lock
    std::atomic<bool> stop_{false};
    // Jobs being run, by the pool's threads and by waiters (RunOneOf);
    // changed under mu_. A pool thread takes a job only below count_.
    std::atomic<int> running_{0};
    int helpers_ = 0;  // waiters inside RunOneOf (under mu_): the destructor waits for them
    int count_ = 0;  // threads_.size(), fixed before they start
    std::vector<std::thread> threads_;
};

}  // namespace spyre::dependency
