// SPDX-License-Identifier: Apache-2.0
// Host-level (level 3) orchestration: what the Worker costs and how chip
// work scales over devices, each beside a baseline measured in this run.
//
//   dispatch/empty_tasks:N   one run of N chip tasks that submit nothing, on
//                            one device: the Worker's own cost. Fitted as
//                            per run + N x per task; the reference runtime
//                            (simpler) measures 43.3 us per run + 8.08 us per
//                            task, the target is 10 us + 1 us.
//   dispatch_traced/empty_tasks:N  the same while a trace records (the
//                            host-level probes' cost, beside the untraced runs)
//   baseline/thread_handoff  a job handed to another thread and its completion
//                            handed back (condition variables): the floor of
//                            any runtime that runs chip tasks on device threads
//   baseline/chip_direct     the device's chip runtime called directly (an
//                            empty scope and WaitAll on its Orchestrator)
//   throughput/devices:D     64 independent chip matmul tasks (64x128x128 on a
//                            card core each) over D = 1, 2, 4, 8 VFs of a
//                            4-card mock, beside D = 1 in this run
//   throughput_big/devices:D the same with 16 tasks of 256x256x256 (33 MFLOP
//                            each): compute rather than per-task overhead
//   baseline/host_blas:R     the same independent matmuls (R = 64: 64 of
//                            64x128x128; R = 256: 16 of 256x256x256) as
//                            cblas_sgemm on the host, spread over one thread
//                            per core, each sgemm on its caller's thread
//                            (OpenBLAS's own pool off: it would fight the
//                            callers for the cores): the throughputs'
//                            baseline on the same cores
//   baseline/host_blas_with_copies:64  the R = 64 matmuls with the copies
//                            each chip task makes (A and B in, C out, as
//                            memcpy): what the chip path could reach on
//                            these cores if dispatch cost nothing
//   residency/reuse:B        a run of one chip task (chip_empty) reading an
//                            unchanged B-byte tensor whose device copy is
//                            kept: each 64 KiB chunk hashed, found unchanged,
//                            nothing uploaded
//   residency/one_changed:B  the same with one element written before each
//                            run (outside the timing): one chunk uploaded
//   residency/all_changed:B  every element written before each run: every
//                            chunk hashed and uploaded (a re-upload)
//   residency/tiny_run       the same run over a 4-byte tensor: the run's own
//                            cost (about what reuse cost before the check)
//   bytes/memcpy:B           memcpy of the same B bytes between two host
//                            buffers: the baseline of the runs above
//   bytes/check:B, bytes/reupload:B, bytes/copy_hashing:B  the bytes' part
//                            alone, on host buffers laid out as an upload's
//                            (a page-aligned destination, the source 16 bytes
//                            into a page): the check of an unchanged range,
//                            of a changed one (hash each chunk, then copy the
//                            ranges that changed), and a copy followed by the
//                            hashes of what it copied (a download)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "bench_main.hpp"
#include "host/content_hash.hpp"  // internal: the hash of the residency check
#include "spyre/compiler/kernel_builder.hpp"
#include "l3_chip_functions.hpp"
#include "spyre/host.hpp"
#include "spyre/trace/trace.hpp"
#include "spyre/common/openblas_kernels.hpp"

using namespace spyre;
using namespace spyre::l3;

namespace {

using Clock = std::chrono::steady_clock;

std::optional<Host> g_host;
std::map<int, std::unique_ptr<Worker>> g_workers;  // by device count
std::map<std::string, double> g_us;                // figures for the summary

Host& TheHost() {
    if (!g_host) {
        g_host.emplace(Host::Open(HostOptions::EmbeddedMock(4, 2, "2G")));
    }
    return *g_host;
}

// A Worker over the first `devices` VFs, spread over the cards first.
Worker& WorkerOver(int devices) {
    auto& w = g_workers[devices];
    if (!w) {
        g_workers.clear();  // one Worker at a time: each holds its devices
        Host& host = TheHost();
        std::vector<int> vfs;
        for (int vf = 1; vf <= 2; ++vf)
            for (const auto& f : host.functions())
                if (f.id.function == vf) vfs.push_back(int(f.index));
        DistributedConfig c;
        c.device_ids.assign(vfs.begin(), vfs.begin() + devices);
        c.num_sub_workers = 1;
        auto made = std::make_unique<Worker>(host, c);
        RegisterChipFunctions(*made, 64, 128, 128);
        made->RegisterKernel(KERNEL_MATMUL_2, KernelBuilder().Matmul(256, 256, 256, DType::FP32).program);
        made->RegisterChipFunction("chip_matmul_big", ChipMatmul(256, 256, 256, KERNEL_MATMUL_2));
        g_workers[devices] = std::move(made);
    }
    return *g_workers[devices];
}

// CPU seconds (user + system) of this process and of its children (the
// embedded mock's daemon): what a run costs the host's cores whatever else
// runs on them, so it moves far less with other jobs' load than a rate does.
double TreeCpuSeconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    double s = double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
    const double tick = double(sysconf(_SC_CLK_TCK));
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
        std::ifstream f(e.path() / "stat");
        std::string stat;
        if (!std::getline(f, stat)) continue;
        const size_t paren = stat.rfind(')');
        if (paren == std::string::npos) continue;
        // After the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
        char state = 0;
        long ppid = 0;
        unsigned long skip = 0, utime = 0, stime = 0;
        if (std::sscanf(stat.c_str() + paren + 1, " %c %ld %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu", &state, &ppid, &skip,
                        &skip, &skip, &skip, &skip, &skip, &skip, &skip, &skip, &utime, &stime) == 13 &&
            ppid == long(getpid()))
            s += double(utime + stime) / tick;
    }
    return s;
}

double UsPerIteration(benchmark::State& state, Clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(state.iterations());
}

void BM_ThreadHandoff(benchmark::State& state) {
    std::mutex mu;
    std::condition_variable to_worker, to_caller;
    int posted = 0, done = 0;
    bool stop = false;
    std::thread t([&] {
        std::unique_lock lock(mu);
        for (;;) {
            to_worker.wait(lock, [&] { return stop || posted > done; });
            if (stop) return;
            ++done;
            to_caller.notify_one();
        }
    });
    const auto t0 = Clock::now();
    for (auto _ : state) {
        std::unique_lock lock(mu);
        ++posted;
        to_worker.notify_one();
        to_caller.wait(lock, [&] { return done == posted; });
    }
    g_us["handoff"] = UsPerIteration(state, t0);
    state.counters["us"] = g_us["handoff"];
    {
        std::lock_guard lock(mu);
        stop = true;
    }
    to_worker.notify_one();
    t.join();
}

void BM_ChipDirect(benchmark::State& state) {
    // The runtime a chip task runs on, without the Worker: its own Orchestrator on a VF.
    Host& host = TheHost();
    g_workers.clear();
    Device dev = host.Open("1");
    Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 1024, .heap_size = 1 << 20});
    const auto t0 = Clock::now();
    for (auto _ : state) {
        { auto scope = orch.BeginScope(); }
        orch.WaitAll();
    }
    g_us["chip_direct"] = UsPerIteration(state, t0);
    state.counters["us"] = g_us["chip_direct"];
}

// `traced`: one recording spans every iteration (started before the first,
// written after the last, both outside the timed loop), to price the
// host-level probes against the same runs untraced in this run.
void BM_Dispatch(benchmark::State& state, bool traced) {
    const int n = int(state.range(0));
    Worker& w = WorkerOver(1);
    HostProgram p{"empty", 0, {}, [n](HostGraph& g, std::span<const HostTensor>) {
                      for (int i = 0; i < n; ++i) g.Chip("chip_empty", {});
                  }};
    const std::string trace_path = "/tmp/spyre_host_bench_" + std::to_string(getpid()) + ".json";
    if (traced) spyre::trace::Start(trace_path);
    const auto t0 = Clock::now();
    for (auto _ : state) w.Run(p, {});
    const double us = UsPerIteration(state, t0);
    if (traced) {
        spyre::trace::Stop();
        std::remove(trace_path.c_str());
    }
    const std::string key = std::string(traced ? "dispatch_traced_" : "dispatch_") + std::to_string(n);
    g_us[key] = us;
    state.counters["us_per_run"] = us;
    state.counters["us_per_task"] = us / n;
    if (traced && g_us.count("dispatch_" + std::to_string(n)))
        state.counters["x_untraced"] = us / g_us["dispatch_" + std::to_string(n)];
}

// `tasks` independent chip matmuls of rows x k x k over the first `devices` VFs.
void Throughput(benchmark::State& state, const std::string& key, const char* function, int tasks, int64_t rows, int64_t k) {
    const int devices = int(state.range(0));
    Worker& w = WorkerOver(devices);
    std::vector<HostTensor> a, c;
    for (int i = 0; i < tasks; ++i) a.push_back(HostTensor::Full({rows, k}, 0.5f)), c.push_back(HostTensor::Zeros({rows, k}));
    HostTensor b = HostTensor::Full({k, k}, 0.25f);
    HostProgram p{"independent", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                      for (int i = 0; i < tasks; ++i) g.Chip(function, {In(a[i]), In(b), Out(c[i])});
                  }};
    const double cpu0 = TreeCpuSeconds();
    const auto t0 = Clock::now();
    for (auto _ : state) w.Run(p, {});
    const double us = UsPerIteration(state, t0);
    const double cpu_us = (TreeCpuSeconds() - cpu0) * 1e6 / double(state.iterations() * tasks);
    // One more run, untimed, into zeroed outputs: every element of every C
    // must be computed again (no copy the device kept stands in for it).
    for (HostTensor& t : c) std::fill(t.floats().begin(), t.floats().end(), 0.0f);
    w.Run(p, {});
    for (int i = 0; i < tasks; ++i)
        for (float x : c[i].floats())
            if (x != 0.5f * 0.25f * float(k)) {
                state.SkipWithError("wrong matmul result");
                return;
            }
    const double per_s = tasks / (us * 1e-6);
    g_us[key + std::to_string(devices)] = per_s;
    g_us[key + "cpu_" + std::to_string(devices)] = cpu_us;
    state.counters["chip_tasks_per_s"] = per_s;
    state.counters["cpu_us_per_task"] = cpu_us;
    if (g_us.count(key + "1")) state.counters["x_1_device"] = per_s / g_us[key + "1"];
    if (g_us.count(key + "blas")) state.counters["x_host_blas"] = per_s / g_us[key + "blas"];
}
// The throughputs' matmuls on the host: `tasks` sgemms of rows x k x k,
// split over one thread per core. `copies`: each with the copies its chip
// task makes (A and B into device memory, C back out; memcpy between host
// buffers, the cheapest such copy), on the same threads: the bound of the
// chip path on these cores if dispatch cost nothing.
void BM_HostBlas(benchmark::State& state, bool copies) {
    const int64_t rows = state.range(0) == 64 ? 64 : 256, k = state.range(0) == 64 ? 128 : 256;
    const int tasks = state.range(0) == 64 ? 64 : 16;
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::vector<float>> a(tasks, std::vector<float>(size_t(rows * k), 0.5f)), c(tasks, std::vector<float>(size_t(rows * k)));
    const std::vector<float> b(size_t(k * k), 0.25f);
    struct Staging {  // one "device copy" of a task's tensors per thread
        std::vector<float> a, b, c;
    };
    std::vector<Staging> staging(copies ? threads : 0, Staging{std::vector<float>(size_t(rows * k)),
                                                               std::vector<float>(size_t(k * k)),
                                                               std::vector<float>(size_t(rows * k))});
    auto share = [&](unsigned t) {
        for (int i = int(t); i < tasks; i += int(threads)) {
            const float* in_a = a[i].data();
            const float* in_b = b.data();
            float* out = c[i].data();
            if (copies) {
                Staging& st = staging[t];
                std::memcpy(st.a.data(), in_a, st.a.size() * 4);
                std::memcpy(st.b.data(), in_b, st.b.size() * 4);
                in_a = st.a.data(), in_b = st.b.data(), out = st.c.data();
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(k), int(k), 1.0f, in_a, int(k), in_b,
                        int(k), 0.0f, out, int(k));
            if (copies) std::memcpy(c[i].data(), out, c[i].size() * 4);
        }
    };
    openblas_set_num_threads(1);  // this process's BLAS only: the mock cards are other processes
    // The other threads live through the whole benchmark and look for each
    // iteration's start (yielding): a thread started per iteration cost
    // about 60 us of a 1 ms iteration on these VMs, a handicap the BLAS
    // does not have in a program that keeps its threads.
    std::atomic<uint64_t> round{0};
    std::atomic<unsigned> finished{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t)
        pool.emplace_back([&, t] {
            for (uint64_t seen = 0;;) {
                while (round.load(std::memory_order_acquire) == seen) std::this_thread::yield();
                if (stop.load(std::memory_order_acquire)) return;
                ++seen;
                share(t);
                finished.fetch_add(1, std::memory_order_release);
            }
        });
    const double cpu0 = TreeCpuSeconds();
    const auto t0 = Clock::now();
    for (auto _ : state) {
        finished.store(0, std::memory_order_relaxed);
        round.fetch_add(1, std::memory_order_release);
        share(0);
        while (finished.load(std::memory_order_acquire) != threads - 1) std::this_thread::yield();
    }
    const double us = UsPerIteration(state, t0);
    stop.store(true, std::memory_order_release);
    round.fetch_add(1, std::memory_order_release);
    for (auto& t : pool) t.join();
    if (c[tasks - 1][0] != 0.5f * 0.25f * float(k)) state.SkipWithError("wrong BLAS result");
    const double cpu_us = (TreeCpuSeconds() - cpu0) * 1e6 / double(state.iterations() * tasks);
    const double per_s = tasks / (us * 1e-6);
    const std::string key = std::string(rows == 64 ? "throughput_" : "throughput_big_") + "blas";
    g_us[key + (copies ? "_with_copies" : "")] = per_s;
    if (!copies) g_us[std::string(rows == 64 ? "throughput_" : "throughput_big_") + "cpu_blas"] = cpu_us;
    state.counters["matmuls_per_s"] = per_s;
    state.counters["cpu_us_per_matmul"] = cpu_us;
    if (copies && g_us.count(key)) state.counters["x_host_blas"] = per_s / g_us[key];
}

void BM_Throughput(benchmark::State& state) { Throughput(state, "throughput_", "chip_matmul", 64, 64, 128); }
void BM_ThroughputBig(benchmark::State& state) { Throughput(state, "throughput_big_", "chip_matmul_big", 16, 256, 256); }

// One chip task reading x[0] on the Worker's device 0.
const HostProgram& ReadOnOneDevice() {
    static const HostProgram p{"read", 1, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                                   g.Chip("chip_empty", {In(x[0])}, {.device = 0});
                               }};
    return p;
}

// What is written before each run (outside the timing).
enum class Change { None, OneElement, All };

void BM_Residency(benchmark::State& state, Change change) {
    const int64_t bytes = state.range(0);
    Worker& w = WorkerOver(1);
    HostTensor t = HostTensor::Zeros({bytes / int64_t(sizeof(float))});
    w.Run(ReadOnOneDevice(), {t});  // the first upload
    const uint64_t uploaded_before = w.Stats(0).moved.bytes_uploaded;
    double us = 0;
    for (auto _ : state) {
        if (change == Change::OneElement) t.floats()[0] += 1.0f;
        if (change == Change::All)
            for (float& x : t.floats()) x += 1.0f;
        const auto t0 = Clock::now();
        w.Run(ReadOnOneDevice(), {t});
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        state.SetIterationTime(s);
        us += s * 1e6;
    }
    us /= double(state.iterations());
    const uint64_t per_run[] = {0, std::min<uint64_t>(uint64_t(bytes), host::kHashChunk), uint64_t(bytes)};
    if (w.Stats(0).moved.bytes_uploaded - uploaded_before != per_run[int(change)] * state.iterations())
        state.SkipWithError("uploads not as expected");
    const char* name[] = {"reuse_", "one_changed_", "all_changed_"};
    g_us[name[int(change)] + std::to_string(bytes)] = us;
    state.counters["us_per_run"] = us;
    state.SetBytesProcessed(int64_t(state.iterations()) * bytes);
}

// The bytes' part alone, on host buffers laid out as an upload's.
enum class BytesOp { Memcpy, Check, Reupload, CopyHashing };
void BM_Bytes(benchmark::State& state, BytesOp op) {
    const size_t bytes = size_t(state.range(0));
    struct Free {
        void operator()(unsigned char* p) const { std::free(p); }
    };
    std::unique_ptr<unsigned char, Free> dst(static_cast<unsigned char*>(std::aligned_alloc(4096, bytes))),
        src_page(static_cast<unsigned char*>(std::aligned_alloc(4096, bytes + 4096)));
    unsigned char* src = src_page.get() + 16;  // as a large std::vector's bytes lie
    std::memset(src, 1, bytes);
    std::memset(dst.get(), 0, bytes);
    host::ChunkHashes held;
    std::memcpy(dst.get(), src, bytes);
    host::HashChunks(src, bytes, held);
    const host::ChunkHashes current = held;
    // What an upload does with the ranges that changed (here a memcpy stands for the DMA).
    auto reupload = [&] {
        for (const host::ByteRange& r : host::ChangedRanges(src, bytes, held))
            std::memcpy(dst.get() + r.offset, src + r.offset, r.bytes);
    };
    const auto t0 = Clock::now();
    for (auto _ : state) {
        switch (op) {
        case BytesOp::Memcpy: std::memcpy(dst.get(), src, bytes); break;
        case BytesOp::Check: reupload(); break;  // nothing changed: hashes only
        case BytesOp::Reupload:
            std::fill(held.begin(), held.end(), host::ContentHash{});  // as if every chunk had changed
            reupload();
            break;
        case BytesOp::CopyHashing:  // a download: the copy, then the hashes of what came
            std::memcpy(dst.get(), src, bytes);
            host::HashChunks(dst.get(), bytes, held);
            break;
        }
        benchmark::ClobberMemory();
    }
    const double us = UsPerIteration(state, t0);
    if (held != current) state.SkipWithError("wrong hashes");
    const char* name[] = {"memcpy_", "check_", "reupload_", "copy_hashing_"};
    g_us[name[int(op)] + std::to_string(bytes)] = us;
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}

void BM_TinyRun(benchmark::State& state) {
    Worker& w = WorkerOver(1);
    HostTensor t = HostTensor::Zeros({1});
    w.Run(ReadOnOneDevice(), {t});
    const auto t0 = Clock::now();
    for (auto _ : state) w.Run(ReadOnOneDevice(), {t});
    g_us["tiny_run"] = UsPerIteration(state, t0);
    state.counters["us_per_run"] = g_us["tiny_run"];
}

constexpr int64_t kResidencySizes[] = {64 << 10, 1 << 20, 16 << 20, 64 << 20};

void Summary() {
    auto at = [](const std::string& k) { return g_us.count(k) ? g_us[k] : 0.0; };
    const double t1 = at("dispatch_1"), t64 = at("dispatch_64");
    const double per_task = (t64 - t1) / 63, per_run = t1 - per_task;
    std::printf("\n");
    if (t1 > 0 && t64 > 0) {
        std::printf("L3 dispatch, empty chip tasks on 1 device (%u host cores):\n", std::thread::hardware_concurrency());
        std::printf("  per run %.2f us + per task %.2f us   (reference runtime 43.3 + 8.08 us; target 10 + 1 us)\n", per_run,
                    per_task);
        const double tt1 = at("dispatch_traced_1"), tt64 = at("dispatch_traced_64");
        if (tt1 > 0 && tt64 > 0) {
            const double tper_task = (tt64 - tt1) / 63;
            std::printf("  traced (a recording over 2000 runs): per run %.2f us + per task %.2f us (%.2fx / %.2fx untraced)\n",
                        tt1 - tper_task, tper_task, t1 > 0 ? tt1 / t1 : 0.0, t64 > 0 ? tt64 / t64 : 0.0);
        }
        std::printf("  beside, same run: thread handoff round trip %.2f us, chip runtime alone (empty scope + WaitAll) %.2f us\n",
                    at("handoff"), at("chip_direct"));
    }
    if (at("tiny_run") > 0) {
        std::printf("L3 residency check of a kept device copy, one chip task reading one tensor (us per run; "
                    "a run over 4 bytes: %.1f us):\n", at("tiny_run"));
        std::printf("  %9s %10s | %-20s %-20s %-20s | bytes alone: %-16s %-16s %-16s\n", "bytes", "memcpy", "reuse run",
                    "one changed run", "all changed run", "check", "reupload", "copy+hash");
        for (int64_t b : kResidencySizes) {
            const std::string n = std::to_string(b);
            const double m = at("memcpy_" + n);
            auto cell = [&](const std::string& key) {
                char s[32];
                std::snprintf(s, sizeof s, "%.1f us (%.2fx)", at(key + n), at(key + n) / m);
                return std::string(s);
            };
            std::printf("  %9lld %7.1f us | %-20s %-20s %-20s |              %-16s %-16s %-16s\n", (long long)b, m,
                        cell("reuse_").c_str(), cell("one_changed_").c_str(), cell("all_changed_").c_str(),
                        cell("check_").c_str(), cell("reupload_").c_str(), cell("copy_hashing_").c_str());
        }
        std::printf("  (x: ratio to memcpy of the same bytes in this run)\n");
    }
    for (const char* key : {"throughput_", "throughput_big_"}) {
        std::printf("L3 throughput, %s:\n", key == std::string("throughput_") ? "64 independent 64x128x128 chip matmuls"
                                                                              : "16 independent 256x256x256 chip matmuls");
        const double blas_cpu = at(key + std::string("cpu_blas"));
        if (at(key + std::string("blas")) > 0)
            std::printf("  host BLAS, one thread per core: %.0f matmuls/s, %.1f us CPU per matmul\n", at(key + std::string("blas")),
                        blas_cpu);
        if (at(key + std::string("blas_with_copies")) > 0)
            std::printf("  the same with each chip task's copies (memcpy in and out): %.0f matmuls/s (%.2fx of host BLAS)\n",
                        at(key + std::string("blas_with_copies")),
                        at(key + std::string("blas_with_copies")) / at(key + std::string("blas")));
        for (int d : {1, 2, 4, 8})
            if (at(key + std::to_string(d)) > 0) {
                const double cpu = at(key + std::string("cpu_") + std::to_string(d));
                std::printf("  %d device(s): %.0f chip tasks/s  (%.2fx of 1 device, %.2fx of host BLAS, same run); "
                            "%.1f us CPU per task, both processes (BLAS's CPU / this: %.2f)\n",
                            d, at(key + std::to_string(d)), at(key + std::to_string(d)) / at(std::string(key) + "1"),
                            at(key + std::to_string(d)) / at(key + std::string("blas")), cpu, cpu > 0 ? blas_cpu / cpu : 0.0);
            }
    }
}

}  // namespace

int main(int argc, char** argv) {
    spyre::openblas::RunAgainWithTheCpusKernels(argv);  // first: before OpenBLAS or any thread is used
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RegisterBenchmark("baseline/thread_handoff", BM_ThreadHandoff)->UseRealTime()->MinTime(0.3);
    benchmark::RegisterBenchmark("baseline/chip_direct", BM_ChipDirect)->UseRealTime()->MinTime(0.3);
    benchmark::RegisterBenchmark("dispatch/empty_tasks", BM_Dispatch, false)->Arg(1)->Arg(64)->UseRealTime()->MinTime(0.5);
    // A fixed count keeps a recording small (a few MB).
    benchmark::RegisterBenchmark("dispatch_traced/empty_tasks", BM_Dispatch, true)->Arg(1)->Arg(64)->UseRealTime()->Iterations(2000);
    benchmark::RegisterBenchmark("baseline/host_blas", BM_HostBlas, false)->Arg(64)->Arg(256)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("baseline/host_blas_with_copies", BM_HostBlas, true)->Arg(64)->UseRealTime()->MinTime(0.5);
    benchmark::RegisterBenchmark("throughput/devices", BM_Throughput)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->UseRealTime()->MinTime(1.0);
    benchmark::RegisterBenchmark("throughput_big/devices", BM_ThroughputBig)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->UseRealTime()->MinTime(1.0);
    benchmark::RegisterBenchmark("residency/tiny_run", BM_TinyRun)->UseRealTime()->MinTime(0.3);
    for (int64_t b : kResidencySizes) {
        benchmark::RegisterBenchmark("bytes/memcpy", BM_Bytes, BytesOp::Memcpy)->Arg(b)->UseRealTime()->MinTime(0.2);
        benchmark::RegisterBenchmark("bytes/check", BM_Bytes, BytesOp::Check)->Arg(b)->UseRealTime()->MinTime(0.2);
        benchmark::RegisterBenchmark("bytes/reupload", BM_Bytes, BytesOp::Reupload)->Arg(b)->UseRealTime()->MinTime(0.2);
        benchmark::RegisterBenchmark("bytes/copy_hashing", BM_Bytes, BytesOp::CopyHashing)->Arg(b)->UseRealTime()->MinTime(0.2);
        benchmark::RegisterBenchmark("residency/reuse", BM_Residency, Change::None)->Arg(b)->UseManualTime()->MinTime(0.3);
        benchmark::RegisterBenchmark("residency/one_changed", BM_Residency, Change::OneElement)->Arg(b)->UseManualTime()->MinTime(0.3);
        benchmark::RegisterBenchmark("residency/all_changed", BM_Residency, Change::All)->Arg(b)->UseManualTime()->MinTime(0.3);
    }
    const int status = spyre::bench::RunBenchmarks("host_bench", std::chrono::seconds(240), [] {
        g_workers.clear();
        g_host.reset();
    });
    Summary();
    return status;
}
