// SPDX-License-Identifier: Apache-2.0
// Level 4 (docs/multihost.md), under mpirun -np 2: host programs on a
// MultiHostWorker, each beside raw MPI ping-pongs measured in the same run:
// 128 KiB each way (the bytes a [128x128] fp32 add ships: two inputs there,
// one output back) and 4 KiB (a small call), each twice: first with no mock
// card running (the clean baseline the x_raw ratios use), then after both
// ranks started theirs (whose daemons poll and share the cores).
//   dependency/local    chip_add on rank 0's device -> SubWorker on rank 0
//   dependency/remote   chip_add on rank 1's device -> SubWorker on rank 0:
//                       a dependency across ranks (x_raw: over 128 KiB)
//   empty/remote/N      N empty chip tasks on rank 1's device per run
//                       (dispatch across ranks: per run and per task;
//                       x_raw: a run over the 4 KiB round trip)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "bench_main.hpp"
#include "l3_chip_functions.hpp"
#include "mpi_pingpong.hpp"
#include "spyre/host.hpp"
#include "spyre/host/mpi_transport.hpp"

using namespace spyre;
using Clock = std::chrono::steady_clock;

namespace {

Worker* g_worker = nullptr;
// One raw MPI round trip, no mock card running: 128 KiB and 4 KiB each way.
double g_raw_us = 0, g_raw_small_us = 0;

// One raw round trip of `bytes` each way, in microseconds (both ranks).
double RawRoundTripUs(host::MpiTransport& t, uint64_t bytes, uint64_t rounds) {
    double seconds = 0;
    t.RunOnMpiThread([&](MPI_Comm comm) { seconds = bench::RawPingPongs(comm, 1 - t.rank(), t.rank() == 0, bytes, rounds); });
    return seconds / double(rounds) * 1e6;
}

void BM_Dependency(benchmark::State& state, size_t device) {
    HostTensor a = HostTensor::Full({l3::kTile, l3::kTile}, 2.0f), b = HostTensor::Full({l3::kTile, l3::kTile}, 3.0f);
    HostTensor f = HostTensor::Zeros({l3::kTile, l3::kTile});
    const HostProgram p{"dependency", 2, {{{l3::kTile, l3::kTile}}}, [device](HostGraph& g, std::span<const HostTensor> x) {
                            g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.device = device});
                            g.Sub("consume", {In(x[2])});
                        }};
    const auto t0 = Clock::now();
    for (auto _ : state) g_worker->Run(p, {a, b, f});
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(state.iterations());
    if (f.floats()[0] != 5.0f) state.SkipWithError("wrong result");
    state.counters["us_per_run"] = us;
    state.counters["raw_mpi_us"] = g_raw_us;
    state.counters["x_raw_mpi"] = us / g_raw_us;
}

void BM_EmptyRemote(benchmark::State& state) {
    const int n = int(state.range(0));
    const HostProgram p{"empty", 0, {}, [n](HostGraph& g, std::span<const HostTensor>) {
                            for (int i = 0; i < n; ++i) g.Chip("chip_empty", {}, {.device = 1});
                        }};
    const auto t0 = Clock::now();
    for (auto _ : state) g_worker->Run(p, {});
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(state.iterations());
    state.counters["us_per_run"] = us;
    state.counters["us_per_task"] = us / n;
    state.counters["raw_mpi_4k_us"] = g_raw_small_us;
    state.counters["x_raw_mpi_4k"] = us / g_raw_small_us;
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    try {
        host::MpiTransportOptions options;
        // As mpi_bench: a round trip should not pay a sleep. SPYRE_IDLE_SPIN_US overrides it (to compare).
        const char* spin = std::getenv("SPYRE_IDLE_SPIN_US");
        options.idle_spin = std::chrono::microseconds(spin ? std::atoll(spin) : 2000);
        if (const char* sleep = std::getenv("SPYRE_IDLE_SLEEP_US"))  // the progress thread's idle poll period
            options.idle_sleep = std::chrono::microseconds(std::atoll(sleep));
        host::MpiTransport t(options);
        if (t.size() != 2) {
            if (t.rank() == 0) std::fprintf(stderr, "multihost_bench: run with mpirun -np 2 (this run has %d ranks)\n", t.size());
            return 1;
        }
        constexpr uint64_t kBytes = 2 * l3::kTileBytes, kSmall = 4096, kRounds = 200, kSmallRounds = 1000;
        // Best of three batches: the clean figure the ratios stand on.
        g_raw_us = g_raw_small_us = 1e300;
        for (int i = 0; i < 3; ++i) {
            g_raw_us = std::min(g_raw_us, RawRoundTripUs(t, kBytes, kRounds));
            g_raw_small_us = std::min(g_raw_small_us, RawRoundTripUs(t, kSmall, kSmallRounds));
        }

        Host host = Host::Open(HostOptions::EmbeddedMock(1, 1, "1G"));
        // The same with both mock cards running (each rank's daemon polls).
        double busy_us = 1e300, busy_small_us = 1e300;
        for (int i = 0; i < 3; ++i) {
            busy_us = std::min(busy_us, RawRoundTripUs(t, kBytes, kRounds));
            busy_small_us = std::min(busy_small_us, RawRoundTripUs(t, kSmall, kSmallRounds));
        }
        MultiHostWorker mw(t, host, {.device_ids = {1}, .num_sub_workers = 1});
        l3::RegisterChipFunctions(mw.worker());
        mw.worker().RegisterSubWorker("consume", [](std::span<const HostTensor>) {});
        if (t.rank() == 1) {
            mw.Serve();
            return 0;
        }
        g_worker = &mw.worker();
        benchmark::RegisterBenchmark("dependency/local", BM_Dependency, size_t(0))->UseRealTime()->MinTime(0.5);
        benchmark::RegisterBenchmark("dependency/remote", BM_Dependency, size_t(1))->UseRealTime()->MinTime(0.5);
        benchmark::RegisterBenchmark("empty/remote", BM_EmptyRemote)->Arg(1)->Arg(16)->UseRealTime()->MinTime(0.5);
        std::printf("transport idle_spin %lld us\n", static_cast<long long>(options.idle_spin.count()));
        std::printf("raw MPI ping-pong, best of 3 batches, us per round trip: no mock card running: 128 KiB %.1f, 4 KiB %.1f;"
                    " both mock cards running: 128 KiB %.1f, 4 KiB %.1f\n",
                    g_raw_us, g_raw_small_us, busy_us, busy_small_us);
        return bench::RunBenchmarks("multihost_bench", std::chrono::seconds(120));
    } catch (const Error& e) {
        std::fprintf(stderr, "multihost_bench: %s\n", e.what());
        return 1;
    }
}
