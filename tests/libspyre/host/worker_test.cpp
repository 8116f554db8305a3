// SPDX-License-Identifier: Apache-2.0
// The level-3 Worker (seed 003) on an embedded spyre-mockdev with 2 cards x
// 2 VFs (and 4 x 4 at the end): chip tasks run on the cards' cores through
// each device's orchestration runtime, SubWorkers on host threads; results
// are checked exactly (or against a CPU matmul), placement through each
// device's task counts and bytes moved, overlap through the device's own
// timestamps in a trace, errors by kind, fields and message.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <atomic>
#include <functional>
#include <mutex>
#include <set>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "l3_chip_functions.hpp"
#include "pair_gate.hpp"
#include "worker_fixture.hpp"
#include "spyre/compiler/plan_writer.hpp"
#include "spyre/host.hpp"
#include "spyre/trace/trace.hpp"

using namespace spyre;
using namespace spyre::l3;

namespace {

HostTensor Iota(float scale, float offset) {
    HostTensor t = HostTensor::Zeros({kTile, kTile});
    auto v = t.floats();
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(int(i % 1000)) * scale + offset;
    return t;
}

void ExpectFloats(const HostTensor& got, const std::function<float(size_t)>& want, const std::string& what) {
    auto v = got.floats();
    for (size_t i = 0; i < v.size(); ++i)
        if (v[i] != want(i)) {
            ADD_FAILURE() << what << ": element " << i << " is " << v[i] << ", want " << want(i);
            return;
        }
}

// The device time each group of core tracks was busy in the trace at
// `path` (removed after): from its first core task's start to its last
// one's end, in µs; `group(device, core)` names a track's group.
std::map<std::string, std::pair<double, double>> BusySpans(
    const std::string& path, const std::function<std::string(const std::string&, int)>& group) {
    std::ifstream in(path);
    const nlohmann::json t = nlohmann::json::parse(in);
    std::filesystem::remove(path);
    std::map<int64_t, std::string> tracks;
    for (const auto& e : t["traceEvents"])
        if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int64_t>()] = e["args"]["name"];
    std::map<std::string, std::pair<double, double>> busy;
    for (const auto& e : t["traceEvents"]) {
        if (e["ph"] != "X" || !e.contains("tid")) continue;
        const std::string track = tracks[e["tid"].get<int64_t>()];
        const auto core = track.find(" core ");
        if (core == std::string::npos) continue;
        const double ts = e["ts"].get<double>(), end = ts + e["dur"].get<double>();
        auto [it, fresh] = busy.try_emplace(group(track.substr(0, core), std::stoi(track.substr(core + 6))), ts, end);
        it->second.first = std::min(it->second.first, ts);
        it->second.second = std::max(it->second.second, end);
    }
    return busy;
}

// 8 core tasks of 128 rows per chip task, long enough (milliseconds) that a
// late start of one chip task on a host of two CPUs still overlaps another.
constexpr int64_t kPairM = 2048, kPairK = 1024, kPairN = 256;

// "paired_matmul": chip_matmul that first waits until another chip task of
// the same function is in flight beside it (10 s at most, then Timeout):
// run one at a time, a pair never completes.
void RegisterPairedMatmul(Worker& w, std::atomic<int>& arrived) {
    RegisterChipFunctions(w, 128, kPairK, kPairN);
    w.RegisterChipFunction("paired_matmul", [&arrived, matmul = ChipMatmul(128, kPairK, kPairN)](ChipContext& ctx) {
        WaitForPartner(arrived, "chip task");
        matmul(ctx);
    });
}

// C = A * B as two paired chip tasks of half the rows each.
HostProgram PairedMatmul() {
    return {"pair", 2, {{{kPairM, kPairN}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                for (int64_t half = 0; half < 2; ++half)
                    g.Chip("paired_matmul", {In(x[0].Rows(half * kPairM / 2, (half + 1) * kPairM / 2)), In(x[1]),
                                             Out(x[2].Rows(half * kPairM / 2, (half + 1) * kPairM / 2))});
            }};
}

// Runs PairedMatmul until the device time the two groups of core tracks
// were busy intersects (`group` names a core track's group), at most five
// times: on a host of two CPUs the emulated cores of one group can starve
// the other group's submission for milliseconds, but run one at a time the
// groups never intersect. The first run places the inputs on the devices,
// so the traced ones upload nothing and their chip tasks start together.
// C is checked every time.
void ExpectPairOverlapsInDeviceTime(Worker& w, const std::function<std::string(const std::string&, int)>& group) {
    HostTensor a = HostTensor::Zeros({kPairM, kPairK}), b = HostTensor::Zeros({kPairK, kPairN});
    for (size_t i = 0; i < a.floats().size(); ++i) a.floats()[i] = float(int(i % 7) - 3);
    for (float& x : b.floats()) x = 0.25f;
    w.Run(PairedMatmul(), {a, b});
    std::string last;
    for (int attempt = 0; attempt < 5; ++attempt) {
        const std::string path = (std::filesystem::temp_directory_path() / ("l3_pair_" + std::to_string(getpid()) + ".json")).string();
        trace::Start(path);
        auto outs = w.Run(PairedMatmul(), {a, b});
        trace::Stop();
        for (int64_t r = 0; r < kPairM; ++r) {
            float row = 0;
            for (int64_t x = 0; x < kPairK; ++x) row += a.floats()[size_t(r * kPairK + x)] * 0.25f;
            ASSERT_EQ(outs[0].floats()[size_t(r * kPairN)], row) << "row " << r;
            ASSERT_EQ(outs[0].floats()[size_t(r * kPairN + kPairN - 1)], row) << "row " << r;
        }
        const auto busy = BusySpans(path, group);
        ASSERT_EQ(busy.size(), 2u) << "core tasks of two groups in the trace";
        const auto& [g0, s0] = *busy.begin();
        const auto& [g1, s1] = *std::next(busy.begin());
        if (std::max(s0.first, s1.first) < std::min(s0.second, s1.second)) return;
        last = g0 + " busy " + std::to_string(s0.first) + ".." + std::to_string(s0.second) + " us, " + g1 + " busy " +
               std::to_string(s1.first) + ".." + std::to_string(s1.second);
    }
    ADD_FAILURE() << "no overlap in five runs; the last: " << last;
}

}  // namespace

// Seed 003's L3 dependency program, in-place (f given) and return style
// (f allocated by the runtime), and its verify SubWorker failing on a wrong f.
TEST_F(WorkerTest, DependencyProgramInPlaceAndReturnStyle) {
    HostTensor a = HostTensor::Full({128, 128}, 2.0f), b = HostTensor::Full({128, 128}, 3.0f);
    HostTensor f = HostTensor::Zeros({128, 128});
    auto outs = worker_->Run(DependencyProgram(), {a, b, f});
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_TRUE(outs[0].SameStorage(f));
    ExpectFloats(f, [](size_t) { return 5.0f; }, "in-place f");

    outs = worker_->Run(DependencyProgram(), {a, b});
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_FALSE(outs[0].SameStorage(f));
    EXPECT_EQ(outs[0].shape(), (std::vector<int64_t>{128, 128}));
    ExpectFloats(outs[0], [](size_t) { return 5.0f; }, "returned f");

    try {
        worker_->Run(DependencyProgram(), {a, a});
        FAIL() << "verify passed 4.0";
    } catch (const HostRunError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::TaskFailed) << e.what();
        ASSERT_EQ(e.failures().size(), 1u);
        EXPECT_EQ(e.failures()[0].task, "verify#0");
        EXPECT_EQ(e.failures()[0].level, Level::Host);
        EXPECT_NE(e.failures()[0].cause.find("expected 5.0, got 4.0"), std::string::npos) << e.what();
    }
}

// Seed 003's parallel pattern: chip_add and chip_sub are independent and
// the reduce SubWorker sees both: f = 2a. Placed as they are submitted, the
// two go to two devices while both are in flight; only when the first had
// already finished (its inputs then current on its device) may the second
// follow it there.
TEST_F(WorkerTest, ParallelReduceSpreadsOverTwoDevices) {
    HostTensor a = Iota(0.5f, 1.0f), b = Iota(-0.25f, 3.0f);
    RunHandle h = worker_->Submit(ParallelReduceProgram(), {a, b});
    auto outs = h.Wait();
    auto av = a.floats();
    ExpectFloats(outs[0], [&](size_t i) { return (av[i] + b.floats()[i]) + (av[i] - b.floats()[i]); }, "f");
    const std::vector<TaskRecord> report = h.Report();
    ASSERT_EQ(report.size(), 3u);
    const TaskRecord &add = report[0], &sub = report[1];
    if (add.device == sub.device) {
        EXPECT_GE(sub.start_ns, add.end_ns) << "two independent chip tasks in flight at once shared " << add.device;
    }
    uint64_t total = 0;
    for (const auto& s : AllStats()) total += s.chip_tasks;
    EXPECT_EQ(total, 2u);
}

// Chains, fan-out and fan-in at host level: t1 = a + b, t2 = t1 + b,
// t3 = t2 + b (a chain), four u_i = t3 - b (fan-out from t3), and a
// SubWorker summing the u_i (fan-in): 4 (a + 2b), exact in fp32 here.
TEST_F(WorkerTest, ChainsFanOutAndFanInResolveFromTensors) {
    HostProgram p{"chain_fan", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                      HostTensor t1 = g.CreateTensor({kTile, kTile}), t2 = g.CreateTensor({kTile, kTile}),
                                 t3 = g.CreateTensor({kTile, kTile});
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(t1)});
                      g.Chip("chip_add", {In(t1), In(x[1]), Out(t2)});
                      g.Chip("chip_add", {In(t2), In(x[1]), Out(t3)});
                      std::vector<TensorArg> sum_args;
                      for (int i = 0; i < 4; ++i) {
                          HostTensor u = g.CreateTensor({kTile, kTile});
                          g.Chip("chip_sub", {In(t3), In(x[1]), Out(u)});
                          sum_args.push_back(In(u));
                      }
                      sum_args.push_back(Out(x[2]));
                      g.Sub("sum", [](std::span<const HostTensor> t) {
                          auto f = t[4].floats();
                          for (size_t i = 0; i < f.size(); ++i)
                              f[i] = t[0].floats()[i] + t[1].floats()[i] + t[2].floats()[i] + t[3].floats()[i];
                      }, std::move(sum_args));
                  }};
    HostTensor a = Iota(1.0f, 0.0f), b = Iota(0.0f, 2.0f);
    auto outs = worker_->Run(p, {a, b});
    ExpectFloats(outs[0], [&](size_t i) { return 4 * (a.floats()[i] + 4.0f); }, "4(a + 2b)");
    uint64_t tasks = 0;
    for (const auto& s : AllStats()) tasks += s.chip_tasks;
    EXPECT_EQ(tasks, 7u);
}

// A chip function that is an ExecutionPlan (the kernel builder's add as
// compiler output), loaded on every device, chained with a C++ chip
// function: f = (a + b) - b = a.
TEST_F(WorkerTest, AnExecutionPlanAsAChipFunction) {
    const KernelBuilder kb;
    worker_->RegisterChipPlan("plan_add", CompilerOutputFromKernel("add", kb.Elementwise(ElementwiseOp::Add, {kTile, kTile},
                                                                                         {kTile, kTile}, DType::FP32)));
    HostProgram p{"plan", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                      HostTensor s = g.CreateTensor({kTile, kTile});
                      g.Chip("plan_add", {In(x[0]), In(x[1]), Out(s)});
                      g.Chip("chip_sub", {In(s), In(x[1]), Out(x[2])});
                  }};
    HostTensor a = Iota(1.0f, 3.0f), b = Iota(0.0f, 2.0f);
    auto outs = worker_->Run(p, {a, b});
    ExpectFloats(outs[0], [&](size_t i) { return a.floats()[i]; }, "(a + b) - b through a plan");
    HostProgram wrong{"wrong", 2, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                          g.Chip("plan_add", {In(x[0]), Out(x[1])}, {.name = "two args"});
                      }};
    EXPECT_SPYRE_ERROR(worker_->Run(wrong, {a, HostTensor::Zeros({kTile, kTile})}), InvalidArgument,
                       "chip plan 'plan_add' takes 3 tensors, the task 'two args' passes 2");
    // The plan's output given as In was written in the device copy kept for
    // that In tensor, and a later reader of the unchanged host tensor got
    // the device's bytes (a + b, not its zeros); an input given as Out was
    // never uploaded, and the caller's bytes were overwritten. Both are
    // refused, as the ready-made chip functions refuse them.
    HostTensor zeros = HostTensor::Zeros({kTile, kTile});
    auto access = [](Access c, Access in0) {
        return HostProgram{"access", 3, {}, [c, in0](HostGraph& g, std::span<const HostTensor> x) {
                               g.Chip("plan_add", {{x[0], in0}, In(x[1]), {x[2], c}}, {.name = "plan task", .device = 0});
                           }};
    };
    EXPECT_SPYRE_ERROR(worker_->Run(access(Access::In, Access::In), {a, b, zeros}), InvalidArgument,
                       "chip plan 'plan_add' writes its tensor 2 ('add.output0'), which the task 'plan task' passes as "
                       "In: pass it as Out or InOut");
    HostTensor a_kept = Iota(1.0f, 3.0f);
    EXPECT_SPYRE_ERROR(worker_->Run(access(Access::Out, Access::Out), {a_kept, b, HostTensor::Zeros({kTile, kTile})}),
                       InvalidArgument, "chip plan 'plan_add' reads its tensor 0 ('add.input0'), which the task "
                       "'plan task' passes as Out: pass it as In or InOut");
    ExpectFloats(a_kept, [&](size_t i) { return a.floats()[i]; }, "an input given as Out is left alone");
    HostTensor copy = HostTensor::Full({kTile, kTile}, -1.0f);
    HostProgram reads_zeros{"reads", 2, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                                g.Chip("plan_add", {In(x[0]), In(x[0]), Out(x[1])}, {.device = 0});
                            }};
    worker_->Run(reads_zeros, {zeros, copy});
    ExpectFloats(copy, [](size_t) { return 0.0f; }, "zeros + zeros from the kept copy of zeros");
}

// A registration that fails leaves nothing behind. RegisterChipPlan added
// the name before loading the plan: a refused plan left it registered (a
// valid plan under it then said "already registered", and a chip task "not
// loaded"). RegisterKernel took any bytes, and the device refused every
// chip task of them (code 19); it now decodes the program first, as
// pto_register_program does, and a refused one leaves the id free.
TEST_F(WorkerTest, AFailedRegistrationLeavesNothingRegistered) {
    EXPECT_SPYRE_ERROR(worker_->RegisterChipPlan("plan_p", CompilerOutput{}), InvalidArgument, "plan.json");
    const KernelBuilder kb;
    const BuiltKernel add = kb.Elementwise(ElementwiseOp::Add, {kTile, kTile}, {kTile, kTile}, DType::FP32);
    worker_->RegisterChipPlan("plan_p", CompilerOutputFromKernel("add", add));
    EXPECT_SPYRE_ERROR(worker_->RegisterChipPlan("plan_p", CompilerOutputFromKernel("add", add)), InvalidArgument,
                       "chip function 'plan_p' is already registered");
    EXPECT_SPYRE_ERROR(worker_->RegisterChipPlan("", CompilerOutputFromKernel("add", add)), InvalidArgument, "empty name");
    HostTensor a = Iota(1.0f, 3.0f), b = Iota(0.0f, 2.0f);
    HostProgram through_plan{"through_plan", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                                 g.Chip("plan_p", {In(x[0]), In(x[1]), Out(x[2])});
                             }};
    auto outs = worker_->Run(through_plan, {a, b});
    ExpectFloats(outs[0], [&](size_t i) { return a.floats()[i] + b.floats()[i]; }, "a + b through the plan");

    constexpr int32_t kKernel = 320;
    EXPECT_SPYRE_ERROR(worker_->RegisterKernel(kKernel, {1, 2, 3}), InvalidArgument,
                       "kernel 320's program is not a program image: program of 3 bytes is shorter than its header");
    EXPECT_SPYRE_ERROR(worker_->RegisterKernel(kKernel, std::vector<uint8_t>(64, 0)), InvalidArgument,
                       "kernel 320's program is not a program image: not a program: bad magic");
    EXPECT_SPYRE_ERROR(worker_->RegisterKernel(-1, add.program), InvalidArgument, "kernel -1: a kernel id must be >= 0");
    worker_->RegisterKernel(kKernel, add.program);  // the refusals left the id free
    EXPECT_SPYRE_ERROR(worker_->RegisterKernel(kKernel, add.program), InvalidArgument, "kernel 320 is already registered");
    worker_->RegisterChipFunction("chip_add_320", [](ChipContext& ctx) {
        TaskParam p[] = {{PARAM_INPUT, ctx.args[0], ctx.bytes[0], {}},
                         {PARAM_INPUT, ctx.args[1], ctx.bytes[1], {}},
                         {PARAM_OUTPUT, ctx.args[2], ctx.bytes[2], {}}};
        ctx.orch.Submit(kKernel, WORKER_VECTOR, p);
    });
    HostProgram through_kernel{"through_kernel", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                                   g.Chip("chip_add_320", {In(x[0]), In(x[1]), Out(x[2])});
                               }};
    outs = worker_->Run(through_kernel, {a, b});
    ExpectFloats(outs[0], [&](size_t i) { return a.floats()[i] + b.floats()[i]; }, "a + b through kernel 320");
}

// Writers of one range serialise (RAW/WAW: f = a + b, then f = f + b);
// the same program twice gives a + 2b each time.
TEST_F(WorkerTest, WritersOfOneTensorSerialise) {
    HostProgram p{"twice", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])});
                      g.Chip("chip_add", {In(x[2]), In(x[1]), Out(x[2])});
                  }};
    HostTensor a = Iota(2.0f, -7.0f), b = Iota(0.0f, 1.5f);
    for (int i = 0; i < 2; ++i) {
        auto outs = worker_->Run(p, {a, b});
        ExpectFloats(outs[0], [&](size_t j) { return a.floats()[j] + 3.0f; }, "a + 2b");
    }
}

// A task naming one range as Out and then In reads it: the In uploads the
// host bytes though the Out came first (the function here changes nothing,
// so the range comes back as it went).
TEST_F(WorkerTest, AnOutBeforeAnInOfTheSameRangeStillUploadsIt) {
    worker_->RegisterChipFunction("leave_as_is", [](ChipContext&) {});
    HostProgram p{"out_then_in", 1, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                      g.Chip("leave_as_is", {Out(x[0]), In(x[0])});
                  }};
    HostTensor t = Iota(1.0f, 2.0f);
    const std::vector<float> before(t.floats().begin(), t.floats().end());
    worker_->Run(p, {t});
    ExpectFloats(t, [&](size_t i) { return before[i]; }, "the range after Out + In");
}

// The data-parallel matmul: A's rows split over the four devices, each chip
// task writing its own rows of C (disjoint: no dependency), each split again
// over block_dim = 2 core tasks; C checked against a CPU matmul.
TEST_F(WorkerTest, DataParallelMatmulSplitsRowsOverAllDevices) {
    constexpr int64_t m = 512, k = 128, n = 128;
    std::vector<float> av(m * k), bv(k * n), want(m * n, 0.0f);
    for (size_t i = 0; i < av.size(); ++i) av[i] = float(int(i * 37 % 19) - 9) / 8.0f;
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = float(int(i * 11 % 13) - 6) / 4.0f;
    for (int64_t r = 0; r < m; ++r)
        for (int64_t x = 0; x < k; ++x)
            for (int64_t c = 0; c < n; ++c) want[r * n + c] += av[r * k + x] * bv[x * n + c];
    HostTensor a = HostTensor::FromFloats({m, k}, av), b = HostTensor::FromFloats({k, n}, bv);
    auto outs = worker_->Run(RowParallelMatmul(m, n, 4), {a, b});
    auto c = outs[0].floats();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(c[i], want[i], 1e-3 * std::max(1.0f, std::fabs(want[i]))) << i;
    // Placed as they are submitted, a task that finished before the next
    // was submitted draws it to its device (b is current there): the
    // split over all devices holds when the four are in flight together,
    // as here, where each waits until the function submitted all four. A
    // fresh Worker: what the first run taught placement of each device's
    // speed (noisy on a loaded machine) would weigh in beside the load.
    {
        DistributedConfig c;
        c.device_ids = Vfs(*host_);
        c.block_dim = 2;
        worker_.reset();
        worker_.emplace(*host_, c);
        RegisterChipFunctions(*worker_);
    }
    std::atomic<bool> all_in{false};
    worker_->RegisterChipFunction("gated_matmul", [&all_in, matmul = ChipMatmul(64, k, n)](ChipContext& ctx) {
        while (!all_in.load()) std::this_thread::yield();
        matmul(ctx);
    });
    const auto before = AllStats();
    HostProgram gated{"gated_rows", 2, {{{m, n}}}, [&](HostGraph& g, std::span<const HostTensor> x) {
                          for (int64_t p = 0; p < 4; ++p)
                              g.Chip("gated_matmul", {In(x[0].Rows(p * 128, (p + 1) * 128)), In(x[1]),
                                                      Out(x[2].Rows(p * 128, (p + 1) * 128))});
                          all_in = true;
                      }};
    // Fresh copies: no device holds them current, so locality draws nothing.
    outs = worker_->Run(gated, {HostTensor::FromFloats({m, k}, av), HostTensor::FromFloats({k, n}, bv)});
    c = outs[0].floats();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(c[i], want[i], 1e-3 * std::max(1.0f, std::fabs(want[i]))) << i;
    const auto after = AllStats();
    for (size_t d = 0; d < after.size(); ++d) EXPECT_EQ(after[d].chip_tasks - before[d].chip_tasks, 1u) << d;
}

// Chip tasks on different devices really overlap: the device timestamps of
// their core tasks (trace spans from the completion records) intersect.
TEST_F(WorkerTest, ChipTasksOnTwoDevicesOverlapInDeviceTime) {
    worker_.reset();
    DistributedConfig c;
    c.device_ids = {1, 4};  // one VF of each card
    c.block_dim = 8;
    worker_.emplace(*host_, c);
    std::atomic<int> arrived{0};
    RegisterPairedMatmul(*worker_, arrived);
    ExpectPairOverlapsInDeviceTime(*worker_, [](const std::string& device, int) { return device; });
    EXPECT_EQ(worker_->Stats(0).chip_tasks, worker_->Stats(1).chip_tasks) << "one of each pair on each device";
}

// Independent chip tasks that each fit a small device run several at once
// (32 cores: four slots). Together their device copies need more memory than
// the device has, so a call short of memory waits for one on another slot
// to give its copies back instead of failing: every run used to fail with
// OutOfMemory where one task at a time fit (a probe: 8 to 10 runs of 10).
TEST(WorkerOneDevice, ChipTasksAtOnceWaitForMemoryTheOthersHold) {
    SPYRE_REQUIRE_FUSE();
    HostOptions o = HostOptions::EmbeddedMock(1, 1, "40M");  // the VF has 20 MiB
    o.embedded_mock.extra_args = {"--cores", "32"};
    Host host = Host::Open(o);
    std::mutex mu;
    std::set<Orchestrator*> registered;  // each slot's chip runtime, once (they live as long as the Worker)
    Worker w(host, {.device_ids = Vfs(host), .chip_heap_bytes = 1 << 20});
    ASSERT_EQ(w.ChipTasksAtOnce(0), 4u);
    constexpr int32_t kInc = 7;
    w.RegisterChipFunction("inc_all", [&](ChipContext& ctx) {
        {
            std::lock_guard lock(mu);
            if (registered.insert(&ctx.orch).second)
                ctx.orch.RegisterHostKernel(kInc, [](std::span<void* const> b, std::span<const uint64_t> s) {
                    const float* in = static_cast<const float*>(b[0]);
                    float* out = static_cast<float*>(b[1]);
                    for (uint64_t i = 0; i < s[0] / 4; ++i) out[i] = in[i] + 1.0f;
                    return 0u;
                });
        }
        TaskParam p[] = {{PARAM_INPUT, ctx.args[0], ctx.bytes[0], {}}, {PARAM_OUTPUT, ctx.args[1], ctx.bytes[1], {}}};
        ctx.orch.Submit(kInc, WORKER_HOST, p);
    });
    constexpr int kTasks = 8;
    constexpr int64_t kRows = 4096, kCols = 128;  // 2 MiB each: in and out 4 MiB a task, 16 MiB for four
    std::vector<HostTensor> args;
    for (int i = 0; i < kTasks; ++i) args.push_back(HostTensor::Full({kRows, kCols}, float(i)));
    for (int i = 0; i < kTasks; ++i) args.push_back(HostTensor::Zeros({kRows, kCols}));
    HostProgram p{"independent", size_t(2 * kTasks), {}, [](HostGraph& g, std::span<const HostTensor> x) {
                      for (int i = 0; i < kTasks; ++i) g.Chip("inc_all", {In(x[i]), Out(x[kTasks + i])});
                  }};
    for (int run = 0; run < 5; ++run) {
        for (int i = 0; i < kTasks; ++i) std::fill(args[kTasks + i].floats().begin(), args[kTasks + i].floats().end(), 0.0f);
        ASSERT_NO_THROW(w.Run(p, args)) << "run " << run;
        for (int i = 0; i < kTasks; ++i)
            for (float v : args[kTasks + i].floats()) ASSERT_EQ(v, float(i) + 1.0f) << "run " << run << ", task " << i;
    }
}

// A chip function that holds its arguments' memory past its call (as
// Python's views of ctx.args do) gets those device copies for itself: a
// late write through them reaches no later run (the executor reused the
// copy, whose host bytes had not changed: z = y + 1 came out 1001), and
// they stay mapped, over zeros, after the Worker is gone. A call that keeps nothing
// leaves its copies to be reused.
TEST(WorkerOneDevice, ArgumentMemoryHeldPastTheCallIsSetAsideForItsHolder) {
    SPYRE_REQUIRE_FUSE();
    Host host = Host::Open(HostOptions::EmbeddedMock(1, 1, "1G"));
    std::shared_ptr<const void> held;
    float* kept = nullptr;
    bool keep = false;
    std::optional<Worker> w(std::in_place, host, DistributedConfig{.device_ids = Vfs(host)});
    w->RegisterChipFunction("plus_one", [&](ChipContext& ctx) {
        const auto* in = static_cast<const float*>(ctx.args[0]);
        auto* out = static_cast<float*>(ctx.args.back());
        for (uint64_t i = 0; i < ctx.bytes[0] / 4; ++i) out[i] = in[i] + 1.0f;
        if (keep) held = ctx.args_memory, kept = out;
    });
    HostTensor y = HostTensor::Zeros({4, 16}), z = HostTensor::Zeros({4, 16});
    const uint64_t bytes = y.bytes();
    HostProgram inc{"inc", 1, {}, [](HostGraph& g, std::span<const HostTensor> x) { g.Chip("plus_one", {InOut(x[0])}); }};
    HostProgram next{"next", 2, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                         g.Chip("plus_one", {In(x[0]), Out(x[1])});
                     }};
    w->Run(inc, {y});  // y = 1, its copy kept by the executor
    const uint64_t uploaded = w->Stats(0).moved.bytes_uploaded;
    w->Run(next, {y, z});
    EXPECT_EQ(w->Stats(0).moved.bytes_uploaded, uploaded) << "a call that holds nothing leaves y's copy reused";

    keep = true;
    w->Run(inc, {y});  // y = 2; this call's copy of y is now the holder's
    keep = false;
    ASSERT_TRUE(held && kept);
    std::fill(kept, kept + bytes / 4, 1000.0f);  // the late write
    for (int run = 0; run < 2; ++run) {
        w->Run(next, {y, z});
        for (float v : z.floats()) ASSERT_EQ(v, 3.0f) << "run " << run;
    }
    for (float v : y.floats()) ASSERT_EQ(v, 2.0f);
    EXPECT_EQ(w->Stats(0).moved.bytes_uploaded, uploaded + bytes) << "y uploaded again once, into a fresh copy";
    w.reset();
    // Still mapped once the Worker is gone, over private zeros: nothing the
    // device hands out next is reachable through it.
    for (uint64_t i = 0; i < bytes / 4; ++i) ASSERT_EQ(kept[i], 0.0f) << "after the Worker";
    std::fill(kept, kept + bytes / 4, 5.0f);
    // The view holds no device: a new Worker opens its functions at once
    // (it was refused Busy, "already open", until the view went: found
    // probing from outside), and computes right.
    const auto reopening = std::chrono::steady_clock::now();
    w.emplace(host, DistributedConfig{.device_ids = Vfs(host)});
    EXPECT_LT(std::chrono::steady_clock::now() - reopening, std::chrono::seconds(5));
    w->RegisterChipFunction("plus_one", [](ChipContext& ctx) {
        auto* out = static_cast<float*>(ctx.args.back());
        for (uint64_t i = 0; i < ctx.bytes[0] / 4; ++i) out[i] += 1.0f;
    });
    w->Run(inc, {y});
    for (float v : y.floats()) ASSERT_EQ(v, 3.0f) << "the new Worker";
    for (uint64_t i = 0; i < bytes / 4; ++i) ASSERT_EQ(kept[i], 5.0f) << "the view is the holder's own memory";
    w.reset();
    held.reset();
}

// A device with room for two chip tasks (16 cores: two task queues, and
// block_dim 8) runs two independent ones at once, each on its own core
// group: both chip functions are in flight together (each waits for the
// other before it submits: one at a time would time out), and the device
// timestamps of the two groups' core tasks intersect.
TEST(WorkerOneDevice, TwoChipTasksOverlapOnADeviceWithRoom) {
    SPYRE_REQUIRE_FUSE();
    HostOptions o = HostOptions::EmbeddedMock(1, 1, "2G");
    o.embedded_mock.extra_args = {"--cores", "16"};
    Host host = Host::Open(o);
    DistributedConfig c;
    c.device_ids = Vfs(host);
    c.block_dim = 8;
    std::optional<Worker> w(std::in_place, host, c);
    std::atomic<int> arrived{0};
    RegisterPairedMatmul(*w, arrived);
    ExpectPairOverlapsInDeviceTime(*w, [](const std::string&, int core) { return "group " + std::to_string(core / 8); });
    EXPECT_EQ(w->Stats(0).moved.bytes_uploaded, uint64_t(kPairM * kPairK + kPairK * kPairN) * 4) << "only the first run uploads";

    // A chip task that faults beside another on the same device fails alone:
    // its own chip runtime reports it, the other's C is exact.
    w->RegisterChipFunction("paired_fault", [&arrived](ChipContext& ctx) {
        WaitForPartner(arrived, "chip task");
        ChipFault(ctx);
    });
    HostProgram fault_beside{"fault_beside", 2, {{{kPairM / 2, kPairN}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                                 HostTensor junk = g.CreateTensor({kTile, kTile});
                                 g.Chip("paired_fault", {In(x[1]), Out(junk)}, {.name = "faulty"});
                                 g.Chip("paired_matmul", {In(x[0].Rows(0, kPairM / 2)), In(x[1]), Out(x[2])}, {.name = "fine"});
                             }};
    HostTensor a = HostTensor::Full({kPairM, kPairK}, 1.0f), b = HostTensor::Full({kPairK, kPairN}, 0.5f);
    HostTensor out = HostTensor::Zeros({kPairM / 2, kPairN});
    try {
        w->Run(fault_beside, {a, b, out});
        ADD_FAILURE() << "no error";
    } catch (const HostRunError& e) {
        ASSERT_EQ(e.failures().size(), 1u) << e.what();
        EXPECT_EQ(e.failures()[0].task, "faulty");
        EXPECT_NE(e.failures()[0].device_code, 0u);
        EXPECT_TRUE(e.skipped().empty());
    }
    for (float x : out.floats()) ASSERT_EQ(x, 0.5f * kPairK);

    // Asked for more than the device has task queues: a typed error naming both.
    w.reset();
    c.chip_tasks_per_device = 3;
    EXPECT_SPYRE_ERROR(Worker(host, c), InvalidArgument,
                       "chip_tasks_per_device is 3, but 0000:01:00.1 has 2 task queue(s), one per chip task at most");
    c.chip_tasks_per_device = -1;
    EXPECT_SPYRE_ERROR(Worker(host, c), InvalidArgument, "chip_tasks_per_device is -1 (0: automatic, or >= 1)");
}

// Affinity: a task naming its device runs there. Locality: a task reading
// what a chip task wrote goes to that device and does not upload it again.
TEST_F(WorkerTest, AffinityAndLocality) {
    HostProgram pinned{"pinned", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                           g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.name = "pinned add", .device = 3});
                       }};
    HostTensor a = Iota(1.0f, 0.0f), b = Iota(0.0f, 1.0f);
    worker_->Run(pinned, {a, b});
    EXPECT_EQ(worker_->Stats(3).chip_tasks, 1u);

    // Fresh tensors: a and b are current on device 3 now, and would draw the chain there.
    a = Iota(1.0f, 5.0f), b = Iota(0.0f, 1.0f);
    const auto before = AllStats();
    HostProgram chain{"chain", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                          HostTensor t = g.CreateTensor({kTile, kTile});
                          g.Chip("chip_add", {In(x[0]), In(x[1]), Out(t)});
                          g.Chip("chip_sub", {In(t), In(x[1]), Out(x[2])});
                      }};
    auto outs = worker_->Run(chain, {a, b});
    ExpectFloats(outs[0], [&](size_t i) { return a.floats()[i]; }, "(a + b) - b");
    const auto after = AllStats();
    int devices_used = 0;
    for (size_t d = 0; d < after.size(); ++d) {
        const uint64_t tasks = after[d].chip_tasks - before[d].chip_tasks;
        if (tasks == 0) continue;
        ++devices_used;
        EXPECT_EQ(tasks, 2u) << "both on " << worker_->DescribeDevice(d);
        EXPECT_EQ(after[d].moved.bytes_uploaded - before[d].moved.bytes_uploaded, 2 * kTileBytes);  // a, b once
        EXPECT_EQ(after[d].moved.bytes_reused - before[d].moved.bytes_reused, 2 * kTileBytes);      // t and b
    }
    EXPECT_EQ(devices_used, 1);
}

// A SubWorker that throws: the run fails with its structured error, its
// downstream tasks are skipped and listed, the independent task finishes,
// and the next run works.
TEST_F(WorkerTest, AThrowingSubWorkerFailsTheRunAndSkipsItsCone) {
    HostProgram p{"with_boom", 2, {{{kTile, kTile}}, {{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                      HostTensor s = g.CreateTensor({kTile, kTile}), t = g.CreateTensor({kTile, kTile}),
                                 u = g.CreateTensor({kTile, kTile});
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(s)});
                      g.Sub("boom", [](std::span<const HostTensor>) { throw std::runtime_error("boom!"); }, {In(s), Out(t)});
                      g.Chip("chip_sub", {In(t), In(x[1]), Out(u)}, {.name = "after boom"});
                      g.Sub("last", [](std::span<const HostTensor>) {}, {In(u), Out(x[2])});
                      g.Chip("chip_sub", {In(x[0]), In(x[1]), Out(x[3])}, {.name = "independent"});
                  }};
    HostTensor a = Iota(1.0f, 0.0f), b = Iota(0.0f, 1.0f), f = HostTensor::Zeros({kTile, kTile}),
               v = HostTensor::Zeros({kTile, kTile});
    try {
        worker_->Run(p, {a, b, f, v});
        FAIL() << "no error";
    } catch (const HostRunError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::TaskFailed);
        ASSERT_EQ(e.failures().size(), 1u);
        const TaskFailureInfo& fail = e.failures()[0];
        EXPECT_EQ(fail.task, "boom#0");
        EXPECT_EQ(fail.function, "boom");
        EXPECT_EQ(fail.level, Level::Host);
        EXPECT_EQ(fail.device, "");
        EXPECT_FALSE(fail.orchestrator);
        EXPECT_EQ(fail.cause, "boom!");
        EXPECT_EQ(e.skipped(), (std::vector<std::string>{"after boom", "last#0"}));
        EXPECT_NE(std::string(e.what()).find("HOST task 'boom#0' (SubWorker 'boom') failed: boom!"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("skipped 2 downstream task(s): after boom last#0"), std::string::npos)
            << e.what();
    }
    ExpectFloats(v, [&](size_t i) { return a.floats()[i] - 1.0f; }, "the independent task's a - b");
    ExpectFloats(f, [](size_t) { return 0.0f; }, "f, downstream of the failure");
    HostTensor five = HostTensor::Full({128, 128}, 2.0f);
    worker_->Run(DependencyProgram(), {five, HostTensor::Full({128, 128}, 3.0f)});  // still usable
}

// Skipped tasks are listed in submission order, as the report lists them:
// they were listed in the order they were skipped (the reader of a slow
// failure after the reader of a fast one submitted later; probe of 6 Dec).
TEST_F(WorkerTest, SkippedTasksAreListedInSubmissionOrder) {
    HostProgram p{"two_failures", 0, {}, [](HostGraph& g, std::span<const HostTensor>) {
                      HostTensor slow = g.CreateTensor({4}), fast = g.CreateTensor({4});
                      g.Sub("slow_boom", [](std::span<const HostTensor>) {
                          std::this_thread::sleep_for(std::chrono::milliseconds(200));
                          throw std::runtime_error("slow");
                      }, {Out(slow)});
                      g.Sub("fast_boom", [](std::span<const HostTensor>) { throw std::runtime_error("fast"); }, {Out(fast)});
                      g.Sub("reads_slow", [](std::span<const HostTensor>) {}, {In(slow), Out(g.CreateTensor({4}))},
                            {.name = "reads_slow"});
                      g.Sub("reads_fast", [](std::span<const HostTensor>) {}, {In(fast), Out(g.CreateTensor({4}))},
                            {.name = "reads_fast"});
                  }};
    try {
        worker_->Run(p, {});
        FAIL() << "no error";
    } catch (const HostRunError& e) {
        EXPECT_EQ(e.skipped(), (std::vector<std::string>{"reads_slow", "reads_fast"}));
        EXPECT_NE(std::string(e.what()).find("skipped 2 downstream task(s): reads_slow reads_fast"), std::string::npos)
            << e.what();
    }
}

// A reader of rows that two later writers wrote over, after a failed
// writer of them, runs. The failed writer's rows cross a 64 KiB granule
// of the range tracker; the first overwrite's cut left a piece of its
// entry under the granule above, which the second cut missed, and the
// reader was skipped for the failure (found probing from outside).
TEST_F(WorkerTest, AReaderOfRowsTwoWritersRewroteAfterAFailureRuns) {
    for (const bool high_first : {true, false}) {
        HostTensor t = HostTensor::Zeros({256, 128}), a = HostTensor::Full({128, 128}, 1.0f);
        std::atomic<int> reader_ran{0};
        HostProgram p{"rewritten", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                          g.Chip("chip_fault", {In(a), Out(t.Rows(64, 192))}, {.name = "fault"});  // bytes 32..96 KiB
                          const std::pair<int64_t, int64_t> halves[] = {{128, 256}, {0, 128}};
                          for (int i = 0; i < 2; ++i) {
                              const auto [lo, hi] = halves[high_first ? i : 1 - i];
                              g.Chip("chip_add", {In(a), In(a), Out(t.Rows(lo, hi))}, {.name = lo == 0 ? "over_low" : "over_high"});
                          }
                          g.Sub("reader", [&](std::span<const HostTensor> x) {
                              for (float v : x[0].floats()) ASSERT_EQ(v, 2.0f);
                              ++reader_ran;
                          }, {In(t.Rows(64, 192))}, {.name = "reader"});
                      }};
        try {
            worker_->Run(p, {});
            FAIL() << "no error";
        } catch (const HostRunError& e) {
            ASSERT_EQ(e.failures().size(), 1u) << e.what();
            EXPECT_EQ(e.failures()[0].task, "fault") << e.what();
            EXPECT_EQ(e.skipped(), std::vector<std::string>{}) << e.what();
        }
        EXPECT_EQ(reader_ran.load(), 1) << "high half first: " << high_first;
        ExpectFloats(t, [](size_t) { return 2.0f; }, "t, written over whole");
    }
}

// A failure at the head of a long loop skips every task after it: the
// message names the first 16 of them and counts the rest (it listed all,
// 139 KB for 10,000 tasks, an outside probe); skipped() has them all.
TEST_F(WorkerTest, TheRunErrorNamesAFewSkippedTasksAndCountsTheRest) {
    HostProgram p{"long_cone", 1, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                      g.Sub("boom", [](std::span<const HostTensor>) { throw std::runtime_error("boom!"); }, {InOut(x[0])});
                      for (int i = 0; i < 40; ++i) g.Sub("after", [](std::span<const HostTensor>) {}, {InOut(x[0])});
                  }};
    try {
        worker_->Run(p, {HostTensor::Zeros({4, 4})});
        FAIL() << "no error";
    } catch (const HostRunError& e) {
        ASSERT_EQ(e.skipped().size(), 40u);
        EXPECT_EQ(e.skipped().back(), "after#39");
        const std::string what = e.what();
        EXPECT_NE(what.find("skipped 40 downstream task(s): after#0 after#1 "), std::string::npos) << what;
        EXPECT_NE(what.find(" after#15 and 24 more (skipped() lists them)"), std::string::npos) << what;
        EXPECT_EQ(what.find("after#16"), std::string::npos) << what;
    }
}

// One chip task writing the same bytes through two arguments: on this
// rank's device both arguments were one device copy, on another rank's two,
// so each(InOut(x), InOut(x)) gave x + 2 or x + 1 by placement, and two
// overlapping row views written by one task lost a write even here. Refused
// when the task is submitted, as an out-of-range access value is (one used
// to run as InOut). Reading bytes twice, or reading and writing them
// (an in-place call), is fine.
TEST_F(WorkerTest, AChipTaskThatWritesBytesThroughTwoArgumentsIsRefused) {
    std::vector<std::string> messages;
    auto message_of = [&](const std::function<void()>& submit) {
        try {
            submit();
            messages.push_back("accepted");
        } catch (const Error& e) {
            messages.push_back(e.kind() == ErrorKind::InvalidArgument ? e.message() : "another kind");
        }
    };
    HostProgram p{"aliases", 1, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                      const HostTensor head = x[0].Rows(0, kTile / 2 + 1), tail = x[0].Rows(kTile / 2, kTile);
                      message_of([&] { g.Chip("chip_empty", {InOut(x[0]), InOut(x[0])}); });
                      message_of([&] { g.Chip("chip_empty", {InOut(head), In(x[0]), Out(tail)}); });
                      message_of([&] { g.Chip("chip_empty", {TensorArg{x[0], Access(9)}}); });
                      message_of([&] { g.Sub("s", [](std::span<const HostTensor>) {}, {TensorArg{x[0], Access(200)}}); });
                      message_of([&] { g.Chip("chip_empty", {In(x[0]), In(x[0]), InOut(head)}, {.name = "in place"}); });
                      // A named task is named by its name (it was by its function's).
                      message_of([&] { g.Chip("chip_empty", {In(HostTensor()), Out(x[0])}, {.name = "badtask"}); });
                      message_of([&] { g.Chip("chip_empty", {InOut(x[0]), Out(tail)}, {.name = "twice"}); });
                  }};
    EXPECT_EQ(worker_->Run(p, {Iota(1.0f, 0.0f)}).size(), 0u);
    ASSERT_EQ(messages.size(), 7u);
    const char* expected[] = {
        "chip task 'chip_empty': arguments 0 (inout) and 1 (inout) are both written and share bytes",
        "chip task 'chip_empty': arguments 0 (inout) and 2 (out) are both written and share bytes",
        "task 'chip_empty': argument 0 has access 9, not In, Out or InOut",
        "task 's': argument 0 has access 200, not In, Out or InOut",
        "accepted",
        "task 'badtask' (function 'chip_empty'): argument 0 is an empty tensor",
        "chip task 'twice' (function 'chip_empty'): arguments 0 (inout) and 1 (out) are both written",
    };
    for (size_t i = 0; i < messages.size(); ++i)
        EXPECT_NE(messages[i].find(expected[i]), std::string::npos) << "case " << i << ": " << messages[i];
}

// A host orchestration function that throws fails its run as a failing
// task does: HostRunError, the failed task is the orchestration function
// (level HOST), its cause the exception's message. The tasks it submitted
// before it threw run to the end (nothing is skipped). Through Run and
// Submit alike; a spyre::Error keeps its kind; the Worker keeps working.
TEST_F(WorkerTest, AThrowingOrchestrationFunctionFailsTheRunAndWhatItSubmittedRuns) {
    std::atomic<int> ran{0};
    HostProgram p{"plan_fails", 2, {{{kTile, kTile}}}, [&ran](HostGraph& g, std::span<const HostTensor> x) {
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])});
                      g.Sub("count", [&ran](std::span<const HostTensor>) { ++ran; }, {In(x[2])});
                      throw std::runtime_error("cannot plan tile 3");
                  }};
    HostTensor a = Iota(1.0f, 0.0f), b = Iota(0.0f, 1.0f), f = HostTensor::Zeros({kTile, kTile});
    const auto before = AllStats();
    auto expect = [](const HostRunError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::TaskFailed) << e.what();
        ASSERT_EQ(e.failures().size(), 1u);
        const TaskFailureInfo& fail = e.failures()[0];
        EXPECT_EQ(fail.task, "plan_fails");
        EXPECT_EQ(fail.function, "plan_fails");
        EXPECT_EQ(fail.level, Level::Host);
        EXPECT_TRUE(fail.orchestrator);
        EXPECT_EQ(fail.run, "plan_fails");  // was empty: only task records named their run
        EXPECT_EQ(fail.device, "");
        EXPECT_EQ(fail.kind, ErrorKind::TaskFailed);
        EXPECT_EQ(fail.cause, "cannot plan tile 3");
        EXPECT_TRUE(e.skipped().empty());
        EXPECT_NE(std::string(e.what()).find("run 'plan_fails': HOST task 'plan_fails' (host orchestration function "
                                             "'plan_fails') failed: cannot plan tile 3"),
                  std::string::npos)
            << e.what();
        EXPECT_EQ(std::string(e.what()).find("skipped"), std::string::npos) << e.what();
    };
    try {
        worker_->Run(p, {a, b, f});
        ADD_FAILURE() << "Run: no HostRunError";
    } catch (const HostRunError& e) {
        expect(e);
    }
    RunHandle h = worker_->Submit(p, {a, b, f});
    try {
        h.Wait();
        ADD_FAILURE() << "Submit + Wait: no HostRunError";
    } catch (const HostRunError& e) {
        expect(e);
    }
    EXPECT_EQ(ran.load(), 2) << "the SubWorker submitted before the throw, once per run";
    ExpectFloats(f, [&](size_t i) { return a.floats()[i] + b.floats()[i]; }, "f = a + b");
    const auto after = AllStats();
    uint64_t chip_tasks = 0;
    for (size_t d = 0; d < after.size(); ++d) chip_tasks += after[d].chip_tasks - before[d].chip_tasks;
    EXPECT_EQ(chip_tasks, 2u);

    // A spyre::Error keeps its kind: an unknown chip function after one recorded task.
    HostProgram unknown{"unknown_fn", 1, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                            g.Chip("chip_empty", {In(x[0])});
                            g.Chip("chip_mul", {In(x[0])});
                        }};
    try {
        worker_->Run(unknown, {a});
        ADD_FAILURE() << "no HostRunError";
    } catch (const HostRunError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::NotFound) << e.what();
        ASSERT_EQ(e.failures().size(), 1u);
        EXPECT_EQ(e.failures()[0].level, Level::Host);
        EXPECT_NE(e.failures()[0].cause.find("chip function 'chip_mul' is not registered"), std::string::npos)
            << e.failures()[0].cause;
        EXPECT_TRUE(e.skipped().empty());  // chip_empty#0 ran
    }
    auto outs = worker_->Run(DependencyProgram(), {HostTensor::Full({kTile, kTile}, 2.0f), HostTensor::Full({kTile, kTile}, 3.0f)});
    ExpectFloats(outs[0], [](size_t) { return 5.0f; }, "the next run");
}

// A chip task whose device program faults: DeviceError with the device,
// the chip function and the device's code; downstream skipped; independent
// work done; the worker keeps working.
// A chip function's host kernel that returns a code fails the chip task
// with that code marked as the kernel's own, not read as a device error
// name (9 would read BAD_DEPENDENCY).
TEST_F(WorkerTest, AChipTasksHostKernelCodeIsReportedAsTheKernels) {
    worker_->RegisterChipFunction("chip_host_code", [](ChipContext& ctx) {
        ctx.orch.RegisterHostKernel(901, [](std::span<void* const>, std::span<const uint64_t>) { return 9u; });
        TaskParam out{PARAM_OUTPUT, ctx.args[0], ctx.bytes[0], {}};
        ctx.orch.Submit(901, WORKER_HOST, {&out, 1});
    });
    HostTensor y = HostTensor::Zeros({kTile, kTile});
    HostProgram p{"host_code", 1, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                      g.Chip("chip_host_code", {Out(x[0])}, {.name = "coded"});
                  }};
    try {
        worker_->Run(p, {y});
        FAIL() << "no error";
    } catch (const HostRunError& e) {
        ASSERT_EQ(e.failures().size(), 1u);
        const TaskFailureInfo& fail = e.failures()[0];
        EXPECT_EQ(fail.device_code, 9u);
        EXPECT_TRUE(fail.host_kernel_code);
        EXPECT_NE(fail.cause.find("host kernel return code 9"), std::string::npos) << fail.cause;
        const std::string what = e.what();
        EXPECT_NE(what.find("host code 9"), std::string::npos) << what;
        // Once, in the context (the message repeated it: "[host code 9] [..., host code 9]").
        EXPECT_EQ(what.find("host code 9"), what.rfind("host code 9")) << what;
        EXPECT_EQ(what.find("BAD_DEPENDENCY"), std::string::npos) << what;
    }
}

// A chip task that fails after its inputs went up still counts them: the
// Worker's stats (and the trace's span) said it uploaded nothing, though
// the device's DMA counters showed the bytes (found probing from outside).
TEST_F(WorkerTest, AFailedChipTaskCountsTheBytesItUploaded) {
    worker_->RegisterChipFunction("chip_fails_after_upload", [](ChipContext&) {
        throw Error(ErrorKind::TaskFailed, "failed on purpose");
    });
    const HostTensor a = Iota(1.0f, 0.0f), b = Iota(0.5f, 1.0f);
    HostTensor c = HostTensor::Zeros({kTile, kTile});
    const HostProgram p{"fails", 3, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                            g.Chip("chip_fails_after_upload", {In(x[0]), In(x[1]), Out(x[2])}, {.device = 0});
                        }};
    const uint64_t before = worker_->Stats(0).moved.bytes_uploaded;
    EXPECT_THROW(worker_->Run(p, {a, b, c}), HostRunError);
    EXPECT_EQ(worker_->Stats(0).moved.bytes_uploaded - before, a.bytes() + b.bytes());
}

TEST_F(WorkerTest, AFaultingChipTaskReportsTheDeviceAndItsCode) {
    HostProgram p{"with_fault", 2, {{{kTile, kTile}}, {{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                      HostTensor y = g.CreateTensor({kTile, kTile});
                      g.Chip("chip_fault", {In(x[0]), Out(y)}, {.name = "faulty", .device = 1});
                      g.Sub("use", [](std::span<const HostTensor>) {}, {In(y), Out(x[2])});
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[3])}, {.name = "independent", .device = 2});
                  }};
    HostTensor a = Iota(1.0f, 0.0f), b = Iota(0.0f, 1.0f);
    HostTensor f = HostTensor::Zeros({kTile, kTile}), v = HostTensor::Zeros({kTile, kTile});
    try {
        worker_->Run(p, {a, b, f, v});
        FAIL() << "no error";
    } catch (const HostRunError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceError) << e.what();
        ASSERT_EQ(e.failures().size(), 1u);
        const TaskFailureInfo& fail = e.failures()[0];
        EXPECT_EQ(fail.task, "faulty");
        EXPECT_EQ(fail.level, Level::Chip);
        EXPECT_EQ(fail.function, "chip_fault");
        EXPECT_EQ(fail.device, worker_->DescribeDevice(1));
        EXPECT_NE(fail.device_code, 0u);
        EXPECT_EQ(e.context().device_code, fail.device_code);
        EXPECT_EQ(e.context().device, fail.device);
        EXPECT_NE(fail.cause.find("kernel " + std::to_string(KERNEL_JUNK)), std::string::npos) << fail.cause;
        EXPECT_EQ(e.skipped(), (std::vector<std::string>{"use#0"}));
        EXPECT_NE(std::string(e.what()).find("CHIP task 'faulty' (chip function 'chip_fault' on " + fail.device),
                  std::string::npos) << e.what();
    }
    ExpectFloats(v, [&](size_t i) { return a.floats()[i] + 1.0f; }, "independent a + b");
    // Same device, next run: fine.
    HostProgram again{"again", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                          g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.device = 1});
                      }};
    auto outs = worker_->Run(again, {a, b});
    ExpectFloats(outs[0], [&](size_t i) { return a.floats()[i] + 1.0f; }, "a + b after the fault");
}

// Bad configurations and bad runs are typed errors naming what is wrong.
TEST_F(WorkerTest, BadConfigurationsAndRunsAreTypedErrors) {
    auto config = [](auto edit) {
        DistributedConfig c;
        c.device_ids = {1};
        edit(c);
        return c;
    };
    EXPECT_SPYRE_ERROR(Validate(config([](auto& c) { c.device_ids.clear(); })), InvalidArgument, "device_ids is empty");
    EXPECT_SPYRE_ERROR(Validate(config([](auto& c) { c.device_ids = {1, 1}; })), InvalidArgument, "names device 1 twice");
    EXPECT_SPYRE_ERROR(Validate(config([](auto& c) { c.runtime = static_cast<ChipRuntime>(7); })), InvalidArgument,
                       "runtime 7 is unknown");
    EXPECT_SPYRE_ERROR(ChipRuntimeFromString("simpler"), InvalidArgument, "runtime 'simpler' is unknown");
    EXPECT_EQ(ChipRuntimeFromString("tensormap_and_ringbuffer_lockfree"), ChipRuntime::TensorMapAndRingBufferLockFree);
    EXPECT_STREQ(ToString(ChipRuntime::TensorMapAndRingBuffer), "tensormap_and_ringbuffer");
    EXPECT_SPYRE_ERROR(Validate(config([](auto& c) { c.block_dim = 0; })), InvalidArgument, "block_dim is 0");
    EXPECT_SPYRE_ERROR(Validate(config([](auto& c) { c.aicpu_thread_num = 0; })), InvalidArgument, "aicpu_thread_num is 0");
    EXPECT_SPYRE_ERROR(Validate(config([](auto& c) { c.num_sub_workers = -1; })), InvalidArgument, "num_sub_workers is -1");
    EXPECT_SPYRE_ERROR(Worker(*host_, config([](auto& c) { c.device_ids = {9}; })), NotFound, "device_ids[0] is 9");
    EXPECT_SPYRE_ERROR(Worker(*host_, config([](auto& c) { c.device_ids = {0}; c.block_dim = 100000; })), InvalidArgument,
                       "block_dim is 100000");
    // Held by worker_: the refusal names a Worker too (it said "close that
    // Device first", to a caller who holds none).
    EXPECT_SPYRE_ERROR(Worker(*host_, config([](auto& c) { c.device_ids = {1}; })), Busy,
                       "or a Worker of it runs chip tasks there (close that Device or destroy that Worker first)");

    HostTensor a = Iota(1.0f, 0.0f);
    EXPECT_SPYRE_ERROR(worker_->Run(DependencyProgram(), {a}), InvalidArgument, "takes 2 input(s) and 1 output(s): got 1");
    EXPECT_SPYRE_ERROR(worker_->Run(DependencyProgram(), {a, a, HostTensor::Zeros({64, 128})}), InvalidArgument,
                       "output 0 is [64x128] fp32");
    // A bad output spec names the program and the output (it said only "host tensor: ...").
    HostProgram empty_out{"empty_out", 1, {{{4}}, {{0, 3}}}, [](HostGraph&, std::span<const HostTensor>) {}};
    EXPECT_SPYRE_ERROR(worker_->Run(empty_out, {a}), InvalidArgument,
                       "host program 'empty_out': output 1: host tensor: dim 0 of shape [0x3] is 0");
    HostProgram unknown{"unknown", 1, {}, [](HostGraph& g, std::span<const HostTensor> x) { g.Chip("chip_mul", {In(x[0])}); }};
    EXPECT_SPYRE_ERROR(worker_->Run(unknown, {a}), NotFound, "chip function 'chip_mul' is not registered on this Worker");
    HostProgram far{"far", 1, {}, [](HostGraph& g, std::span<const HostTensor> x) { g.Chip("chip_empty", {In(x[0])}, {.device = 4}); }};
    EXPECT_SPYRE_ERROR(worker_->Run(far, {a}), InvalidArgument, "names device 4, but the Worker has 4");
    HostProgram throws{"throws", 1, {}, [](HostGraph&, std::span<const HostTensor>) { throw std::logic_error("no graph"); }};
    EXPECT_SPYRE_ERROR(worker_->Run(throws, {a}), TaskFailed, "(host orchestration function 'throws') failed: no graph");
    EXPECT_SPYRE_ERROR(a.Rows(0, 129), InvalidArgument, "rows 0..129");

    worker_.reset();
    Worker no_subs(*host_, config([](auto&) {}));
    RegisterChipFunctions(no_subs);
    HostProgram sub{"sub", 1, {}, [](HostGraph& g, std::span<const HostTensor> x) { g.Sub("s", [](auto) {}, {In(x[0])}); }};
    EXPECT_SPYRE_ERROR(no_subs.Run(sub, {a}), InvalidArgument, "needs DistributedConfig::num_sub_workers >= 1 (it is 0)");
}

// Several runs in flight: independent ones all finish right; a run reading
// what an earlier run in flight writes waits for it.
TEST_F(WorkerTest, SeveralRunsInFlight) {
    std::vector<HostTensor> as, bs;
    std::vector<RunHandle> runs;
    for (int r = 0; r < 8; ++r) {
        as.push_back(Iota(float(r), 1.0f));
        bs.push_back(Iota(0.5f, float(r)));
        runs.push_back(worker_->Submit(ParallelReduceProgram(), {as.back(), bs.back()}));
    }
    HostTensor a = Iota(1.0f, 0.0f), b = Iota(0.0f, 4.0f), f = HostTensor::Zeros({kTile, kTile});
    HostProgram write{"write", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                          g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])});
                      }};
    HostProgram read{"read", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                         g.Chip("chip_sub", {In(x[0]), In(x[1]), Out(x[2])});
                     }};
    RunHandle w = worker_->Submit(write, {a, b, f});
    RunHandle rd = worker_->Submit(read, {f, b});
    for (int r = 0; r < 8; ++r) {
        auto outs = runs[r].Wait();
        auto x = as[r].floats(), y = bs[r].floats();
        ExpectFloats(outs[0], [&](size_t i) { return (x[i] + y[i]) + (x[i] - y[i]); }, "run " + std::to_string(r));
    }
    w.Wait();
    ExpectFloats(rd.Wait()[0], [&](size_t i) { return a.floats()[i]; }, "(a + b) - b across runs");
}

// Chip tasks and SubWorkers finish on many threads (4 devices, 2
// SubWorkers) while two threads submit runs, so completions are often
// parked while another thread holds the scheduler's lock: every task runs
// once, every chain runs in order, every run ends, and the device counts
// add up.
constexpr int kStressRuns = 24, kFan = 12, kChain = 6;
TEST_F(WorkerTest, CompletionsFromManyThreadsAreNeverLostOrRepeated) {
    constexpr int kRuns = kStressRuns;
    uint64_t chip_before = 0;
    for (const auto& s : AllStats()) chip_before += s.chip_tasks;
    std::vector<std::atomic<int>> ran(size_t(kRuns) * kFan);
    std::vector<HostTensor> chains;
    for (int r = 0; r < kRuns; ++r) chains.push_back(HostTensor::Zeros({1}));
    auto program = [&](int r) {
        return HostProgram{"stress" + std::to_string(r), 0, {}, [&, r](HostGraph& g, std::span<const HostTensor>) {
                               for (int i = 0; i < kFan; ++i) {
                                   g.Chip("chip_empty", {});
                                   g.Sub("count", [&ran, r, i](std::span<const HostTensor>) { ++ran[size_t(r) * kFan + size_t(i)]; }, {});
                               }
                               for (int k = 0; k < kChain; ++k)
                                   g.Sub("step", [k](std::span<const HostTensor> t) {
                                       float& v = t[0].floats()[0];
                                       if (v != float(k)) throw std::runtime_error("step " + std::to_string(k) + " saw " + std::to_string(v));
                                       v = float(k + 1);
                                   }, {InOut(chains[size_t(r)])});
                           }};
    };
    std::vector<RunHandle> handles(kRuns);
    std::vector<std::thread> submitters;
    for (int s = 0; s < 2; ++s)
        submitters.emplace_back([&, s] {
            for (int r = s; r < kRuns; r += 2) handles[size_t(r)] = worker_->Submit(program(r), {});
        });
    for (auto& t : submitters) t.join();
    for (int r = 0; r < kRuns; ++r) EXPECT_NO_THROW(handles[size_t(r)].Wait()) << "run " << r;
    for (size_t i = 0; i < ran.size(); ++i) EXPECT_EQ(ran[i].load(), 1) << "task " << i;
    for (int r = 0; r < kRuns; ++r) EXPECT_EQ(chains[size_t(r)].floats()[0], float(kChain)) << "chain of run " << r;
    uint64_t chip_after = 0;
    for (const auto& s : AllStats()) chip_after += s.chip_tasks;
    EXPECT_EQ(chip_after - chip_before, uint64_t(kRuns) * kFan);
}

// A run reading what a failing earlier run in flight should have written
// is skipped, and fails with the earlier run's cause. A SubWorker gate
// holds the first run until the second is recorded, so the order is sure.
TEST_F(WorkerTest, ARunDependingOnAFailedRunInFlightFailsWithItsCause) {
    std::promise<void> open_gate;
    std::shared_future<void> gate = open_gate.get_future().share();
    HostProgram first{"first", 1, {{{kTile, kTile}}}, [gate](HostGraph& g, std::span<const HostTensor> x) {
                          HostTensor held = g.CreateTensor({kTile, kTile});
                          g.Sub("gate", [gate](std::span<const HostTensor>) { gate.wait(); }, {In(x[0]), Out(held)});
                          g.Chip("chip_fault", {In(held), Out(x[1])}, {.name = "fault"});
                      }};
    HostProgram second{"second", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                           g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.name = "reader"});
                       }};
    HostTensor a = Iota(1.0f, 0.0f), f = HostTensor::Zeros({kTile, kTile});
    RunHandle r1 = worker_->Submit(first, {a, f});
    RunHandle r2 = worker_->Submit(second, {f, a});
    open_gate.set_value();
    EXPECT_THROW(r1.Wait(), HostRunError);
    try {
        r2.Wait();
        FAIL() << "the reader ran on what the failed task did not write";
    } catch (const HostRunError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceError) << e.what();
        ASSERT_EQ(e.failures().size(), 1u);
        EXPECT_EQ(e.failures()[0].task, "fault");
        EXPECT_EQ(e.skipped(), std::vector<std::string>{"reader"});
        // The failed task is the earlier run's, and the message says so.
        EXPECT_EQ(e.failures()[0].run, "first");
        EXPECT_NE(std::string(e.what()).find("run 'second': CHIP task 'fault' of run 'first' (chip function"),
                  std::string::npos)
            << e.what();
    }
}

// Device copies are a cache bounded by the device's memory: 24 chip tasks
// over distinct 4 MiB tensors pass through a VF of a 128 MiB card.
TEST(WorkerSmallDevice, DeviceCopiesMakeRoomOnASmallDevice) {
    SPYRE_REQUIRE_FUSE();
    HostOptions o;
    o.source = HostOptions::Source::EmbeddedMock;
    o.embedded_mock = {.cards = 1, .vfs = 1, .mem = "128M"};
    Host host = Host::Open(o);
    DistributedConfig c;
    c.device_ids = Vfs(host);
    c.chip_heap_bytes = 1 << 20;
    Worker w(host, c);
    RegisterChipFunctions(w);
    std::vector<HostTensor> keep;
    for (int i = 0; i < 24; ++i) {
        HostTensor in = HostTensor::Full({1024, 1024}, float(i)), out = HostTensor::Zeros({1024, 1024});
        HostProgram p{"big", 2, {}, [](HostGraph& g, std::span<const HostTensor> x) { g.Chip("chip_empty", {In(x[0]), Out(x[1])}); }};
        w.Run(p, {in, out});
        keep.push_back(in), keep.push_back(out);  // alive: their copies can only go by eviction
    }
    EXPECT_EQ(w.Stats(0).chip_tasks, 24u);
    EXPECT_EQ(w.Stats(0).moved.bytes_uploaded, 24u * (4u << 20));
}

// 4 cards x 4 VFs: 32 independent chip tasks over 16 devices, summed by a
// SubWorker. A SubWorker gate writes their input first and holds it until
// the function has submitted them all, so all 32 become ready at once and
// placement spreads them by load: started one by one as submitted, on a
// slow machine (TSan), each would find the last one done and its inputs
// current there, and stay.
TEST(WorkerManyDevices, SixteenVfsOfFourCards) {
    SPYRE_REQUIRE_FUSE();
    Host host = Host::Open(Mock(4, 4));
    DistributedConfig c;
    c.device_ids = Vfs(host);
    ASSERT_EQ(c.device_ids.size(), 16u);
    c.num_sub_workers = 1;
    Worker w(host, c);
    RegisterChipFunctions(w);
    std::atomic<bool> submitted{false};
    HostProgram p{"many", 2, {{{kTile, kTile}}}, [&submitted](HostGraph& g, std::span<const HostTensor> x) {
                      std::vector<TensorArg> parts;
                      g.Sub("gate", [&submitted](std::span<const HostTensor>) {
                          const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
                          while (!submitted.load() && std::chrono::steady_clock::now() < give_up)
                              std::this_thread::sleep_for(std::chrono::microseconds(100));
                      }, {InOut(x[0])});
                      for (int i = 0; i < 32; ++i) {
                          HostTensor t = g.CreateTensor({kTile, kTile});
                          g.Chip("chip_add", {In(x[0]), In(x[1]), Out(t)});
                          parts.push_back(In(t));
                      }
                      parts.push_back(Out(x[2]));
                      g.Sub("sum", [](std::span<const HostTensor> t) {
                          auto f = t.back().floats();
                          for (size_t j = 0; j + 1 < t.size(); ++j)
                              for (size_t i = 0; i < f.size(); ++i) f[i] += t[j].floats()[i];
                      }, std::move(parts));
                      submitted = true;
                  }};
    HostTensor a = Iota(1.0f, 0.0f), b = Iota(0.0f, 2.0f);
    auto outs = w.Run(p, {a, b});
    ExpectFloats(outs[0], [&](size_t i) { return 32 * (a.floats()[i] + 2.0f); }, "32 (a + b)");
    for (size_t d = 0; d < w.device_count(); ++d) EXPECT_GE(w.Stats(d).chip_tasks, 1u) << w.DescribeDevice(d);
}

// A chip function whose tasks name more bytes than its tensors hold (the
// seed's C chip_orch_add always passes [128x128] regions) is refused: the
// region would run past its argument's device copy into another tensor's,
// which a later run reused as current and so computed 303 where 5 was due
// (found probing from outside).
TEST_F(WorkerTest, AChipTaskRegionPastItsTensorIsRefusedAndLaterRunsStayRight) {
    worker_->RegisterChipFunction("chip_add_pto", &ChipAddPto);
    HostProgram small{"small", 2, {{{4, 4}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                          g.Chip("chip_add_pto", {In(x[0]), In(x[1]), Out(x[2])}, {.name = "too small", .device = 0});
                      }};
    HostProgram add{"add", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                        g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.device = 0});
                    }};
    HostTensor a = HostTensor::Full({kTile, kTile}, 2.0f), b = HostTensor::Full({kTile, kTile}, 3.0f);
    HostTensor s1 = HostTensor::Full({4, 4}, 100.0f), s2 = HostTensor::Full({4, 4}, 200.0f);
    for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        EXPECT_SPYRE_ERROR(worker_->Run(small, {s1, s2, HostTensor::Zeros({4, 4})}), InvalidArgument,
                           "is outside the memory its tasks are confined to");
        auto outs = worker_->Run(add, {a, b});
        ExpectFloats(outs[0], [](size_t) { return 5.0f; }, "a + b after a refused call");
    }
}

// chip_add adds every tile of operands larger than one: a [256x128] sum is
// the CPU's whole (a fixed 64 KiB region left the rest of the output as it
// was: of a [129x128] output, 127 of the last row were wrong; found probing
// from outside). What it cannot cover, a size that is no whole number of
// tiles, is refused before any task and the output stays as it was. The
// seed's C function (pto path) adds its one tile.
TEST_F(WorkerTest, ChipAddCoversEveryTileAndRefusesWhatItCannot) {
    HostProgram add{"add", 3, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                        g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])});
                    }};
    auto pattern = [](int64_t rows, float scale) {
        HostTensor t = HostTensor::Zeros({rows, kTile});
        auto v = t.floats();
        for (size_t i = 0; i < v.size(); ++i) v[i] = float(int(i % 997) - 498) * scale;
        return t;
    };
    HostTensor a = pattern(2 * kTile, 0.5f), b = pattern(2 * kTile, -0.25f), f = HostTensor::Full({2 * kTile, kTile}, 7.0f);
    worker_->Run(add, {a, b, f});
    ExpectFloats(f, [&](size_t i) { return a.floats()[i] + b.floats()[i]; }, "[256x128] a + b");

    HostTensor a1 = pattern(kTile + 1, 0.5f), b1 = pattern(kTile + 1, 1.0f), f1 = HostTensor::Full({kTile + 1, kTile}, 7.0f);
    EXPECT_SPYRE_ERROR(worker_->Run(add, {a1, b1, f1}), InvalidArgument,
                       "chip_add: operands must be fp32 tensors of one size, a whole number of [128x128] tiles "
                       "(64 KiB each); argument 0 has 66048 bytes");
    ExpectFloats(f1, [](size_t) { return 7.0f; }, "the refused call's output, untouched");

    worker_->RegisterChipFunction("chip_add_pto", &ChipAddPto);
    HostProgram pto{"add_pto", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                        g.Chip("chip_add_pto", {In(x[0]), In(x[1]), Out(x[2])});
                    }};
    HostTensor c = Iota(2.0f, -7.0f), d = Iota(0.0f, 1.5f);
    auto outs = worker_->Run(pto, {c, d});
    ExpectFloats(outs[0], [&](size_t i) { return c.floats()[i] + 1.5f; }, "chip_add_pto: c + d");
}

// A chip task that writes an argument its call passes as In is refused: the
// In argument's device copy is kept for later calls that read the same
// bytes, and such a call read what the task wrote (c + b gave 5 + 3, not
// 10 + 3; found probing from outside).
TEST_F(WorkerTest, AChipTaskWritingAnInArgumentIsRefusedAndTheKeptCopyStaysRight) {
    HostProgram all_in{"all_in", 3, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                           g.Chip("chip_add", {In(x[0]), In(x[1]), In(x[2])}, {.device = 0});
                       }};
    HostProgram add{"add", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                        g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.device = 0});
                    }};
    HostTensor a = HostTensor::Full({kTile, kTile}, 2.0f), b = HostTensor::Full({kTile, kTile}, 3.0f);
    HostTensor c = HostTensor::Full({kTile, kTile}, 10.0f);
    EXPECT_SPYRE_ERROR(worker_->Run(all_in, {a, b, c}), InvalidArgument,
                       "writes memory its tasks may only read (ConfineTasksTo; at the host level, a chip call's In "
                       "argument: pass it as InOut or Out to write it)");
    ExpectFloats(c, [](size_t) { return 10.0f; }, "c, untouched");
    auto outs = worker_->Run(add, {c, b});
    ExpectFloats(outs[0], [](size_t) { return 13.0f; }, "c + b after the refused call");
}

// Nor may a chip function copy into its In argument (Orchestrator::CopyIn,
// pto_copy_in) or into another tensor's kept copy at an address it kept
// from an earlier call, nor copy out of one: copies are held to the rules
// of its tasks (they went anywhere in the mapping, and a later call read
// the kept copy as a's: found probing from outside).
TEST_F(WorkerTest, AChipFunctionsCopiesStayInsideItsArguments) {
    static std::vector<float> junk(size_t(kTile) * kTile, 1000.0f);
    static void* kept = nullptr;  // a's device copy, as the first call saw it
    worker_->RegisterChipFunction("copy_onto_in", [](ChipContext& ctx) {
        kept = ctx.args[0];
        ctx.orch.CopyIn(ctx.args[0], junk.data(), ctx.bytes[0]);
    });
    worker_->RegisterChipFunction("copy_onto_kept", [](ChipContext& ctx) {
        ctx.orch.CopyIn(kept, junk.data(), ctx.bytes[0]);
    });
    worker_->RegisterChipFunction("copy_out_of_kept", [](ChipContext& ctx) {
        ctx.orch.CopyOut(junk.data(), kept, ctx.bytes[0]);
    });
    worker_->RegisterChipFunction("copy_onto_inout", [](ChipContext& ctx) {
        std::vector<float> fives(ctx.bytes[0] / 4, 5.0f);
        ctx.orch.CopyIn(ctx.args[0], fives.data(), ctx.bytes[0]);
    });
    auto one = [](const char* fn, Access access) {
        return HostProgram{fn, 1, {}, [fn, access](HostGraph& g, std::span<const HostTensor> x) {
                               g.Chip(fn, {TensorArg{x[0], access}}, {.device = 0});
                           }};
    };
    HostProgram add{"add", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                        g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.device = 0});
                    }};
    HostTensor a = HostTensor::Full({kTile, kTile}, 2.0f), b = HostTensor::Full({kTile, kTile}, 3.0f);
    HostTensor other = HostTensor::Full({kTile, kTile}, 9.0f);
    ExpectFloats(worker_->Run(add, {a, b})[0], [](size_t) { return 5.0f; }, "a + b");
    EXPECT_SPYRE_ERROR(worker_->Run(one("copy_onto_in", Access::In), {a}), InvalidArgument,
                       "pto_copy_in of 65536 bytes [device address");
    EXPECT_SPYRE_ERROR(worker_->Run(one("copy_onto_kept", Access::In), {other}), InvalidArgument,
                       "is outside the memory its tasks are confined to");
    EXPECT_SPYRE_ERROR(worker_->Run(one("copy_out_of_kept", Access::In), {other}), InvalidArgument,
                       "pto_copy_out of 65536 bytes [device address");
    EXPECT_EQ(junk[0], 1000.0f) << "nothing was copied out";
    ExpectFloats(worker_->Run(add, {a, b})[0], [](size_t) { return 5.0f; }, "a + b after the refused copies");
    // Its InOut argument is its own to write.
    worker_->Run(one("copy_onto_inout", Access::InOut), {other});
    ExpectFloats(other, [](size_t) { return 5.0f; }, "an InOut argument copied into");
}

// A SubWorker sees its task's arguments with their access (what Python's
// read-only In views are made from); no other thread sees any.
TEST_F(WorkerTest, ASubWorkerSeesItsArgumentsAccess) {
    std::vector<Access> seen;
    size_t storage = 0;
    HostProgram p{"access", 2, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                      EXPECT_TRUE(RunningSubWorkerArgs().empty());
                      g.Sub("look", [&](std::span<const HostTensor> t) {
                          for (const TensorArg& a : RunningSubWorkerArgs()) seen.push_back(a.access);
                          storage = RunningSubWorkerArgs()[1].tensor.storage_id() == t[1].storage_id() ? 1 : 2;
                      }, {In(x[0]), InOut(x[1]), Out(g.CreateTensor({4}))});
                  }};
    worker_->Run(p, {HostTensor::Zeros({4}), HostTensor::Zeros({4})});
    EXPECT_EQ(seen, (std::vector<Access>{Access::In, Access::InOut, Access::Out}));
    EXPECT_EQ(storage, 1u);
    EXPECT_TRUE(RunningSubWorkerArgs().empty());
}

// Bad indexes and counts get InvalidArgument, never a standard-library
// exception or a crash (found probing from outside).
// Two storages wrapped over the same memory were not ordered: the Worker
// finds dependencies by storage and byte range, so a reader of one ran
// beside a writer of the other. Wrap now refuses memory a live wrapped
// storage spans; its Rows() views, memory beside it, and the same memory
// once the first storage is gone are fine.
TEST(HostTensorWrap, MemoryAWrappedStorageHoldsCannotBeWrappedAgain) {
    auto memory = std::make_shared<std::vector<float>>(64, 1.0f);
    float* m = memory->data();
    std::optional<HostTensor> a(HostTensor::Wrap(m, {4, 8}, DType::FP32, memory));  // floats [0, 32)
    const std::string refused = "would not be ordered: wrap the memory once and take Rows() views";
    EXPECT_SPYRE_ERROR(HostTensor::Wrap(m, {4, 8}, DType::FP32, memory), InvalidArgument, refused);
    EXPECT_SPYRE_ERROR(HostTensor::Wrap(m + 8, {1, 8}, DType::FP32, memory), InvalidArgument, refused);
    EXPECT_SPYRE_ERROR(HostTensor::Wrap(m + 31, {2}, DType::FP32, memory), InvalidArgument, refused);
    EXPECT_SPYRE_ERROR(HostTensor::Wrap(m - 1, {64}, DType::FP32, nullptr), InvalidArgument, "storage #");
    HostTensor beside = HostTensor::Wrap(m + 32, {4, 8}, DType::FP32, memory);  // floats [32, 64)
    HostTensor rows = a->Rows(1, 3);
    EXPECT_EQ(rows.storage_id(), a->storage_id());
    a.reset();
    // Its Rows() view still holds the storage.
    EXPECT_SPYRE_ERROR(HostTensor::Wrap(m, {4, 8}, DType::FP32, memory), InvalidArgument, refused);
    rows = HostTensor();
    HostTensor again = HostTensor::Wrap(m, {4, 8}, DType::FP32, memory);
    EXPECT_EQ(again.floats()[0], 1.0f);
    EXPECT_NE(again.storage_id(), beside.storage_id());
}

// The same holds for a tensor's own memory (Zeros, Full, FromFloats): a
// storage wrapped over it was a second storage over those bytes, and a
// chip task reading the first after a write through the second reused the
// device copy kept for the first, stale (found probing from outside).
TEST(HostTensorWrap, MemoryAMadeTensorHoldsCannotBeWrapped) {
    const std::string refused = "would not be ordered: wrap the memory once and take Rows() views";
    for (int made = 0; made < 3; ++made) {
        std::optional<HostTensor> t(made == 0   ? HostTensor::Zeros({4, 8})
                                    : made == 1 ? HostTensor::Full({4, 8}, 1.0f)
                                                : HostTensor::FromFloats({4, 8}, std::vector<float>(32, 2.0f)));
        auto* m = static_cast<float*>(t->data());
        EXPECT_SPYRE_ERROR(HostTensor::Wrap(m, {4, 8}, DType::FP32, nullptr), InvalidArgument,
                           "storage #" + std::to_string(t->storage_id()));
        EXPECT_SPYRE_ERROR(HostTensor::Wrap(m + 9, {3}, DType::FP32, nullptr), InvalidArgument, refused);
        HostTensor rows = t->Rows(1, 2);
        t.reset();
        EXPECT_SPYRE_ERROR(HostTensor::Wrap(m, {1}, DType::FP32, nullptr), InvalidArgument, refused);  // rows holds it
    }
}

TEST_F(WorkerTest, OutOfRangeDevicesCountsAndShapesAreInvalidArguments) {
    const size_t n = worker_->device_count();
    EXPECT_SPYRE_ERROR(worker_->Stats(n), InvalidArgument, "Worker::Stats: device " + std::to_string(n));
    EXPECT_SPYRE_ERROR(worker_->DescribeDevice(99), InvalidArgument, "Worker::DescribeDevice: device 99");
    EXPECT_SPYRE_ERROR(worker_->ChipTasksAtOnce(99), InvalidArgument, "has " + std::to_string(n) + " device(s)");
    // num_inputs + outputs wrapped to 0 and an empty argument list passed the count check.
    HostProgram wraps{"wraps", size_t(-1), {{{4}}}, [](HostGraph&, std::span<const HostTensor>) {}};
    EXPECT_SPYRE_ERROR(worker_->Run(wraps, {}), InvalidArgument, "at most 1048576 of each");
    // Element counts that overflow, or that no host has the memory for.
    EXPECT_SPYRE_ERROR(HostTensor::Zeros({int64_t(1) << 62, 4}), InvalidArgument, "more elements than a tensor can hold");
    EXPECT_SPYRE_ERROR(HostTensor::Zeros({int64_t(1) << 32, int64_t(1) << 32}), InvalidArgument, "more elements");
    EXPECT_SPYRE_ERROR(HostTensor::Zeros({INT64_MAX}), InvalidArgument, "more elements");
    float x = 0;
    EXPECT_SPYRE_ERROR(HostTensor::Wrap(&x, {int64_t(1) << 62}, DType::FP32, nullptr), InvalidArgument, "more elements");
    EXPECT_SPYRE_ERROR(HostTensor::Wrap(reinterpret_cast<void*>(UINTPTR_MAX - 7), {4}, DType::FP32, nullptr),
                       InvalidArgument, "past the end of the address space");
    EXPECT_SPYRE_ERROR(HostTensor::Zeros({int64_t(1) << 58}), OutOfMemory, "cannot allocate");
    // Past RAM and swap it is refused before it is asked for: overcommit
    // would grant it, and zeroing it would bring the OOM killer.
    EXPECT_SPYRE_ERROR(HostTensor::Zeros({int64_t(1) << 46}), OutOfMemory, "bytes of RAM and swap");
    // chip_matmul (64-row tasks, K = N = 128, block_dim 2) on A with other
    // columns, or into a C of another shape, ran and left C part-written.
    const std::string matmul = "chip_matmul: expects fp32 (A, B, C) of [128x128]";
    for (const auto& [a, c] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
             {{128, 256}, {128, 128}}, {{128, 128}, {128, 256}}, {{128, 128}, {64, 128}}}) {
        HostProgram mm{"mm", 2, {{c}}, [](HostGraph& g, std::span<const HostTensor> x) {
                           g.Chip("chip_matmul", {In(x[0]), In(x[1]), Out(x[2])});
                       }};
        EXPECT_SPYRE_ERROR(worker_->Run(mm, {HostTensor::Full(a, 1.0f), HostTensor::Full({128, 128}, 1.0f)}),
                           InvalidArgument, matmul);
    }
    // An empty kernel program said "cannot allocate 0 bytes".
    EXPECT_SPYRE_ERROR(worker_->RegisterKernel(7, {}), InvalidArgument, "Worker::RegisterKernel: kernel 7: the program is empty");
    HostProgram huge{"huge", 0, {{{int64_t(1) << 40}}}, [](HostGraph&, std::span<const HostTensor>) {}};
    EXPECT_SPYRE_ERROR(worker_->Run(huge, {}), OutOfMemory, "cannot allocate");
    // The Worker is still fine; a handle waited for once says so when waited for again.
    RunHandle h = worker_->Submit(DependencyProgram(), {HostTensor::Full({kTile, kTile}, 2.0f), HostTensor::Full({kTile, kTile}, 3.0f)});
    auto outs = h.Wait();
    ExpectFloats(outs[0], [](size_t) { return 5.0f; }, "a + b");
    EXPECT_SPYRE_ERROR(h.Wait(), InvalidArgument, "waited for already");
}

// A heap larger than the device's memory said only "cannot allocate N bytes".
TEST(WorkerExecutors, AChipHeapTheDeviceCannotHoldNamesTheField) {
    SPYRE_REQUIRE_FUSE();
    Host host = Host::Open(Mock(1, 1));
    DistributedConfig c;
    c.device_ids = Vfs(host);
    c.chip_heap_bytes = uint64_t(1) << 40;
    EXPECT_SPYRE_ERROR(Worker(host, c), InvalidArgument, "DistributedConfig: chip_heap_bytes is 1099511627776");
    c.chip_heap_bytes = uint64_t(1) << 20;  // the devices were let go: a sane heap works
    Worker w(host, c);
    EXPECT_EQ(w.device_count(), 1u);
}

TEST(WorkerExecutors, ANullExecutorIsAnInvalidArgument) {
    std::vector<std::unique_ptr<ChipExecutor>> executors;
    executors.push_back(nullptr);
    EXPECT_SPYRE_ERROR(Worker(std::move(executors), DistributedConfig{}, std::make_shared<ChipRegistry>()), InvalidArgument,
                       "chip executor 0 is null");
}
