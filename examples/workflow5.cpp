// SPDX-License-Identifier: Apache-2.0
// spyre-workflow5: seed 001's Workflow 5 end to end on a (mock) Spyre card.
//
//   A[4096,1024] and B[1024,1024] go to the device (Workflow 1), a matmul is
//   compiled for the tile [1024,1024]x[1024,1024] and loaded (Workflow 2),
//   LaunchKernel sees A is 4x the tile and runs LaunchTiled: 4 iterations of
//   copy offsets -> launch correction -> launch matmul (12 FlexStream ops,
//   Workflow 4), C comes back (CopyFromDevice) and is checked against the
//   host's BLAS. Every phase is timed.
//
// Usage: spyre-workflow5 [M K N TILE]   (defaults 4096 1024 1024 1024; each an
//        integer from 1 to 1048576; a bad one: a usage error, exit code 2)
// Finds the device like every spyre app (SPYRE_DEV_ROOT, FLEX_DEVICE); with
// no device root it starts a private spyre-mockdev.
#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "example_main.hpp"
#include "hang_watchdog.hpp"
#include "result_check.hpp"
#include "spyre/spyre.hpp"
#include "spyre/common/openblas_kernels.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

struct Phase {
    const char* name;
    double ms;
};

constexpr const char* kUsage = "spyre-workflow5 [M K N TILE]  (each an integer from 1 to 1048576; defaults 4096 1024 1024 1024)";

int Run(int argc, char** argv) {
    int64_t m = 4096, k = 1024, n = 1024, tile = 1024;
    if (argc == 5) {
        using spyre::support::ParseInteger, spyre::support::kMaxDimension;
        m = ParseInteger("M", argv[1], 1, kMaxDimension);
        k = ParseInteger("K", argv[2], 1, kMaxDimension);
        n = ParseInteger("N", argv[3], 1, kMaxDimension);
        tile = ParseInteger("TILE", argv[4], 1, kMaxDimension);
    } else if (argc != 1) {
        throw spyre::support::UsageError("give M K N TILE together, or none");
    }
    // A hang is reported (exit 124), not waited out: each phase gets 300 s
    // (SPYRE_HANG_TIMEOUT_S overrides it, for large sizes).
    spyre::support::HangWatchdog watchdog("spyre-workflow5", std::chrono::seconds(300), "open device + scheduler");
    std::vector<Phase> phases;
    auto t0 = Clock::now();
    spyre::Device device = spyre::Device::Open();
    spyre::SpyreStream stream = spyre::SpyreStream::Default(device);  // the runtime's default stream
    phases.push_back({"open device + scheduler", Ms(t0, Clock::now())});
    watchdog.Phase("after: open device + scheduler");
    std::printf("device %s, allocator %s mode, scheduler %s\n", device.pci_address().c_str(),
                device.allocator().mode() == spyre::AllocatorMode::VF ? "VF" : "PF",
                spyre::ToString(device.scheduler().policy()));

    // 1-3: host tensors to the device (Workflow 1), asynchronously.
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> a(size_t(m * k)), b(size_t(k * n)), c(size_t(m * n), 0.0f);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    t0 = Clock::now();
    spyre::SpyreTensor ta = spyre::SpyreTensor::FromHost(device, stream.flex_stream(), a.data(), {m, k}, spyre::DType::FP32);
    spyre::SpyreTensor tb = spyre::SpyreTensor::FromHost(device, stream.flex_stream(), b.data(), {k, n}, spyre::DType::FP32);
    spyre::SpyreTensor tc = spyre::SpyreTensor::Empty(device, {m, n}, spyre::DType::FP32);
    stream.Synchronize();
    phases.push_back({"A, B to device", Ms(t0, Clock::now())});
    watchdog.Phase("after: A, B to device");

    // 4-5: "compile" for the tile, write the compiler output, load it (Workflow 2).
    t0 = Clock::now();
    const spyre::BuiltKernel kernel = spyre::KernelBuilder().Matmul(tile, std::min(k, tile), std::min(n, tile),
                                                                    spyre::DType::FP32);
    const auto dir = std::filesystem::temp_directory_path() / ("spyre-workflow5-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    spyre::CompilerOutputFromKernel("matmul_tile" + std::to_string(tile), kernel).WriteDirectory(dir);
    phases.push_back({"compile tile + write plan", Ms(t0, Clock::now())});
    watchdog.Phase("after: compile tile + write plan");
    t0 = Clock::now();
    std::shared_ptr<const spyre::ExecutionPlan> plan;
    {
        spyre::ProgressLine line;  // binaries loaded, on a terminal only
        plan = spyre::LoadExecutionPlan(stream, dir, line.Callback());
    }
    std::filesystem::remove_all(dir);
    phases.push_back({"load plan (binaries to device)", Ms(t0, Clock::now())});
    watchdog.Phase("after: load plan (binaries to device)");

    // LaunchKernel -> LaunchTiled: returns as soon as everything is queued.
    const uint64_t ops_before = stream.flex_stream().enqueued();
    const auto stats_before = device.scheduler().Stats();
    t0 = Clock::now();
    const std::vector<spyre::SpyreTensor> tensors = {ta, tb, tc};
    spyre::LaunchKernel(stream, *plan, tensors);
    const auto queued = Clock::now();
    const uint64_t ops = stream.flex_stream().enqueued() - ops_before;
    stream.Synchronize();
    const auto done = Clock::now();
    phases.push_back({"LaunchKernel (enqueue only)", Ms(t0, queued)});
    watchdog.Phase("after: LaunchKernel (enqueue only)");
    phases.push_back({"device compute (to Synchronize)", Ms(queued, done)});
    watchdog.Phase("after: device compute (to Synchronize)");

    // 6: result back to the host.
    t0 = Clock::now();
    tc.CopyToHost(stream.flex_stream(), c.data());
    stream.Synchronize();
    phases.push_back({"C to host", Ms(t0, Clock::now())});
    watchdog.Phase("after: C to host");

    // Check against the host BLAS.
    t0 = Clock::now();
    std::vector<float> ref(size_t(m * n));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, a.data(), int(k),
                b.data(), int(n), 0.0f, ref.data(), int(n));
    // Relative to max(1, |ref|); a NaN or an infinity in C is off.
    const double max_err = spyre::support::WorstRelativeError(c, ref);
    const size_t bad = spyre::support::CountOff(c, ref, 1e-3);
    phases.push_back({"host sgemm reference", Ms(t0, Clock::now())});
    watchdog.Phase("after: host sgemm reference");

    const auto stats = device.scheduler().Stats();
    const int64_t tiles = ((m + tile - 1) / tile) * ((n + std::min(n, tile) - 1) / std::min(n, tile)) *
                          ((k + std::min(k, tile) - 1) / std::min(k, tile));
    std::printf("\nC[%lld,%lld] = A[%lld,%lld] x B[%lld,%lld] with a [%lld,%lld]x[%lld,%lld] kernel: %lld tiles\n",
                (long long)m, (long long)n, (long long)m, (long long)k, (long long)k, (long long)n,
                (long long)tile, (long long)std::min(k, tile), (long long)std::min(k, tile),
                (long long)std::min(n, tile), (long long)tiles);
    std::printf("FlexStream ops enqueued by LaunchKernel: %llu (ring CBs %llu, doorbells %llu, inline copies %llu)\n",
                (unsigned long long)ops, (unsigned long long)(stats.ring_cbs - stats_before.ring_cbs),
                (unsigned long long)(stats.doorbells - stats_before.doorbells),
                (unsigned long long)(stats.inline_copies - stats_before.inline_copies));
    std::printf("\n%-34s %10s\n", "phase", "ms");
    for (const Phase& p : phases) std::printf("%-34s %10.3f\n", p.name, p.ms);
    const double gflop = 2.0 * double(m) * double(n) * double(k) / 1e9;
    std::printf("\ndevice matmul rate: %.1f GFLOP/s\n", gflop / (Ms(queued, done) / 1e3));
    std::printf("max relative error %.3g, elements off: %zu of %zu\n", max_err, bad, ref.size());
    if (bad != 0) {
        std::printf("RESULT: MISMATCH\n");
        return 1;
    }
    std::printf("RESULT: OK (matches host BLAS)\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    spyre::openblas::RunAgainWithTheCpusKernels(argv);  // first: before OpenBLAS or any thread is used
    return spyre::support::RunExample("spyre-workflow5", kUsage, [&] { return Run(argc, argv); });
}
