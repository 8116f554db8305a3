// SPDX-License-Identifier: Apache-2.0
// What scrubbing costs when a function changes hands: a VF whose owner
// touched N MiB of its memory is released (SPYRE_IOC_RELEASE: the daemon
// replaces its register, ring and memory objects with fresh ones), beside
// the baselines of this run: touching N MiB of fresh memory (what an eager
// scrub would write) and unmapping N MiB of touched memory (the pages the
// hand-over frees).
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>

#include "bench_main.hpp"
// Below a Device: the driver tier, which spyre.hpp leaves out.
#include "spyre/driver/discovery.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/driver/mock_daemon.hpp"
#include "spyre/spyre.hpp"

using namespace spyre;
using namespace spyre::driver;
using Clock = std::chrono::steady_clock;

namespace {

struct Mock {
    MockDaemon daemon = MockDaemon::Start({.cards = 1, .vfs = 2, .mem = "4G"});
    FunctionInfo vf = DeviceRoot(daemon.mount()).Find("1");
};
std::optional<Mock> g_mock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The release of a VF whose memory has `bytes` touched.
void BM_HandOver(benchmark::State& state) {
    if (!g_mock) g_mock.emplace();
    const size_t bytes = size_t(state.range(0));
    for (auto _ : state) {
        std::optional<Function> fn(Function::Open(g_mock->vf));
        {
            MappedRegion mem = fn->MapRegion(SPYRE_REGION_DEVMEM);
            std::memset(mem.data(), 0x5A, bytes);
        }
        const auto start = Clock::now();
        fn.reset();  // release: the daemon hands the VF over with fresh objects
        state.SetIterationTime(Seconds(Clock::now() - start));
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}

// Eager scrub: writing zeros over `bytes` of fresh memory.
void BM_TouchBaseline(benchmark::State& state) {
    const size_t bytes = size_t(state.range(0));
    for (auto _ : state) {
        void* p = ::mmap(nullptr, bytes + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        const auto start = Clock::now();
        std::memset(p, 0, bytes);
        state.SetIterationTime(Seconds(Clock::now() - start));
        ::munmap(p, bytes + 1);
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}

// Freeing `bytes` of touched shared memory.
void BM_UnmapBaseline(benchmark::State& state) {
    const size_t bytes = size_t(state.range(0));
    for (auto _ : state) {
        void* p = ::mmap(nullptr, bytes + 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        std::memset(p, 0x5A, bytes);
        const auto start = Clock::now();
        ::munmap(p, bytes + 1);
        state.SetIterationTime(Seconds(Clock::now() - start));
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}

void Sizes(benchmark::internal::Benchmark* b) {
    b->Arg(0)->Arg(64 << 20)->Arg(512 << 20)->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RegisterBenchmark("baseline/touch_fresh_memory", BM_TouchBaseline)->Apply(Sizes);
    benchmark::RegisterBenchmark("baseline/unmap_touched_shm", BM_UnmapBaseline)->Apply(Sizes);
    benchmark::RegisterBenchmark("scrub/hand_over_vf", BM_HandOver)->Apply(Sizes);
    return spyre::bench::RunBenchmarks("scrub_bench", std::chrono::seconds(120), [] { g_mock.reset(); });
}
