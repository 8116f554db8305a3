// SPDX-License-Identifier: Apache-2.0
// The device-task path, each figure beside a baseline from the same run.
//
// Empty-task throughput through the task queues of a real spyre-mockdev,
// through one queue and through all of them, beside the raw CB ring's NOP
// batch rate (and one NOP's round trip) measured first in the same run on
// the same device. An empty task is a program with no ops: what is measured
// is the queue (descriptor intake, validation, a core picking the task up,
// the out-of-order completion), not a kernel. Then the same empty tasks end
// to end through the orchestration runtime (seed 004: submit with
// dependency tracking, the device worker's argument tables and doorbells,
// completion, reclaim) on a Device of a private mock with the same cores:
// independent tasks through the C++ calls and through pto_submit_task
// (against the batched NOP), and a serial chain, each task INOUT on the
// previous one's buffer (against the NOP round trip). Last, seed 004's
// Example 2 (examples/pto/matmul_orch.c, the seed's 128^3 tiles) at 512^3 and 1024^3
// beside one task of the whole matmul and the host BLAS (cblas_sgemm with
// its default threads), timed in turns (BM_Example2), the result checked
// exactly against the BLAS; and beside the same tile GEMMs and copies on
// one host thread per CPU with no runtime and no device (what tiling alone
// costs against the BLAS: the tiled path's ceiling on these CPUs).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include "bench_main.hpp"
#include "host_blas_threads.hpp"
#include "mock_device.hpp"
#include "pingpong.hpp"
#include "pto/kernels.h"
#include "spyre/compiler/kernel_builder.h"
#include "spyre/orchestration.hpp"
#include "spyre/spyre.hpp"
#include "spyre/common/openblas_kernels.hpp"

using namespace spyre;
using namespace spyre::driver;
using namespace spyre::bench;

namespace {

constexpr size_t kBatch = 256;  // per queue and per doorbell

struct TaskDevice {
    TaskDevice() : dev(MockOptions{.cards = 1, .vfs = 0, .mem = "1G", .extra_args = {"--cores", "16"}}) {
        const std::vector<uint8_t> empty = ProgramImage{}.Encode();
        program = 1ull << 20;
        std::memcpy(dev.mem.data() + program, empty.data(), empty.size());
        for (uint32_t q = 0; q < ReadTaskTopology(dev.fn).queues(); ++q) queues.emplace_back(dev.fn, q);
    }
    MockDevice dev;
    uint64_t program = 0;
    std::deque<TaskQueue> queues;  // not movable: a deque builds them in place
};

std::optional<TaskDevice> g_device;

TaskDevice& Device() {
    if (!g_device) g_device.emplace();
    return *g_device;
}

// Baseline: kBatch NOPs with one doorbell, all completions waited for.
void BM_RingNopBatch(benchmark::State& state) {
    TaskDevice& d = Device();
    std::vector<spyre_cb> cbs(kBatch);
    std::vector<Completion> done(kBatch);
    uint64_t tag = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        for (spyre_cb& cb : cbs) cb = NopCb(++tag);
        d.dev.ring.Submit(cbs);
        for (size_t got = 0; got < kBatch;)
            got += d.dev.ring.Wait(std::span(done).subspan(got), kBatch - got, {.mode = WaitMode::Poll});
        if (!done.back().ok()) state.SkipWithError("NOP failed");
    }
    g_baseline_ns["nop_batch"] = TimePerIteration(state, t0) / kBatch;
    state.SetItemsProcessed(int64_t(state.iterations() * kBatch));
    state.counters["ns_per_item"] = g_baseline_ns["nop_batch"];
}

// Baseline: one NOP submitted and waited for (polling), one at a time.
void BM_RingNopRoundTrip(benchmark::State& state) {
    TaskDevice& d = Device();
    Completion done;
    uint64_t tag = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        d.dev.ring.Submit(std::array{NopCb(++tag)});
        d.dev.ring.Wait({&done, 1}, 1, {.mode = WaitMode::Poll});
        if (!done.ok() || done.user_data != tag) state.SkipWithError("NOP completed wrongly");
    }
    g_baseline_ns["nop_roundtrip"] = TimePerIteration(state, t0);
    state.counters["ns_per_item"] = g_baseline_ns["nop_roundtrip"];
}

// kBatch empty tasks on each of `queues` queues per iteration.
void BM_EmptyTasks(benchmark::State& state, bool all_queues) {
    TaskDevice& d = Device();
    const size_t queues = all_queues ? d.queues.size() : 1;
    std::vector<spyre_cb> tasks(kBatch);
    std::vector<spyre_cqe> done(kBatch);
    uint64_t id = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        for (size_t q = 0; q < queues; ++q) {
            for (spyre_cb& t : tasks) t = TaskCb(++id, d.program, d.program, 0);
            if (d.queues[q].Submit(tasks) != kBatch) state.SkipWithError("queue full");
        }
        for (size_t q = 0; q < queues; ++q) {
            for (size_t got = 0; got < kBatch;)
                got += d.queues[q].Wait(std::span(done).subspan(got), kBatch - got, {.mode = WaitMode::Poll});
            for (const spyre_cqe& c : done)
                if (c.status != SPYRE_ERR_NONE) state.SkipWithError("task failed");
        }
    }
    const double ns = TimePerIteration(state, t0) / double(kBatch * queues);
    state.SetItemsProcessed(int64_t(state.iterations() * kBatch * queues));
    state.counters["ns_per_item"] = ns;
    state.counters["queues"] = double(queues);
    ReportAgainstRing(state, "nop_batch", ns);  // x_ring < 2: at least half the ring's rate
}

// One empty task submitted and waited for (polling), one at a time, on
// one queue: the driver's and the mock's share of a chain's link.
void BM_EmptyTaskRoundTrip(benchmark::State& state) {
    TaskDevice& d = Device();
    spyre_cqe done{};
    uint64_t id = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        const spyre_cb task = TaskCb(++id, d.program, d.program, 0);
        if (d.queues[0].Submit({&task, 1}) != 1) state.SkipWithError("queue full");
        d.queues[0].Wait({&done, 1}, 1, {.mode = WaitMode::Poll});
        if (done.status != SPYRE_ERR_NONE || done.user_data != id) state.SkipWithError("task completed wrongly");
    }
    const double ns = TimePerIteration(state, t0);
    state.counters["ns_per_item"] = ns;
    ReportAgainstRing(state, "nop_roundtrip", ns);
}

// Empty tasks through an Orchestrator on a spyre::Device (its own private
// mock, the same --cores). The chain's kernel is an empty program with one
// argument slot, so its tasks can name a buffer.
struct RuntimeDevice {
    RuntimeDevice()
        : dev(spyre::Device::Open({.embedded_mock = {.extra_args = {"--cores", "16"}}})),
          orch(Orchestrator::Create(dev, {.task_ring_size = 1024, .heap_size = 1 << 20})) {
        RegisterEmpty(kEmptyKernel, 0);
        RegisterEmpty(kEmptyOneArgKernel, 1);
        link = orch.Alloc(64);
    }
    void RegisterEmpty(int32_t kernel, uint16_t slots) {
        ProgramImage image;
        image.slot_count = slots;
        const std::vector<uint8_t> bytes = image.Encode();
        DeviceBuffer& buffer = programs.emplace_back(dev.AllocateBuffer(bytes.size()));
        dev.default_stream().CopyToDevice(bytes.data(), buffer.handle(), bytes.size());
        dev.default_stream().Synchronize();
        orch.RegisterDeviceKernel(kernel, dev.allocator().DeviceAddress(buffer.handle(), bytes.size()));
    }
    static constexpr int32_t kEmptyKernel = 1;
    static constexpr int32_t kEmptyOneArgKernel = 2;
    spyre::Device dev;
    std::deque<DeviceBuffer> programs;
    Orchestrator orch;
    void* link = nullptr;  // the chain's buffer
};
std::optional<RuntimeDevice> g_runtime;

RuntimeDevice& TheRuntime() {
    if (!g_runtime) g_runtime.emplace();
    return *g_runtime;
}

// kBatch independent empty tasks per iteration, then WaitAll; `c_api`:
// through pto_submit_task and pto_wait_all on the runtime's handle.
void BM_RuntimeEmptyTasks(benchmark::State& state, bool c_api) {
    Orchestrator& orch = TheRuntime().orch;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        for (size_t i = 0; i < kBatch; ++i) {
            const int32_t worker = i % 2 ? WORKER_CUBE : WORKER_VECTOR;
            if (!c_api) orch.Submit(RuntimeDevice::kEmptyKernel, worker, {});
            else if (pto_submit_task(orch.handle(), RuntimeDevice::kEmptyKernel, worker, nullptr, 0) < 0)
                state.SkipWithError(pto_last_error());
        }
        if (!c_api) orch.WaitAll();
        else if (pto_wait_all(orch.handle()) < 0) state.SkipWithError(pto_last_error());
    }
    const double ns = TimePerIteration(state, t0) / double(kBatch);
    state.SetItemsProcessed(int64_t(state.iterations() * kBatch));
    state.counters["ns_per_item"] = ns;
    ReportAgainstRing(state, "nop_batch", ns);
}

// A serial chain: kBatch empty tasks per iteration, each INOUT on the same
// 64 bytes, so each waits for the one before (a WAW/RAW edge per link).
void BM_RuntimeEmptyChain(benchmark::State& state) {
    RuntimeDevice& rt = TheRuntime();
    TaskParam p[] = {{PARAM_INOUT, rt.link, 64, {}}};  // pto_submit_task takes it non-const (the seed's signature)
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        for (size_t i = 0; i < kBatch; ++i)
            if (pto_submit_task(rt.orch.handle(), RuntimeDevice::kEmptyOneArgKernel, WORKER_CUBE, p, 1) < 0)
                state.SkipWithError(pto_last_error());
        if (pto_wait_all(rt.orch.handle()) < 0) state.SkipWithError(pto_last_error());
    }
    const double ns = TimePerIteration(state, t0) / double(kBatch);
    state.SetItemsProcessed(int64_t(state.iterations() * kBatch));
    state.counters["ns_per_link"] = ns;
    ReportAgainstRing(state, "nop_roundtrip", ns);
}

// --- seed 004 Example 2 --------------------------------------------------------

// One runtime on a Device of a private mock with the default cores, the
// matrices of one size from the function's allocator (as the example does),
// integer-valued inputs so every order of summation gives the same fp32.
struct Example2 {
    explicit Example2(int64_t size)
        : n(size), dev(spyre::Device::Open()), orch(Orchestrator::Create(dev)),
          abc(dev.AllocateBuffer(uint64_t(3 * n * n) * 4)) {
        if (register_matmul_kernels(orch.handle(), n, n, n) < 0) throw Error(ErrorKind::Internal, pto_last_error());
        const spyre_kernel_spec whole = {.kind = SPYRE_KERNEL_MATMUL, .dtype = SPYRE_DTYPE_FP32, .rank = 3, .shape = {n, n, n}};
        std::vector<uint8_t> program(size_t(spyre_build_kernel(&whole, nullptr, 0)));
        if (spyre_build_kernel(&whole, program.data(), program.size()) < 0 ||
            pto_register_program(orch.handle(), kWhole, program.data(), program.size()) < 0)
            throw Error(ErrorKind::Internal, pto_last_error());
        const uint64_t bytes = uint64_t(3 * n * n) * 4;
        a = static_cast<float*>(orch.HostAddress(dev.allocator().DeviceAddress(abc.handle(), bytes), bytes));
        b = a + n * n;
        c = b + n * n;
        std::mt19937 rng(7);
        std::uniform_int_distribution<int> dist(-1, 1);
        for (int64_t i = 0; i < 2 * n * n; ++i) a[i] = float(dist(rng));
        want.resize(size_t(n * n));
        Blas(want.data());
    }
    void Blas(float* out) const {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, a, int(n), b, int(n), 0.0f,
                    out, int(n));
    }
    void Tiled() {
        uint64_t args[] = {uint64_t(a), uint64_t(b), uint64_t(c), uint64_t(n), uint64_t(n), uint64_t(n)};
        orch.Run(matmul_orch, args);
    }
    void Whole() {
        {
            auto scope = orch.BeginScope();
            const TaskParam p[] = {{PARAM_INPUT, a, uint64_t(n * n) * 4, {}},
                                   {PARAM_INPUT, b, uint64_t(n * n) * 4, {}},
                                   {PARAM_OUTPUT, c, uint64_t(n * n) * 4, {}}};
            orch.Submit(kWhole, WORKER_CUBE, p);
        }
        orch.WaitAll();
    }
    // The tiled run's work on the host: each output tile's K GEMMs into a
    // dense tile, then its copy into C, tiles handed out in the
    // orchestration's order to one thread per CPU (single-threaded BLAS
    // calls, as the card's cores make). The extra threads start per run
    // (tens of us of a run of ms): idle ones would take CPU from the
    // device runs timed between.
    void HostTiles() {
        const int64_t tiles_n = n / TILE_N, tiles = (n / TILE_M) * tiles_n;
        std::atomic<int64_t> next{0};
        auto work = [&] {
            std::vector<float> tile(size_t(TILE_M * TILE_N));
            for (int64_t q; (q = next.fetch_add(1)) < tiles;) {
                const int64_t i = q / tiles_n * TILE_M, j = q % tiles_n * TILE_N;
                for (int64_t k = 0; k < n; k += TILE_K)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, TILE_M, TILE_N, TILE_K, 1.0f, a + i * n + k,
                                int(n), b + k * n + j, int(n), k == 0 ? 0.0f : 1.0f, tile.data(), TILE_N);
                for (int64_t r = 0; r < TILE_M; ++r)
                    std::memcpy(c + (i + r) * n + j, tile.data() + r * TILE_N, TILE_N * 4);
            }
        };
        const int blas_threads = openblas_get_num_threads();
        openblas_set_num_threads(1);
        std::vector<std::thread> others;
        for (unsigned t = 1; t < std::max(1u, std::thread::hardware_concurrency()); ++t) others.emplace_back(work);
        work();
        for (auto& t : others) t.join();
        openblas_set_num_threads(blas_threads);
    }
    bool Exact() const { return std::memcmp(c, want.data(), want.size() * 4) == 0; }

    static constexpr int32_t kWhole = 100;
    int64_t n;
    spyre::Device dev;
    Orchestrator orch;
    DeviceBuffer abc;
    float* a = nullptr;
    float* b = nullptr;
    float* c = nullptr;
    std::vector<float> want;
};
std::map<int64_t, std::unique_ptr<Example2>> g_example2;

Example2& Example2Of(int64_t n) {
    auto& e = g_example2[n];
    if (!e) e = std::make_unique<Example2>(n);
    return *e;
}

// How long each size runs untimed first. The first lap of the runtime's
// heap ring (64 MiB: 64 runs at 512^3, 16 at 1024^3) touches device memory
// the mock has not backed yet, and each new page costs the card's core a
// fault: a tile's first GEMM then takes about twice its time.
constexpr std::chrono::milliseconds kExample2WarmUp{1000};
// Runs of one kind in a row per turn: the first starts after the other
// kinds ran (the card's core threads and the BLAS's workers asleep, the
// CPUs idle), the others back to back.
constexpr int kExample2Block = 4;

double MedianOf(std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
}

// The three ways to compute one C, timed in the same iterations: the tiled
// run (the figure) and its two baselines take turns, each kind
// kExample2Block runs in a row, in an order that rotates every iteration,
// so a drift of the machine touches all three alike. The figures are the
// medians of the runs after the first of each block (back to back); the
// first runs (after another kind) give the *_first_ms figures. The host
// BLAS's workers sleep between its calls (host_blas_threads.hpp); last,
// timed apart, the BLAS as back-to-back calls with spinning workers see
// it. Every run is checked.
void BM_Example2(benchmark::State& state) {
    Example2& e = Example2Of(state.range(0));
    enum Kind { kBlas, kWhole, kTiled, kHostTiles, kKinds };
    auto run_one = [&](int kind) {
        std::memset(e.c, 0xff, e.want.size() * 4);  // a NaN pattern: nothing left over passes the check
        const auto t0 = std::chrono::steady_clock::now();
        if (kind == kBlas) e.Blas(e.c);
        else if (kind == kWhole) e.Whole();
        else if (kind == kHostTiles) e.HostTiles();
        else e.Tiled();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!e.Exact()) state.SkipWithError("the result differs from cblas_sgemm's");
        return s;
    };
    const auto warm_until = std::chrono::steady_clock::now() + kExample2WarmUp;
    for (int i = 0; std::chrono::steady_clock::now() < warm_until; ++i) run_one(i % kKinds);
    std::vector<double> ms[kKinds], first_ms[kKinds];
    int turn = 0;
    for (auto _ : state) {
        for (int i = 0; i < kKinds; ++i) {
            const int kind = (turn + i) % kKinds;
            first_ms[kind].push_back(run_one(kind) * 1e3);
            for (int r = 1; r < kExample2Block; ++r) {
                const double s = run_one(kind);
                ms[kind].push_back(s * 1e3);
                if (kind == kTiled && r == 1) state.SetIterationTime(s);
            }
        }
        ++turn;
    }
    std::vector<double> spinning;
    SetHostBlasWorkersSpin(true);
    for (size_t i = 0; i < ms[kBlas].size() + 1; ++i) spinning.push_back(run_one(kBlas) * 1e3);
    spinning.erase(spinning.begin());  // the call that started the workers
    SetHostBlasWorkersSpin(false);
    const double tiled = MedianOf(ms[kTiled]), blas = MedianOf(ms[kBlas]), whole = MedianOf(ms[kWhole]);
    const double host_tiles = MedianOf(ms[kHostTiles]);
    const double tiled_first = MedianOf(first_ms[kTiled]), blas_first = MedianOf(first_ms[kBlas]);
    const double blas_spinning = MedianOf(spinning);
    state.counters["ms"] = tiled;
    state.counters["host_blas_ms"] = blas;
    state.counters["whole_task_ms"] = whole;
    state.counters["host_blas_spinning_ms"] = blas_spinning;
    state.counters["first_ms"] = tiled_first;
    state.counters["host_blas_first_ms"] = blas_first;
    state.counters["whole_task_first_ms"] = MedianOf(first_ms[kWhole]);
    state.counters["x_host_blas"] = blas / tiled;
    state.counters["x_whole_task"] = whole / tiled;
    state.counters["x_host_blas_spinning"] = blas_spinning / tiled;
    state.counters["x_host_blas_first"] = blas_first / tiled_first;
    state.counters["host_tiles_ms"] = host_tiles;
    state.counters["x_host_tiles"] = host_tiles / tiled;
    state.counters["host_tiles_x_host_blas"] = blas / host_tiles;
    state.counters["tasks"] = double((e.n / TILE_M) * (e.n / TILE_N) * (e.n / TILE_K + 1));
    state.SetLabel("medians; the baselines ran in the same iterations, in turn (see the code)");
}

}  // namespace

int main(int argc, char** argv) {
    spyre::openblas::RunAgainWithTheCpusKernels(argv);  // first: before OpenBLAS or any thread is used
    SetHostBlasWorkersSpin(false);  // from the first call on (host_blas_threads.hpp)
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    // Registration order is run order: the ring baseline first.
    benchmark::RegisterBenchmark("baseline/ring_nop_batch", BM_RingNopBatch)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("baseline/ring_nop_roundtrip", BM_RingNopRoundTrip)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("tasks/empty_one_queue", BM_EmptyTasks, false)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("tasks/empty_roundtrip", BM_EmptyTaskRoundTrip)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("tasks/empty_all_queues", BM_EmptyTasks, true)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("runtime/empty_device_tasks", BM_RuntimeEmptyTasks, false)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("runtime/empty_device_tasks/pto_submit_task", BM_RuntimeEmptyTasks, true)
        ->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("runtime/empty_device_task_chain", BM_RuntimeEmptyChain)->UseRealTime()->MinTime(0.5);
    for (int64_t n : {512, 1024}) {
        benchmark::RegisterBenchmark(("example2/tiles_of_" + std::to_string(TILE_M)).c_str(), BM_Example2)
            ->Arg(n)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(n == 512 ? 20 : 6);
    }
    return spyre::bench::RunBenchmarks("task_queue_bench", std::chrono::seconds(120), [] {
        g_device.reset();
        g_runtime.reset();
        g_example2.clear();
    });
}
