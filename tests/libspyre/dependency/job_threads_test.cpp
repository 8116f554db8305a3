// SPDX-License-Identifier: Apache-2.0
// Host job threads (libspyre/dependency/job_threads): a run's waiter running that
// run's queued jobs (RunOneOf) takes only its own, never runs more jobs at
// once than the pool has threads, and runs them as one of the pool's
// threads; so does a job run on its submitter (RunHere).
#include "dependency/job_threads.hpp"
#include "spyre/error.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace spyre::dependency;

namespace {

const int kRun = 1, kOtherRun = 2;  // their addresses are the owners

// Waits up to 10 s for `ready`.
template <typename Ready>
bool Await(Ready ready) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!ready())
        if (std::chrono::steady_clock::now() > end) return false;
        else std::this_thread::sleep_for(std::chrono::microseconds(50));
    return true;
}

// The names of a 2-thread pool's threads, as its jobs read them (each
// thread takes one: the first waits for the second to start).
std::vector<std::string> NamesOfTwoThreads(const std::string& pool_name) {
    std::mutex mu;
    std::vector<std::string> names;
    {
        JobThreads pool(2, pool_name);
        std::atomic<int> started{0};
        for (int i = 0; i < 2; ++i)
            pool.Post([&] {
                char name[16] = {};
                pthread_getname_np(pthread_self(), name, sizeof name);
                {
                    std::lock_guard lock(mu);
                    names.emplace_back(name);
                }
                ++started;
                Await([&] { return started.load() == 2; });
            });
    }
    std::sort(names.begin(), names.end());
    return names;
}

// A trace names a thread's track, and top -H and perf its line, by the
// thread's name: the library's threads all carried the program's (found
// probing from outside: five tracks "spyre-l3-exampl").
TEST(JobThreads, EachThreadIsNamedAfterItsPool) {
    EXPECT_EQ(NamesOfTwoThreads("spyre-sub"), (std::vector<std::string>{"spyre-sub-0", "spyre-sub-1"}));
    // Longer than the 15 characters Linux keeps: cut.
    EXPECT_EQ(NamesOfTwoThreads("spyre-chip12345"), (std::vector<std::string>{"spyre-chip12345", "spyre-chip12345"}));
}

TEST(JobThreads, AWaiterRunsNoJobWhileEveryThreadOfThePoolIsBusy) {
    JobThreads pool(1);
    std::atomic<bool> release{false}, busy{false}, second_ran{false};
    pool.Post([&] {
        busy = true;
        while (!release) std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
    ASSERT_TRUE(Await([&] { return busy.load(); }));
    pool.Post([&] { second_ran = true; }, &kRun);
    EXPECT_FALSE(pool.MayRunOne());
    EXPECT_FALSE(pool.RunOneOf(&kRun)) << "a waiter ran a job beside the pool's only thread";
    EXPECT_FALSE(second_ran.load());
    release = true;
    EXPECT_TRUE(Await([&] { return second_ran.load(); })) << "the pool's thread never ran the job left queued";
}

TEST(JobThreads, AWaiterRunsOnlyItsOwnRunsJobsAsOneOfThePoolsThreads) {
    JobThreads pool(1);
    std::atomic<int> ran_by_waiter{0}, others_ran{0}, others_ran_by_waiter{0};
    std::atomic<bool> pool_seen_in_helped_job{true};
    for (int i = 0; i < 50; ++i) {
        // Past the pool thread's look (JobThreads::kSpin): it sleeps, and the
        // waiter, awake already, usually takes the job first.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::atomic<bool> done{false};
        pool.Post([&] {
            ++others_ran;
            if (JobThreads::CurrentIndex() == JobThreads::kHelperIndex) ++others_ran_by_waiter;
        }, &kOtherRun);
        pool.Post([&] {
            if (JobThreads::CurrentIndex() == JobThreads::kHelperIndex) {
                ++ran_by_waiter;
                if (JobThreads::Current() != &pool) pool_seen_in_helped_job = false;
            }
            done = true;
        }, &kRun);
        while (!done) pool.RunOneOf(&kRun);
    }
    ASSERT_TRUE(Await([&] { return others_ran.load() == 50; }));
    EXPECT_EQ(others_ran_by_waiter.load(), 0) << "a waiter ran another run's job";
    EXPECT_GT(ran_by_waiter.load(), 0) << "in 50 tries the waiter never ran its own queued job";
    EXPECT_TRUE(pool_seen_in_helped_job.load()) << "a job a waiter ran did not see the pool as its own";
}

TEST(JobThreads, AJobAWaiterRunsMayRunThePoolsQueuedJobsNestedInIt) {
    // As a pool thread's job may (a SubWorker waiting on a nested run): the
    // pool's room is taken by the waiter's job, so only this thread can run it.
    JobThreads pool(1);
    std::atomic<int> nested_ran{0}, helped{0};
    for (int i = 0; i < 50; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::atomic<bool> done{false};
        pool.Post([&] {
            if (JobThreads::CurrentIndex() == JobThreads::kHelperIndex) {
                ++helped;
                std::atomic<bool> nested{false};
                JobThreads::Current()->Post([&] { nested = true; });
                while (!nested) JobThreads::Current()->RunOneQueued();
                ++nested_ran;
            }
            done = true;
        }, &kRun);
        while (!done) pool.RunOneOf(&kRun);
    }
    EXPECT_GT(helped.load(), 0) << "in 50 tries the waiter never ran its own queued job";
    EXPECT_EQ(nested_ran.load(), helped.load());
}

// RunHere (a cheap chip task on its submitting thread) runs the job on the
// caller, as one of the pool's threads, while the pool has room, and
// leaves it to be posted when every thread's room is taken.
TEST(JobThreads, AJobRunHereTakesAThreadsRoomOrIsLeftToPost) {
    JobThreads pool(1);
    const std::thread::id caller = std::this_thread::get_id();
    std::thread::id ran_on;
    bool as_pool_thread = false;
    JobThreads::Job job{[&] {
                            ran_on = std::this_thread::get_id();
                            as_pool_thread = JobThreads::Current() == &pool &&
                                             JobThreads::CurrentIndex() == JobThreads::kHelperIndex;
                        },
                        &kRun};
    ASSERT_TRUE(pool.RunHere(job));
    EXPECT_EQ(ran_on, caller);
    EXPECT_TRUE(as_pool_thread);
    EXPECT_EQ(JobThreads::Current(), nullptr) << "the caller stayed one of the pool's threads";

    std::atomic<bool> release{false}, busy{false}, second_ran{false};
    pool.Post([&] {
        busy = true;
        while (!release) std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
    ASSERT_TRUE(Await([&] { return busy.load(); }));
    JobThreads::Job second{[&] { second_ran = true; }, &kRun};
    EXPECT_FALSE(pool.RunHere(second)) << "a job ran here beside the pool's only busy thread";
    EXPECT_FALSE(second_ran.load());
    ASSERT_TRUE(second.run) << "a job refused was not left to post";
    std::vector<JobThreads::Job> post;
    post.push_back(std::move(second));
    pool.PostAll(post);
    release = true;
    EXPECT_TRUE(Await([&] { return second_ran.load(); })) << "the pool's thread never ran the job posted";
}

}  // namespace

// A pool whose threads cannot all start (here: address space for their
// stacks runs out) is OutOfMemory, and the threads that did start stop;
// it aborted the process ("terminate called without an active
// exception": the started threads were destroyed joinable). In a child
// process: the limit would hold for the rest of the tests.
TEST(JobThreads, APoolThatCannotStartItsThreadsIsOutOfMemory) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        rlimit as{};
        ::getrlimit(RLIMIT_AS, &as);
        std::ifstream statm("/proc/self/statm");
        uint64_t pages = 0;
        statm >> pages;
        as.rlim_cur = pages * uint64_t(::sysconf(_SC_PAGESIZE)) + (256ull << 20);  // room for a few stacks
        ::setrlimit(RLIMIT_AS, &as);
        try {
            JobThreads pool(4096);
        } catch (const spyre::Error& e) {
            const bool ok = e.kind() == spyre::ErrorKind::OutOfMemory &&
                            std::string(e.what()).find("cannot start 4096 host threads") != std::string::npos;
            ::_exit(ok ? 0 : 2);
        } catch (...) {
            ::_exit(3);
        }
        ::_exit(4);  // all 4096 started: the limit did not bite
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "2: other error, 3: not a spyre::Error, 4: no error";
}
