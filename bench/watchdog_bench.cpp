// SPDX-License-Identifier: Apache-2.0
// How far past its bound the mock device's watchdog stops a CB, measured from
// the host as submit -> WATCHDOG completion (blocking wait), for
// --watchdog-ms 20 and 300:
//   watchdog/long_matmul   a LAUNCH of a program that would run for seconds
//                          (400 x the 2048^3 fp32 matmul, as the watchdog test)
//   watchdog/sem_wait      a SEM_WAIT that is never satisfied
// Each prints the bound (bound_ms), the mean time to the WATCHDOG completion
// (real time) and overshoot_ms = time - bound, mean and max over iterations.
// The overshoot of a program is the rest of the kernel chunk running when the
// bound passes (workers check the budget between chunks): it depends on how
// busy the machine's cores are; the semaphore's is its poll period.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "bench_main.hpp"
#include "mock_device.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/spyre.hpp"

using namespace spyre;
using namespace spyre::driver;

namespace {

using Clock = std::chrono::steady_clock;

struct Device : spyre::bench::MockDevice {
    explicit Device(int watchdog_ms)
        : MockDevice({.cards = 1, .vfs = 0, .mem = "1G", .extra_args = {"--watchdog-ms", std::to_string(watchdog_ms)}}) {}
};
std::map<int, std::optional<Device>> g_devices;

Device& DeviceWith(int watchdog_ms) {
    auto& d = g_devices[watchdog_ms];
    if (!d) d.emplace(watchdog_ms);
    return *d;
}

// 400 x 2048^3 fp32 matmul in one program, tensors and program in device memory.
spyre_cb LongProgram(Device& dev) {
    const BuiltKernel k = KernelBuilder().Matmul(2048, 2048, 2048, DType::FP32);
    std::vector<uint64_t> addrs;
    uint64_t next = 0;
    for (const KernelTensor* t : {&k.inputs[0], &k.inputs[1], &k.outputs[0]}) {
        addrs.push_back(next);
        std::memset(dev.mem.data() + next, 0, t->bytes);
        next += (t->bytes + 4095) / 4096 * 4096;
    }
    ProgramImage image = ProgramImage::Decode(k.Bind(addrs));
    image.ops.assign(400, image.ops[0]);
    const std::vector<uint8_t> program = image.Encode();
    std::memcpy(dev.mem.data() + next, program.data(), program.size());
    return LaunchCb(next, program.size());
}

void BM_Watchdog(benchmark::State& state, bool program) {
    const int bound_ms = int(state.range(0));
    Device& dev = DeviceWith(bound_ms);
    const uint64_t sem_addr = 1ull << 29;  // far from the long program's tensors
    std::memset(dev.mem.data() + sem_addr, 0, 8);
    const spyre_cb cb = program ? LongProgram(dev) : SemWaitCb(sem_addr, 1, 0);
    double sum_ms = 0, max_ms = 0;
    for (auto _ : state) {
        Completion done;
        const auto t0 = Clock::now();
        dev.ring.Submit(std::array{cb});
        dev.ring.Wait({&done, 1}, 1, {.mode = WaitMode::Blocking});
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (done.status != SPYRE_ERR_WATCHDOG) state.SkipWithError(spyre_error_name(done.status));
        state.SetIterationTime(ms / 1e3);
        sum_ms += ms;
        max_ms = std::max(max_ms, ms);
    }
    const double mean_ms = sum_ms / double(state.iterations());
    state.counters["bound_ms"] = bound_ms;
    state.counters["overshoot_ms"] = mean_ms - bound_ms;
    state.counters["max_overshoot_ms"] = max_ms - bound_ms;
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    for (const bool program : {true, false})
        benchmark::RegisterBenchmark(program ? "watchdog/long_matmul" : "watchdog/sem_wait", BM_Watchdog, program)
            ->Arg(20)->Arg(300)->Iterations(10)->UseManualTime()->Unit(benchmark::kMillisecond);
    return spyre::bench::RunBenchmarks("watchdog_bench", std::chrono::seconds(120), [] { g_devices.clear(); });
}
