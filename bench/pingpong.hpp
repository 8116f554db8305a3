// SPDX-License-Identifier: Apache-2.0
// Round-trip baselines shared by the benchmarks: a cross-process spin
// ping-pong, a cross-process futex ping-pong, and the raw ring NOP round trip
// through a private spyre-mockdev, measured in the same run as the figure
// they anchor.
#pragma once

#include <benchmark/benchmark.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <array>
#include <climits>
#include <map>
#include <string>
#include <vector>

#include "spyre/common/futex.hpp"
// Below a Device: the driver tier, which spyre.hpp leaves out.
#include "spyre/driver/command_ring.hpp"
#include "spyre/driver/discovery.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/driver/mock_daemon.hpp"
#include "spyre/spyre.hpp"

namespace spyre::bench {

// Baseline results (ns per round trip), filled as the baselines run first.
inline std::map<std::string, double> g_baseline_ns;
// The median round trip of the same baselines: on a shared VM a few round
// trips take 10-100x (a preempted vCPU), which moves a mean more than the
// path it measures. Figures print both.
inline std::map<std::string, double> g_baseline_p50_ns;

// Times every `every`-th iteration on its own, for a median beside the mean.
// A clock read costs about 35 ns in this VM: timing every iteration would add
// two to a sub-microsecond round trip, and not to the spin baseline, which
// is timed as a whole. One in eight adds about 9 ns to a mean.
class RoundTrips {
public:
    explicit RoundTrips(uint32_t every = 8, size_t expect = 1 << 16) : every_(every) { ns_.reserve(expect); }
    void Start() {
        timing_ = n_++ % every_ == 0;
        if (timing_) t_ = std::chrono::steady_clock::now();
    }
    void Stop() {
        if (timing_)
            ns_.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t_).count());
    }
    // The last iteration timed.
    double Last() const { return ns_.empty() ? 0 : ns_.back(); }
    double Median() { return Quantile(0.5); }
    // The q-quantile (0 <= q <= 1) of the round trips timed: 1 is the slowest.
    double Quantile(double q) {
        if (ns_.empty()) return 0;
        const size_t k = std::min(ns_.size() - 1, size_t(q * double(ns_.size())));
        std::nth_element(ns_.begin(), ns_.begin() + long(k), ns_.end());
        return ns_[k];
    }

private:
    uint32_t every_;
    uint32_t n_ = 0;
    bool timing_ = false;
    std::vector<double> ns_;
    std::chrono::steady_clock::time_point t_;
};

struct alignas(64) PingPongWords {
    alignas(64) uint32_t ping;
    alignas(64) uint32_t pong;
    alignas(64) uint32_t stop;
    alignas(64) uint32_t parked;  // 1: the peer sleeps until Unpark (a spinning peer off its CPU)
};

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
        Unpark();
        std::atomic_ref<uint32_t>(words_->ping).fetch_add(1);
        spyre::FutexWake(&words_->ping, INT_MAX);
        ::waitpid(pid_, nullptr, 0);
        ::munmap(words_, sizeof(PingPongWords));
    }
    pid_t pid() const { return pid_; }
    // A spinning peer burns a CPU even between round trips; parked, it sleeps
    // until Unpark, so a benchmark can interleave it with other spinners on a
    // machine of two CPUs. Each costs a wake-up: not for timed round trips.
    void Park() { std::atomic_ref<uint32_t>(words_->parked).store(1); }
    void Unpark() {
        std::atomic_ref<uint32_t>(words_->parked).store(0);
        spyre::FutexWake(&words_->parked, INT_MAX);
    }
    void RoundTrip(uint32_t i) {
        std::atomic_ref<uint32_t> ping(words_->ping), pong(words_->pong);
        ping.store(i, std::memory_order_release);
        if (use_futex_) spyre::FutexWake(&words_->ping, 1);
        // Classic futex protocol: sleep only on the value just checked. The
        // kernel compares it with the word under its lock, so a pong (and its
        // wake) that lands between the check and the wait makes FUTEX_WAIT
        // return at once instead of being lost.
        for (uint32_t seen; (seen = pong.load(std::memory_order_acquire)) != i;)
            if (use_futex_) spyre::FutexWait(&words_->pong, seen, std::chrono::seconds(1));
    }

private:
    void Serve() {
        std::atomic_ref<uint32_t> ping(words_->ping), pong(words_->pong), stop(words_->stop), parked(words_->parked);
        uint32_t seen = 0;
        while (!stop.load(std::memory_order_acquire)) {
            if (parked.load(std::memory_order_relaxed)) {
                spyre::FutexWait(&words_->parked, 1, std::chrono::milliseconds(100));
                continue;
            }
            uint32_t v = ping.load(std::memory_order_acquire);
            if (v == seen) {
                // Waits on the value it checked (see RoundTrip).
                if (use_futex_) spyre::FutexWait(&words_->ping, v, std::chrono::seconds(1));
                continue;
            }
            seen = v;
            pong.store(v, std::memory_order_release);
            if (use_futex_) spyre::FutexWake(&words_->pong, 1);
        }
    }
    bool use_futex_;
    PingPongWords* words_;
    pid_t pid_;
};

inline double TimePerIteration(benchmark::State& state, std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
           double(state.iterations());
}

inline void BM_SpinPingPongTimed(benchmark::State& state) {
    PingPongPeer peer(false);
    uint32_t i = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) peer.RoundTrip(++i);
    g_baseline_ns["spin"] = TimePerIteration(state, t0);
}

inline void BM_FutexPingPong(benchmark::State& state) {
    PingPongPeer peer(true);
    uint32_t i = 0;
    RoundTrips trips;
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        trips.Start();
        peer.RoundTrip(++i);
        trips.Stop();
    }
    g_baseline_ns["futex"] = TimePerIteration(state, t0);
    g_baseline_p50_ns["futex"] = trips.Median();
    state.counters["p50_ns"] = g_baseline_p50_ns["futex"];
}

// A private daemon and its command ring, for the raw ring round trip.
struct RingNopDevice {
    explicit RingNopDevice(std::vector<std::string> args)
        : daemon(driver::MockDaemon::Start({.cards = 1, .vfs = 0, .mem = "1G", .extra_args = std::move(args)})),
          fn(driver::Function::Open(driver::DeviceRoot(daemon.mount()).Find("0"))),
          ring(fn) {}
    driver::MockDaemon daemon;
    driver::Function fn;
    driver::CommandRing ring;
};

// One NOP tagged `tag`, submitted straight on the ring (no runtime) and
// waited for; false if it completed wrongly.
inline bool RingNopOnce(RingNopDevice& dev, driver::WaitMode mode, uint64_t tag) {
    driver::Completion c;
    dev.ring.Submit(std::array{driver::NopCb(tag)});
    dev.ring.Wait({&c, 1}, 1, {.mode = mode});
    return c.ok() && c.user_data == tag;
}

// One NOP round trip per iteration; recorded as baseline `key` for the
// figures that follow.
inline void RingNopRoundTrip(benchmark::State& state, RingNopDevice& dev, driver::WaitMode mode, const char* key) {
    uint64_t tag = 0;
    RoundTrips trips;
    auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        trips.Start();
        const bool ok = RingNopOnce(dev, mode, ++tag);
        trips.Stop();
        if (!ok) state.SkipWithError("NOP completed wrongly");
    }
    g_baseline_ns[key] = TimePerIteration(state, t0);
    g_baseline_p50_ns[key] = trips.Median();
    state.counters["p50_ns"] = g_baseline_p50_ns[key];
}

// Adds ring_ns and x_ring counters: a figure of `ns` against the raw ring
// round trip recorded as `key`.
inline void ReportAgainstRing(benchmark::State& state, const char* key, double ns, double p50_ns = 0) {
    if (g_baseline_ns.count(key)) {
        state.counters["ring_ns"] = g_baseline_ns[key];
        state.counters["x_ring"] = ns / g_baseline_ns[key];
    }
    if (p50_ns > 0 && g_baseline_p50_ns.count(key)) state.counters["x_ring_p50"] = p50_ns / g_baseline_p50_ns[key];
}

// Adds baseline_ns and x_baseline counters for a figure of `ns` per iteration.
inline void ReportAgainst(benchmark::State& state, const char* baseline, double ns, double p50_ns = 0) {
    state.SetLabel(std::string("vs ") + baseline + " ping-pong");
    if (g_baseline_ns.count(baseline)) {
        state.counters["baseline_ns"] = g_baseline_ns[baseline];
        state.counters["x_baseline"] = ns / g_baseline_ns[baseline];
    }
    if (p50_ns > 0 && g_baseline_p50_ns.count(baseline))
        state.counters["x_baseline_p50"] = p50_ns / g_baseline_p50_ns[baseline];
}

}  // namespace spyre::bench
