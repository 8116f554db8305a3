// SPDX-License-Identifier: Apache-2.0
// Device matmul through a real spyre-mockdev (one LAUNCH and its completion
// per iteration), fp32 and fp16, each printed beside the host BLAS running
// the same sgemm with as many threads as the device's worker pool, measured
// first in the same run. x_host is the device's GFLOP/s over the host's.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "bench_main.hpp"
#include "host_blas_threads.hpp"
#include "mock_device.hpp"
#include "spyre/spyre.hpp"
#include "spyre/common/openblas_kernels.hpp"

using namespace spyre;
using namespace spyre::driver;

namespace {

// Host GFLOP/s per size, filled as the baselines run first.
std::map<int64_t, double> g_host_gflops;

// The device's default pool: the card's 32 cores or the machine's threads.
int PoolThreads() { return int(std::clamp(std::thread::hardware_concurrency(), 1u, 32u)); }

double Gflops(int64_t n, double seconds_per_iteration) { return 2.0 * double(n) * double(n) * double(n) / seconds_per_iteration / 1e9; }

std::vector<float> Random(size_t count) {
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<float> v(count);
    for (float& x : v) x = dist(gen);
    return v;
}

void BM_HostSgemm(benchmark::State& state) {
    const int n = int(state.range(0));
    openblas_set_num_threads(PoolThreads());
    const std::vector<float> a = Random(size_t(n) * n), b = Random(size_t(n) * n);
    std::vector<float> c(size_t(n) * n);
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(state.iterations());
    spyre::bench::StopHostBlasWorkers();  // spinning, they would share the CPUs with the device's run after this one
    g_host_gflops[n] = Gflops(n, s);
    state.counters["GFLOP/s"] = g_host_gflops[n];
    state.counters["threads"] = PoolThreads();
}

// One mock device for the whole run.
struct Device : spyre::bench::MockDevice {
    Device() : MockDevice({.cards = 1, .vfs = 0, .mem = "1G"}) {}
};
std::optional<Device> g_device;

void BM_DeviceMatmul(benchmark::State& state, DType dtype) {
    const int64_t n = state.range(0);
    if (!g_device) g_device.emplace();
    Device& dev = *g_device;
    const BuiltKernel k = KernelBuilder().Matmul(n, n, n, dtype);
    // A, B, C and the program one after another; inputs hold random values.
    std::vector<uint64_t> addrs;
    uint64_t next = 0;
    for (const KernelTensor* t : {&k.inputs[0], &k.inputs[1], &k.outputs[0]}) {
        addrs.push_back(next);
        next += (t->bytes + 4095) / 4096 * 4096;
    }
    const std::vector<float> values = Random(size_t(n) * n);
    for (int i = 0; i < 2; ++i) {
        uint8_t* p = dev.mem.data() + addrs[size_t(i)];
        if (dtype == DType::FP32) {
            std::memcpy(p, values.data(), values.size() * 4);
        } else {
            for (size_t j = 0; j < values.size(); ++j) {
                const _Float16 h = static_cast<_Float16>(values[j]);
                std::memcpy(p + 2 * j, &h, 2);
            }
        }
    }
    const std::vector<uint8_t> program = k.Bind(addrs);
    std::memcpy(dev.mem.data() + next, program.data(), program.size());
    spyre_cb launch{};
    launch.opcode = SPYRE_OP_LAUNCH;
    launch.slots = 1;
    launch.u.launch = {next, program.size(), {}};
    Completion done;
    auto run = [&] {
        dev.ring.Submit(std::array{launch});
        dev.ring.Wait({&done, 1}, 1, {.mode = WaitMode::Blocking});
        if (!done.ok()) state.SkipWithError(spyre_error_name(done.status));
    };
    run();  // first touch of C's pages
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(state.iterations());
    state.counters["GFLOP/s"] = Gflops(n, s);
    if (g_host_gflops.count(n)) {
        state.counters["host_GFLOP/s"] = g_host_gflops[n];
        state.counters["x_host"] = Gflops(n, s) / g_host_gflops[n];
    }
}

}  // namespace

int main(int argc, char** argv) {
    spyre::openblas::RunAgainWithTheCpusKernels(argv);  // first: before OpenBLAS or any thread is used
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    // Registration order is run order: the host baselines first.
    for (int64_t n : {1024, 2048})
        benchmark::RegisterBenchmark("host/sgemm", BM_HostSgemm)->Arg(n)->UseRealTime()->Unit(benchmark::kMillisecond);
    for (int64_t n : {1024, 2048}) {
        benchmark::RegisterBenchmark("device/matmul_fp32", BM_DeviceMatmul, DType::FP32)
            ->Arg(n)->UseRealTime()->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark("device/matmul_fp16", BM_DeviceMatmul, DType::FP16)
            ->Arg(n)->UseRealTime()->Unit(benchmark::kMillisecond);
    }
    return spyre::bench::RunBenchmarks("matmul_bench", std::chrono::seconds(240), [] {
        g_device.reset();
    });
}
