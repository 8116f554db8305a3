// SPDX-License-Identifier: Apache-2.0
// The orchestration runtime (seed 004), each figure beside a baseline run in
// the same process:
//   heap ring Allocate+Release and TensorMap Lookup in cycles (rdtsc; seed
//   targets < 10 and < 20), beside malloc+free and std::unordered_map::find;
//   submission throughput with dependency tracking, tasks run to completion
//   (empty host kernels), for a chain, fan-out and a random DAG, beside
//   libgomp `#pragma omp task depend` and (when built with it) StarPU on the
//   same DAGs. Every runtime gets two threads: ours one submitter + one host
//   worker, libgomp a team of two, StarPU one CPU worker + the submitter.
//   Ours runs by default (cheap host tasks ready at submission run on the
//   submitting thread) and with every task handed to the worker; and
//   pto_submit_one_thread prices the bookkeeping alone (EXTERNAL tasks
//   completed by the submitter at once, no second thread).
#include <benchmark/benchmark.h>
#include <unistd.h>
#include <x86intrin.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_main.hpp"
#include "orchestration/heap_ring.hpp"
#include "dependency/region_map.hpp"
#include "spyre/orchestration.hpp"
#include "spyre/trace/trace.hpp"

#ifdef SPYRE_HAVE_STARPU
#include <starpu.h>
#endif

namespace {

using spyre::orchestration::HeapRing;
using TensorMap = spyre::dependency::RegionMap<int32_t>;

// --- cycles -----------------------------------------------------------------

std::map<std::string, double> g_baseline;

void BM_MallocFree(benchmark::State& state) {
    std::vector<void*> window(64, nullptr);
    size_t i = 0;
    const uint64_t c0 = __rdtsc();
    for (auto _ : state) {
        std::free(window[i]);
        window[i] = std::malloc(256);
        benchmark::DoNotOptimize(window[i]);
        i = (i + 1) % window.size();
    }
    const double cycles = double(__rdtsc() - c0) / double(state.iterations());
    for (void* p : window) std::free(p);
    g_baseline["alloc"] = cycles;
    state.counters["cycles"] = cycles;
}

void BM_HeapRingAllocRelease(benchmark::State& state) {
    std::vector<uint8_t> mem(1 << 20);
    HeapRing ring(mem.data(), mem.size());
    // 64 live blocks; each step releases the oldest and allocates one: the
    // ring's steady state, with wrap-around.
    std::vector<uint64_t> window;
    for (int i = 0; i < 64; ++i) window.push_back(ring.Allocate(256, 0)->seq);
    size_t i = 0;
    const uint64_t c0 = __rdtsc();
    for (auto _ : state) {
        ring.Release(window[i]);
        auto b = ring.Allocate(256, 0);
        benchmark::DoNotOptimize(b);
        window[i] = b->seq;
        i = (i + 1) % window.size();
    }
    const double cycles = double(__rdtsc() - c0) / double(state.iterations());
    state.counters["cycles"] = cycles;
    state.counters["x_malloc"] = g_baseline["alloc"] / cycles;
}

// Allocation alone (the seed's < 10 cycles is for the bump): 64 blocks
// timed, then released untimed.
void BM_HeapRingAllocOnly(benchmark::State& state) {
    std::vector<uint8_t> mem(1 << 20);
    HeapRing ring(mem.data(), mem.size());
    uint64_t seqs[64];
    uint64_t cycles = 0;
    for (auto _ : state) {
        const uint64_t c0 = __rdtsc();
        for (uint64_t& s : seqs) s = ring.Allocate(256, 0)->seq;
        cycles += __rdtsc() - c0;
        benchmark::DoNotOptimize(seqs);
        for (uint64_t s : seqs) ring.Release(s);
    }
    state.counters["alloc_cycles"] = double(cycles) / double(state.iterations() * 64);
}

std::vector<uint64_t> LookupKeys(size_t n) {
    std::mt19937_64 rng(7);
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < n; ++i) keys.push_back((rng() % (1u << 16)) << 16);  // 4 GiB of 64 KiB granules
    return keys;
}

void BM_UnorderedMapFind(benchmark::State& state) {
    const auto keys = LookupKeys(1024);
    std::unordered_map<uint64_t, int32_t> map;
    for (size_t i = 0; i < keys.size(); ++i) map[keys[i]] = int32_t(i);
    size_t i = 0;
    int64_t sum = 0;
    const uint64_t c0 = __rdtsc();
    for (auto _ : state) {
        auto it = map.find(keys[i]);
        sum += it->second;
        i = (i + 1) & 1023;
    }
    benchmark::DoNotOptimize(sum);
    const double cycles = double(__rdtsc() - c0) / double(state.iterations());
    g_baseline["lookup"] = cycles;
    state.counters["cycles"] = cycles;
}

void BM_TensorMapLookup(benchmark::State& state) {
    // A full ring's worth of producers (1024 tasks, one 4 KiB region each).
    const auto keys = LookupKeys(1024);
    TensorMap map(1024);
    for (size_t i = 0; i < keys.size(); ++i) map.Insert(0, keys[i], 4096, true, int32_t(i));
    std::vector<int32_t> deps;
    size_t i = 0;
    int64_t found = 0;
    const uint64_t c0 = __rdtsc();
    for (auto _ : state) {
        deps.clear();
        map.Lookup(0, keys[i] + 1024, 1024, false, -1, [](int32_t) { return true; }, deps);
        found += int64_t(deps.size());
        i = (i + 1) & 1023;
    }
    benchmark::DoNotOptimize(found);
    const double cycles = double(__rdtsc() - c0) / double(state.iterations());
    state.counters["cycles"] = cycles;
    state.counters["x_unordered_map"] = g_baseline["lookup"] / cycles;
}

// --- DAGs -------------------------------------------------------------------

constexpr int kTasks = 10000;
constexpr int kBuffers = 64;
// The heap ring takes the memory's last kHeap bytes: the DAG's buffers (64
// KiB apart from address 0) lie before it, not inside it.
constexpr uint64_t kHeap = 1 << 16;
constexpr uint64_t kMemory = (uint64_t(kBuffers) << 16) + kHeap;

struct DagTask {
    int reads[2];
    int nreads;
    int write;
};

std::vector<DagTask> MakeDag(const std::string& shape) {
    std::vector<DagTask> dag;
    std::mt19937 rng(99);
    for (int t = 0; t < kTasks; ++t) {
        if (shape == "chain") {
            dag.push_back({{0, 0}, 0, 0});
        } else if (shape == "fanout") {  // one writer, then 63 readers of it
            if (t % kBuffers == 0) dag.push_back({{0, 0}, 0, 0});
            else dag.push_back({{0, 0}, 1, t % kBuffers});
        } else {  // random: read two buffers, write a third
            dag.push_back({{int(rng() % kBuffers), int(rng() % kBuffers)}, 2, int(rng() % kBuffers)});
        }
    }
    return dag;
}

std::map<std::string, double> g_rate;  // baseline tasks/s by "runtime/shape"

void Report(benchmark::State& state, const std::string& shape, double seconds, const char* self) {
    const double rate = double(kTasks) * double(state.iterations()) / seconds;
    state.counters["tasks_per_s"] = rate;
    g_rate[std::string(self) + "/" + shape] = rate;
    if (std::string(self) == "pto_traced" && g_rate.count("pto/" + shape))
        state.counters["x_untraced"] = rate / g_rate["pto/" + shape];
    if (std::string(self).starts_with("pto") && std::string(self) != "pto_one_thread") {
        if (g_rate.count("gomp/" + shape)) state.counters["x_gomp"] = rate / g_rate["gomp/" + shape];
        if (g_rate.count("starpu/" + shape)) state.counters["x_starpu"] = rate / g_rate["starpu/" + shape];
    }
    if ((std::string(self) == "pto_locked" || std::string(self) == "pto_handoff") && g_rate.count("pto/" + shape))
        state.counters["x_default"] = rate / g_rate["pto/" + shape];  // < 1: the default is faster
}

double Now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void BM_Gomp(benchmark::State& state, std::string shape) {
    const auto dag = MakeDag(shape);
    alignas(64) static char bufs[kBuffers][64];
    const double t0 = Now();
    for (auto _ : state) {
#pragma omp parallel num_threads(2)
#pragma omp single
        for (const DagTask& t : dag) {
            char* r0 = bufs[t.reads[0]];
            char* r1 = bufs[t.reads[1]];
            char* w = bufs[t.write];
            (void)r0, (void)r1;  // used only in depend clauses
            if (t.nreads == 0) {
#pragma omp task depend(inout : w[0])
                benchmark::DoNotOptimize(w[0]);
            } else if (t.nreads == 1) {
#pragma omp task depend(in : r0[0]) depend(inout : w[0])
                benchmark::DoNotOptimize(w[0]);
            } else {
#pragma omp task depend(in : r0[0], r1[0]) depend(inout : w[0])
                benchmark::DoNotOptimize(w[0]);
            }
        }
    }
    Report(state, shape, Now() - t0, "gomp");
}

#ifdef SPYRE_HAVE_STARPU
void EmptyCpu(void*[], void*) {}

void BM_StarPU(benchmark::State& state, std::string shape) {
    const auto dag = MakeDag(shape);
    ::setenv("STARPU_NCPU", "1", 1);
    ::setenv("STARPU_SILENT", "1", 1);
    ::setenv("STARPU_NCUDA", "0", 1);
    ::setenv("STARPU_NOPENCL", "0", 1);
    if (starpu_init(nullptr) != 0) {
        state.SkipWithError("starpu_init failed");
        return;
    }
    static int values[kBuffers];
    starpu_data_handle_t h[kBuffers];
    for (int i = 0; i < kBuffers; ++i)
        starpu_variable_data_register(&h[i], STARPU_MAIN_RAM, uintptr_t(&values[i]), sizeof(int));
    starpu_codelet cl;
    starpu_codelet_init(&cl);
    cl.cpu_funcs[0] = EmptyCpu;
    cl.nbuffers = STARPU_VARIABLE_NBUFFERS;
    const double t0 = Now();
    for (auto _ : state) {
        for (const DagTask& t : dag) {
            if (t.nreads == 0)
                starpu_task_insert(&cl, STARPU_RW, h[t.write], 0);
            else if (t.nreads == 1)
                starpu_task_insert(&cl, STARPU_R, h[t.reads[0]], STARPU_RW, h[t.write], 0);
            else if (t.reads[0] != t.reads[1])
                starpu_task_insert(&cl, STARPU_R, h[t.reads[0]], STARPU_R, h[t.reads[1]], STARPU_RW, h[t.write], 0);
            else
                starpu_task_insert(&cl, STARPU_R, h[t.reads[0]], STARPU_RW, h[t.write], 0);
        }
        starpu_task_wait_for_all();
    }
    const double secs = Now() - t0;
    for (int i = 0; i < kBuffers; ++i) starpu_data_unregister(h[i]);
    starpu_shutdown();
    Report(state, shape, secs, "starpu");
}
#endif

// Submits the DAG as tasks of kernel 1 and waits for them; returns the
// seconds taken. Buffers 64 KiB apart (one TensorMap granule each), 64
// bytes used. EXTERNAL tasks are completed by the submitter at once.
// `c_api`: through pto_submit_task and pto_wait_all on the handle (each
// call checks its generation and holds its slot) instead of the C++ calls.
double RunDag(spyre::Orchestrator& orch, const std::vector<DagTask>& dag, int32_t worker_type, bool c_api = false) {
    auto* base = static_cast<uint8_t*>(orch.HostAddress(0, uint64_t(kBuffers - 1) << 16));
    auto buf = [&](int i) { return static_cast<void*>(base + (uint64_t(i) << 16)); };
    const double t0 = Now();
    for (const DagTask& t : dag) {
        TaskParam p[3];
        int n = 0;
        for (int k = 0; k < t.nreads; ++k) p[n++] = {PARAM_INPUT, buf(t.reads[k]), 64, {}};
        p[n++] = {PARAM_INOUT, buf(t.write), 64, {}};
        if (c_api) {
            if (pto_submit_task(orch.handle(), 1, worker_type, p, n) < 0)
                throw spyre::Error(spyre::ErrorKind::Internal, pto_last_error());
            continue;
        }
        const int32_t id = orch.Submit(1, worker_type, std::span<const TaskParam>(p, size_t(n)));
        if (worker_type == WORKER_EXTERNAL) orch.Complete(id);
    }
    if (c_api && pto_wait_all(orch.handle()) < 0) throw spyre::Error(spyre::ErrorKind::Internal, pto_last_error());
    if (!c_api) orch.WaitAll();
    return Now() - t0;
}

std::optional<spyre::Orchestrator> g_orch[2][2];  // per ReadyQueueKind, per run_cheap_host_tasks_here

// `kind`: the ready queues' implementation. `run_here`: cheap host tasks
// ready at submission run on the submitting thread (the default; false:
// every task is handed to the worker thread). `traced`: one recording spans
// every iteration (started before the first, written after the last, both
// outside the timed loop), to price the orchestration probes against the
// same loop untraced in the same run. All run a fixed 20 iterations so a
// recording stays small (~4 MB each). `c_api`: through the C calls on the
// handle, to price the handle checks beside the C++ calls.
void BM_Pto(benchmark::State& state, std::string shape, spyre::ReadyQueueKind kind, bool run_here, bool traced,
            bool c_api) {
    std::optional<spyre::Orchestrator>& orch = g_orch[size_t(kind)][run_here];
    if (!orch) {
        orch.emplace(spyre::Orchestrator::CreateOnHostMemory(
            kMemory, {.task_ring_size = 4096,
                             .heap_size = kHeap,
                             .host_threads = 1,
                             .ready_queues = kind,
                             .run_cheap_host_tasks_here = run_here}));
        orch->RegisterHostKernel(1, [](std::span<void* const>, std::span<const uint64_t>) { return 0u; });
    }
    const auto dag = MakeDag(shape);
    const std::string trace_path = "/tmp/spyre_orch_bench_" + std::to_string(getpid()) + ".json";
    if (traced) spyre::trace::Start(trace_path);
    double secs = 0;
    for (auto _ : state) secs += RunDag(*orch, dag, WORKER_HOST, c_api);
    if (traced) {
        spyre::trace::Stop();
        std::remove(trace_path.c_str());
    }
    Report(state, shape, secs,
           c_api                                  ? "pto_c_api"
           : traced                               ? "pto_traced"
           : !run_here                            ? "pto_handoff"
           : kind == spyre::ReadyQueueKind::Locked ? "pto_locked"
                                                  : "pto");
}

// The same DAG on the submitting thread alone: every task is submitted as
// EXTERNAL and completed at once with Complete (pto_task_complete), so it
// goes through the whole bookkeeping (TensorMap, fan-in and fan-out,
// readiness, completion, CONSUMED, reclaim) with no ready queue, no worker
// and no second thread. Its rate is what dependency tracking costs by
// itself; pto_submit's shortfall from it is the handoff between threads.
void BM_PtoOneThread(benchmark::State& state, std::string shape) {
    static std::optional<spyre::Orchestrator> orch;
    if (!orch) {
        orch.emplace(spyre::Orchestrator::CreateOnHostMemory(
            kMemory, {.task_ring_size = 4096, .heap_size = kHeap, .host_threads = 1}));
        orch->RegisterHostKernel(1, [](std::span<void* const>, std::span<const uint64_t>) { return 0u; });
    }
    const auto dag = MakeDag(shape);
    double secs = 0;
    for (auto _ : state) secs += RunDag(*orch, dag, WORKER_EXTERNAL);
    Report(state, shape, secs, "pto_one_thread");
    if (g_rate.count("pto/" + shape)) state.counters["x_pto"] = g_rate["pto/" + shape] / g_rate["pto_one_thread/" + shape];
    if (shape == "random") orch.reset();  // the last shape: gone before the process's teardown
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RegisterBenchmark("baseline/malloc_free_256B", BM_MallocFree);
    benchmark::RegisterBenchmark("heap_ring/alloc_release_256B", BM_HeapRingAllocRelease);
    benchmark::RegisterBenchmark("heap_ring/alloc_only_256B_x64", BM_HeapRingAllocOnly);
    benchmark::RegisterBenchmark("baseline/unordered_map_find", BM_UnorderedMapFind);
    benchmark::RegisterBenchmark("tensor_map/lookup", BM_TensorMapLookup);
    for (const char* shape : {"chain", "fanout", "random"}) {
        benchmark::RegisterBenchmark((std::string("baseline/gomp_task_depend/") + shape).c_str(), BM_Gomp,
                                     std::string(shape))->UseRealTime()->Unit(benchmark::kMillisecond);
#ifdef SPYRE_HAVE_STARPU
        benchmark::RegisterBenchmark((std::string("baseline/starpu/") + shape).c_str(), BM_StarPU, std::string(shape))
            ->UseRealTime()->Unit(benchmark::kMillisecond);
#endif
        benchmark::RegisterBenchmark((std::string("pto_submit/") + shape).c_str(), BM_Pto, std::string(shape),
                                     spyre::ReadyQueueKind::LockFree, true, false, false)
            ->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(20);
        benchmark::RegisterBenchmark((std::string("pto_submit/") + shape + "/c_api").c_str(), BM_Pto,
                                     std::string(shape), spyre::ReadyQueueKind::LockFree, true, false, true)
            ->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(20);
        benchmark::RegisterBenchmark((std::string("pto_submit/") + shape + "/every_task_to_the_worker").c_str(), BM_Pto,
                                     std::string(shape), spyre::ReadyQueueKind::LockFree, false, false, false)
            ->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(20);
        benchmark::RegisterBenchmark((std::string("pto_submit_one_thread/") + shape).c_str(), BM_PtoOneThread,
                                     std::string(shape))
            ->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(20);
        benchmark::RegisterBenchmark((std::string("pto_submit/") + shape + "/locked_ready_queues").c_str(), BM_Pto,
                                     std::string(shape), spyre::ReadyQueueKind::Locked, true, false, false)
            ->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(20);
        benchmark::RegisterBenchmark((std::string("pto_submit_traced/") + shape).c_str(), BM_Pto, std::string(shape),
                                     spyre::ReadyQueueKind::LockFree, true, true, false)
            ->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(20);
    }
    return spyre::bench::RunBenchmarks("orchestration_bench", std::chrono::seconds(120), [] {
        for (auto& kind : g_orch)
            for (auto& o : kind) o.reset();
    });
}
