// SPDX-License-Identifier: Apache-2.0
// The stream layer's costs, each beside a baseline of the same run:
//   enqueue        host cost of one async FlexStream enqueue (target < 100 ns;
//                  cudaLaunchKernel ~2.6 us), beside an uncontended mutex
//                  lock/unlock + vector push, into an idle stream, in a
//                  burst, and while the scheduler drains (see BM_Enqueue)
//   launch_sync    empty-kernel Launch + Synchronize round trip through the
//                  stream layer and the device, beside the raw ring NOP
//                  round trip of the same wait mode (x_ring; target 2x poll
//                  and adaptive) and the spin (poll, adaptive) and futex
//                  (blocking; target 1.3x) ping-pongs
//   launch_loop    256 launches + one Synchronize, per launch, traced and
//                  untraced alternately (x_untraced; target < 1.05)
//   launch_tiled   LaunchTiled cost per tile iteration, beside one Launch of
//                  the same tile
//   overlap        copy-in + matmul + copy-out of 8 chunks on one stream vs
//                  two streams ordered by events, on a card of all the
//                  machine's cores and on a card of one core: the mock's
//                  cores are host threads, so on 2 CPUs a card of two cores
//                  leaves no CPU for the copies to overlap with (a real card
//                  computes beside the host's DMA, not on its CPUs)
#include <benchmark/benchmark.h>

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "bench_main.hpp"
#include "spyre/trace/trace.hpp"
#include "pingpong.hpp"
#include "spyre/spyre.hpp"

using namespace spyre;
using namespace spyre::bench;

namespace {

using Clock = std::chrono::steady_clock;

// Devices kept for the whole run, one per configuration.
std::optional<Device> g_poll, g_adaptive, g_blocking, g_one_core;

Device& PollDevice() {
    if (!g_poll) g_poll.emplace(Device::Open({.scheduler = {.wait_mode = driver::WaitMode::Poll}}));
    return *g_poll;
}
Device& AdaptiveDevice() {
    if (!g_adaptive) g_adaptive.emplace(Device::Open());
    return *g_adaptive;
}
// The device sleeps at once (--poll-us 0), as a futex peer does, and every
// wait on the host blocks.
Device& BlockingDevice() {
    if (!g_blocking) {
        DeviceOptions o;
        o.scheduler.wait_mode = driver::WaitMode::Blocking;
        o.embedded_mock.extra_args = {"--poll-us", "0"};
        g_blocking.emplace(Device::Open(o));
    }
    return *g_blocking;
}

// An adaptive device whose card computes on one core (mock --cores 1).
Device& OneCoreDevice() {
    if (!g_one_core) {
        DeviceOptions o;
        o.embedded_mock.extra_args = {"--cores", "1"};
        g_one_core.emplace(Device::Open(o));
    }
    return *g_one_core;
}

// An empty program (no ops) resident on `dev`.
DeviceHandle EmptyProgram(Device& dev) {
    static std::map<Device*, DeviceHandle> programs;
    if (auto it = programs.find(&dev); it != programs.end()) return it->second;
    const std::vector<uint8_t> bytes = ProgramImage{}.Encode();
    const DeviceAllocation a = dev.allocator().Allocate(bytes.size());
    dev.default_stream().CopyToDevice(bytes.data(), a.handle, bytes.size());
    dev.default_stream().Synchronize();
    programs.emplace(&dev, a.handle);
    return a.handle;
}

// What one steady_clock read costs here (the median of many back to back):
// each individually timed sample includes one.
double ClockReadNs() {
    std::vector<double> d;
    for (int i = 0; i < 4096; ++i) {
        const auto t0 = Clock::now();
        d.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
    }
    std::sort(d.begin(), d.end());
    return d[d.size() / 2];
}

void BM_MutexPush(benchmark::State& state) {
    std::mutex mu;
    std::vector<uint64_t> v;
    v.reserve(1 << 20);
    auto t0 = Clock::now();
    uint64_t i = 0;
    for (auto _ : state) {
        std::lock_guard lock(mu);
        v.push_back(++i);
        if (v.size() == v.capacity()) v.clear();
    }
    g_baseline_ns["mutex_push"] = TimePerIteration(state, t0);
}

// Host cost of one async enqueue, under three conditions (docs/streams.md):
//   idle       the stream is empty and the scheduler thread asleep (2 ms after
//              a Synchronize): one enqueue, timed alone; it pays the futex
//              wake of the scheduler
//   burst      1024 enqueues back to back into an empty stream, timed
//              together (the first wakes the scheduler, which then drains
//              concurrently); a Synchronize between batches, not timed
//   draining   1024 enqueues back to back, timed together, while the
//              scheduler drains a backlog of 1024 ops queued just before: the
//              app competes with the scheduler thread (and, on 2 cores, the
//              device) for cores; then the same again with each enqueue
//              timed alone, for the spread (each sample includes a clock
//              read, printed as clock_ns)
// Each prints the mean per enqueue; `draining` also its p50 and p99, and how
// often the timed thread was preempted (preempted_per_1k enqueues).
enum class EnqueueLoad { Idle, Burst, Draining };

void BM_Enqueue(benchmark::State& state, bool copy, EnqueueLoad load) {
    Device& dev = AdaptiveDevice();
    FlexStream s = dev.CreateStream();
    const DeviceHandle program = EmptyProgram(dev);
    const DeviceAllocation target = dev.allocator().Allocate(8);
    const uint64_t value = 42;
    auto enqueue = [&] {
        if (copy)
            s.CopyToDevice(&value, target.handle, sizeof value);
        else
            s.Launch(program);
    };
    constexpr int kBatch = 1024;
    double preempted = 0;  // involuntary context switches in the timed blocks
    std::vector<double> samples;
    samples.reserve(size_t(state.max_iterations) * kBatch);
    double total_ns = 0;
    uint64_t count = 0;
    for (auto _ : state) {
        if (load == EnqueueLoad::Idle) {
            s.Synchronize();
            std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the scheduler is asleep by now
            const auto t0 = Clock::now();
            enqueue();
            const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
            samples.push_back(ns);
            total_ns += ns;
            ++count;
            state.SetIterationTime(ns / 1e9);
        } else if (load == EnqueueLoad::Burst) {
            const auto t0 = Clock::now();
            for (int i = 0; i < kBatch; ++i) enqueue();
            const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
            s.Synchronize();
            total_ns += ns;
            count += kBatch;
            state.SetIterationTime(ns / 1e9 / kBatch);
        } else {
            // The mean: a block of enqueues timed together while the
            // scheduler drains the backlog queued just before it.
            for (int i = 0; i < kBatch; ++i) enqueue();
            rusage r0, r1;
            getrusage(RUSAGE_THREAD, &r0);
            const auto t0 = Clock::now();
            for (int i = 0; i < kBatch; ++i) enqueue();
            const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
            getrusage(RUSAGE_THREAD, &r1);
            preempted += double(r1.ru_nivcsw - r0.ru_nivcsw);
            s.Synchronize();
            total_ns += ns;
            count += kBatch;
            state.SetIterationTime(ns / 1e9 / kBatch);
            // The spread: the same again, each enqueue timed alone (each
            // sample includes one clock read, clock_ns).
            for (int i = 0; i < kBatch; ++i) enqueue();
            for (int i = 0; i < kBatch; ++i) {
                const auto t1 = Clock::now();
                enqueue();
                samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t1).count());
            }
            s.Synchronize();
        }
    }
    s.Synchronize();
    dev.allocator().Free(target.handle);
    state.SetLabel("per enqueue, vs mutex lock+push");
    state.counters["mean_ns"] = count ? total_ns / double(count) : 0;
    if (!samples.empty()) {
        std::sort(samples.begin(), samples.end());
        state.counters["p50_ns"] = samples[samples.size() / 2];
        state.counters["p99_ns"] = samples[std::min(samples.size() - 1, samples.size() * 99 / 100)];
    }
    state.counters["baseline_ns"] = g_baseline_ns["mutex_push"];
    if (load == EnqueueLoad::Draining) {
        state.counters["preempted_per_1k"] = count ? preempted * 1024 / double(count) : 0;
        state.counters["clock_ns"] = ClockReadNs();
    }
}

// The raw ring NOP round trip per wait mode, on a private daemon configured
// as the launch_sync device is (the blocking one sleeps at once).
std::optional<RingNopDevice> g_ring_polling, g_ring_sleeping;
RingNopDevice& RingDevice(bool sleeps) {
    auto& slot = sleeps ? g_ring_sleeping : g_ring_polling;
    if (!slot) slot.emplace(sleeps ? std::vector<std::string>{"--poll-us", "0"} : std::vector<std::string>{});
    return *slot;
}
void BM_RingNop(benchmark::State& state, driver::WaitMode mode, const char* key) {
    RingNopRoundTrip(state, RingDevice(mode == driver::WaitMode::Blocking), mode, key);
}

void BM_LaunchSync(benchmark::State& state, Device& (*device)(), const char* baseline, const char* ring) {
    Device& dev = device();
    FlexStream& s = dev.default_stream();
    const DeviceHandle program = EmptyProgram(dev);
    RoundTrips trips;
    auto t0 = Clock::now();
    for (auto _ : state) {
        trips.Start();
        s.Launch(program);
        s.Synchronize();
        trips.Stop();
    }
    const double ns = TimePerIteration(state, t0), p50 = trips.Median();
    state.counters["p50_ns"] = p50;
    ReportAgainst(state, baseline, ns, p50);
    ReportAgainstRing(state, ring, ns, p50);
}

// Runs a, b and c in the order `turn` picks (abc, bca, cab), so drift of the
// machine during a run hits all three alike.
template <typename A, typename B, typename C>
void InRotation(uint32_t turn, A& a, B& b, C& c) {
    switch (turn % 3) {
        case 0: a(), b(), c(); break;
        case 1: b(), c(), a(); break;
        default: c(), a(), b(); break;
    }
}

// Launch + Synchronize, the raw ring NOP and the spin ping-pong of a polling
// (or adaptive) stack, interleaved: each iteration runs a block of each, in
// rotating order, so a change of the VM's speed mid-run (this one moves
// between spin ping-pongs of ~130 and ~600 ns) hits all three alike. Only one
// party spins at a time: the spin peer is parked and the other devices'
// ring servers fall asleep 50 us after their block; the first kWarmup round trips
// of a block (wake-ups) are not timed, the rest as one span per block.
void BM_PollPaired(benchmark::State& state, Device& (*device)(), driver::WaitMode mode) {
    constexpr int kWarmup = 256, kTimed = 1024;
    Device& dev = device();
    FlexStream& s = dev.default_stream();
    const DeviceHandle program = EmptyProgram(dev);
    RingNopDevice& ring = RingDevice(false);
    PingPongPeer peer(false);
    peer.Park();
    double launch_ns = 0, ring_ns = 0, spin_ns = 0;
    uint32_t i = 0, turn = 0;
    uint64_t tag = 0;
    bool ok = true;
    auto block = [&](double& sum, auto&& once) {
        for (int k = 0; k < kWarmup; ++k) once();
        const auto t0 = Clock::now();
        for (int k = 0; k < kTimed; ++k) once();
        sum += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    };
    auto launch = [&] {
        block(launch_ns, [&] {
            s.Launch(program);
            s.Synchronize();
        });
    };
    auto ring_nop = [&] { block(ring_ns, [&] { ok = RingNopOnce(ring, mode, ++tag) && ok; }); };
    auto spin = [&] {
        peer.Unpark();
        block(spin_ns, [&] { peer.RoundTrip(++i); });
        peer.Park();
    };
    for (auto _ : state) {
        InRotation(turn++, launch, ring_nop, spin);
    }
    if (!ok) state.SkipWithError("NOP completed wrongly");
    const double trips = double(state.iterations()) * kTimed;
    state.counters["launch_ns"] = launch_ns / trips;
    state.counters["ring_ns"] = ring_ns / trips;
    state.counters["spin_ns"] = spin_ns / trips;
    state.counters["x_ring"] = launch_ns / ring_ns;
    state.counters["ring_x_spin"] = ring_ns / spin_ns;
    state.SetLabel(std::string(driver::ToString(mode)) + ": launch vs ring NOP, ring NOP vs spin ping-pong, interleaved");
}

// Where the two ends of a blocking round trip run. This VM's scheduler
// sometimes puts a woken thread on its waker's vCPU and sometimes on an idle
// one, by each pair's history, and a round trip on one vCPU is about 1.5x
// faster (no IPI, no halted vCPU to wake): left free, the ping-pong and the
// ring land differently and the ratio measures placement, not software. So
// the paired benchmark also runs with every pair's ends pinned, across the
// two CPUs and all on one.
enum class Placement { Free, CrossCpu, SameCpu };

// The device-side threads of this process's mock daemons (the command ring's
// and the task queues' servers, named spyre-<bus:dev.fn> and spyre-t...).
std::vector<pid_t> DaemonServerThreads() {
    std::vector<pid_t> tids;
    for (const auto& proc : std::filesystem::directory_iterator("/proc")) {
        const std::string name = proc.path().filename();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        std::ifstream stat(proc.path() / "stat");
        std::string line;
        std::getline(stat, line);
        const size_t close = line.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream rest(line.substr(close + 2));
        char state;
        pid_t ppid = 0;
        rest >> state >> ppid;
        if (ppid != ::getpid()) continue;
        std::error_code ec;
        for (const auto& task : std::filesystem::directory_iterator(proc.path() / "task", ec)) {
            std::ifstream comm(task.path() / "comm");
            std::string c;
            std::getline(comm, c);
            if (c.rfind("spyre-", 0) == 0 && c.find(':') != std::string::npos)
                tids.push_back(pid_t(std::stoi(task.path().filename().string())));
        }
    }
    return tids;
}

// Pins thread `tid` to `cpu`, or gives it `all` back (cpu < 0). Returns
// false if the kernel refused.
bool PinTo(pid_t tid, int cpu, const cpu_set_t& all) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (cpu >= 0) CPU_SET(cpu, &set);
    return ::sched_setaffinity(tid, sizeof set, cpu >= 0 ? &set : &all) == 0;
}

// Launch+Synchronize in blocking mode (device asleep) paired with the futex
// ping-pong and the raw ring NOP of a sleeping device: one round trip of each
// per iteration, in rotating order, so a slow phase of this shared VM (its
// wake-ups vary 2x over minutes) hits the figure and its baselines alike;
// the separate benchmarks above run seconds apart. Prints the means and
// medians of all three and the launch's ratios to each, so a gap shows
// whether it lies in the ring and device (ring vs ping-pong) or in the
// stream layer (launch vs ring).
void BM_LaunchSyncBlockingPaired(benchmark::State& state, Placement placement) {
    Device& dev = BlockingDevice();
    FlexStream& s = dev.default_stream();
    const DeviceHandle program = EmptyProgram(dev);
    RingNopDevice& ring = RingDevice(true);
    PingPongPeer peer(true);
    // The first two CPUs this process may use: the app on one, the peers on
    // the other (CrossCpu) or on the same (SameCpu).
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    ::sched_getaffinity(0, sizeof allowed, &allowed);
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
        if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    if (placement == Placement::CrossCpu && cpus.size() < 2) return state.SkipWithError("needs 2 CPUs");
    const int here = placement == Placement::Free ? -1 : cpus[0];
    const int there = placement == Placement::Free ? -1 : placement == Placement::CrossCpu ? cpus[1] : cpus[0];
    auto unpin = [&] {
        PinTo(0, -1, allowed);
        for (pid_t tid : DaemonServerThreads()) PinTo(tid, -1, allowed);
    };
    bool pinned = PinTo(0, here, allowed) && PinTo(peer.pid(), there, allowed);
    for (pid_t tid : DaemonServerThreads()) pinned = PinTo(tid, there, allowed) && pinned;
    if (!pinned) {
        unpin();
        return state.SkipWithError("cannot set the threads' CPU affinity");
    }
    RoundTrips launches(1), rings(1), pingpongs(1);  // every call timed: the sums are the figures
    double launch_ns = 0, ring_ns = 0, pingpong_ns = 0;
    uint32_t i = 0, turn = 0;
    uint64_t tag = 0;
    auto launch = [&] {
        launches.Start();
        s.Launch(program);
        s.Synchronize();
        launches.Stop();
        launch_ns += launches.Last();
    };
    auto ring_nop = [&] {
        rings.Start();
        const bool ok = RingNopOnce(ring, driver::WaitMode::Blocking, ++tag);
        rings.Stop();
        ring_ns += rings.Last();
        if (!ok) state.SkipWithError("NOP completed wrongly");
    };
    auto pingpong = [&] {
        pingpongs.Start();
        peer.RoundTrip(++i);
        pingpongs.Stop();
        pingpong_ns += pingpongs.Last();
    };
    for (auto _ : state) {
        InRotation(turn++, launch, ring_nop, pingpong);
    }
    unpin();
    const double n = double(state.iterations());
    state.counters["launch_ns"] = launch_ns / n;
    state.counters["ring_ns"] = ring_ns / n;
    state.counters["pingpong_ns"] = pingpong_ns / n;
    state.counters["x_pingpong"] = launch_ns / pingpong_ns;
    state.counters["x_ring"] = launch_ns / ring_ns;
    state.counters["ring_x_pingpong"] = ring_ns / pingpong_ns;
    const double launch_p50 = launches.Median(), ring_p50 = rings.Median(), pingpong_p50 = pingpongs.Median();
    state.counters["launch_p50_ns"] = launch_p50;
    state.counters["ring_p50_ns"] = ring_p50;
    state.counters["pingpong_p50_ns"] = pingpong_p50;
    state.counters["x_pingpong_p50"] = launch_p50 / pingpong_p50;
    state.counters["x_ring_p50"] = launch_p50 / ring_p50;
    // The tail, where a mean above the median comes from (a lost wake-up
    // would show as a slowest round trip near a sleep timeout, 100 ms).
    state.counters["launch_p99_ns"] = launches.Quantile(0.99);
    state.counters["ring_p99_ns"] = rings.Quantile(0.99);
    state.counters["pingpong_p99_ns"] = pingpongs.Quantile(0.99);
    state.counters["launch_max_ns"] = launches.Quantile(1);
    state.counters["ring_max_ns"] = rings.Quantile(1);
    state.counters["pingpong_max_ns"] = pingpongs.Quantile(1);
    state.SetLabel("vs futex ping-pong and ring NOP, interleaved");
}

// The launch loop: 256 empty-kernel launches, then one Synchronize. Each
// iteration runs it twice, untraced and with a trace recording (started
// before, written after, neither timed), in alternating order, so drift of
// the machine hits both alike. Prints the median loop of each per launch and x_untraced, their
// ratio. Target: tracing < 5%.
void BM_LaunchLoopTraced(benchmark::State& state) {
    Device& dev = AdaptiveDevice();
    FlexStream& s = dev.default_stream();
    const DeviceHandle program = EmptyProgram(dev);
    constexpr int kLaunches = 256;
    const std::string path = "/tmp/spyre_stream_bench_trace.json";
    auto loop = [&] {
        const auto t0 = Clock::now();
        for (int i = 0; i < kLaunches; ++i) s.Launch(program);
        s.Synchronize();
        return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    };
    std::vector<double> plain, traced;
    double events = 0;
    bool traced_first = false;
    for (auto _ : state) {
        // Which runs first alternates: the first of a pair starts after a
        // pause (the trace file written) and pays for the wake-ups.
        if (!traced_first) plain.push_back(loop());
        trace::Start(path);
        traced.push_back(loop());
        events += double(trace::Stop());
        if (traced_first) plain.push_back(loop());
        traced_first = !traced_first;
        state.SetIterationTime(traced.back() / 1e9);
    }
    std::remove(path.c_str());
    // Medians: a loop now and then runs 2x slower either way (the scheduler
    // or the device went to sleep mid-loop); the median ignores those.
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.empty() ? 0.0 : v[v.size() / 2];
    };
    state.counters["per_launch_ns"] = median(traced) / kLaunches;
    state.counters["untraced_ns"] = median(plain) / kLaunches;
    state.counters["x_untraced"] = median(traced) / median(plain);
    state.counters["events_per_launch"] = events / (double(state.iterations()) * kLaunches);
    state.SetLabel("per launch traced, vs the same loop untraced");
}

// What one probe costs with a trace recording: a SPYRE_TRACE_SCOPE (two
// clock reads and one record), beside one clock read. A launch records
// about 4 events (events_per_launch above).
// The thread's trace buffers are kept between recordings: the first
// recording pays for touching fresh memory (first_recording_ns), the timed
// one writes where the first did.
void BM_TraceScope(benchmark::State& state) {
    const std::string path = "/tmp/spyre_stream_bench_probe.json";
    const int64_t n = state.max_iterations;
    trace::Start(path);
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < n; ++i) {
        SPYRE_TRACE_SCOPE("probe");
    }
    const double first_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / double(n);
    trace::Stop();
    trace::Start(path);
    for (auto _ : state) {
        SPYRE_TRACE_SCOPE("probe");
    }
    trace::Stop();
    std::remove(path.c_str());
    state.counters["first_recording_ns"] = first_ns;
    state.counters["clock_read_ns"] = ClockReadNs() / 2;
    state.SetLabel("one traced scope, vs one steady_clock read");
}

// A 32^3 fp32 matmul tile run over M = 32 * iterations rows.
struct TiledSetup {
    std::shared_ptr<const ExecutionPlan> plan;
    std::vector<SpyreTensor> tile_tensors, big_tensors;
};
TiledSetup MakeTiled(Device& dev, SpyreStream& s, int64_t iterations) {
    const int64_t t = 32;
    TiledSetup out;
    out.plan = LoadExecutionPlan(s, CompilerOutputFromKernel("mm32", KernelBuilder().Matmul(t, t, t, DType::FP32)));
    std::vector<float> zeros(size_t(t * iterations * t), 0.0f);
    out.tile_tensors = {SpyreTensor::FromHost(dev, s.flex_stream(), zeros.data(), {t, t}, DType::FP32),
                        SpyreTensor::FromHost(dev, s.flex_stream(), zeros.data(), {t, t}, DType::FP32),
                        SpyreTensor::Empty(dev, {t, t}, DType::FP32)};
    out.big_tensors = {SpyreTensor::FromHost(dev, s.flex_stream(), zeros.data(), {t * iterations, t}, DType::FP32),
                       out.tile_tensors[1], SpyreTensor::Empty(dev, {t * iterations, t}, DType::FP32)};
    s.Synchronize();
    return out;
}

std::map<std::string, double> g_tile_ns;

void BM_LaunchOneTile(benchmark::State& state) {
    Device& dev = AdaptiveDevice();
    SpyreStream s(dev);
    TiledSetup setup = MakeTiled(dev, s, 64);
    auto t0 = Clock::now();
    for (auto _ : state) {
        LaunchKernel(s, *setup.plan, setup.tile_tensors);
        s.Synchronize();
    }
    g_tile_ns["one"] = TimePerIteration(state, t0);
}

void BM_LaunchTiled(benchmark::State& state) {
    Device& dev = AdaptiveDevice();
    SpyreStream s(dev);
    const int64_t iterations = state.range(0);
    TiledSetup setup = MakeTiled(dev, s, iterations);
    auto t0 = Clock::now();
    for (auto _ : state) {
        LaunchKernel(s, *setup.plan, setup.big_tensors);
        s.Synchronize();
    }
    const double per_iteration = TimePerIteration(state, t0) / double(iterations);
    state.counters["per_tile_ns"] = per_iteration;
    state.SetLabel("per tile vs one Launch+Synchronize of the tile");
    if (g_tile_ns.count("one")) {
        state.counters["one_launch_ns"] = g_tile_ns["one"];
        state.counters["x_one_launch"] = per_iteration / g_tile_ns["one"];
    }
}

// Chunks of A[1024,256] x B[256,256] with copies in and out.
struct OverlapSetup {
    static constexpr int64_t kChunks = 8, kRows = 1024, kK = 256, kN = 256;
    std::shared_ptr<const ExecutionPlan> plan;
    std::vector<std::vector<float>> a, c;
    std::vector<SpyreTensor> buffers;  // a0 a1 b c0 c1
};
OverlapSetup MakeOverlap(Device& dev, SpyreStream& s) {
    OverlapSetup o;
    o.plan = LoadExecutionPlan(
        s, CompilerOutputFromKernel("mm_overlap", KernelBuilder().Matmul(o.kRows, o.kK, o.kN, DType::FP32)));
    o.a.assign(o.kChunks, std::vector<float>(size_t(o.kRows * o.kK), 0.5f));
    o.c.assign(o.kChunks, std::vector<float>(size_t(o.kRows * o.kN), 0.0f));
    std::vector<float> b(size_t(o.kK * o.kN), 0.25f);
    o.buffers = {SpyreTensor::Empty(dev, {o.kRows, o.kK}, DType::FP32), SpyreTensor::Empty(dev, {o.kRows, o.kK}, DType::FP32),
                 SpyreTensor::FromHost(dev, s.flex_stream(), b.data(), {o.kK, o.kN}, DType::FP32),
                 SpyreTensor::Empty(dev, {o.kRows, o.kN}, DType::FP32), SpyreTensor::Empty(dev, {o.kRows, o.kN}, DType::FP32)};
    s.Synchronize();
    return o;
}

std::map<Device*, double> g_one_stream_ns;  // per card, for two_streams to compare with

void BM_OverlapOneStream(benchmark::State& state, Device& (*device)()) {
    Device& dev = device();
    SpyreStream s(dev);
    OverlapSetup o = MakeOverlap(dev, s);
    const uint64_t a_bytes = uint64_t(o.kRows * o.kK) * 4, c_bytes = uint64_t(o.kRows * o.kN) * 4;
    auto t0 = Clock::now();
    for (auto _ : state) {
        for (int64_t i = 0; i < o.kChunks; ++i) {
            const size_t buf = size_t(i % 2);
            s.flex_stream().CopyToDevice(o.a[size_t(i)].data(), o.buffers[buf].device_handle(), a_bytes);
            const std::vector<SpyreTensor> t = {o.buffers[buf], o.buffers[2], o.buffers[3 + buf]};
            LaunchKernel(s, *o.plan, t);
            s.flex_stream().CopyFromDevice(o.c[size_t(i)].data(), o.buffers[3 + buf].device_handle(), c_bytes);
        }
        s.Synchronize();
    }
    g_one_stream_ns[&dev] = TimePerIteration(state, t0);
}

void BM_OverlapTwoStreams(benchmark::State& state, Device& (*device)()) {
    Device& dev = device();
    SpyreStream copy(dev), compute(dev);
    OverlapSetup o = MakeOverlap(dev, copy);
    const uint64_t a_bytes = uint64_t(o.kRows * o.kK) * 4, c_bytes = uint64_t(o.kRows * o.kN) * 4;
    std::vector<Event> copied, computed, drained;
    for (int64_t i = 0; i < o.kChunks; ++i) {
        copied.emplace_back(dev);
        computed.emplace_back(dev);
        drained.emplace_back(dev);
    }
    auto copy_in = [&](int64_t i) {
        copy.flex_stream().CopyToDevice(o.a[size_t(i)].data(), o.buffers[size_t(i % 2)].device_handle(), a_bytes);
        copied[size_t(i)].Record(copy.flex_stream());
    };
    auto t0 = Clock::now();
    for (auto _ : state) {
        copy_in(0);
        for (int64_t i = 0; i < o.kChunks; ++i) {
            const size_t buf = size_t(i % 2);
            compute.flex_stream().Wait(copied[size_t(i)]);
            if (i >= 2) compute.flex_stream().Wait(drained[size_t(i - 2)]);
            const std::vector<SpyreTensor> t = {o.buffers[buf], o.buffers[2], o.buffers[3 + buf]};
            LaunchKernel(compute, *o.plan, t);
            computed[size_t(i)].Record(compute.flex_stream());
            if (i + 1 < o.kChunks) copy_in(i + 1);
            copy.flex_stream().Wait(computed[size_t(i)]);
            copy.flex_stream().CopyFromDevice(o.c[size_t(i)].data(), o.buffers[3 + buf].device_handle(), c_bytes);
            drained[size_t(i)].Record(copy.flex_stream());
        }
        copy.Synchronize();
        compute.Synchronize();
    }
    const double ns = TimePerIteration(state, t0);
    state.SetLabel("vs the same work on one stream");
    const double one = g_one_stream_ns[&dev];
    state.counters["one_stream_ns"] = one;
    state.counters["x_one_stream"] = one ? ns / one : 0;
}

}  // namespace

int main(int argc, char** argv) {
    // Every device here is a private mock of this run.
    ::setenv("FLEX_DEVICE", "MOCK", 1);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    // Registration order is run order: each baseline runs before its figure.
    benchmark::RegisterBenchmark("baseline/mutex_push", BM_MutexPush)->UseRealTime();
    for (const bool copy : {false, true}) {
        const std::string op = copy ? "enqueue/copy_8B/" : "enqueue/launch/";
        benchmark::RegisterBenchmark((op + "idle").c_str(), BM_Enqueue, copy, EnqueueLoad::Idle)
            ->UseManualTime()->Iterations(200);
        benchmark::RegisterBenchmark((op + "burst").c_str(), BM_Enqueue, copy, EnqueueLoad::Burst)
            ->UseManualTime()->Iterations(500);
        benchmark::RegisterBenchmark((op + "draining").c_str(), BM_Enqueue, copy, EnqueueLoad::Draining)
            ->UseManualTime()->Iterations(200);
    }
    benchmark::RegisterBenchmark("baseline/spin_pingpong", BM_SpinPingPongTimed)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("baseline/futex_pingpong", BM_FutexPingPong)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("baseline/ring_nop/poll", BM_RingNop, driver::WaitMode::Poll, "ring_poll")
        ->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("baseline/ring_nop/adaptive", BM_RingNop, driver::WaitMode::Adaptive, "ring_adaptive")
        ->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("baseline/ring_nop/blocking_device_sleeps", BM_RingNop, driver::WaitMode::Blocking,
                                 "ring_blocking")->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("launch_sync/poll", BM_LaunchSync, PollDevice, "spin", "ring_poll")
        ->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("launch_sync/adaptive", BM_LaunchSync, AdaptiveDevice, "spin", "ring_adaptive")
        ->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("launch_sync/poll_paired", BM_PollPaired, PollDevice, driver::WaitMode::Poll)
        ->UseRealTime()->MinTime(2.0);
    benchmark::RegisterBenchmark("launch_sync/adaptive_paired", BM_PollPaired, AdaptiveDevice,
                                 driver::WaitMode::Adaptive)
        ->UseRealTime()->MinTime(2.0);
    benchmark::RegisterBenchmark("trace/scope", BM_TraceScope)->Iterations(1 << 20);
    benchmark::RegisterBenchmark("launch_loop/traced_vs_untraced", BM_LaunchLoopTraced)->Iterations(300)->UseManualTime();
    benchmark::RegisterBenchmark("launch_sync/blocking_device_sleeps", BM_LaunchSync, BlockingDevice, "futex",
                                 "ring_blocking")->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("launch_sync/blocking_device_sleeps_paired", BM_LaunchSyncBlockingPaired,
                                 Placement::Free)
        ->UseRealTime()->MinTime(1.0);
    benchmark::RegisterBenchmark("launch_sync/blocking_device_sleeps_paired/cross_cpu", BM_LaunchSyncBlockingPaired,
                                 Placement::CrossCpu)
        ->UseRealTime()->MinTime(1.0);
    benchmark::RegisterBenchmark("launch_sync/blocking_device_sleeps_paired/same_cpu", BM_LaunchSyncBlockingPaired,
                                 Placement::SameCpu)
        ->UseRealTime()->MinTime(1.0);
    benchmark::RegisterBenchmark("launch_tiled/one_tile", BM_LaunchOneTile)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("launch_tiled/tiles", BM_LaunchTiled)->Arg(4)->Arg(64)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("overlap/one_stream", BM_OverlapOneStream, AdaptiveDevice)->UseRealTime()->MinTime(1.0);
    benchmark::RegisterBenchmark("overlap/two_streams", BM_OverlapTwoStreams, AdaptiveDevice)->UseRealTime()->MinTime(1.0);
    benchmark::RegisterBenchmark("overlap/card_of_one_core/one_stream", BM_OverlapOneStream, OneCoreDevice)
        ->UseRealTime()->MinTime(1.0);
    benchmark::RegisterBenchmark("overlap/card_of_one_core/two_streams", BM_OverlapTwoStreams, OneCoreDevice)
        ->UseRealTime()->MinTime(1.0);
    return spyre::bench::RunBenchmarks("stream_bench", std::chrono::seconds(240), [] {
        g_poll.reset();
        g_adaptive.reset();
        g_blocking.reset();
        g_one_core.reset();
        g_ring_polling.reset();
        g_ring_sleeping.reset();
    });
}
