// SPDX-License-Identifier: Apache-2.0
// The card's cores (execution/card_cores.hpp): the worker pool that runs a
// program's chunks, its budget checks, and the FIFO turns functions take.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

#include "execution/card_cores.hpp"

using namespace spyre::mockdev;
using namespace std::chrono_literals;

namespace {
Budget Forever() { return Budget(Budget::Clock::now(), 1h); }
}  // namespace

TEST(CardCores, RunsEveryChunkExactlyOnce) {
    CardCores cores(3);
    for (size_t chunks : {0u, 1u, 2u, 1000u}) {
        std::vector<std::atomic<int>> hits(chunks);
        EXPECT_EQ(cores.ParallelFor(chunks, Forever(), [&](size_t i) {
            hits[i]++;
            return uint16_t(SPYRE_ERR_NONE);
        }),
                  SPYRE_ERR_NONE);
        for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
}

TEST(CardCores, StopsWithinAChunkWhenTheBudgetEnds) {
    CardCores cores(2);
    std::atomic<size_t> ran{0};
    const auto start = std::chrono::steady_clock::now();
    const uint16_t status = cores.ParallelFor(100000, Budget(Budget::Clock::now(), 30ms), [&](size_t) {
        std::this_thread::sleep_for(1ms);
        ran++;
        return uint16_t(SPYRE_ERR_NONE);
    });
    EXPECT_EQ(status, SPYRE_ERR_WATCHDOG);
    EXPECT_LT(ran.load(), 1000u);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);

    std::atomic<bool> abort{false};
    std::thread aborter([&] {
        std::this_thread::sleep_for(20ms);
        abort = true;
    });
    EXPECT_EQ(cores.ParallelFor(100000, Budget(Budget::Clock::now(), 1h, [&] { return abort.load(); }),
                                 [](size_t) {
                                     std::this_thread::sleep_for(1ms);
                                     return uint16_t(SPYRE_ERR_NONE);
                                 }),
              SPYRE_ERR_ABORTED);
    aborter.join();
}

TEST(CardCores, TheFirstFaultStopsTheRestAndExceptionsReachTheCaller) {
    CardCores cores(2);
    EXPECT_EQ(cores.ParallelFor(1000, Forever(), [](size_t i) { return uint16_t(i == 5 ? SPYRE_ERR_SHAPE : 0); }),
              SPYRE_ERR_SHAPE);
    EXPECT_THROW(cores.ParallelFor(10, Forever(),
                                    [](size_t i) -> uint16_t {
                                        if (i == 3) throw std::runtime_error("kernel bug");
                                        return SPYRE_ERR_NONE;
                                    }),
                 std::runtime_error);
    // The pool is still fine.
    EXPECT_EQ(cores.ParallelFor(10, Forever(), [](size_t) { return uint16_t(SPYRE_ERR_NONE); }), SPYRE_ERR_NONE);
}

TEST(CardCores, OneProgramHoldsTheCardAndAWaiterGivesUpAtItsBound) {
    CardCores cores(1);
    uint16_t status = 0;
    std::optional<CardCores::Turn> held(cores.Acquire(Forever(), status));
    ASSERT_TRUE(*held);
    EXPECT_FALSE(held->waited());
    std::thread other([&] {
        uint16_t s = 0;
        auto turn = cores.Acquire(Budget(Budget::Clock::now(), 20ms), s);
        EXPECT_FALSE(turn);
        EXPECT_EQ(s, SPYRE_ERR_WATCHDOG);
        std::atomic<bool> reset{false};
        std::thread resetter([&] {
            std::this_thread::sleep_for(20ms);
            reset = true;
        });
        auto aborted = cores.Acquire(Budget(Budget::Clock::now(), 1h, [&] { return reset.load(); }).AbortOnly(), s);
        EXPECT_FALSE(aborted);
        EXPECT_EQ(s, SPYRE_ERR_ABORTED);
        resetter.join();
    });
    other.join();
    held.reset();
    auto again = cores.Acquire(Budget(Budget::Clock::now(), 20ms), status);
    EXPECT_TRUE(again);
    EXPECT_EQ(status, SPYRE_ERR_NONE);
}

// Functions get the card in the order they asked for it: a function that
// asks again right after its turn queues behind everyone already waiting.
TEST(CardCores, TurnsAreHandedOutInArrivalOrder) {
    CardCores cores(1);
    uint16_t status = 0;
    std::optional<CardCores::Turn> held(cores.Acquire(Forever(), status));
    std::mutex order_mutex;
    std::vector<int> order;
    std::vector<std::thread> waiters;
    for (int i = 0; i < 4; ++i) {
        waiters.emplace_back([&, i] {
            uint16_t s = 0;
            auto turn = cores.Acquire(Forever(), s);
            std::lock_guard lock(order_mutex);
            order.push_back(i);
        });
        // The next one starts only once this one is in the queue.
        while (cores.waiting() != unsigned(i + 1)) std::this_thread::yield();
    }
    held.reset();
    for (auto& t : waiters) t.join();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(cores.waiting(), 0u);
}

// Many functions launching at once, some taking the card by its lock-free
// way (no one in line) and some queued: never two holders, every launch gets
// its turn, and the line ends empty.
TEST(CardCores, OneHolderAtATimeUnderContention) {
    CardCores cores(1);
    constexpr int kThreads = 4, kTurns = 3000;
    std::atomic<int> holders{0}, most{0}, turns{0};
    std::vector<std::thread> functions;
    for (int t = 0; t < kThreads; ++t)
        functions.emplace_back([&] {
            for (int i = 0; i < kTurns; ++i) {
                uint16_t s = 0;
                auto turn = cores.Acquire(Forever(), s);
                ASSERT_TRUE(turn);
                const int now = holders.fetch_add(1) + 1;
                int seen = most.load();
                while (now > seen && !most.compare_exchange_weak(seen, now)) {
                }
                if (i % 7 == 0) std::this_thread::yield();  // let others queue behind this turn
                holders.fetch_sub(1);
                turns.fetch_add(1);
            }
        });
    for (auto& f : functions) f.join();
    EXPECT_EQ(most.load(), 1);
    EXPECT_EQ(turns.load(), kThreads * kTurns);
    EXPECT_EQ(cores.waiting(), 0u);
}

namespace {

// A function's task queue 0 holding `count` tasks; records who ran where.
class FakeTasks : public TaskSource {
public:
    FakeTasks(char name, int count, std::vector<char>& log, std::mutex& mu, std::condition_variable& cv)
        : name_(name), left_(count), log_(log), mu_(mu), cv_(cv) {}
    bool Take(uint32_t queue, CoreTask& out) override {
        std::lock_guard lock(mu_);
        if (queue != 0 || left_ == 0) return false;
        --left_;
        out.source = this;
        out.queue = queue;
        return true;
    }
    void Run(const CoreTask&, unsigned core) noexcept override {
        std::lock_guard lock(mu_);
        log_.push_back(name_);
        cores_.push_back(core);
        cv_.notify_all();
    }
    std::vector<unsigned> cores_;
    void Add(int count) {
        std::lock_guard lock(mu_);
        left_ += count;
    }

private:
    char name_;
    int left_;
    std::vector<char>& log_;
    std::mutex& mu_;
    std::condition_variable& cv_;
};

}  // namespace

TEST(CardCores, CoreGroupsAreEightWorkersEach) {
    CardCores cores(12);
    EXPECT_EQ(cores.groups(), 2u);
    EXPECT_EQ(cores.group_cores(0), 8u);
    EXPECT_EQ(cores.group_cores(1), 4u);
    EXPECT_EQ(cores.group_cores(2), 0u);
}

// A new task wakes one worker of its queue's group, not every worker of the
// card: on a host with two CPUs each needless wake-up is a context switch.
// Waking every worker (as NotifyTasks() without a group does) made about 15
// of the 16 wake for nothing per task here.
TEST(CardCores, ANewTaskWakesOneWorkerOfItsGroup) {
    CardCores cores(16);
    std::vector<char> log;
    std::mutex mu;
    std::condition_variable cv;
    FakeTasks tasks('t', 0, log, mu, cv);
    cores.AddTaskSource(&tasks);
    constexpr size_t kTasks = 50;
    for (size_t i = 1; i <= kTasks; ++i) {
        tasks.Add(1);
        cores.NotifyTasks(0, 1);
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return log.size() == i; }));
    }
    for (unsigned core : tasks.cores_) EXPECT_LT(core, 8u);  // group 0's workers
    // At most one per task: a woken worker may find its task taken by one
    // that had just finished and looked.
    EXPECT_LE(cores.fruitless_wakeups(), kTasks);
    cores.RemoveTaskSource(&tasks);
}

// A worker that has just run a task lingers before it sleeps: the next task
// (a chain's next link) is taken by it without a wake-up. The linger here is
// an hour, so the test does not depend on how fast the host is; the card's
// destruction ends it (a stop pokes lingering workers).
TEST(CardCores, AWorkerThatJustRanATaskTakesTheNextWithoutAWake) {
    CardCores cores(16, std::chrono::hours(1));
    // Every worker has started and sleeps (one starting late would look for
    // a task on its own).
    ASSERT_EQ(cores.ParallelFor(16, Forever(), [](size_t) { return uint16_t(SPYRE_ERR_NONE); }), SPYRE_ERR_NONE);
    std::vector<char> log;
    std::mutex mu;
    std::condition_variable cv;
    FakeTasks tasks('t', 0, log, mu, cv);
    cores.AddTaskSource(&tasks);
    tasks.Add(1);
    cores.NotifyTasks(0, 1);
    EXPECT_EQ(cores.wakes_sent(), 1u);  // every worker slept
    for (size_t i = 2; i <= 20; ++i) {
        {
            std::unique_lock lock(mu);
            ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return log.size() == i - 1; }));
        }
        while (cores.lingering(0) != 1) std::this_thread::yield();
        EXPECT_EQ(cores.lingering(1), 0u);  // group 1 ran nothing
        tasks.Add(1);
        cores.NotifyTasks(0, 1);
    }
    {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return log.size() == 20; }));
    }
    EXPECT_EQ(cores.wakes_sent(), 1u);
    EXPECT_EQ(cores.fruitless_wakeups(), 0u);
    for (unsigned core : tasks.cores_) EXPECT_EQ(core, tasks.cores_.front());  // the one lingering worker
    // Two tasks with one worker lingering: one wake-up for the other.
    while (cores.lingering(0) != 1) std::this_thread::yield();
    tasks.Add(2);
    cores.NotifyTasks(0, 2);
    {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return log.size() == 22; }));
    }
    EXPECT_EQ(cores.wakes_sent(), 2u);
    cores.RemoveTaskSource(&tasks);
}

// Without a linger every new task wakes a sleeping worker.
TEST(CardCores, WithoutALingerEveryTaskIsAWake) {
    CardCores cores(8, std::chrono::microseconds(0));
    std::vector<char> log;
    std::mutex mu;
    std::condition_variable cv;
    FakeTasks tasks('t', 0, log, mu, cv);
    cores.AddTaskSource(&tasks);
    for (size_t i = 1; i <= 5; ++i) {
        tasks.Add(1);
        cores.NotifyTasks(0, 1);
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return log.size() == i; }));
    }
    EXPECT_EQ(cores.wakes_sent(), 5u);
    EXPECT_EQ(cores.lingering(0), 0u);
    cores.RemoveTaskSource(&tasks);
}

// One worker, two functions' queues: the worker alternates between them, so
// the function with 100 tasks does not hold back the one with 10.
TEST(CardCores, TasksOfTwoFunctionsAlternate) {
    CardCores cores(1);
    std::vector<char> log;
    std::mutex mu;
    std::condition_variable cv;
    FakeTasks flood('a', 100, log, mu, cv), few('b', 10, log, mu, cv);
    cores.AddTaskSource(&flood);
    cores.AddTaskSource(&few);
    cores.NotifyTasks();
    {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return log.size() == 110; }));
    }
    EXPECT_EQ(std::count(log.begin(), log.begin() + 20, 'b'), 10) << std::string(log.begin(), log.begin() + 20);
    for (unsigned core : flood.cores_) EXPECT_EQ(core, 0u);
    cores.RemoveTaskSource(&flood);
    cores.RemoveTaskSource(&few);
}

// While a program holds the card no worker starts a task; the tasks run
// once the turn ends.
TEST(CardCores, NoTaskStartsWhileAProgramHoldsTheCard) {
    CardCores cores(2);
    std::vector<char> log;
    std::mutex mu;
    std::condition_variable cv;
    FakeTasks tasks('t', 5, log, mu, cv);
    uint16_t status = 0;
    std::optional<CardCores::Turn> held(cores.Acquire(Forever(), status));
    ASSERT_TRUE(*held);
    cores.AddTaskSource(&tasks);
    cores.NotifyTasks();
    std::this_thread::sleep_for(20ms);  // room for a wrong start; none may happen however long
    {
        std::lock_guard lock(mu);
        EXPECT_TRUE(log.empty());
    }
    held.reset();
    {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return log.size() == 5; }));
    }
    cores.RemoveTaskSource(&tasks);
}

// A program has the cores only once the tasks running on them have ended,
// and says that it waited (its watchdog then starts late); when it ends, a
// worker it held back takes its task before the next program takes the card.
TEST(CardCores, ProgramsAndTasksWaitingForEachOtherTakeTurns) {
    CardCores cores(1);
    std::mutex mu;
    std::condition_variable cv;
    bool running = false, let_go = false;
    int ran = 0;
    // Each task runs until let go, then counts itself.
    class HeldTasks : public TaskSource {
    public:
        HeldTasks(std::mutex& mu, std::condition_variable& cv, bool& running, bool& let_go, int& ran)
            : mu_(mu), cv_(cv), running_(running), let_go_(let_go), ran_(ran) {}
        bool Take(uint32_t queue, CoreTask& out) override {
            if (queue != 0 || left_ == 0) return false;
            --left_;
            out.source = this;
            return true;
        }
        void Run(const CoreTask&, unsigned) noexcept override {
            std::unique_lock lock(mu_);
            running_ = true;
            cv_.notify_all();
            cv_.wait(lock, [&] { return let_go_; });
            running_ = false;
            ++ran_;
            cv_.notify_all();
        }

    private:
        std::mutex& mu_;
        std::condition_variable& cv_;
        bool& running_;
        bool& let_go_;
        int& ran_;
        int left_ = 3;  // Take runs under the cores' lock
    } tasks(mu, cv, running, let_go, ran);
    auto let_go_now = [&](bool go) {
        std::lock_guard lock(mu);
        let_go = go;
        cv.notify_all();
    };
    auto wait_running = [&] {
        std::unique_lock lock(mu);
        return cv.wait_for(lock, 30s, [&] { return running; });
    };
    cores.AddTaskSource(&tasks);
    cores.NotifyTasks();
    ASSERT_TRUE(wait_running());

    // A program asks while task 1 runs: it gets the card once the task ends.
    std::atomic<int> ran_before{-1};
    auto program = [&] {
        uint16_t s = 0;
        auto turn = cores.Acquire(Forever(), s);
        EXPECT_TRUE(turn.waited());
        {
            std::lock_guard lock(mu);
            ran_before = ran;
        }
        // The worker wants its next task: held back until this turn ends.
        // Bounded: a worker that is never held back fails, not hangs.
        for (int look = 0; look < 20000 && cores.tasks_waiting() == 0; ++look)
            std::this_thread::sleep_for(std::chrono::microseconds(500));
        EXPECT_GT(cores.tasks_waiting(), 0u) << "the worker was not held back by the program's turn";
        let_go_now(false);
    };
    std::thread first(program);
    std::this_thread::sleep_for(20ms);  // room for a wrong start; none may happen however long
    EXPECT_EQ(ran_before.load(), -1);
    let_go_now(true);
    first.join();
    EXPECT_EQ(ran_before.load(), 1);

    // The worker held back by that program takes task 2 before the next
    // program gets the card, and the program waits for it to end.
    ran_before = -1;
    std::thread second(program);
    ASSERT_TRUE(wait_running());
    // The program must hold the card before task 2 may end (a thread
    // started late would otherwise find task 3 taken). Bounded.
    for (int look = 0; look < 20000 && !cores.card_held(); ++look) std::this_thread::sleep_for(std::chrono::microseconds(500));
    ASSERT_TRUE(cores.card_held()) << "the second program never took the card";
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(ran_before.load(), -1);
    let_go_now(true);
    second.join();
    EXPECT_EQ(ran_before.load(), 2);
    let_go_now(true);
    {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return ran == 3; }));
    }
    cores.RemoveTaskSource(&tasks);
}

// A task lane runs a lone task on its own thread, on an idle core of the
// group lent for the run: no worker is woken (on a host with two CPUs a
// wake-up costs more than a short task).
TEST(CardCores, ALoneTaskRunsOnTheCallerOnALentCoreWithoutAWake) {
    CardCores cores(8);
    ASSERT_EQ(cores.ParallelFor(8, Forever(), [](size_t) { return uint16_t(SPYRE_ERR_NONE); }), SPYRE_ERR_NONE);
    std::vector<char> log;
    std::mutex mu;
    std::condition_variable cv;
    FakeTasks tasks('t', 0, log, mu, cv);
    cores.AddTaskSource(&tasks);
    EXPECT_FALSE(cores.RunOneTask(0, tasks)) << "ran a task the source does not have";
    tasks.Add(1);
    EXPECT_TRUE(cores.RunOneTask(0, tasks));
    ASSERT_EQ(log.size(), 1u);  // already run: on this thread
    EXPECT_LT(tasks.cores_.front(), 8u);
    EXPECT_EQ(cores.wakes_sent(), 0u);
    EXPECT_FALSE(cores.RunOneTask(1, tasks)) << "group 1 does not exist on 8 cores";
    cores.RemoveTaskSource(&tasks);
}

namespace {

// FakeTasks whose runs wait for `open` (under the log's mutex).
class GatedTasks : public FakeTasks {
public:
    GatedTasks(std::vector<char>& log, std::mutex& mu, std::condition_variable& cv) : FakeTasks('g', 0, log, mu, cv), mu_(mu), cv_(cv) {}
    void Run(const CoreTask& task, unsigned core) noexcept override {
        {
            std::unique_lock lock(mu_);
            ++started;
            cv_.notify_all();
            cv_.wait(lock, [&] { return open; });
        }
        FakeTasks::Run(task, core);
    }
    int started = 0;
    bool open = false;

private:
    std::mutex& mu_;
    std::condition_variable& cv_;
};

}  // namespace

// A core lent to a task lane runs nothing else: its worker takes no task
// until the core is given back (one task per core), nor does a second
// RunOneTask; a task announced meanwhile runs once it is.
TEST(CardCores, ALentCoreRunsNoOtherTaskUntilItIsGivenBack) {
    CardCores cores(1);
    ASSERT_EQ(cores.ParallelFor(1, Forever(), [](size_t) { return uint16_t(SPYRE_ERR_NONE); }), SPYRE_ERR_NONE);
    std::vector<char> log;
    std::mutex mu;
    std::condition_variable cv;
    GatedTasks tasks(log, mu, cv);
    cores.AddTaskSource(&tasks);
    tasks.Add(1);
    std::thread server([&] { EXPECT_TRUE(cores.RunOneTask(0, tasks)); });
    {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return tasks.started == 1; }));
    }
    tasks.Add(1);
    cores.NotifyTasks(0, 1);
    EXPECT_FALSE(cores.RunOneTask(0, tasks)) << "ran a second task on the card's only core";
    std::this_thread::sleep_for(20ms);  // room for a wrong start; none may happen however long
    {
        std::lock_guard lock(mu);
        EXPECT_EQ(tasks.started, 1) << "the lent core's worker took a task";
        tasks.open = true;
        cv.notify_all();
    }
    server.join();
    {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return log.size() == 2; })) << "the task announced while the core was lent never ran";
    }
    EXPECT_EQ(tasks.cores_, (std::vector<unsigned>{0, 0}));
    cores.RemoveTaskSource(&tasks);
}

// While a program holds the card no task starts on a lent core either.
TEST(CardCores, NoTaskRunsOnALentCoreWhileAProgramHoldsTheCard) {
    CardCores cores(2);
    std::vector<char> log;
    std::mutex mu;
    std::condition_variable cv;
    FakeTasks tasks('t', 1, log, mu, cv);
    uint16_t status = 0;
    std::optional<CardCores::Turn> held(cores.Acquire(Forever(), status));
    ASSERT_TRUE(*held);
    EXPECT_FALSE(cores.RunOneTask(0, tasks));
    EXPECT_TRUE(log.empty());
    held.reset();
    EXPECT_TRUE(cores.RunOneTask(0, tasks));
    EXPECT_EQ(log.size(), 1u);
}

// A wake for a new task may reach the worker of a core lent to a task lane
// (a group's workers share one condition): that worker cannot take it, and
// passes the wake on to another of the group. The lane's task here runs
// until the test lets it end, so a task that waited for the core's return
// would not start in time. The lane takes its task from a source of its
// own, which the workers do not serve, so no worker looking for work takes
// it first. Rounds alternate the lent core (RunOneTask rotates), so the
// wake meets the lent worker in some of them.
TEST(CardCores, AWakeThatReachesALentCoresWorkerIsPassedOn) {
    CardCores cores(2, std::chrono::microseconds(0));  // no lingering: every notice is a wake
    std::vector<char> log;
    std::mutex mu;
    std::condition_variable cv;
    GatedTasks lane_tasks(log, mu, cv), tasks(log, mu, cv);
    cores.AddTaskSource(&tasks);
    for (int round = 1; round <= 10; ++round) {
        {
            std::lock_guard lock(mu);
            lane_tasks.open = tasks.open = false;
        }
        lane_tasks.Add(1);
        std::thread lane([&] { EXPECT_TRUE(cores.RunOneTask(0, lane_tasks)); });
        {
            std::unique_lock lock(mu);
            ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return lane_tasks.started == round; }));
        }
        tasks.Add(1);
        cores.NotifyTasks(0, 1);
        bool started;
        {
            std::unique_lock lock(mu);
            started = cv.wait_for(lock, 5s, [&] { return tasks.started == round; });
            lane_tasks.open = tasks.open = true;
            cv.notify_all();
        }
        lane.join();
        EXPECT_TRUE(started) << "round " << round << ": the new task waited for the lent core";
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return log.size() == size_t(2 * round); }));
    }
    cores.RemoveTaskSource(&tasks);
}

// A task lane's round, over and over: two tasks come in while the card's
// only worker lingers after its last task (or sleeps), so the notice of one
// is a poke or a wake; the server then runs the other on a lent core, which
// may be lent before the worker looks, and announces what is left, as
// TaskQueues::HandOut does. Every task must run: no round may wait for a
// wake that never comes.
TEST(CardCores, ATaskAnnouncedToALentCoresWorkerStillRuns) {
    CardCores cores(1, std::chrono::hours(1));
    std::vector<char> log;
    std::mutex mu;
    std::condition_variable cv;
    FakeTasks tasks('t', 1, log, mu, cv);
    cores.AddTaskSource(&tasks);
    cores.NotifyTasks(0, 1);
    for (size_t round = 1; round <= 300; ++round) {
        {
            std::unique_lock lock(mu);
            ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return log.size() == 2 * round - 1; }))
                << "round " << round << ": a task was left for a wake that never came";
        }
        // Usually it lingers now; after a wake that found nothing it sleeps
        // instead, and the round then tests a sleeping worker.
        const auto enough = std::chrono::steady_clock::now() + 2ms;
        while (cores.lingering(0) != 1 && std::chrono::steady_clock::now() < enough) std::this_thread::yield();
        tasks.Add(2);
        cores.NotifyTasks(0, 1);
        // As TaskQueues::HandOut: the task left after the lent run is announced again.
        const bool lent = cores.RunOneTask(0, tasks);
        bool left;
        {
            std::lock_guard lock(mu);
            left = log.size() < 2 * round + 1;
        }
        if (!lent || left) cores.NotifyTasks(0, 1);
    }
    {
        std::unique_lock lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return log.size() == 601; })) << "the last round's task never ran";
    }
    cores.RemoveTaskSource(&tasks);
}
