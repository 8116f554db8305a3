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

#include "spyre/spyre.hpp"

using namespace spyre::driver;

namespace {

// Baseline results (ns per round trip), filled as the baselines run first.
std::map<std::string, double> g_baseline_ns;

struct alignas(64) PingPongWords {
    alignas(64) uint32_t ping;
    alignas(64) uint32_t pong;
    alignas(64) uint32_t stop;
};

long Futex(uint32_t* word, int op, uint32_t val) { return ::syscall(SYS_futex, word, op, val, nullptr, nullptr, 0); }

// A child process that answers every ping with a pong, by spinning or by
// sleeping on a futex. Shared anonymous memory spans the fork like shm.
class PingPongPeer {
public:
    explicit PingPongPeer(bool use_futex) : use_futex_(use_futex) {
        void* p = ::mmap(nullptr, sizeof(PingPongWords), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        words_ = new (p) PingPongWords{};
        pid_ = ::fork();
        if (pid_ == 0) {
            Serve();
            ::_exit(0);
        }
    }
    ~PingPongPeer() {
        std::atomic_ref<uint32_t>(words_->stop).store(1);
        std::atomic_ref<uint32_t>(words_->ping).fetch_add(1);
        Futex(&words_->ping, FUTEX_WAKE, INT_MAX);
        ::waitpid(pid_, nullptr, 0);
        ::munmap(words_, sizeof(PingPongWords));
    }
    void RoundTrip(uint32_t i) {
        std::atomic_ref<uint32_t> ping(words_->ping), pong(words_->pong);
        ping.store(i, std::memory_order_release);
        if (use_futex_) Futex(&words_->ping, FUTEX_WAKE, 1);
        while (pong.load(std::memory_order_acquire) != i)
            if (use_futex_) Futex(&words_->pong, FUTEX_WAIT, pong.load());
    }

private:
    void Serve() {
        std::atomic_ref<uint32_t> ping(words_->ping), pong(words_->pong), stop(words_->stop);
        uint32_t seen = 0;
        while (!stop.load(std::memory_order_acquire)) {
            uint32_t v = ping.load(std::memory_order_acquire);
            if (v == seen) {
                if (use_futex_) Futex(&words_->ping, FUTEX_WAIT, v);
                continue;
            }
            seen = v;
            pong.store(v, std::memory_order_release);
            if (use_futex_) Futex(&words_->pong, FUTEX_WAKE, 1);
        }
    }
    bool use_futex_;
    PingPongWords* words_;
    pid_t pid_;
};

double TimePerIteration(benchmark::State& state, std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
           double(state.iterations());
}

void BM_SpinPingPongTimed(benchmark::State& state) {
    PingPongPeer peer(false);
    uint32_t i = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) peer.RoundTrip(++i);
    g_baseline_ns["spin"] = TimePerIteration(state, t0);
}

void BM_FutexPingPong(benchmark::State& state) {
    PingPongPeer peer(true);
    uint32_t i = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) peer.RoundTrip(++i);
    g_baseline_ns["futex"] = TimePerIteration(state, t0);
}

// A private daemon per device configuration, kept for the whole run.
struct Device {
    explicit Device(std::vector<std::string> args)
        : daemon(MockDaemon::Start({.cards = 1, .vfs = 0, .mem = "1G", .extra_args = std::move(args)})),
          fn(Function::Open(DeviceRoot(daemon.mount()).Find("0"))),
          ring(fn) {}
    MockDaemon daemon;
    Function fn;
    CommandRing ring;
};
std::optional<Device> g_polling_device;   // the device spins 50 us before it sleeps (default)
std::optional<Device> g_sleeping_device;  // --poll-us 0: the device sleeps at once, as a futex peer does

// One NOP submitted and waited for per iteration.
void BM_NopRoundTrip(benchmark::State& state, WaitMode mode, bool device_sleeps, const char* baseline) {
    auto& slot = device_sleeps ? g_sleeping_device : g_polling_device;
    if (!slot) slot.emplace(device_sleeps ? std::vector<std::string>{"--poll-us", "0"} : std::vector<std::string>{});
    CommandRing& ring = slot->ring;
    Completion c;
    uint64_t tag = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        ring.Submit(std::array{NopCb(++tag)});
        ring.Wait({&c, 1}, 1, {.mode = mode});
        if (!c.ok() || c.user_data != tag) state.SkipWithError("NOP completed wrongly");
    }
    const double ns = TimePerIteration(state, t0);
    state.SetLabel(std::string("vs ") + baseline + " ping-pong");
    if (g_baseline_ns.count(baseline)) {
        state.counters["baseline_ns"] = g_baseline_ns[baseline];
        state.counters["x_baseline"] = ns / g_baseline_ns[baseline];
    }
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
    try {
        benchmark::RunSpecifiedBenchmarks();
    } catch (const spyre::Error& e) {
        std::fprintf(stderr, "nop_roundtrip_bench: %s\n", e.what());
        return 1;
    }
    g_polling_device.reset();
    g_sleeping_device.reset();
    benchmark::Shutdown();
    return 0;
}
