// SPDX-License-Identifier: Apache-2.0
// NOP control-block round trips through a real spyre-mockdev, in poll,
// adaptive and blocking modes, each beside the baselines measured in the same
// run: a cross-process spin ping-pong and a cross-process futex ping-pong.
// Then a trapped register read (a FUSE round trip to the daemon), as the
// driver makes it (from a thread of its own, waiting only while the device
// serves) beside the same pread made on the caller's thread.
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

// A trapped read of STATUS: `inline` is one pread on the node from this
// thread (the baseline), otherwise Function::ReadTrapped32.
void BM_TrappedRead(benchmark::State& state, bool inline_pread) {
    if (!g_polling_device) g_polling_device.emplace(std::vector<std::string>{});
    Function& fn = g_polling_device->fn;
    const off_t at = off_t(SPYRE_REGION_OFFSET(SPYRE_REGION_BAR0) + SPYRE_REG_STATUS);
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        uint32_t v = 0;
        if (inline_pread) {
            if (::pread(fn.fd(), &v, sizeof v, at) != ssize_t(sizeof v)) state.SkipWithError("pread failed");
        } else {
            v = fn.ReadTrapped32(SPYRE_REG_STATUS);
        }
        benchmark::DoNotOptimize(v);
    }
    const double ns = TimePerIteration(state, t0);
    state.counters["us"] = ns / 1000;
    if (inline_pread)
        g_baseline_ns["trapped_inline"] = ns;
    else if (g_baseline_ns.count("trapped_inline"))
        state.counters["x_inline"] = ns / g_baseline_ns["trapped_inline"];
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
    benchmark::RegisterBenchmark("baseline/trapped_read_inline", BM_TrappedRead, true)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("trapped_read", BM_TrappedRead, false)->UseRealTime()->MinTime(0.5);
    return spyre::bench::RunBenchmarks("nop_roundtrip_bench", std::chrono::seconds(120), [] {
        g_polling_device.reset();
        g_sleeping_device.reset();
    });
}
