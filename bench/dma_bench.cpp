// SPDX-License-Identifier: Apache-2.0
// Host<->device copy throughput through a real spyre-mockdev on each DMA path
// (io_uring only, copy engines only, the default), each size printed beside
// memcpy of the same size measured in the same run; the kernel's own copy of
// the device-memory object (pread/pwrite) beside it; small-copy latency beside
// pwrite to a tmpfs file; allocator cost at 10^5 live blocks.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench_main.hpp"
// Below a Device: the driver tier, which spyre.hpp leaves out.
#include "spyre/driver/discovery.hpp"
#include "spyre/driver/dma_queue.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/driver/mock_daemon.hpp"
#include "spyre/spyre.hpp"

using namespace spyre;
using namespace spyre::driver;

namespace {

constexpr uint64_t kMaxBytes = 64ull << 20;

std::map<std::pair<std::string, int64_t>, double> g_baseline_bps;  // (name, size) -> bytes/s

// Page-faulted host buffers, reused by every benchmark.
struct Buffers {
    std::vector<uint8_t> a = std::vector<uint8_t>(kMaxBytes, 1);
    std::vector<uint8_t> b = std::vector<uint8_t>(kMaxBytes, 2);
};
Buffers& Host() {
    static Buffers buffers;
    return buffers;
}

// The DMA paths compared. "io_uring" and "engines" take every copy, small
// ones included, through their path (no fast path); "default" is a queue
// with default options, as an app gets it.
enum Path { kIoUring, kEngines, kDefault, kPaths };
const char* const kPathNames[kPaths] = {"io_uring", "engines", "default"};

DmaOptions PathOptions(Path path) {
    switch (path) {
    case kIoUring: return {.backend = DmaBackend::IoUring, .require_io_uring = true, .inline_threshold = 0};
    case kEngines: return {.backend = DmaBackend::Engines, .inline_threshold = 0};
    default: return {};
    }
}

struct Device {
    MockDaemon daemon = MockDaemon::Start({.cards = 1, .vfs = 0, .mem = "2G"});
    Function fn = Function::Open(DeviceRoot(daemon.mount()).Find("0"));
    SpyreAllocator alloc{fn, {.mode = AllocatorMode::PF, .pf_pool_limit = 1ull << 30}};
    std::optional<DmaQueue> queues[kPaths];
    std::optional<DMAEngine> dma[kPaths];
    DeviceAllocation block = alloc.Allocate(kMaxBytes);
    Device() {
        for (int p = 0; p < kPaths; ++p) {
            queues[p].emplace(fn, PathOptions(Path(p)));
            dma[p].emplace(alloc, *queues[p]);
        }
        dma[kDefault]->Wait(dma[kDefault]->CopyToDevice(Host().a.data(), block.handle, kMaxBytes));  // device pages exist
    }
};
std::optional<Device> g_device;
Device& Dev() {
    if (!g_device) g_device.emplace();
    return *g_device;
}

// The device-memory object itself, opened as the driver's io_uring path
// opens it: what the kernel's copy of it costs without io_uring.
const spyre::driver::RegionFile& DeviceMemoryFile() {
    static const spyre::driver::RegionFile file = Dev().fn.OpenRegionFile(SPYRE_REGION_DEVMEM);
    return file;
}

double Elapsed(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void SetRatio(benchmark::State& state, const char* baseline, double secs) {
    const double bps = double(state.range(0)) * double(state.iterations()) / secs;
    auto it = g_baseline_bps.find({baseline, state.range(0)});
    if (it != g_baseline_bps.end()) state.counters["x_" + std::string(baseline)] = bps / it->second;
}

void BM_Memcpy(benchmark::State& state) {
    const size_t n = size_t(state.range(0));
    auto& h = Host();
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        std::memcpy(h.b.data(), h.a.data(), n);
        benchmark::ClobberMemory();
    }
    g_baseline_bps[{"memcpy", state.range(0)}] = double(n) * double(state.iterations()) / Elapsed(t0);
    state.SetBytesProcessed(int64_t(n) * int64_t(state.iterations()));
}

// memcpy from a page-aligned buffer (as device memory is mapped) into the
// same host buffer the device-to-host copies land in, 16 bytes into its page:
// what a plain memcpy makes of a device-to-host copy's addresses, for sizes
// below glibc's large-copy path (spyre/common/memory_copy.hpp).
void BM_MemcpyAliased(benchmark::State& state) {
    const size_t n = size_t(state.range(0));
    static void* page_aligned = [] {
        void* p = ::mmap(nullptr, kMaxBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        std::memset(p, 3, kMaxBytes);
        return p;
    }();
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
        std::memcpy(Host().b.data(), page_aligned, n);
        benchmark::ClobberMemory();
    }
    state.counters["dst_past_src_mod_4k"] =
        double((reinterpret_cast<uintptr_t>(Host().b.data()) - reinterpret_cast<uintptr_t>(page_aligned)) & 4095);
    SetRatio(state, "memcpy", Elapsed(t0));
    state.SetBytesProcessed(int64_t(n) * int64_t(state.iterations()));
}

// Each iteration times one copy, then one memcpy of the same size between
// host buffers: x_memcpy_interleaved compares the two over the same moments,
// so a machine whose load changes during the run moves both alike.
template <typename Copy>
void Interleaved(benchmark::State& state, Copy copy) {
    using clock = std::chrono::steady_clock;
    const size_t n = size_t(state.range(0));
    double copy_secs = 0, memcpy_secs = 0;
    for (auto _ : state) {
        const auto t0 = clock::now();
        copy();
        const auto t1 = clock::now();
        std::memcpy(Host().b.data(), Host().a.data(), n);
        benchmark::ClobberMemory();
        const auto t2 = clock::now();
        const double secs = std::chrono::duration<double>(t1 - t0).count();
        state.SetIterationTime(secs);
        copy_secs += secs;
        memcpy_secs += std::chrono::duration<double>(t2 - t1).count();
    }
    state.counters["x_memcpy_interleaved"] = memcpy_secs / copy_secs;
    state.counters["memcpy_GBps"] = double(n) * double(state.iterations()) / memcpy_secs / 1e9;
    state.SetBytesProcessed(int64_t(n) * int64_t(state.iterations()));
}

void BM_HostToDevice(benchmark::State& state, Path path) {
    Device& d = Dev();
    const size_t n = size_t(state.range(0));
    Interleaved(state, [&] { d.dma[path]->Wait(d.dma[path]->CopyToDevice(Host().a.data(), d.block.handle, n)); });
    state.SetLabel(ToString(d.queues[path]->backend()));
}

void BM_DeviceToHost(benchmark::State& state, Path path) {
    Device& d = Dev();
    const size_t n = size_t(state.range(0));
    Interleaved(state, [&] { d.dma[path]->Wait(d.dma[path]->CopyFromDevice(Host().b.data(), d.block.handle, n)); });
    state.SetLabel(ToString(d.queues[path]->backend()));
}

// pwrite/pread of the device-memory object in 4 MiB pieces on one thread:
// the kernel's copy that every io_uring request runs, without io_uring.
void BM_KernelCopy(benchmark::State& state, bool to_device) {
    const int fd = DeviceMemoryFile().fd;
    const uint64_t base = DeviceMemoryFile().offset + Dev().alloc.DeviceAddress(Dev().block.handle, kMaxBytes);
    const size_t n = size_t(state.range(0));
    Interleaved(state, [&] {
        for (size_t done = 0; done < n;) {
            const size_t piece = std::min<size_t>(n - done, 4u << 20);
            const ssize_t r = to_device ? ::pwrite(fd, Host().a.data() + done, piece, off_t(base + done))
                                        : ::pread(fd, Host().b.data() + done, piece, off_t(base + done));
            if (r <= 0) return state.SkipWithError("pread/pwrite of the device memory object failed");
            done += size_t(r);
        }
    });
}

// Small copies: one 4 KiB write, as pwrite(2) to a tmpfs file and as DMA.
void BM_PwriteLatency(benchmark::State& state) {
    int fd = ::open("/dev/shm", O_TMPFILE | O_RDWR, 0600);
    if (fd < 0 || ::ftruncate(fd, 1 << 20) != 0) return state.SkipWithError("cannot create a tmpfs file");
    const size_t n = size_t(state.range(0));
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state)
        if (::pwrite(fd, Host().a.data(), n, 0) != ssize_t(n)) state.SkipWithError("pwrite failed");
    g_baseline_bps[{"pwrite", state.range(0)}] = double(n) * double(state.iterations()) / Elapsed(t0);
    ::close(fd);
}

void BM_SmallCopyLatency(benchmark::State& state) {
    Device& d = Dev();
    const size_t n = size_t(state.range(0));
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) d.dma[kDefault]->Wait(d.dma[kDefault]->CopyToDevice(Host().a.data(), d.block.handle, n));
    SetRatio(state, "pwrite", Elapsed(t0));
}

// Allocate + free of one block while 10^5 blocks stay live.
void BM_AllocFreeAt100kLive(benchmark::State& state) {
    Device& d = Dev();
    SpyreAllocator& alloc = d.alloc;
    std::mt19937 rng(1);
    std::vector<DeviceHandle> live;
    for (int i = 0; i < 100000; ++i) live.push_back(alloc.Allocate(128 + rng() % 4096).handle);
    for (size_t i = 0; i < live.size(); i += 2) alloc.Free(live[i]);  // fragment: every other block free
    for (size_t i = 0; i < live.size(); i += 2) live[i] = alloc.Allocate(128 + rng() % 4096).handle;
    for (auto _ : state) {
        auto a = alloc.Allocate(128 + rng() % 4096);
        alloc.Free(a.handle);
    }
    state.counters["live_blocks"] = double(alloc.Stats().live_allocations);
    for (const auto& h : live) alloc.Free(h);
}

void Sizes(benchmark::internal::Benchmark* b) {
    for (int64_t n = 4 << 10; n <= int64_t(kMaxBytes); n *= 4) b->Arg(n);
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    // Baselines first: every device figure is printed beside one of this run.
    benchmark::RegisterBenchmark("baseline/memcpy", BM_Memcpy)->Apply(Sizes)->UseRealTime();
    benchmark::RegisterBenchmark("baseline/memcpy_to_16_past_a_page", BM_MemcpyAliased)
        ->Arg(4 << 10)->Arg(64 << 10)->Arg(256 << 10)->UseRealTime();
    for (const bool to_device : {true, false}) {
        const std::string dir = to_device ? "host_to_device" : "device_to_host";
        for (int p = 0; p < kPaths; ++p) {
            auto run = to_device ? BM_HostToDevice : BM_DeviceToHost;
            benchmark::RegisterBenchmark(("dma/" + dir + "/" + kPathNames[p]).c_str(),
                                         [run, p](benchmark::State& s) { run(s, Path(p)); })
                ->Apply(Sizes)->UseManualTime();
        }
        benchmark::RegisterBenchmark(to_device ? "kernel_copy/pwrite_device_memory" : "kernel_copy/pread_device_memory",
                                     [to_device](benchmark::State& s) { BM_KernelCopy(s, to_device); })
            ->Arg(16 << 20)->Arg(64 << 20)->UseManualTime();
    }
    benchmark::RegisterBenchmark("baseline/pwrite_tmpfs", BM_PwriteLatency)->Arg(64)->Arg(4096)->UseRealTime();
    benchmark::RegisterBenchmark("dma/small_host_to_device", BM_SmallCopyLatency)->Arg(64)->Arg(4096)->UseRealTime();
    benchmark::RegisterBenchmark("allocator/alloc_free_at_100k_live", BM_AllocFreeAt100kLive)->UseRealTime();
    return spyre::bench::RunBenchmarks("dma_bench", std::chrono::seconds(240), [] {
        g_device.reset();
    });
}
