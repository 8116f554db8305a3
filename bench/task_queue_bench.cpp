// SPDX-License-Identifier: Apache-2.0
// Empty-task throughput through the task queues of a real spyre-mockdev,
// through one queue and through all of them, beside the raw CB ring's NOP
// batch rate measured first in the same run on the same device. An empty
// task is a program with no ops and no arguments: what is measured is the
// queue (descriptor intake, validation, a core picking the task up, the
// out-of-order completion), not a kernel. Last, the same empty tasks end to
// end through the orchestration runtime (seed 004: submit with dependency
// tracking, the device worker's argument tables and doorbells, completion,
// reclaim) on a Device of a private mock with the same cores.
#include <benchmark/benchmark.h>

#include <cstring>
#include <deque>
#include <optional>
#include <vector>

#include "bench_main.hpp"
#include "mock_device.hpp"
#include "pingpong.hpp"
#include "spyre/orchestration.hpp"
#include "spyre/spyre.hpp"

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

// kBatch empty tasks on each of `queues` queues per iteration.
void BM_EmptyTasks(benchmark::State& state, bool all_queues) {
    TaskDevice& d = Device();
    const size_t queues = all_queues ? d.queues.size() : 1;
    std::vector<spyre_task_desc> tasks(kBatch);
    std::vector<spyre_task_cqe> done(kBatch);
    uint64_t id = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        for (size_t q = 0; q < queues; ++q) {
            for (spyre_task_desc& t : tasks) t = TaskDesc(++id, d.program, d.program, 0);
            if (d.queues[q].Submit(tasks) != kBatch) state.SkipWithError("queue full");
        }
        for (size_t q = 0; q < queues; ++q) {
            for (size_t got = 0; got < kBatch;)
                got += d.queues[q].Wait(std::span(done).subspan(got), kBatch - got, {.mode = WaitMode::Poll});
            for (const spyre_task_cqe& c : done)
                if (c.status != SPYRE_ERR_NONE) state.SkipWithError("task failed");
        }
    }
    const double ns = TimePerIteration(state, t0) / double(kBatch * queues);
    state.SetItemsProcessed(int64_t(state.iterations() * kBatch * queues));
    state.counters["ns_per_item"] = ns;
    state.counters["queues"] = double(queues);
    ReportAgainstRing(state, "nop_batch", ns);  // x_ring < 2: at least half the ring's rate
}

// kBatch independent empty tasks per iteration through an Orchestrator on a
// spyre::Device (its own private mock, the same --cores), then WaitAll.
struct RuntimeDevice {
    RuntimeDevice()
        : dev(spyre::Device::Open({.embedded_mock = {.extra_args = {"--cores", "16"}}})),
          orch(Orchestrator::Create(dev, {.task_ring_size = 1024, .heap_size = 1 << 20})) {
        const std::vector<uint8_t> empty = ProgramImage{}.Encode();
        program.emplace(dev.AllocateBuffer(empty.size()));
        dev.default_stream().CopyToDevice(empty.data(), program->handle(), empty.size());
        dev.default_stream().Synchronize();
        orch.RegisterDeviceKernel(kEmptyKernel, dev.allocator().DeviceAddress(program->handle(), empty.size()));
    }
    static constexpr int32_t kEmptyKernel = 1;
    spyre::Device dev;
    std::optional<DeviceBuffer> program;
    Orchestrator orch;
};
std::optional<RuntimeDevice> g_runtime;

void BM_RuntimeEmptyTasks(benchmark::State& state) {
    if (!g_runtime) g_runtime.emplace();
    Orchestrator& orch = g_runtime->orch;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        for (size_t i = 0; i < kBatch; ++i)
            orch.Submit(RuntimeDevice::kEmptyKernel, i % 2 ? WORKER_CUBE : WORKER_VECTOR, {});
        orch.WaitAll();
    }
    const double ns = TimePerIteration(state, t0) / double(kBatch);
    state.SetItemsProcessed(int64_t(state.iterations() * kBatch));
    state.counters["ns_per_item"] = ns;
    ReportAgainstRing(state, "nop_batch", ns);
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    // Registration order is run order: the ring baseline first.
    benchmark::RegisterBenchmark("baseline/ring_nop_batch", BM_RingNopBatch)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("tasks/empty_one_queue", BM_EmptyTasks, false)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("tasks/empty_all_queues", BM_EmptyTasks, true)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("runtime/empty_device_tasks", BM_RuntimeEmptyTasks)->UseRealTime()->MinTime(0.5);
    return spyre::bench::RunBenchmarks("task_queue_bench", std::chrono::seconds(120), [] {
        g_device.reset();
        g_runtime.reset();
    });
}
