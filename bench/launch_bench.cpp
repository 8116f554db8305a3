// SPDX-License-Identifier: Apache-2.0
// LaunchTiled per tile, beside one Launch + Synchronize of the same tile in
// the same run (target: per tile <= 2x one Launch). A 32^3 fp32
// matmul tile over M = 32 * tiles rows:
//   one_launch         SpyreStream::Launch of the exact tile + Synchronize
//   tiled/compiled/N   LaunchTiled over N whole tiles (the compiled program)
//   tiled/remainder/N  the last of N tiles has 16 rows: a variant program,
//                      taken from the plan's cache after the first launch
// Each tiled figure is the whole LaunchTiled + Synchronize divided by N.
#include <benchmark/benchmark.h>

#include <optional>
#include <vector>

#include "bench_main.hpp"
#include "pingpong.hpp"
#include "spyre/spyre.hpp"

using namespace spyre;
using namespace spyre::bench;

namespace {

constexpr int64_t kTile = 32;
std::optional<Device> g_device;
double g_one_launch_ns = 0;

Device& Dev() {
    if (!g_device) g_device.emplace(Device::Open());
    return *g_device;
}

struct Setup {
    std::shared_ptr<const ExecutionPlan> plan;
    std::vector<SpyreTensor> tensors;
};

Setup Make(Device& dev, SpyreStream& s, int64_t rows) {
    Setup out;
    out.plan = LoadExecutionPlan(
        s, CompilerOutputFromKernel("mm32", KernelBuilder().Matmul(kTile, kTile, kTile, DType::FP32)));
    const std::vector<float> ones(size_t(rows * kTile), 1.0f);
    out.tensors = {SpyreTensor::FromHost(dev, s.flex_stream(), ones.data(), {rows, kTile}, DType::FP32),
                   SpyreTensor::FromHost(dev, s.flex_stream(), ones.data(), {kTile, kTile}, DType::FP32),
                   SpyreTensor::Empty(dev, {rows, kTile}, DType::FP32)};
    s.Synchronize();
    return out;
}

// Times one launch's enqueue and its Synchronize apart (two clock reads,
// about 40 ns, against iterations of microseconds): a fixed cost of the
// enqueue shows as enqueue_ns.
template <typename Launch>
void TimedLoop(benchmark::State& state, SpyreStream& s, Launch&& launch) {
    double enqueue_ns = 0, sync_ns = 0;
    for (auto _ : state) {
        const auto a = std::chrono::steady_clock::now();
        launch();
        const auto b = std::chrono::steady_clock::now();
        s.Synchronize();
        const auto c = std::chrono::steady_clock::now();
        enqueue_ns += std::chrono::duration<double, std::nano>(b - a).count();
        sync_ns += std::chrono::duration<double, std::nano>(c - b).count();
    }
    state.counters["enqueue_ns"] = enqueue_ns / double(state.iterations());
    state.counters["sync_ns"] = sync_ns / double(state.iterations());
}

void BM_OneLaunch(benchmark::State& state) {
    Device& dev = Dev();
    SpyreStream s(dev);
    Setup setup = Make(dev, s, kTile);
    const Operation& op = setup.plan->operations[0];
    auto t0 = std::chrono::steady_clock::now();
    TimedLoop(state, s, [&] { s.Launch(op, setup.tensors); });
    g_one_launch_ns = TimePerIteration(state, t0);
    state.counters["ns"] = g_one_launch_ns;
}

void BM_Tiled(benchmark::State& state, bool remainder) {
    Device& dev = Dev();
    SpyreStream s(dev);
    const int64_t tiles = state.range(0);
    Setup setup = Make(dev, s, kTile * tiles - (remainder ? kTile / 2 : 0));
    const Operation& op = setup.plan->operations[0];
    s.LaunchTiled(op, setup.tensors);  // the first launch uploads the variant
    s.Synchronize();
    const uint64_t allocations = dev.allocator().Stats().allocations;
    auto t0 = std::chrono::steady_clock::now();
    TimedLoop(state, s, [&] { s.LaunchTiled(op, setup.tensors); });
    const double per_tile = TimePerIteration(state, t0) / double(tiles);
    state.counters["per_tile_ns"] = per_tile;
    state.counters["one_launch_ns"] = g_one_launch_ns;
    state.counters["x_one_launch"] = g_one_launch_ns ? per_tile / g_one_launch_ns : 0;
    // Cached variants: the timed launches allocated (uploaded) nothing.
    state.counters["allocations"] = double(dev.allocator().Stats().allocations - allocations);
    state.SetLabel("per tile vs one Launch+Synchronize of the tile");
}

}  // namespace

int main(int argc, char** argv) {
    ::setenv("FLEX_DEVICE", "MOCK", 1);  // a private mock of this run
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    // Registration order is run order: the baseline runs first.
    benchmark::RegisterBenchmark("one_launch", BM_OneLaunch)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("tiled/compiled", BM_Tiled, false)->Arg(4)->Arg(64)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("tiled/remainder", BM_Tiled, true)->Arg(4)->Arg(64)->UseRealTime()->MinTime(0.5);
    return spyre::bench::RunBenchmarks("launch_bench", std::chrono::seconds(120), [] { g_device.reset(); });
}
