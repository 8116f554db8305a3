// SPDX-License-Identifier: Apache-2.0
// The level-3 Worker runs tasks as the host orchestration function submits
// them: a task completes (by its device timestamps) before the function
// returns, a long loop stays within the run's window of tasks and hazard
// records and computes the right result, a failure midway leaves what was
// submitted to finish, a task waiting on its own run gets an error instead
// of a hang, and every run reports every task (name, level, device, state,
// device-clock times).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "l3_chip_functions.hpp"
#include "pair_gate.hpp"
#include "spyre/common/device_clock.hpp"
#include "worker_fixture.hpp"

using namespace spyre;
using namespace spyre::l3;

namespace {

// Waits (60 s at most) for `ready`; false when it never came.
template <typename Ready>
bool Await(Ready&& ready) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!ready()) {
        if (std::chrono::steady_clock::now() > until) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
}

constexpr int32_t KERNEL_TINY_ADD = 310;
constexpr int64_t kTinyCols = 16;  // one row: 64 bytes

// "tiny_add": out[1 x 16] = a[1 x 16] + b[1 x 16] as one device task.
void RegisterTinyAdd(Worker& w) {
    const std::vector<int64_t> row = {1, kTinyCols};
    w.RegisterKernel(KERNEL_TINY_ADD, KernelBuilder().Elementwise(ElementwiseOp::Add, row, row, DType::FP32).program);
    w.RegisterChipFunction("tiny_add", ChipFunction([](ChipContext& ctx) {
                               std::vector<TaskParam> p;
                               for (size_t i = 0; i < 3; ++i)
                                   p.push_back({i == 2 ? PARAM_OUTPUT : PARAM_INPUT, ctx.args[i], ctx.bytes[i], {}});
                               ctx.orch.Submit(KERNEL_TINY_ADD, WORKER_VECTOR, p);
                           }));
}

const TaskRecord& Find(const std::vector<TaskRecord>& report, const std::string& name) {
    for (const TaskRecord& r : report)
        if (r.name == name) return r;
    throw std::runtime_error("no task '" + name + "' in the report");
}

// One SubWorker thread and a window of one task: a submit waits for room
// while any task of the run is unfinished.
DistributedConfig WindowOfOne(const Host& host) {
    DistributedConfig c;
    c.device_ids = Vfs(host);
    c.num_sub_workers = 1;
    c.max_tasks_in_flight = 1;
    return c;
}

// Runs `p` (no inputs) and returns its report, or exits the process with
// `hang` when it has not ended in 60 s: the Worker's threads are stuck, and
// no clean teardown is possible.
std::vector<TaskRecord> ReportOrExit(Worker& w, const HostProgram& p, const char* hang) {
    auto run = std::async(std::launch::async, [&] { return w.Submit(p, {}).Report(); });
    if (run.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
        std::fprintf(stderr, "%s\n", hang);
        std::fflush(stderr);
        std::_Exit(1);
    }
    return run.get();
}

// Two outer SubWorkers (both of the fixture's pool threads) each wait on a
// nested run whose SubWorker waits on a run of three leaf SubWorkers, every
// wait through `wait_for(worker, program)`: the nested runs' SubWorkers
// can only run on the waiting threads. Exits the process on a deadlock.
void NestedRunsOnEveryPoolThread(Worker& worker, const std::function<void(Worker&, const HostProgram&)>& wait_for) {
    std::atomic<int> outer_started{0}, leaves{0};
    std::atomic<bool> stalled{false};
    HostProgram leaf_run{"leaf_run", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                             for (int i = 0; i < 3; ++i)
                                 g.Sub("leaf " + std::to_string(i), [&](std::span<const HostTensor>) { ++leaves; },
                                       {In(HostTensor::Zeros({4}))});
                         }};
    HostProgram middle_run{"middle_run", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                               g.Sub("middle", [&](std::span<const HostTensor>) { wait_for(worker, leaf_run); },
                                     {In(HostTensor::Zeros({4}))});
                           }};
    HostProgram outer{"outer", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          for (int i = 0; i < 2; ++i)
                              g.Sub("outer " + std::to_string(i),
                                    [&](std::span<const HostTensor>) {
                                        // Both threads busy before either nests.
                                        ++outer_started;
                                        if (!Await([&] { return outer_started.load() == 2; })) stalled = true;
                                        wait_for(worker, middle_run);
                                    },
                                    {In(HostTensor::Zeros({4}))});
                      }};
    auto run = std::async(std::launch::async, [&] { return worker.Submit(outer, {}).Report(); });
    if (run.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
        std::fprintf(stderr, "the nested runs deadlocked (%d of 6 leaves ran)\n", leaves.load());
        std::fflush(stderr);
        std::_Exit(1);  // the Worker's threads are stuck: no clean teardown is possible
    }
    const std::vector<TaskRecord> report = run.get();
    EXPECT_FALSE(stalled.load()) << "the two outer SubWorkers never ran at once";
    EXPECT_EQ(leaves.load(), 6);
    ASSERT_EQ(report.size(), 2u);
    for (const TaskRecord& r : report) EXPECT_EQ(r.state, TaskState::Done) << r.name;
}

}  // namespace

// The function submits one chip task and a SubWorker reading its output,
// then waits until that SubWorker ran before it returns: it only can if
// tasks start while the function still runs. The chip task's device end
// time comes before the function's return.
TEST_F(WorkerTest, AChipTaskCompletesBeforeTheOrchestrationFunctionReturns) {
    std::atomic<bool> consumed{false};
    std::atomic<uint64_t> returned_ns{0};
    bool saw = false;
    HostProgram p{"early", 2, {{{kTile, kTile}}}, [&](HostGraph& g, std::span<const HostTensor> x) {
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.name = "first"});
                      g.Sub("seen", [&](std::span<const HostTensor>) { consumed = true; }, {In(x[2])},
                            {.name = "consumer"});
                      saw = Await([&] { return consumed.load(); });
                      returned_ns = DeviceClockNs();
                  }};
    HostTensor a = HostTensor::Full({kTile, kTile}, 2.0f), b = HostTensor::Full({kTile, kTile}, 3.0f);
    RunHandle h = worker_->Submit(p, {a, b});
    auto outs = h.Wait();
    ASSERT_TRUE(saw) << "the SubWorker did not run while the orchestration function was running";
    for (float v : outs[0].floats()) ASSERT_EQ(v, 5.0f);
    const std::vector<TaskRecord> report = h.Report();
    const TaskRecord& first = Find(report, "first");
    EXPECT_EQ(first.state, TaskState::Done);
    EXPECT_GT(first.start_ns, 0u);
    EXPECT_LE(first.start_ns, first.end_ns);
    EXPECT_LT(first.end_ns, returned_ns.load()) << "the chip task ended (device clock) after the function returned";
    // A SubWorker task is named as its options say (else "seen#0").
    EXPECT_EQ(Find(report, "consumer").level, Level::Host);
}

// A chip function that submits nothing costs less than the two hand-overs
// between the submitting thread and a device thread: once its runs are
// measured under DistributedConfig::cheap_chip_task_ns, it runs on the
// submitting thread, inside the submit, never more at once than the
// device's chip task room. A slower function, or any with the bound 0,
// runs on the device's threads. (The bounds here are far from the runs so
// a loaded machine cannot blur them: 5 ms against a few microseconds, and
// against 30 ms runs.)
TEST_F(WorkerTest, ACheapChipFunctionRunsOnTheSubmittingThread) {
    worker_.reset();
    // The threads the calls ran on, each marked when it ran inside the
    // orchestration function that `submitting` names (the run's waiter, on
    // the same thread, runs queued tasks too, but only after it returned).
    struct Seen {
        std::mutex mu;
        std::vector<std::thread::id> threads;
        std::atomic<std::thread::id> submitting{};
        std::atomic<int> running{0}, most{0};
        void Note() {
            const int now = ++running;
            for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {}
            {
                std::lock_guard lock(mu);
                const std::thread::id self = std::this_thread::get_id();
                threads.push_back(self == submitting.load() ? self : std::thread::id{});
            }
            --running;
        }
        std::vector<std::thread::id> Take() {
            std::lock_guard lock(mu);
            return std::exchange(threads, {});
        }
    };
    auto worker_with = [&](uint32_t cheap_ns, Seen& seen) {
        DistributedConfig c;
        c.device_ids = {Vfs(*host_)[0]};
        c.chip_tasks_per_device = 1;
        c.cheap_chip_task_ns = cheap_ns;
        auto w = std::make_unique<Worker>(*host_, c);
        w->RegisterChipFunction("note", ChipFunction([&seen](ChipContext&) { seen.Note(); }));
        w->RegisterChipFunction("slow", ChipFunction([&seen](ChipContext&) {
                                    seen.Note();
                                    std::this_thread::sleep_for(std::chrono::milliseconds(30));
                                }));
        return w;
    };
    // Runs `tasks` calls of `function` after one call that measures it;
    // how many of the `tasks` ran on the thread that submitted them, while
    // it ran the orchestration function.
    auto on_submitter = [](Worker& w, Seen& seen, const char* function, int tasks) {
        HostProgram once{"measure", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) { g.Chip(function, {}); }};
        w.Run(once, {});
        seen.Take();
        HostProgram p{"calls", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          seen.submitting = std::this_thread::get_id();
                          for (int i = 0; i < tasks; ++i) g.Chip(function, {});
                          seen.submitting = std::thread::id{};
                      }};
        w.Run(p, {});
        const std::vector<std::thread::id> ran = seen.Take();
        EXPECT_EQ(ran.size(), size_t(tasks));
        return std::count_if(ran.begin(), ran.end(), [](std::thread::id t) { return t != std::thread::id{}; });
    };
    {
        Seen seen;
        auto w = worker_with(5'000'000, seen);
        EXPECT_EQ(on_submitter(*w, seen, "note", 20), 20) << "a cheap chip function went to a device thread";
        EXPECT_EQ(on_submitter(*w, seen, "slow", 3), 0) << "a 30 ms chip function ran on its submitter";
        // Two submitters at once, on a device of one chip task at a time.
        seen.most = 0;
        std::vector<std::thread> submitters;
        for (int t = 0; t < 2; ++t)
            submitters.emplace_back([&] {
                HostProgram p{"many", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                                  for (int i = 0; i < 500; ++i) g.Chip("note", {});
                              }};
                w->Run(p, {});
            });
        for (auto& t : submitters) t.join();
        EXPECT_EQ(seen.most.load(), 1) << "chip tasks run on their submitters exceeded the device's room";
        EXPECT_EQ(seen.Take().size(), 1000u);
    }
    {
        Seen seen;
        auto w = worker_with(0, seen);
        EXPECT_EQ(on_submitter(*w, seen, "note", 20), 0) << "a chip task ran on its submitter with the bound 0";
    }
}

// 10,000 chip tasks from one loop over tiny tensors, with a window of 64:
// the run never holds more tasks than its window, nor more hazard records
// than those tasks file, and the result matches a CPU reference. Each pair
// of tasks goes through an intermediate the loop creates: RAW edges, and
// tensors freed as the run goes.
TEST_F(WorkerTest, TenThousandChipTasksRunInABoundedWindow) {
    constexpr int kPairs = 5000;
    constexpr int kWindow = 64;
    worker_.reset();
    DistributedConfig c;
    c.device_ids = Vfs(*host_);
    c.max_tasks_in_flight = kWindow;
    Worker w(*host_, c);
    RegisterTinyAdd(w);
    HostTensor a = HostTensor::Zeros({kPairs, kTinyCols}), b = HostTensor::Zeros({1, kTinyCols});
    for (size_t i = 0; i < a.floats().size(); ++i) a.floats()[i] = float(i % 977);
    for (int j = 0; j < kTinyCols; ++j) b.floats()[size_t(j)] = float(j) * 0.5f;
    Worker::Held most;
    HostProgram p{"long_loop", 2, {{{kPairs, kTinyCols}}}, [&](HostGraph& g, std::span<const HostTensor> x) {
                      for (int64_t i = 0; i < kPairs; ++i) {
                          HostTensor t = g.CreateTensor({1, kTinyCols});
                          g.Chip("tiny_add", {In(x[0].Rows(i, i + 1)), In(x[1]), Out(t)});
                          g.Chip("tiny_add", {In(t), In(x[1]), Out(x[2].Rows(i, i + 1))});
                          if (i % 64 == 0) {
                              const Worker::Held held = w.HeldNow();
                              most.tasks = std::max(most.tasks, held.tasks);
                              most.hazard_records = std::max(most.hazard_records, held.hazard_records);
                          }
                      }
                  }};
    RunHandle h = w.Submit(p, {a, b});
    auto outs = h.Wait();
    EXPECT_GT(most.tasks, 0u);
    EXPECT_LE(most.tasks, size_t(kWindow));
    EXPECT_LE(most.hazard_records, size_t(kWindow) * 3);  // three ranges per task
    const auto got = outs[0].floats();
    for (size_t i = 0; i < got.size(); ++i) {
        const float want = a.floats()[i] + 2.0f * b.floats()[i % kTinyCols];
        ASSERT_EQ(got[i], want) << "element " << i;
    }
    EXPECT_EQ(h.Report().size(), size_t(2 * kPairs));
    const Worker::Held after = w.HeldNow();
    EXPECT_EQ(after.tasks, 0u);
    EXPECT_EQ(after.hazard_records, 0u);
}

// The orchestration function hands the graph to four threads of its own,
// each submitting a chain over its own rows, with a small window. Their
// submissions raced in the graph's spare tasks (a segfault from Python,
// where the calls run without the GIL); they now submit one at a time.
TEST_F(WorkerTest, ThreadsOfTheOrchestrationFunctionSubmitIntoOneGraph) {
    constexpr int kThreads = 4, kPerThread = 300;
    worker_.reset();
    DistributedConfig c;
    c.device_ids = Vfs(*host_);
    c.max_tasks_in_flight = 8;
    Worker w(*host_, c);
    RegisterTinyAdd(w);
    HostTensor b = HostTensor::Zeros({1, kTinyCols});
    for (int j = 0; j < kTinyCols; ++j) b.floats()[size_t(j)] = 1.0f;
    HostProgram p{"threads", 1, {{{kThreads, kTinyCols}}}, [&](HostGraph& g, std::span<const HostTensor> x) {
                      std::vector<std::thread> threads;
                      for (int t = 0; t < kThreads; ++t)
                          threads.emplace_back([&, t] {
                              const HostTensor row = x[1].Rows(t, t + 1);
                              for (int i = 0; i < kPerThread; ++i) g.Chip("tiny_add", {In(row), In(x[0]), Out(row)});
                          });
                      for (std::thread& t : threads) t.join();
                  }};
    for (int rep = 0; rep < 3; ++rep) {
        RunHandle h = w.Submit(p, {b});
        const auto outs = h.Wait();
        for (float v : outs[0].floats()) ASSERT_EQ(v, float(kPerThread));
        const std::vector<TaskRecord> report = h.Report();
        ASSERT_EQ(report.size(), size_t(kThreads * kPerThread));
        std::set<std::string> names;
        std::set<uint64_t> ids;
        for (const TaskRecord& r : report) {
            names.insert(r.name);
            ids.insert(r.task_id);
            EXPECT_EQ(r.state, TaskState::Done) << r.name;
        }
        EXPECT_EQ(names.size(), report.size());
        EXPECT_EQ(ids.size(), report.size());
    }
}

// A copy of the graph kept past its orchestration function (by a SubWorker,
// a thread of the function's) named the function's stack frame: a call
// through it was a use after return. Each call now throws InvalidArgument,
// also once the Worker is gone.
TEST_F(WorkerTest, AGraphKeptPastItsFunctionRefusesTasks) {
    RegisterTinyAdd(*worker_);
    std::optional<HostGraph> kept;
    HostProgram p{"keeps_its_graph", 1, {}, [&](HostGraph& g, std::span<const HostTensor>) { kept.emplace(g); }};
    worker_->Run(p, {HostTensor::Zeros({1, kTinyCols})});
    ASSERT_TRUE(kept);
    const HostTensor row = HostTensor::Zeros({1, kTinyCols});
    auto expect_refused = [&](const char* call, const std::function<void()>& f) {
        try {
            f();
            ADD_FAILURE() << call << " took a task after the function returned";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << call << ": " << e.what();
            EXPECT_NE(e.message().find(std::string("HostGraph::") + call +
                                       ": the orchestration function of host program 'keeps_its_graph' has returned"),
                      std::string::npos)
                << e.message();
        }
    };
    for (int pass = 0; pass < 2; ++pass) {  // with the Worker, then without it
        expect_refused("Chip", [&] { kept->Chip("tiny_add", {In(row), In(row), Out(row)}); });
        expect_refused("Sub", [&] { kept->Sub("inline", [](std::span<const HostTensor>) {}, {InOut(row)}); });
        expect_refused("Sub", [&] { kept->Sub("verify", {InOut(row)}); });
        expect_refused("CreateTensor", [&] { kept->CreateTensor({4}); });
        worker_.reset();
    }
}

// A thread of the orchestration function submits in a loop and outlives the
// function: every submission either runs in the run or is refused, none
// is lost or half taken. The run's sum counts exactly the accepted ones.
TEST_F(WorkerTest, AThreadSubmittingWhileItsFunctionReturnsLosesNoTask) {
    RegisterTinyAdd(*worker_);
    HostTensor one = HostTensor::Zeros({1, kTinyCols});
    for (float& v : one.floats()) v = 1.0f;
    for (int rep = 0; rep < 5; ++rep) {
        std::atomic<int> accepted{0}, started{0};
        std::thread submitter;
        std::string refusal;
        HostProgram p{"outlived", 1, {{{1, kTinyCols}}}, [&](HostGraph& g, std::span<const HostTensor> x) {
                          submitter = std::thread([&, graph = g, sum = x[1], in = x[0]]() mutable {
                              for (int i = 0; i < 100000; ++i) {
                                  try {
                                      graph.Chip("tiny_add", {In(sum), In(in), Out(sum)});
                                  } catch (const Error& e) {
                                      refusal = e.message();
                                      return;
                                  }
                                  ++accepted;
                                  ++started;
                              }
                          });
                          // Returns while the thread submits (a few tasks in).
                          Await([&] { return started.load() >= 3 + rep; });
                      }};
        RunHandle h = worker_->Submit(p, {one});
        const std::vector<HostTensor> outs = h.Wait();
        submitter.join();
        EXPECT_NE(refusal.find("has returned"), std::string::npos) << refusal;
        for (float v : outs[0].floats()) ASSERT_EQ(v, float(accepted.load())) << "rep " << rep;
        EXPECT_EQ(h.Report().size(), size_t(accepted.load()));
    }
}

// A task of a run that submits into that same run through a copy of its
// graph: with the window full (1 task: the submitter itself) the submit
// waited for room only the submitter's end could make, holding the graph's
// lock the function needed: a hang. Now refused, from a SubWorker and
// from a chip function, and the run ends.
TEST_F(WorkerTest, ATaskSubmittingIntoItsOwnRunIsRefused) {
    worker_.reset();
    Worker w(*host_, WindowOfOne(*host_));
    RegisterTinyAdd(w);
    std::optional<HostGraph> kept;
    std::mutex mu;
    std::vector<std::string> refusals;
    auto submit_into_own_run = [&] {
        try {
            kept->Chip("tiny_add", {In(HostTensor::Zeros({1, kTinyCols})), In(HostTensor::Zeros({1, kTinyCols})),
                                    Out(HostTensor::Zeros({1, kTinyCols}))});
        } catch (const Error& e) {
            std::lock_guard lock(mu);
            refusals.push_back(std::string(ToString(e.kind())) + ": " + e.message());
        }
    };
    w.RegisterChipFunction("submits_into_its_run", ChipFunction([&](ChipContext&) { submit_into_own_run(); }));
    HostProgram p{"own_run", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                      kept.emplace(g);
                      g.Sub("sub", [&](std::span<const HostTensor>) { submit_into_own_run(); }, {Out(HostTensor::Zeros({4}))});
                      g.Chip("submits_into_its_run", {Out(HostTensor::Zeros({4}))});
                      // Open until both tried (the Sub tried while this
                      // waited for room for the chip task).
                      Await([&] {
                          std::lock_guard lock(mu);
                          return refusals.size() == 2;
                      });
                  }};
    const std::vector<TaskRecord> report =
        ReportOrExit(w, p, "a task submitting into its own run hung the run");
    ASSERT_EQ(report.size(), 2u);
    for (const TaskRecord& r : report) EXPECT_EQ(r.state, TaskState::Done) << r.name;
    ASSERT_EQ(refusals.size(), 2u);
    for (const std::string& r : refusals)
        EXPECT_NE(r.find("invalid argument: HostGraph::Chip: a task of host program 'own_run' submits into its own run"),
                  std::string::npos)
            << r;
}

// A task of another run, given a run's graph, submits into that run while
// a task of it reads what this task writes, and the run's function waits
// for room in a full window (holding the graph's submit lock). Neither run
// could end: the submission is refused instead, and both runs finish.
// (A task still submits into a nested run it started: see
// SubWorkersWaitingOnNestedRunsOfTheirWorkerRunThoseRunsSubWorkers.)
TEST_F(WorkerTest, ATaskSubmittingIntoARunThatWaitsForItIsRefused) {
    worker_.reset();
    Worker w(*host_, WindowOfOne(*host_));
    RegisterTinyAdd(w);
    const HostTensor shared = HostTensor::Zeros({1, kTinyCols});
    std::optional<HostGraph> later_graph;
    std::atomic<bool> handed{false};
    std::string refusal;
    HostProgram writer{"writer", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                           g.Sub("writes_shared",
                                 [&](std::span<const HostTensor>) {
                                     if (!Await([&] { return handed.load(); })) throw std::runtime_error("never handed");
                                     try {
                                         later_graph->Chip("tiny_add", {In(HostTensor::Zeros({1, kTinyCols})),
                                                                        In(HostTensor::Zeros({1, kTinyCols})),
                                                                        Out(HostTensor::Zeros({1, kTinyCols}))});
                                     } catch (const Error& e) {
                                         refusal = std::string(ToString(e.kind())) + ": " + e.message();
                                     }
                                 },
                                 {Out(shared)}, {.name = "writes_shared"});
                       }};
    HostProgram reader{"reader", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                           // Depends on writes_shared (RAW on `shared`), and fills the window.
                           g.Chip("tiny_add", {In(shared), In(shared), Out(HostTensor::Zeros({1, kTinyCols}))},
                                  {.name = "reads_shared"});
                           later_graph.emplace(g);
                           handed = true;
                           g.Chip("tiny_add", {In(HostTensor::Zeros({1, kTinyCols})), In(HostTensor::Zeros({1, kTinyCols})),
                                               Out(HostTensor::Zeros({1, kTinyCols}))},
                                  {.name = "waits_for_room"});
                       }};
    RunHandle first = w.Submit(writer, {});
    const std::vector<TaskRecord> report =
        ReportOrExit(w, reader, "a task submitting into a run that waits for it hung both runs");
    ASSERT_EQ(report.size(), 2u);
    for (const TaskRecord& r : report) EXPECT_EQ(r.state, TaskState::Done) << r.name;
    first.Wait();
    EXPECT_EQ(refusal,
              "invalid argument: HostGraph::Chip: task 'writes_shared' of host program 'writer' submits into host "
              "program 'reader', a run it did not start; waiting there for room in the window could wait for the "
              "task itself (that run may depend on it, or need the thread it holds); submit from that run's "
              "orchestration function (or its threads), or start a nested run");
}

// With a window of 2 and the chip tasks held at a gate the test opens once
// the function has submitted two, the function never sees more than two
// tasks held after a submit: the third waits for room.
TEST_F(WorkerTest, ASubmitWaitsWhileTheWindowIsFull) {
    worker_.reset();
    DistributedConfig c;
    c.device_ids = Vfs(*host_);
    c.max_tasks_in_flight = 2;
    Worker w(*host_, c);
    std::atomic<bool> gate{false};
    std::atomic<int> submitted{0};
    w.RegisterChipFunction("gated", ChipFunction([&](ChipContext&) {
                               if (!Await([&] { return gate.load(); })) throw std::runtime_error("gate never opened");
                           }));
    size_t most = 0;
    HostProgram p{"gated", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                      for (int i = 0; i < 6; ++i) {
                          g.Chip("gated", {Out(HostTensor::Zeros({4}))});
                          ++submitted;
                          most = std::max(most, w.HeldNow().tasks);
                      }
                  }};
    std::thread opener([&] {
        Await([&] { return submitted.load() >= 2; });
        gate = true;
    });
    w.Run(p, {});
    opener.join();
    EXPECT_EQ(most, 2u);
}

// A host orchestration function that throws after submitting: what it
// submitted runs to the end (the chip task's sum lands, the SubWorker
// behind it runs), nothing is skipped, and the run fails with the
// function's exception.
TEST_F(WorkerTest, WhatWasSubmittedBeforeTheFunctionThrewRuns) {
    std::atomic<int> ran{0};
    HostProgram p{"plan_fails", 2, {{{kTile, kTile}}}, [&ran](HostGraph& g, std::span<const HostTensor> x) {
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])});
                      g.Sub("count", [&ran](std::span<const HostTensor>) { ++ran; }, {In(x[2])});
                      throw std::runtime_error("cannot plan tile 3");
                  }};
    HostTensor a = HostTensor::Full({kTile, kTile}, 2.0f), b = HostTensor::Full({kTile, kTile}, 3.0f),
               f = HostTensor::Zeros({kTile, kTile});
    RunHandle h = worker_->Submit(p, {a, b, f});
    try {
        h.Wait();
        ADD_FAILURE() << "no HostRunError";
    } catch (const HostRunError& e) {
        ASSERT_EQ(e.failures().size(), 1u);
        EXPECT_TRUE(e.failures()[0].orchestrator);
        EXPECT_EQ(e.failures()[0].run, "plan_fails");
        EXPECT_EQ(e.failures()[0].cause, "cannot plan tile 3");
        EXPECT_TRUE(e.skipped().empty());
        ASSERT_EQ(e.report().size(), 2u);
        EXPECT_EQ(e.report()[0].state, TaskState::Done);
        EXPECT_EQ(e.report()[1].state, TaskState::Done);
    }
    EXPECT_EQ(ran.load(), 1);
    for (float v : f.floats()) ASSERT_EQ(v, 5.0f);
}

// A SubWorker that fails ("gated failure") once `open` is set (or after
// 2 s), setting `failed` first: the test decides whether the failure comes
// before or after the tasks it submits next.
SubWorkerFn GatedFailure(std::atomic<bool>& open, std::atomic<bool>& failed) {
    return [&open, &failed](std::span<const HostTensor>) {
        for (int i = 0; i < 20000 && !open.load(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(100));
        failed = true;
        throw std::runtime_error("gated failure");
    };
}

// A task that only follows a failed one (it overwrites all the failed
// task wrote) runs, and so does its reader, whether the failure came
// before or after its submission: as in the orchestration runtime
// (dependency/fan_out.hpp). Before, a failure passed along every edge.
// The reader also overwrites the failed task's other output: it reads the
// overwrite's bytes only, and runs (it was skipped, probe79).
TEST_F(WorkerTest, ATaskThatOnlyFollowsAFailedOneRuns) {
    for (const bool failed_first : {false, true}) {
        SCOPED_TRACE(failed_first ? "failed before the overwrite was submitted" : "failing while it was submitted");
        std::atomic<bool> open{failed_first}, failed{false};
        HostProgram p{"follows", 2, {{{kTile, kTile}}}, [&](HostGraph& g, std::span<const HostTensor> x) {
                          HostTensor scratch = g.CreateTensor({kTile, kTile});
                          g.Sub(
                              "gated_fail",
                              GatedFailure(open, failed),
                              {Out(scratch), Out(x[2])});
                          if (failed_first) {
                              while (!failed.load()) std::this_thread::yield();
                              std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past its end
                          }
                          g.Chip("chip_add", {In(x[0]), In(x[1]), Out(scratch)}, {.name = "overwrite"});
                          g.Chip("chip_add", {In(scratch), In(x[1]), Out(x[2])}, {.name = "reader"});
                          open = true;
                      }};
        HostTensor a = HostTensor::Full({kTile, kTile}, 2.0f), b = HostTensor::Full({kTile, kTile}, 3.0f),
                   c = HostTensor::Zeros({kTile, kTile});
        RunHandle h = worker_->Submit(p, {a, b, c});
        try {
            h.Wait();
            ADD_FAILURE() << "no HostRunError";
        } catch (const HostRunError& e) {
            ASSERT_EQ(e.failures().size(), 1u);
            EXPECT_EQ(e.failures()[0].cause, "gated failure");
            EXPECT_TRUE(e.skipped().empty());
            ASSERT_EQ(e.report().size(), 3u);
            EXPECT_EQ(e.report()[0].state, TaskState::Failed);
            EXPECT_EQ(e.report()[1].state, TaskState::Done);
            EXPECT_EQ(e.report()[2].state, TaskState::Done);
        }
        for (float v : c.floats()) ASSERT_EQ(v, 8.0f);
    }
}

// A task that rewrote part of what a failed task wrote: a reader of only
// those bytes reads its version and runs, whenever the failure came; a
// reader of the rest is skipped. The failed writer's whole range stayed in
// the hazard map until one write covered it, so the first reader was
// skipped too (probe of 5 Dec).
TEST_F(WorkerTest, AReaderOfRowsRewrittenAfterAFailureRuns) {
    for (const bool failed_first : {false, true}) {
        SCOPED_TRACE(failed_first ? "failed before the rewrite was submitted" : "failing while it was submitted");
        std::atomic<bool> open{failed_first}, failed{false};
        HostTensor x = HostTensor::Zeros({2 * kTile, kTile});
        HostProgram p{"rewrite_part", 4, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                          g.Sub(
                              "gated_fail",
                              GatedFailure(open, failed),
                              {Out(x)});
                          if (failed_first) {
                              while (!failed.load()) std::this_thread::yield();
                              std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past its end
                          }
                          g.Chip("chip_add", {In(t[0]), In(t[1]), Out(x.Rows(0, kTile))}, {.name = "rewrite_top"});
                          g.Chip("chip_add", {In(x.Rows(0, kTile)), In(t[1]), Out(t[2])}, {.name = "reads_top"});
                          g.Chip("chip_add", {In(x.Rows(kTile, 2 * kTile)), In(t[1]), Out(t[3])}, {.name = "reads_bottom"});
                          open = true;
                      }};
        HostTensor a = HostTensor::Full({kTile, kTile}, 2.0f), b = HostTensor::Full({kTile, kTile}, 3.0f),
                   top = HostTensor::Zeros({kTile, kTile}), bottom = HostTensor::Zeros({kTile, kTile});
        try {
            worker_->Run(p, {a, b, top, bottom});
            ADD_FAILURE() << "no HostRunError";
        } catch (const HostRunError& e) {
            ASSERT_EQ(e.failures().size(), 1u);
            EXPECT_EQ(e.skipped(), std::vector<std::string>{"reads_bottom"});
            ASSERT_EQ(e.report().size(), 4u);
            EXPECT_EQ(e.report()[1].state, TaskState::Done);
            EXPECT_EQ(e.report()[2].state, TaskState::Done);
            EXPECT_EQ(e.report()[3].state, TaskState::Skipped);
        }
        for (float v : top.floats()) ASSERT_EQ(v, 8.0f);
        for (float v : bottom.floats()) ASSERT_EQ(v, 0.0f);
    }
}

// A write wider than 4 MiB over rows a failed task wrote: a reader of those
// rows reads its bytes and runs. The wide write left the narrower entries
// it covered in the hazard map, so the reader was skipped (probe of 5 Dec).
TEST_F(WorkerTest, AReaderAfterAWideRewriteOfFailedRowsRuns) {
    HostTensor x = HostTensor::Full({2048, 1024}, 1.0f), y = HostTensor::Zeros({1, 1024});  // x: 8 MiB
    HostProgram p{"wide_rewrite", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                      g.Sub("fails", [](std::span<const HostTensor>) { throw std::runtime_error("boom"); },
                            {Out(x.Rows(0, 32))});
                      g.Sub("rewrite", [](std::span<const HostTensor> t) { std::ranges::fill(t[0].floats(), 7.0f); },
                            {Out(x.Rows(16, 2048))});
                      g.Sub("reader",
                            [](std::span<const HostTensor> t) {
                                for (size_t i = 0; i < t[1].floats().size(); ++i) t[1].floats()[i] = t[0].floats()[i] + 1;
                            },
                            {In(x.Rows(16, 17)), Out(y)});
                  }};
    try {
        worker_->Run(p, {});
        ADD_FAILURE() << "no HostRunError";
    } catch (const HostRunError& e) {
        ASSERT_EQ(e.failures().size(), 1u);
        EXPECT_TRUE(e.skipped().empty()) << e.what();
    }
    for (float v : y.floats()) ASSERT_EQ(v, 8.0f);
}

// A task of a nested run skipped for its caller's failure ended with its
// run, before the caller's run went on: the hazard map forgot it, and with
// it the failure it had covered, so a later reader of the failed task's
// bytes ran on them (probe of 5 Dec). It stays while the failure's run is
// in flight, and goes with it.
TEST_F(WorkerTest, AReaderAfterANestedRunSkippedForTheFailureIsSkipped) {
    HostTensor x = HostTensor::Full({kTile, kTile}, 1.0f), c = HostTensor::Full({kTile, kTile}, 10.0f),
               y = HostTensor::Zeros({kTile, kTile});
    const HostProgram inner{"inner", 2, {}, [](HostGraph& g, std::span<const HostTensor> t) {
                                g.Chip("chip_add", {In(t[0]), In(t[1]), Out(t[0])}, {.name = "inner_add"});
                            }};
    std::optional<RunHandle> nested;
    std::atomic<bool> failed{false};
    HostProgram p{"outer", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                      g.Sub(
                          "writer_fails",
                          [&](std::span<const HostTensor> t) {
                              t[0].floats()[0] = 999.0f;
                              nested.emplace(worker_->Submit(inner, {t[0], c}));
                              failed = true;
                              throw std::runtime_error("writer failed after submitting a nested run over its bytes");
                          },
                          {InOut(x)});
                      // The nested run ends (its task skipped) before the reader comes.
                      ASSERT_TRUE(Await([&] { return failed.load() && nested->Done(); }));
                      g.Chip("chip_add", {In(x), In(c), Out(y)}, {.name = "reads_x"});
                  }};
    try {
        worker_->Run(p, {});
        ADD_FAILURE() << "no HostRunError";
    } catch (const HostRunError& e) {
        ASSERT_EQ(e.failures().size(), 1u);
        EXPECT_EQ(e.failures()[0].function, "writer_fails");
        EXPECT_EQ(e.skipped(), std::vector<std::string>{"reads_x"});
    }
    for (float v : y.floats()) ASSERT_EQ(v, 0.0f);
    try {
        nested->Wait();
        ADD_FAILURE() << "the nested run did not fail";
    } catch (const HostRunError& e) {
        EXPECT_EQ(e.skipped(), std::vector<std::string>{"inner_add"});
    }
    // Both runs ended: nothing of theirs is held.
    EXPECT_EQ(worker_->HeldNow().tasks, 0u);
    EXPECT_EQ(worker_->HeldNow().hazard_records, 0u);
}

// A SubWorker that waits on its own run (through the run's handle) gets
// InvalidArgument at once instead of waiting for itself; the run then ends.
TEST_F(WorkerTest, ASubWorkerWaitingOnItsOwnRunIsRefused) {
    std::atomic<RunHandle*> handle{nullptr};
    std::string wait_error, report_error;
    HostProgram p{"self_wait", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                      g.Sub("waits_on_itself",
                            [&](std::span<const HostTensor>) {
                                if (!Await([&] { return handle.load() != nullptr; })) return;
                                try {
                                    handle.load()->Wait();
                                } catch (const Error& e) {
                                    if (e.kind() == ErrorKind::InvalidArgument) wait_error = e.message();
                                }
                                try {
                                    handle.load()->Report();
                                } catch (const Error& e) {
                                    if (e.kind() == ErrorKind::InvalidArgument) report_error = e.message();
                                }
                            },
                            {In(HostTensor::Zeros({4}))});
                  }};
    RunHandle h = worker_->Submit(p, {});
    handle = &h;
    ASSERT_TRUE(Await([&] { return h.Done(); }));
    h.Wait();
    EXPECT_NE(wait_error.find("a task of the run waits for the run itself"), std::string::npos) << wait_error;
    EXPECT_NE(report_error.find("a task of the run waits for the run itself"), std::string::npos) << report_error;
}

// A SubWorker of run A that waits on a later run B, whose task reads what
// A's SubWorker writes, would wait for itself through B: it gets
// InvalidArgument naming both tasks, and both runs end. It used to hang.
TEST_F(WorkerTest, ASubWorkerWaitingOnARunThatDependsOnItIsRefused) {
    HostTensor x = HostTensor::Zeros({4});
    std::atomic<RunHandle*> later{nullptr};
    std::string wait_error;
    HostProgram a{"A", 1, {}, [&](HostGraph& g, std::span<const HostTensor> in) {
                      g.Sub("writes_x",
                            [&](std::span<const HostTensor> t) {
                                if (!Await([&] { return later.load() != nullptr; })) return;
                                try {
                                    later.load()->Wait();
                                } catch (const Error& e) {
                                    if (e.kind() == ErrorKind::InvalidArgument) wait_error = e.message();
                                }
                                t[0].floats()[0] = 7;
                            },
                            {InOut(in[0])});
                  }};
    float seen = -1;
    HostProgram b{"B", 1, {}, [&](HostGraph& g, std::span<const HostTensor> in) {
                      g.Sub("reads_x", [&](std::span<const HostTensor> t) { seen = t[0].floats()[0]; }, {In(in[0])});
                  }};
    RunHandle ha = worker_->Submit(a, {x});
    RunHandle hb = worker_->Submit(b, {x});
    later = &hb;
    ASSERT_TRUE(Await([&] { return ha.Done(); })) << "run A never ended";
    ha.Wait();
    hb.Wait();
    EXPECT_NE(wait_error.find("task 'reads_x#0' of it depends on task 'writes_x#0' of run 'A', which waits for it"),
              std::string::npos)
        << wait_error;
    EXPECT_EQ(seen, 7.0f);
}

// SubWorker bodies that wait for another run's handle (once set, after
// `delay_ms`) and count whether the wait returned or was refused.
struct Waits {
    std::atomic<int> refused{0}, returned{0};
    std::string why;  // the refusal, "kind: message"
    std::mutex why_mu;
    SubWorkerFn For(std::atomic<RunHandle*>& other, int delay_ms) {
        return [this, &other, delay_ms](std::span<const HostTensor>) {
            if (!Await([&] { return other.load() != nullptr; })) return;
            std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
            try {
                other.load()->Report();
                ++returned;
            } catch (const Error& e) {
                ++refused;
                std::lock_guard lock(why_mu);
                why = std::string(ToString(e.kind())) + ": " + e.message();
            }
        };
    }
};

// SubWorkers of two runs, each waiting for the other's run (disjoint
// tensors): one of them gets InvalidArgument naming both waits, whichever
// thread runs the second (its own, or the first's, which runs queued jobs
// as it waits), and both runs end. On threads of their own both waited for
// good, about one time in six (found probing from outside).
TEST_F(WorkerTest, TwoSubWorkersWaitingForEachOthersRunsAreRefusedRatherThanHang) {
    for (int round = 0; round < 5; ++round) {
        HostTensor x = HostTensor::Zeros({4}), y = HostTensor::Zeros({4});
        std::atomic<RunHandle*> of_a{nullptr}, of_b{nullptr};
        Waits waits;
        HostProgram a{"A", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          g.Sub("waits_for_b", waits.For(of_b, 0), {InOut(x)});
                      }};
        HostProgram b{"B", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          g.Sub("waits_for_a", waits.For(of_a, 20 * (round % 3)), {InOut(y)});
                      }};
        RunHandle ha = worker_->Submit(a, {});
        RunHandle hb = worker_->Submit(b, {});
        of_a = &ha;
        of_b = &hb;
        if (!ha.WaitFor(std::chrono::seconds(30)) || !hb.WaitFor(std::chrono::seconds(30))) {
            std::fprintf(stderr, "round %d: the two runs waited for each other for good\n", round);
            std::_Exit(1);  // two pool threads wait for good: nothing else ends this test
        }
        ha.Wait();
        hb.Wait();
        EXPECT_EQ(waits.refused.load(), 1) << "round " << round;
        EXPECT_EQ(waits.returned.load(), 1) << "round " << round;
        EXPECT_NE(waits.why.find("invalid argument: run '"), std::string::npos) << waits.why;
        EXPECT_NE(waits.why.find("(neither run could end)"), std::string::npos) << waits.why;
    }
}

// A cycle through a tensor and two waits: SubWorker a1 of run A waits for
// run B, whose SubWorker b1 waits for run C, whose task c1 reads what a2 of
// A writes after a1 (a2 reads a1's output). No run could end: one of the
// two waits is refused (InvalidArgument), whichever is filed second (b1
// may run on a1's thread as a1 waits: then b1's wait is refused for a1's
// consumer), and all three runs end. Before, both waited for good.
TEST_F(WorkerTest, AWaitClosingACycleThroughATensorAndAnotherWaitIsRefused) {
    for (int round = 0; round < 4; ++round) {
        HostTensor x = HostTensor::Zeros({4}), t = HostTensor::Zeros({4}), y = HostTensor::Zeros({4});
        std::atomic<RunHandle*> of_b{nullptr}, of_c{nullptr};
        Waits waits;
        auto add_one = [](std::span<const HostTensor> a) {
            for (size_t i = 0; i < 4; ++i) a[1].floats()[i] = a[0].floats()[i] + 1.0f;
        };
        HostProgram a{"A", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          g.Sub("a1", waits.For(of_b, round % 2 ? 0 : 30), {Out(x)});
                          g.Sub("a2", add_one, {In(x), Out(t)});
                      }};
        HostProgram c{"C", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          g.Sub("c1", add_one, {In(t), Out(y)});
                      }};
        HostProgram b{"B", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          g.Sub("b1", waits.For(of_c, round % 2 ? 30 : 0), {});
                      }};
        RunHandle ha = worker_->Submit(a, {});
        RunHandle hc = worker_->Submit(c, {});
        RunHandle hb = worker_->Submit(b, {});
        of_b = &hb;
        of_c = &hc;
        if (!ha.WaitFor(std::chrono::seconds(30)) || !hb.WaitFor(std::chrono::seconds(30)) ||
            !hc.WaitFor(std::chrono::seconds(30))) {
            std::fprintf(stderr, "round %d: the three runs waited for each other for good\n", round);
            std::_Exit(1);  // two pool threads wait for good: nothing else ends this test
        }
        ha.Wait();
        hb.Wait();
        hc.Wait();
        EXPECT_EQ(waits.refused.load(), 1) << "round " << round;
        EXPECT_EQ(waits.returned.load(), 1) << "round " << round;
        EXPECT_NE(waits.why.find("invalid argument: run '"), std::string::npos) << waits.why;
        EXPECT_NE(waits.why.find(" could end)"), std::string::npos) << waits.why;
        EXPECT_EQ(y.floats()[0], 2.0f) << "round " << round;
    }
}
// Both SubWorker threads (the fixture has 2) run a SubWorker that starts a
// run of the same Worker and waits on it; each nested run has SubWorkers of
// its own, one level deeper still. No thread is free for them: the waiting
// threads run them. Before, this deadlocked.
TEST_F(WorkerTest, SubWorkersWaitingOnNestedRunsOfTheirWorkerRunThoseRunsSubWorkers) {
    NestedRunsOnEveryPoolThread(*worker_, [](Worker& w, const HostProgram& p) { w.Run(p, {}); });
}

// The same with every wait in WaitFor slices: on the Worker's own pool
// threads WaitFor runs their queued jobs as Wait does.
TEST_F(WorkerTest, SubWorkersWaitingInSlicesOnNestedRunsRunThoseRunsSubWorkers) {
    NestedRunsOnEveryPoolThread(*worker_, [](Worker& w, const HostProgram& p) {
        RunHandle h = w.Submit(p, {});
        while (!h.WaitFor(std::chrono::milliseconds(1))) {
        }
        h.Wait();
    });
}

// A chip function that runs a nested program on a Worker of one device
// with one chip slot: the nested chip task queues on the lane whose only
// thread is the waiting chip function, which runs it, and it waited for
// the slot that same call holds: both runs hung. It is refused now (the
// nested run fails, so the outer chip task does), and the Worker goes on.
TEST_F(WorkerTest, AChipFunctionWaitingForANestedRunOnItsOwnOnlySlotIsRefused) {
    worker_.reset();
    DistributedConfig c;
    c.device_ids = {Vfs(*host_).front()};
    c.chip_tasks_per_device = 1;
    Worker one(*host_, c);
    RegisterTinyAdd(one);
    HostProgram inner{"inner", 2, {{{1, kTinyCols}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                          g.Chip("tiny_add", {In(x[0]), In(x[1]), Out(x[2])});
                      }};
    std::string nested_error;
    one.RegisterChipFunction("nest", ChipFunction([&](ChipContext&) {
                                 try {
                                     one.Run(inner, {HostTensor::Zeros({1, kTinyCols}), HostTensor::Zeros({1, kTinyCols})});
                                 } catch (const HostRunError& e) {
                                     nested_error = e.failures().at(0).cause;
                                     throw;
                                 }
                             }));
    HostProgram outer{"outer", 1, {}, [](HostGraph& g, std::span<const HostTensor> x) { g.Chip("nest", {In(x[0])}); }};
    EXPECT_THROW(one.Run(outer, {HostTensor::Zeros({1, kTinyCols})}), HostRunError);
    EXPECT_NE(nested_error.find("chip slot(s) are held by chip calls of this same thread"), std::string::npos)
        << nested_error;
    // The slot is free again: the nested program runs from the host.
    HostTensor a = HostTensor::Zeros({1, kTinyCols});
    a.floats()[0] = 2.0f;
    EXPECT_EQ(one.Run(inner, {a, a})[0].floats()[0], 4.0f);
}

// A Worker of one VF that runs one chip task at a time, and 2 SubWorkers.
Worker OneChipSlotWorker(Host& host) {
    DistributedConfig c;
    c.device_ids = {Vfs(host).front()};
    c.chip_tasks_per_device = 1;
    c.num_sub_workers = 2;
    return Worker(host, c);
}

// Three independent chip tasks on a device of one chip slot, each chip
// function running a nested program of one SubWorker. The device's only
// thread, waiting in the first call for its nested run, took the next chip
// task from its lane, whose slot that same call held: the siblings failed
// with "would wait for itself" (an outside probe, every run). They are put
// back now and run once the call ends.
TEST_F(WorkerTest, SiblingChipTasksWaitWhileAChipFunctionWaitsOnANestedRun) {
    worker_.reset();  // its devices
    Worker one = OneChipSlotWorker(*host_);
    one.RegisterSubWorker("inc", [](std::span<const HostTensor> t) { t[0].floats()[0] += 1; });
    HostTensor d = HostTensor::Zeros({1});
    HostProgram inner{"inner", 1, {}, [](HostGraph& g, std::span<const HostTensor> a) { g.Sub("inc", {InOut(a[0])}); }};
    one.RegisterChipFunction("nest", ChipFunction([&](ChipContext&) { one.Run(inner, {d}); }));
    HostProgram outer{"outer", 1, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                          for (int i = 0; i < 3; ++i) g.Chip("nest", {In(x[0])});
                      }};
    EXPECT_NO_THROW(one.Run(outer, {HostTensor::Zeros({1, kTinyCols})}));
    EXPECT_EQ(d.floats()[0], 3.0f);
}

// The same device, but the nested run reads what a queued sibling writes:
// the nested run waits for that sibling, which waits for the slot the
// waiting call holds. Put back, it would never run and both runs would
// hang; it runs on the waiting thread and fails instead, as before.
TEST_F(WorkerTest, ASiblingTheNestedRunWaitsForFailsRatherThanHangs) {
    worker_.reset();  // its devices
    Worker one = OneChipSlotWorker(*host_);
    RegisterTinyAdd(one);
    HostTensor y = HostTensor::Zeros({1, kTinyCols});
    std::atomic<bool> writer_submitted{false};
    HostProgram inner{"inner", 1, {}, [](HostGraph& g, std::span<const HostTensor> a) {
                          g.Sub("read_y", [](std::span<const HostTensor>) {}, {In(a[0])});
                      }};
    one.RegisterChipFunction("nest", ChipFunction([&](ChipContext&) {
                                 ASSERT_TRUE(Await([&] { return writer_submitted.load(); }));
                                 one.Run(inner, {y});  // its reader depends on the writer below
                             }));
    HostProgram outer{"outer", 1, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                          g.Chip("nest", {In(x[0])});
                          g.Chip("tiny_add", {In(x[0]), In(x[0]), Out(y)});  // queued behind it, on its lane
                          writer_submitted = true;
                      }};
    auto run = std::async(std::launch::async, [&] { one.Run(outer, {HostTensor::Zeros({1, kTinyCols})}); });
    ASSERT_EQ(run.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the runs hung";
    try {
        run.get();
        ADD_FAILURE() << "the sibling got a slot its own device thread held";
    } catch (const HostRunError& e) {
        EXPECT_NE(std::string(e.what()).find("chip slot(s) are held by chip calls of this same thread"),
                  std::string::npos)
            << e.what();
    }
}

// Chip functions on several devices at once, each running a nested program
// of one chip task on the same Worker and waiting for it (`concurrent`
// calls held together by a barrier, so all hold their device's only slot
// while they wait). Returns the outer run's error, or "" when it ended well
// with every nested sum right; "hung" when it did not end within 60 s.
std::string NestedChipRunsAtOnce(Host& host, size_t devices, int concurrent, int slots = 1) {
    DistributedConfig c;
    const auto vfs = Vfs(host);
    c.device_ids.assign(vfs.begin(), vfs.begin() + long(devices));
    c.chip_tasks_per_device = slots;
    Worker w(host, c);
    RegisterTinyAdd(w);
    std::atomic<int> entered{0};
    std::vector<HostTensor> sums;
    for (int i = 0; i < concurrent; ++i) sums.push_back(HostTensor::Zeros({1, kTinyCols}));
    HostTensor ones = HostTensor::Full({1, kTinyCols}, 1.0f);
    HostProgram inner{"inner", 2, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                          g.Chip("tiny_add", {In(ones), In(x[0]), Out(x[1])});
                      }};
    w.RegisterChipFunction("nest", ChipFunction([&](ChipContext& ctx) {
                               ++entered;
                               if (!Await([&] { return entered.load() >= concurrent; })) throw std::runtime_error("barrier");
                               const int i = int(ctx.shapes[0][1]) - 1;  // which sum: the argument's width
                               w.Run(inner, {HostTensor::Full({1, kTinyCols}, float(i)), sums[size_t(i)]});
                           }));
    HostProgram outer{"outer", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          for (int i = 0; i < concurrent; ++i) g.Chip("nest", {In(HostTensor::Zeros({1, i + 1}))});
                      }};
    auto run = std::async(std::launch::async, [&] { w.Run(outer, {}); });
    if (run.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
        std::fprintf(stderr, "the nested runs hung\n");
        std::_Exit(1);  // its threads wait for each other: no clean way out
    }
    try {
        run.get();
    } catch (const Error& e) {
        return e.what();
    }
    for (int i = 0; i < concurrent; ++i)
        for (float v : sums[size_t(i)].floats())
            if (v != float(i) + 1.0f) return "sum " + std::to_string(i) + " holds " + std::to_string(v);
    return "";
}

// Three chip functions on three of four one-slot devices wait for nested
// runs at once: each nested chip task runs on the free device. Before,
// placement sent them by load alone, onto a device whose slot a waiting
// call held: they failed as waiting for themselves, or, queued on each
// other's devices, hung both runs (found probing from outside).
TEST_F(WorkerTest, NestedChipRunsUseTheDeviceNoWaitingCallHolds) {
    worker_.reset();  // its devices
    for (int round = 0; round < 5; ++round) EXPECT_EQ(NestedChipRunsAtOnce(*host_, 4, 3), "") << "round " << round;
}

// Two chip functions hold both one-slot devices and wait for nested runs
// whose chip tasks need a slot: no slot can free before one of those runs
// ends. Their chip tasks fail (InvalidArgument), in bounded time, rather
// than wait for each other for good.
TEST_F(WorkerTest, NestedChipRunsWithEverySlotHeldByWaitingCallsFailRatherThanHang) {
    worker_.reset();  // its devices
    for (int round = 0; round < 5; ++round) {
        const std::string error = NestedChipRunsAtOnce(*host_, 2, 2);
        EXPECT_NE(error.find("chip slot"), std::string::npos) << "round " << round << ": " << error;
        EXPECT_NE(error.find("invalid argument"), std::string::npos) << error;
    }
    // Two slots on one device, held by two threads' waiting calls: a
    // waiting thread that took the other's nested task waited for a slot
    // itself, and both hung.
    HostOptions sixteen_cores = Mock(1, 1);
    sixteen_cores.embedded_mock.extra_args = {"--cores", "16"};
    Host two_slots = Host::Open(sixteen_cores);
    for (int round = 0; round < 3; ++round) {
        const std::string error = NestedChipRunsAtOnce(two_slots, 1, 2, 2);
        EXPECT_NE(error.find("held by chip calls that wait for nested runs"), std::string::npos)
            << "round " << round << ": " << error;
    }
}

// A run's waiter runs the run's queued tasks itself while the device
// threads and SubWorkers sleep (Dispatcher::LookForEnd). A SubWorker it
// runs that starts a nested run and waits takes the SubWorker pool's only
// room: the nested run's SubWorker must then run on that same thread, as
// it would on a pool thread, or the two runs wait for each other forever.
TEST_F(WorkerTest, ASubWorkerRunByItsRunsWaiterMayWaitOnANestedRun) {
    worker_.reset();  // its devices, for a Worker of one SubWorker
    DistributedConfig c;
    c.device_ids = {Vfs(*host_).front()};
    c.num_sub_workers = 1;
    Worker one(*host_, c);
    std::atomic<int> inner_ran{0};
    HostProgram inner{"inner", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          g.Sub("inner", [&](std::span<const HostTensor>) { ++inner_ran; }, {In(HostTensor::Zeros({4}))});
                      }};
    HostProgram outer{"outer", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          g.Sub("outer", [&](std::span<const HostTensor>) { one.Run(inner, {}); },
                                {In(HostTensor::Zeros({4}))});
                      }};
    auto runs = std::async(std::launch::async, [&] {
        for (int i = 0; i < 100; ++i) {
            // The SubWorker thread sleeps by then: the waiter usually runs "outer".
            std::this_thread::sleep_for(std::chrono::microseconds(300));
            one.Run(outer, {});
        }
    });
    if (runs.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
        std::fprintf(stderr, "a waiter's SubWorker and its nested run deadlocked (%d of 100 inner runs)\n", inner_ran.load());
        std::fflush(stderr);
        std::_Exit(1);  // the Worker's threads are stuck: no clean teardown is possible
    }
    runs.get();
    EXPECT_EQ(inner_ran.load(), 100);
}

// The report lists every task by name, level, device and state: a pinned
// chip task, a SubWorker by the name the program gives it, a chip task the
// device refuses and the task behind it skipped. Times are on the device
// clock: start <= end, and a consumer starts after its producer ended.
TEST_F(WorkerTest, TheReportListsEveryTask) {
    HostProgram p{"report", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.name = "add", .device = 1});
                      g.Sub("verify", {In(x[2])});
                      HostTensor junk = g.CreateTensor({kTile, kTile});
                      g.Chip("chip_fault", {Out(junk)}, {.name = "fault", .device = 0});
                      g.Chip("chip_sub", {In(junk), In(x[1]), Out(g.CreateTensor({kTile, kTile}))}, {.name = "behind"});
                  }};
    HostTensor a = HostTensor::Full({kTile, kTile}, 2.0f), b = HostTensor::Full({kTile, kTile}, 3.0f);
    RunHandle h = worker_->Submit(p, {a, b});
    std::vector<TaskRecord> from_error;
    try {
        h.Wait();
        ADD_FAILURE() << "no HostRunError";
    } catch (const HostRunError& e) {
        from_error = e.report();
    }
    const std::vector<TaskRecord> report = h.Report();
    ASSERT_EQ(report.size(), 4u);
    ASSERT_EQ(from_error.size(), 4u);
    const std::vector<std::string> names = {"add", "verify#0", "fault", "behind"};
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(report[i].name, names[i]);
        EXPECT_EQ(from_error[i].name, names[i]);
        EXPECT_EQ(from_error[i].state, report[i].state);
        if (i > 0) {
            EXPECT_LT(report[i - 1].task_id, report[i].task_id);
        }
    }
    EXPECT_EQ(report[0].level, Level::Chip);
    EXPECT_EQ(report[0].device, worker_->DescribeDevice(1));
    EXPECT_EQ(report[0].state, TaskState::Done);
    EXPECT_EQ(report[1].level, Level::Host);
    EXPECT_EQ(report[1].device, "");
    EXPECT_EQ(report[1].state, TaskState::Done);
    EXPECT_EQ(report[2].device, worker_->DescribeDevice(0));
    EXPECT_EQ(report[2].state, TaskState::Failed);
    EXPECT_EQ(report[3].level, Level::Chip);
    EXPECT_EQ(report[3].state, TaskState::Skipped);
    EXPECT_EQ(report[3].start_ns, 0u);
    EXPECT_EQ(report[3].end_ns, 0u);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_GT(report[i].start_ns, 0u) << report[i].name;
        EXPECT_LE(report[i].start_ns, report[i].end_ns) << report[i].name;
    }
    EXPECT_GE(report[1].start_ns, report[0].end_ns) << "the SubWorker started before the chip task it reads ended";
}

// A Worker destroyed by one of its own SubWorkers, chip functions or
// orchestration functions waited for the run the caller belongs to, which
// cannot end before the caller returns: the destruction never returned.
// Now it returns at once, the run goes on to its end (tasks submitted
// after the destruction included), its handle gives the outputs, and the
// state is freed once the run has ended.
TEST(WorkerDestroyedFromInside, BySubWorkerChipFunctionOrOrchestrationFunctionReturnsAtOnce) {
    SPYRE_REQUIRE_FUSE();
    Host host = Host::Open(HostOptions::EmbeddedMock(1, 3, "2G"));
    const std::vector<int> vfs = Vfs(host);
    ASSERT_EQ(vfs.size(), 3u);
    const char* const where[] = {"SubWorker", "chip function", "orchestration function"};
    for (int w_at = 0; w_at < 3; ++w_at) {
        SCOPED_TRACE(where[w_at]);
        DistributedConfig c;
        c.device_ids = {vfs[size_t(w_at)]};
        c.num_sub_workers = 1;
        auto w = std::make_unique<Worker>(host, c);
        std::atomic<bool> returned{false};
        w->RegisterSubWorker("destroy", [&](std::span<const HostTensor>) {
            w.reset();
            returned = true;
        });
        w->RegisterChipFunction("destroy", [&](ChipContext&) {
            w.reset();
            returned = true;
        });
        HostProgram p{"destroys_its_worker", 1, {{{4}}}, [&](HostGraph& g, std::span<const HostTensor> a) {
                          if (w_at == 0) g.Sub("destroy", {In(a[0])});
                          if (w_at == 1) g.Chip("destroy", {In(a[0])});
                          if (w_at == 2) {
                              w.reset();
                              returned = true;
                          }
                          // After the destruction: the run goes on.
                          g.Sub("double", [](std::span<const HostTensor> t) {
                              for (size_t i = 0; i < 4; ++i) t[1].floats()[i] = 2 * t[0].floats()[i];
                          }, {In(a[0]), Out(a[1])});
                      }};
        HostTensor x = HostTensor::Full({4}, 3.f);
        std::optional<RunHandle> h;
        std::thread submitter([&] { h.emplace(w->Submit(p, {x})); });
        if (!Await([&] { return returned.load(); })) {
            std::fprintf(stderr, "the Worker's destruction from its %s never returned\n", where[w_at]);
            std::_Exit(1);  // the destructor waits for itself: nothing else ends this test
        }
        submitter.join();
        EXPECT_FALSE(w);
        ASSERT_TRUE(h.has_value());
        ASSERT_TRUE(Await([&] { return h->Done(); }));
        const std::vector<HostTensor> out = h->Wait();
        ASSERT_EQ(out.size(), 1u);
        for (float v : out[0].floats()) EXPECT_EQ(v, 6.f);
    }
    // The states were freed once their runs ended: their devices open again.
    DistributedConfig all;
    all.device_ids = vfs;
    Worker again(host, all);
    EXPECT_EQ(again.device_count(), 3u);
}

// The state of a Worker destroyed from inside is freed on a thread of its
// own once its runs ended: a new Worker of its devices right after the
// run's Wait was refused Busy ("close that Device first", with no Device
// to close) for 100-180 ms (an outside probe, 5 of 5). It waits for them now.
TEST(WorkerDestroyedFromInside, ANewWorkerOfItsDevicesRightAfterTheRunOpensThem) {
    SPYRE_REQUIRE_FUSE();
    Host host = Host::Open(HostOptions::EmbeddedMock(1, 2, "2G"));
    DistributedConfig c;
    c.device_ids = Vfs(host);
    c.num_sub_workers = 1;
    for (int round = 0; round < 3; ++round) {
        auto w = std::make_unique<Worker>(host, c);
        Worker* raw = w.get();
        HostProgram p{"self_destroy", 1, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                          g.Sub("killer", [&](std::span<const HostTensor>) { w.reset(); }, {In(x[0])});
                      }};
        raw->Submit(p, {HostTensor::Full({4}, 1.f)}).Wait();
        Worker again(host, c);
        EXPECT_EQ(again.device_count(), c.device_ids.size());
    }
}

// What a finished task held of the caller's is let go of once the
// dispatcher's lock is released, on the thread that ran it. Held there, the
// last reference to a RunHandle (its destructor waits for the run), or to
// the Worker (through a SubWorker's closure, or a wrapped tensor's owner),
// hung the Worker for good: every later run waited for the lock (found
// probing from outside).
TEST(WorkerDestroyedFromInside, TheLastReferenceAFinishedTaskHeldGoesWithoutAHang) {
    SPYRE_REQUIRE_FUSE();
    Host host = Host::Open(HostOptions::EmbeddedMock(1, 1, "2G"));
    DistributedConfig c;
    c.device_ids = Vfs(host);
    c.num_sub_workers = 1;
    const char* const held_by[] = {"a RunHandle in its own run's SubWorker", "the Worker in a SubWorker",
                                   "the Worker in a wrapped tensor's owner"};
    for (int held = 0; held < 3; ++held) {
        SCOPED_TRACE(held_by[held]);
        auto w = std::make_shared<Worker>(host, c);
        const std::weak_ptr<Worker> weak = w;
        std::promise<void> let_go;
        const std::shared_future<void> dropped = let_go.get_future().share();
        std::atomic<bool> ran{false};
        auto handle = std::make_shared<std::optional<RunHandle>>();
        const std::weak_ptr<std::optional<RunHandle>> weak_handle = handle;
        float bytes[4] = {};
        std::shared_ptr<const void> owner(bytes, [keep = held == 2 ? w : nullptr](const void*) {});
        HostTensor wrapped = HostTensor::Wrap(bytes, {4}, DType::FP32, std::move(owner));
        SubWorkerFn body = [&ran, dropped](std::span<const HostTensor>) {
            dropped.wait();
            ran = true;
        };
        if (held == 0) body = [body, handle](std::span<const HostTensor> x) { body(x); };
        if (held == 1) body = [body, keep = w](std::span<const HostTensor> x) { body(x); };
        HostProgram p{"holds_the_last_reference", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          g.Sub("holder", body, {In(wrapped)});
                      }};
        RunHandle h = w->Submit(p, {});
        if (held == 0) handle->emplace(std::move(h));
        const bool held_worker = held != 0;
        // Only the task holds it now.
        body = nullptr;
        wrapped = HostTensor();
        if (held == 0) handle.reset();
        if (held_worker) w.reset();
        let_go.set_value();
        // Gone (its destructor started), and the Worker goes on: a run of
        // it, or the handle's Wait once the Worker is gone.
        const bool went = Await([&] { return ran.load() && (held_worker ? weak.expired() : weak_handle.expired()); });
        HostTensor out = HostTensor::Zeros({4});
        auto next = std::async(std::launch::async, [&] {
            if (held_worker) {
                h.Wait();
                return;
            }
            w->Run({"after", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                        g.Sub("fill", [](std::span<const HostTensor> t) { t[0].floats()[0] = 7.f; }, {Out(out)});
                    }},
                   {});
        });
        if (!went || next.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
            std::fprintf(stderr, "%s: the Worker hung after what the task held went\n", held_by[held]);
            std::_Exit(1);  // a thread holds the Worker's lock for good: nothing else ends this test
        }
        next.get();
        if (!held_worker) {
            EXPECT_EQ(out.floats()[0], 7.f);
        }
    }
    Worker again(host, c);  // the devices were closed
    EXPECT_EQ(again.device_count(), c.device_ids.size());
}

// A child forked after the Worker was created has none of its threads: a
// run there would wait for them for good. Every call of the Worker and of
// its RunHandles is InvalidArgument in the child, naming both processes and
// saying to create the Worker again; destroying them there returns, and the
// parent's Worker goes on working.
TEST_F(WorkerTest, AForkedChildCannotUseItsParentsWorker) {
    HostTensor x = HostTensor::Full({4}, 1.f);
    const HostProgram twice{"twice", 1, {}, [](HostGraph& g, std::span<const HostTensor> a) {
                                g.Sub("double", [](std::span<const HostTensor> t) {
                                    for (float& v : t[0].floats()) v *= 2;
                                }, {InOut(a[0])});
                            }};
    std::optional<RunHandle> done(worker_->Submit(twice, {x}));
    ASSERT_TRUE(Await([&] { return done->Done(); }));
    std::optional<RunHandle> waited(worker_->Submit(twice, {x}));
    waited->Wait();
    const int code = test::InChild([&] {
        ::alarm(20);  // a hang ends the child, and the test sees it
        const auto refused = [](const std::function<void()>& call) {
            try {
                call();
            } catch (const Error& e) {
                const std::string why = e.message();
                return e.kind() == ErrorKind::InvalidArgument && why.find("before it forked") != std::string::npos &&
                       why.find("create the Worker again in the child") != std::string::npos;
            }
            return false;
        };
        if (!refused([&] { worker_->Run(twice, {x}); })) return 10;
        if (!refused([&] { worker_->Submit(twice, {x}); })) return 11;
        if (!refused([&] { worker_->RegisterSubWorker("more", [](std::span<const HostTensor>) {}); })) return 12;
        if (!refused([&] { worker_->Stats(0); })) return 13;
        if (!refused([&] { done->Done(); })) return 20;
        if (!refused([&] { done->Report(); })) return 21;
        if (!refused([&] { done->WaitFor(std::chrono::seconds(1)); })) return 22;
        if (!refused([&] { done->Wait(); })) return 23;
        done.reset();
        waited.reset();
        worker_.reset();  // returns: nothing of the parent's is waited for
        return 0;
    });
    EXPECT_EQ(code, 0) << "255: the child hung or crashed; 1x: a Worker call was not refused as forked; 2x: a "
                          "RunHandle call";
    done->Wait();
    worker_->Run(twice, {x});
    for (float v : x.floats()) EXPECT_EQ(v, 8.f);
}

// Validate names the window's field and its range.
TEST(DistributedConfigTest, TheWindowIsChecked) {
    DistributedConfig c;
    c.max_tasks_in_flight = 0;
    EXPECT_SPYRE_ERROR(Validate(c), InvalidArgument, "max_tasks_in_flight is 0 (1..1048576)");
    c.max_tasks_in_flight = (1 << 20) + 1;
    EXPECT_SPYRE_ERROR(Validate(c), InvalidArgument, "max_tasks_in_flight is 1048577");
}

// One handle, two threads in Wait and one polling Done: one Wait gets the
// outputs, the other is InvalidArgument ("waited for already"), and Done
// reads the handle beside them (the first Wait used to move the handle's
// state from under Done: a data race ThreadSanitizer reported).
TEST_F(WorkerTest, TwoThreadsWaitingOnOneHandleGetTheOutputsOnceAndDoneReadsBeside) {
    HostProgram p{"shared_handle", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])});
                  }};
    HostTensor a = HostTensor::Full({kTile, kTile}, 2.0f), b = HostTensor::Full({kTile, kTile}, 3.0f);
    for (int round = 0; round < 20; ++round) {
        RunHandle h = worker_->Submit(p, {a, b});
        std::atomic<bool> stop{false};
        std::thread poll([&] {
            while (!stop.load()) (void)h.Done();
        });
        std::atomic<int> outputs{0}, refused{0};
        auto wait = [&] {
            try {
                auto outs = h.Wait();
                for (float v : outs.at(0).floats()) ASSERT_EQ(v, 5.0f);
                ++outputs;
            } catch (const Error& e) {
                EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
                EXPECT_NE(e.message().find("waited for already"), std::string::npos) << e.what();
                ++refused;
            }
        };
        std::thread other(wait);
        wait();
        other.join();
        stop = true;
        poll.join();
        EXPECT_EQ(outputs.load(), 1);
        EXPECT_EQ(refused.load(), 1);
        EXPECT_TRUE(h.Done());
        EXPECT_EQ(h.Report().size(), 1u);
    }
}

// Once a run ended, the Worker holds none of what its tasks held: the
// tensors (wrapped memory stays its owner's to free: a Python caller's
// arrays) and the SubWorker functions (and what they capture), whether
// the task finished well, failed or was skipped. The Worker keeps finished
// tasks for reuse; before, they kept their arguments until reused.
TEST_F(WorkerTest, AnEndedRunHoldsNoneOfItsTensorsOrFunctions) {
    RegisterTinyAdd(*worker_);
    auto wrapped = [](float v, std::weak_ptr<std::vector<float>>& seen) {
        auto owner = std::make_shared<std::vector<float>>(kTinyCols, v);
        seen = owner;
        return HostTensor::Wrap(owner->data(), {1, kTinyCols}, DType::FP32, owner);
    };
    for (bool fail : {false, true}) {
        SCOPED_TRACE(fail ? "a SubWorker fails, its consumer is skipped" : "every task finishes well");
        std::weak_ptr<std::vector<float>> a_seen, b_seen, out_seen;
        std::weak_ptr<int> captured_seen;
        {
            HostTensor a = wrapped(1.0f, a_seen), b = wrapped(2.0f, b_seen), out = wrapped(0.0f, out_seen);
            auto captured = std::make_shared<int>(7);
            captured_seen = captured;
            HostProgram p{"holds", 3, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                              g.Chip("tiny_add", {In(x[0]), In(x[1]), Out(x[2])});
                              g.Sub("check", [captured, fail](std::span<const HostTensor>) {
                                  if (fail) throw std::runtime_error("check failed on purpose");
                              }, {InOut(x[2])});
                              g.Chip("tiny_add", {In(x[2]), In(x[1]), Out(x[0])});
                          }};
            if (fail) {
                EXPECT_THROW(worker_->Run(p, {a, b, out}), HostRunError);
            } else {
                worker_->Run(p, {a, b, out});
                EXPECT_EQ(out.floats()[0], 3.0f);
                EXPECT_EQ(a.floats()[0], 5.0f);
            }
        }
        EXPECT_TRUE(a_seen.expired());
        EXPECT_TRUE(b_seen.expired());
        EXPECT_TRUE(out_seen.expired());
        EXPECT_TRUE(captured_seen.expired());
    }
}

// RunHandle::WaitFor: false while the run goes on (any number of times, it
// is not the handle's Wait), true once it ended, then Wait returns the
// outputs; refused from a task of the run itself and on an empty handle.
TEST_F(WorkerTest, WaitForWaitsASliceAndLeavesTheWaitToWait) {
    std::atomic<bool> release{false}, self_refused{false};
    std::optional<RunHandle> h;
    std::mutex h_mu;  // the SubWorker looks at the handle the test thread sets
    HostProgram p{"held", 1, {{{1, kTinyCols}}}, [&](HostGraph& g, std::span<const HostTensor> x) {
                      g.Sub("hold", [&](std::span<const HostTensor> t) {
                          {
                              std::lock_guard lock(h_mu);
                              if (h) {
                                  try {
                                      h->WaitFor(std::chrono::milliseconds(1));
                                  } catch (const Error& e) {
                                      self_refused = e.kind() == ErrorKind::InvalidArgument &&
                                                     e.message().find("waits for the run itself") != std::string::npos;
                                  }
                              }
                          }
                          while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                          for (float& v : t[1].floats()) v = t[0].floats()[0] + 1.0f;
                      }, {In(x[0]), Out(x[1])});
                  }};
    {
        std::lock_guard lock(h_mu);
        h.emplace(worker_->Submit(p, {HostTensor::Full({1, kTinyCols}, 4.0f)}));
    }
    EXPECT_FALSE(h->WaitFor(std::chrono::milliseconds(20)));
    EXPECT_FALSE(h->WaitFor(std::chrono::nanoseconds(0)));
    // A timeout too long for the clock waits for good (it overflowed into
    // the past: false at once).
    std::thread releaser([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        release = true;
    });
    EXPECT_TRUE(h->WaitFor(std::chrono::nanoseconds::max()));
    releaser.join();
    EXPECT_TRUE(h->WaitFor(std::chrono::seconds(60)));
    EXPECT_TRUE(h->Done());
    EXPECT_TRUE(h->WaitFor(std::chrono::nanoseconds(0)));
    auto outs = h->Wait();
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_EQ(outs[0].floats()[0], 5.0f);
    EXPECT_TRUE(self_refused.load());
    EXPECT_THROW(RunHandle().WaitFor(std::chrono::milliseconds(1)), Error);
}

namespace {

// Two Workers of one device each (the fixture's first two VFs), with two
// SubWorkers each, and "tiny_add".
struct TwoWorkers {
    explicit TwoWorkers(Host& host) : a(host, Config(host, 0)), b(host, Config(host, 1)) {
        RegisterTinyAdd(a);
        RegisterTinyAdd(b);
    }
    static DistributedConfig Config(Host& host, size_t vf) {
        DistributedConfig c;
        c.device_ids = {Vfs(host).at(vf)};
        c.num_sub_workers = 2;
        return c;
    }
    Worker a, b;
};

// A run of `w` whose SubWorker writes `value` into x[0] once `release`.
RunHandle HoldWriting(Worker& w, const HostTensor& x, float value, std::atomic<bool>& release,
                      std::atomic<bool>& started) {
    HostProgram p{"holder", 1, {}, [&, value](HostGraph& g, std::span<const HostTensor> t) {
                      g.Sub("hold", [&, value](std::span<const HostTensor> held) {
                          started = true;
                          while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                          for (float& v : held[0].floats()) v = value;
                      }, {Out(t[0])});
                  }};
    return w.Submit(p, {x});
}

// The cause of the one failure of `run`, or "ran" when it ended well.
std::string CauseOf(const std::function<void()>& run) {
    try {
        run();
        return "ran";
    } catch (const HostRunError& e) {
        if (e.failures().size() != 1) return "failures: " + std::to_string(e.failures().size());
        return std::string(ToString(e.failures()[0].kind)) + ": " + e.failures()[0].cause;
    }
}

}  // namespace

// Each Worker orders its own tasks only: a task of another Worker reading
// bytes a run in flight writes read either value (an outside probe), and
// one writing them lost a write. Refused when submitted now, naming the
// argument; what touches other bytes, or only reads shared ones, runs; once
// the writing run ended, the reader runs and sees its value.
TEST_F(WorkerTest, AnotherWorkersTaskOverBytesARunInFlightWritesIsRefused) {
    worker_.reset();  // its devices
    TwoWorkers w(*host_);
    HostTensor x = HostTensor::Zeros({4, kTinyCols}), y = HostTensor::Full({1, kTinyCols}, 2.0f);
    std::atomic<bool> release{false}, started{false};
    RunHandle held = HoldWriting(w.a, x.Rows(0, 2), 7.0f, release, started);
    ASSERT_TRUE(Await([&] { return started.load(); }));
    HostTensor sum = HostTensor::Zeros({1, kTinyCols});
    HostProgram read_x{"read_x", 2, {}, [](HostGraph& g, std::span<const HostTensor> t) {
                           g.Chip("tiny_add", {In(t[0]), In(t[0]), Out(t[1])}, {.name = "reader"});
                       }};
    HostProgram write_x{"write_x", 1, {}, [](HostGraph& g, std::span<const HostTensor> t) {
                            g.Sub("w", [](std::span<const HostTensor> o) { o[0].floats()[0] = 1.0f; }, {Out(t[0])});
                        }};
    const std::string reader = CauseOf([&] { w.b.Run(read_x, {x.Rows(1, 2), sum}); });
    EXPECT_NE(reader.find("invalid argument: chip task 'reader' of host program 'read_x': argument 0 (in, [1x16] fp32 "
                          "rows 1..2 of [4x16]"),
              std::string::npos)
        << reader;
    EXPECT_NE(reader.find("reads bytes that a task of another Worker in flight writes; tasks are ordered only within one "
                          "Worker"),
              std::string::npos)
        << reader;
    const std::string writer = CauseOf([&] { w.b.Run(write_x, {x}); });
    EXPECT_NE(writer.find("invalid argument: SubWorker task 'w#0' of host program 'write_x': argument 0 (out, "),
              std::string::npos)
        << writer;
    EXPECT_NE(writer.find("writes bytes that a task of another Worker in flight reads or writes"), std::string::npos)
        << writer;
    // Rows the run does not write, and other tensors, are the other Worker's.
    EXPECT_EQ(CauseOf([&] { w.b.Run(read_x, {x.Rows(2, 3), sum}); }), "ran");
    EXPECT_EQ(CauseOf([&] { w.b.Run(write_x, {x.Rows(3, 4)}); }), "ran");
    EXPECT_EQ(CauseOf([&] { w.b.Run(read_x, {y, sum}); }), "ran");
    EXPECT_EQ(sum.floats()[0], 4.0f);
    release = true;
    held.Wait();
    EXPECT_EQ(CauseOf([&] { w.b.Run(read_x, {x.Rows(1, 2), sum}); }), "ran");
    for (float v : sum.floats()) EXPECT_EQ(v, 14.0f);
    EXPECT_EQ(x.floats()[3 * kTinyCols], 1.0f);  // the second Worker's write
}

// Reads share: two Workers' runs in flight at once over one tensor they
// both only read, each computing from it.
TEST_F(WorkerTest, TwoWorkersMayReadOneTensorAtOnce) {
    worker_.reset();
    TwoWorkers w(*host_);
    HostTensor x = HostTensor::Full({1, kTinyCols}, 3.0f);
    std::atomic<int> arrived{0};
    HostProgram p{"reader", 1, {{{1, kTinyCols}}}, [&](HostGraph& g, std::span<const HostTensor> t) {
                      g.Sub("meet", [&](std::span<const HostTensor>) { WaitForPartner(arrived, "reader"); }, {In(t[0])});
                      g.Chip("tiny_add", {In(t[0]), In(t[0]), Out(t[1])});
                  }};
    RunHandle ha = w.a.Submit(p, {x}), hb = w.b.Submit(p, {x});
    for (RunHandle* h : {&ha, &hb}) {
        auto out = h->Wait();
        ASSERT_EQ(out.size(), 1u);
        for (float v : out[0].floats()) EXPECT_EQ(v, 6.0f);
    }
}

// A task may hand the bytes it holds to another Worker's run and wait for
// it: that run's tasks count as the task's own, so the holder's later tasks
// over the same bytes (ordered after it by its Worker) are not refused.
TEST_F(WorkerTest, ATaskMayHandItsBytesToAnotherWorkersRun) {
    worker_.reset();
    TwoWorkers w(*host_);
    HostTensor x = HostTensor::Zeros({1, kTinyCols});
    HostProgram inner{"inner", 1, {}, [](HostGraph& g, std::span<const HostTensor> t) {
                          g.Sub("inc", [](std::span<const HostTensor> o) {
                              for (float& v : o[0].floats()) v += 1.0f;
                          }, {InOut(t[0])});
                          g.Chip("tiny_add", {In(t[0]), In(t[0]), Out(t[0])});
                      }};
    HostProgram outer{"outer", 1, {{{1, kTinyCols}}}, [&](HostGraph& g, std::span<const HostTensor> t) {
                          g.Sub("delegate", [&](std::span<const HostTensor> o) { w.b.Run(inner, {o[0]}); },
                                {InOut(t[0])});
                          g.Chip("tiny_add", {In(t[0]), In(t[0]), Out(t[1])});
                      }};
    auto out = w.a.Run(outer, {x});
    ASSERT_EQ(out.size(), 1u);
    for (float v : x.floats()) EXPECT_EQ(v, 2.0f);
    for (float v : out[0].floats()) EXPECT_EQ(v, 4.0f);
    // A task holding the bytes only to read them cannot hand them out to write.
    HostProgram reads{"reads", 1, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                          g.Sub("delegate", [&](std::span<const HostTensor> o) { w.b.Run(inner, {o[0]}); },
                                {In(t[0])});
                      }};
    const std::string cause = CauseOf([&] { w.a.Run(reads, {x}); });
    EXPECT_NE(cause.find("SubWorker task 'inc#0' of host program 'inner': argument 0 (inout, "),
              std::string::npos)
        << cause;
}

// What a finished task claimed goes with it, failed or not, and so does
// what a refused one had claimed of its other arguments.
TEST_F(WorkerTest, FailedAndRefusedTasksLeaveNoClaimBehind) {
    worker_.reset();
    TwoWorkers w(*host_);
    HostTensor x = HostTensor::Zeros({1, kTinyCols}), y = HostTensor::Zeros({1, kTinyCols});
    HostProgram fails{"fails", 1, {}, [](HostGraph& g, std::span<const HostTensor> t) {
                          g.Sub("boom", [](std::span<const HostTensor>) { throw std::runtime_error("boom"); },
                                {Out(t[0])});
                      }};
    EXPECT_NE(CauseOf([&] { w.a.Run(fails, {x}); }).find("boom"), std::string::npos);
    std::atomic<bool> release{false}, started{false};
    RunHandle held = HoldWriting(w.a, x, 5.0f, release, started);
    ASSERT_TRUE(Await([&] { return started.load(); }));
    HostProgram copy{"copy", 2, {}, [](HostGraph& g, std::span<const HostTensor> t) {
                         g.Sub("copy", [](std::span<const HostTensor> o) {
                             std::copy_n(o[1].floats().data(), kTinyCols, o[0].floats().data());
                         }, {Out(t[0]), In(t[1])});
                     }};
    const std::string refused = CauseOf([&] { w.b.Run(copy, {y, x}); });
    EXPECT_NE(refused.find("argument 1 (in, "), std::string::npos) << refused;
    release = true;
    held.Wait();
    // y was claimed by the refused task before x was refused: nothing holds it now.
    EXPECT_EQ(CauseOf([&] { w.a.Run(copy, {y, x}); }), "ran");
    for (float v : y.floats()) EXPECT_EQ(v, 5.0f);
}

// A task that hands its bytes to another Worker's run without waiting for
// it ends only once that run's tasks over them finished: its Worker's next
// task over the bytes (ordered after it) came first, and the other run read
// its write instead of the value handed over (an outside probe).
TEST_F(WorkerTest, ATaskHandingItsBytesWithoutWaitingEndsAfterTheTasksItHandedThemTo) {
    worker_.reset();
    TwoWorkers w(*host_);
    HostTensor x = HostTensor::Full({1, kTinyCols}, 5.0f);
    std::optional<RunHandle> handed;
    std::atomic<float> seen{0.0f};
    HostProgram reader{"slow_reader", 1, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                           g.Sub("slow_read", [&](std::span<const HostTensor> v) {
                               std::this_thread::sleep_for(std::chrono::milliseconds(100));
                               seen = v[0].floats()[0];
                           }, {In(t[0])});
                       }};
    HostProgram outer{"outer", 1, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                          g.Sub("hand", [&](std::span<const HostTensor> v) { handed.emplace(w.b.Submit(reader, {v[0]})); },
                                {InOut(t[0])});
                          g.Sub("overwrite", [](std::span<const HostTensor> v) { v[0].floats()[0] = 99.0f; },
                                {InOut(t[0])});
                      }};
    w.a.Run(outer, {x});
    ASSERT_TRUE(handed.has_value());
    handed->Wait();
    EXPECT_EQ(seen.load(), 5.0f);
    EXPECT_EQ(x.floats()[0], 99.0f);
}

// Bytes handed from one Worker's task to the other's and back: the task the
// second hands them to is ordered after the first task (its own Worker's),
// which waits for the second Worker's run, which waits for it. It hung;
// the wait is refused now, as on one Worker, and everything ends.
TEST_F(WorkerTest, BytesHandedToAnotherWorkerAndBackAreRefusedRatherThanHang) {
    worker_.reset();
    TwoWorkers w(*host_);
    HostTensor x = HostTensor::Full({1, kTinyCols}, 1.0f);
    HostProgram inner{"inner", 1, {}, [](HostGraph& g, std::span<const HostTensor> t) {
                          g.Sub("inner_write", [](std::span<const HostTensor> v) { v[0].floats()[0] += 100.0f; },
                                {InOut(t[0])});
                      }};
    HostProgram mid{"mid", 1, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                        g.Sub("b_task", [&](std::span<const HostTensor> v) { w.a.Run(inner, {v[0]}); }, {InOut(t[0])});
                    }};
    HostProgram outer{"outer", 1, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                          g.Sub("outer_task", [&](std::span<const HostTensor> v) { w.b.Run(mid, {v[0]}); },
                                {InOut(t[0])});
                      }};
    auto run = std::async(std::launch::async, [&] { return CauseOf([&] { w.a.Run(outer, {x}); }); });
    if (run.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
        std::fprintf(stderr, "the runs handing bytes A -> B -> A hung\n");
        std::fflush(stderr);
        std::_Exit(1);  // the Workers' threads are stuck: no clean teardown is possible
    }
    const std::string cause = run.get();
    EXPECT_NE(cause.find("run 'inner': task 'inner_write#0' of it depends on task 'outer_task#0' of run 'outer', which "
                         "waits for it (neither could end)"),
              std::string::npos)
        << cause;
}

// The same across two threads: 'ma' (InOut x) nests a run of more tasks
// than the window over y while 'mb' (InOut y) nests one over x. Each
// window waited for the other SubWorker, which waited for room in its own:
// both hung for good (found probing from outside, C++ and Python; chip
// functions too). Room waits are filed and checked task by task through
// the waits filed: one of them is refused, and everything ends.
TEST_F(WorkerTest, NestedRunsWaitingForRoomBehindEachOthersCallersAreRefusedRatherThanHang) {
    worker_.reset();
    DistributedConfig c;
    c.device_ids = Vfs(*host_);
    c.num_sub_workers = 3;
    c.max_tasks_in_flight = 2;
    Worker w(*host_, c);
    w.RegisterSubWorker("leaf", [](std::span<const HostTensor> t) { t[0].floats()[0] += 1.0f; });
    HostTensor x = HostTensor::Zeros({16}), y = HostTensor::Zeros({16});
    std::atomic<int> arrived{0};
    std::string causes[2];
    auto nest = [&](int me, const HostTensor& over) {
        ++arrived;  // both SubWorkers run before either nests
        Await([&] { return arrived.load() == 2; });
        HostProgram inner{me == 0 ? "inner_a" : "inner_b", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                              for (int k = 0; k < 4; ++k) g.Sub("leaf", {InOut(over)});
                          }};
        try {
            w.Run(inner, {});
            causes[me] = "ran";
        } catch (const Error& e) {
            causes[me] = std::string(e.kind() == ErrorKind::InvalidArgument ? "InvalidArgument: " : "another kind: ") +
                         e.what();
        }
    };
    HostProgram outer{"outer", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          g.Sub("ma", [&](std::span<const HostTensor>) { nest(0, y); }, {InOut(x)});
                          g.Sub("mb", [&](std::span<const HostTensor>) { nest(1, x); }, {InOut(y)});
                      }};
    auto run = std::async(std::launch::async, [&] { w.Run(outer, {}); });
    if (run.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
        std::fprintf(stderr, "two nested runs waiting for room behind each other's callers hung\n");
        std::fflush(stderr);
        std::_Exit(1);
    }
    run.get();
    const int refused = int(causes[0].rfind("InvalidArgument: ", 0) == 0) + int(causes[1].rfind("InvalidArgument: ", 0) == 0);
    EXPECT_GE(refused, 1) << causes[0] << "\n" << causes[1];
    for (const std::string& cause : causes)
        if (cause != "ran") EXPECT_NE(cause.find("(neither could end)"), std::string::npos) << cause;
}

// A SubWorker that passes its InOut tensor on to a nested run of more tasks
// than the window: the run's wait is refused, but the function's submit
// waited for room first, which only the nested tasks could make, and they
// wait for the SubWorker: it hung for good (found probing from outside;
// Python too). The submit is refused the same way; a nested run over other
// bytes still fills and drains its window.
TEST_F(WorkerTest, ANestedRunWhoseWindowWaitsForItsCallerIsRefusedRatherThanHang) {
    worker_.reset();
    for (const size_t window : {size_t(1), size_t(2)}) {
        DistributedConfig c;
        c.device_ids = Vfs(*host_);
        c.num_sub_workers = 2;
        c.max_tasks_in_flight = window;
        Worker w(*host_, c);
        w.RegisterSubWorker("leaf", [](std::span<const HostTensor> t) { t[0].floats()[0] += 1.0f; });
        HostTensor x = HostTensor::Zeros({16}), y = HostTensor::Zeros({16});
        std::string nested_cause;
        HostProgram outer{"outer", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                              g.Sub("mid", [&](std::span<const HostTensor> v) {
                                  for (const HostTensor& over : {y, v[0]}) {  // other bytes, then its own
                                      HostProgram inner{"inner", 0, {}, [&](HostGraph& ig, std::span<const HostTensor>) {
                                                            for (size_t k = 0; k < window + 2; ++k)
                                                                ig.Sub("leaf", {InOut(over)});
                                                        }};
                                      try {  // the wait refuses with an Error of its own kind
                                          w.Run(inner, {});
                                          nested_cause = "ran";
                                      } catch (const Error& e) {
                                          nested_cause = std::string(e.kind() == ErrorKind::InvalidArgument ? "InvalidArgument: "
                                                                                                        : "another kind: ") +
                                                         e.what();
                                      }
                                  }
                              }, {InOut(x)});
                          }};
        auto run = std::async(std::launch::async, [&] { w.Run(outer, {}); });
        if (run.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
            std::fprintf(stderr, "a nested run waiting for room behind its caller hung (window %zu)\n", window);
            std::fflush(stderr);
            std::_Exit(1);
        }
        run.get();
        EXPECT_EQ(y.floats()[0], float(window + 2)) << "the nested run over other bytes";
        // The function's submit was refused, so it ended; the wait for its
        // run then says why, as when the function submitted fewer.
        EXPECT_EQ(nested_cause.rfind("InvalidArgument: ", 0), 0u) << nested_cause;
        EXPECT_NE(nested_cause.find("run 'inner': task 'leaf#0' of it depends on task 'mid#0' of run 'outer', which "
                                    "waits for it (neither could end)"),
                  std::string::npos)
            << nested_cause;
    }
}
