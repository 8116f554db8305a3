// SPDX-License-Identifier: Apache-2.0
// NOP control-block round trips through a real spyre-mockdev, in poll,
// adaptive and blocking modes, each beside the baselines measured in the same
// run: a cross-process spin ping-pong and a cross-process futex ping-pong.
#include <benchmark/benchmark.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

#include "bench_main.hpp"
#include "pingpong.hpp"
#include "spyre/spyre.hpp"

using namespace spyre::driver;
using namespace spyre::bench;

namespace {

std::optional<RingNopDevice> g_polling_device;   // the device spins 50 us before it sleeps (default)
std::optional<RingNopDevice> g_sleeping_device;  // --poll-us 0: the device sleeps at once, as a futex peer does

void BM_NopRoundTrip(benchmark::State& state, WaitMode mode, bool device_sleeps, const char* baseline) {
    auto& slot = device_sleeps ? g_sleeping_device : g_polling_device;
    if (!slot) slot.emplace(device_sleeps ? std::vector<std::string>{"--poll-us", "0"} : std::vector<std::string>{});
    const std::string key = std::string("ring_") + ToString(mode) + (device_sleeps ? "_sleeps" : "");
    RingNopRoundTrip(state, *slot, mode, key.c_str());
    ReportAgainst(state, baseline, g_baseline_ns[key]);
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    // Registration order is run order: baselines first, so each device
    // figure is printed beside a baseline of the same run.
    benchmark::RegisterBenchmark("baseline/spin_pingpong", BM_SpinPingPongTimed)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("baseline/futex_pingpong", BM_FutexPingPong)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("nop_roundtrip/poll", BM_NopRoundTrip, WaitMode::Poll, false, "spin")->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("nop_roundtrip/adaptive", BM_NopRoundTrip, WaitMode::Adaptive, false, "spin")->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("nop_roundtrip/blocking", BM_NopRoundTrip, WaitMode::Blocking, false, "futex")->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("nop_roundtrip/blocking_device_sleeps", BM_NopRoundTrip, WaitMode::Blocking, true, "futex")->UseRealTime()->MinTime(0.5);
    return spyre::bench::RunBenchmarks("nop_roundtrip_bench", std::chrono::seconds(120), [] {
        g_polling_device.reset();
        g_sleeping_device.reset();
    });
}
