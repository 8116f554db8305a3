// SPDX-License-Identifier: Apache-2.0
// spyre-overlap: two streams overlap copies and compute, ordered by events.
//
// CHUNKS chunks of A[ROWS,K] are each multiplied by B[K,N]. One stream does
// copy in -> matmul -> copy out per chunk, strictly in turn. Two streams
// split the work: the copy stream moves chunk i+1 in while the compute
// stream runs chunk i's matmul; events order them (copied[i] before compute
// i, computed[i] before copy-out i, drained[i] before the C buffer is
// reused). Both runs are checked against the host BLAS and
// timed.
//
// Usage: spyre-overlap [CHUNKS ROWS K N]   (defaults 8 2048 256 256; each an
//        integer from 1 to 1048576; a bad one: a usage error, exit code 2)
#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "example_main.hpp"
#include "hang_watchdog.hpp"
#include "result_check.hpp"
#include "spyre/spyre.hpp"
#include "spyre/common/openblas_kernels.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Problem {
    int64_t chunks = 8, rows = 2048, k = 256, n = 256;
    std::vector<std::vector<float>> a;  // per chunk
    std::vector<float> b;
    std::vector<std::vector<float>> c;  // per chunk, filled by a run
};

// Largest |difference| relative to the reference, over every chunk
// (+infinity when a result is NaN or infinite).
double Check(const Problem& p) {
    double worst = 0;
    std::vector<float> ref(size_t(p.rows * p.n));
    for (int64_t i = 0; i < p.chunks; ++i) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(p.rows), int(p.n), int(p.k), 1.0f,
                    p.a[size_t(i)].data(), int(p.k), p.b.data(), int(p.n), 0.0f, ref.data(), int(p.n));
        worst = std::max(worst, spyre::support::WorstRelativeError(p.c[size_t(i)], ref));
    }
    return worst;
}

struct DeviceBuffers {
    std::vector<spyre::SpyreTensor> a;  // double buffer
    std::vector<spyre::SpyreTensor> c;
    spyre::SpyreTensor b;
};

double RunOneStream(spyre::Device& dev, const spyre::ExecutionPlan& plan, Problem& p, DeviceBuffers& d) {
    spyre::SpyreStream s(dev);
    const uint64_t a_bytes = uint64_t(p.rows * p.k) * 4, c_bytes = uint64_t(p.rows * p.n) * 4;
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < p.chunks; ++i) {
        const size_t buf = size_t(i % 2);
        s.flex_stream().CopyToDevice(p.a[size_t(i)].data(), d.a[buf].device_handle(), a_bytes);
        const std::vector<spyre::SpyreTensor> tensors = {d.a[buf], d.b, d.c[buf]};
        spyre::LaunchKernel(s, plan, tensors);
        s.flex_stream().CopyFromDevice(p.c[size_t(i)].data(), d.c[buf].device_handle(), c_bytes);
    }
    s.Synchronize();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double RunTwoStreams(spyre::Device& dev, const spyre::ExecutionPlan& plan, Problem& p, DeviceBuffers& d) {
    spyre::SpyreStream copy(dev), compute(dev);
    const uint64_t a_bytes = uint64_t(p.rows * p.k) * 4, c_bytes = uint64_t(p.rows * p.n) * 4;
    std::vector<spyre::Event> copied, computed, drained;
    for (int64_t i = 0; i < p.chunks; ++i) {
        copied.emplace_back(dev);
        computed.emplace_back(dev);
        drained.emplace_back(dev);
    }
    // The copy stream runs ahead: chunk i+1 goes in before chunk i comes
    // out, so it moves while chunk i computes. Its own FIFO keeps chunk
    // i-1's copy-out ahead of chunk i+1's copy-in into the same buffer.
    auto copy_in = [&](int64_t i) {
        copy.flex_stream().CopyToDevice(p.a[size_t(i)].data(), d.a[size_t(i % 2)].device_handle(), a_bytes);
        copied[size_t(i)].Record(copy.flex_stream());
    };
    const auto t0 = Clock::now();
    copy_in(0);
    for (int64_t i = 0; i < p.chunks; ++i) {
        const size_t buf = size_t(i % 2);
        compute.flex_stream().Wait(copied[size_t(i)]);
        if (i >= 2) compute.flex_stream().Wait(drained[size_t(i - 2)]);  // C buffer read out
        const std::vector<spyre::SpyreTensor> tensors = {d.a[buf], d.b, d.c[buf]};
        spyre::LaunchKernel(compute, plan, tensors);
        computed[size_t(i)].Record(compute.flex_stream());

        if (i + 1 < p.chunks) copy_in(i + 1);
        copy.flex_stream().Wait(computed[size_t(i)]);
        copy.flex_stream().CopyFromDevice(p.c[size_t(i)].data(), d.c[buf].device_handle(), c_bytes);
        drained[size_t(i)].Record(copy.flex_stream());
    }
    copy.Synchronize();
    compute.Synchronize();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::printf("  device time of chunk 0's matmul..last matmul (events): %.3f ms\n",
                spyre::Event::ElapsedTime(copied[0], computed[size_t(p.chunks - 1)]));
    return ms;
}

constexpr const char* kUsage = "spyre-overlap [CHUNKS ROWS K N]  (each an integer from 1 to 1048576; defaults 8 2048 256 256)";

int Run(int argc, char** argv) {
    Problem p;
    if (argc == 5) {
        using spyre::support::ParseInteger, spyre::support::kMaxDimension;
        p.chunks = ParseInteger("CHUNKS", argv[1], 1, kMaxDimension);
        p.rows = ParseInteger("ROWS", argv[2], 1, kMaxDimension);
        p.k = ParseInteger("K", argv[3], 1, kMaxDimension);
        p.n = ParseInteger("N", argv[4], 1, kMaxDimension);
    } else if (argc != 1) {
        throw spyre::support::UsageError("give CHUNKS ROWS K N together, or none");
    }
    // A hang is reported (exit 124), not waited out: 300 s per phase
    // (SPYRE_HANG_TIMEOUT_S overrides it, for large sizes).
    spyre::support::HangWatchdog watchdog("spyre-overlap", std::chrono::seconds(300), "setup");
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    p.a.resize(size_t(p.chunks));
    for (auto& chunk : p.a) {
        chunk.resize(size_t(p.rows * p.k));
        for (float& x : chunk) x = dist(rng);
    }
    p.b.resize(size_t(p.k * p.n));
    for (float& x : p.b) x = dist(rng);

    // A private mock gets one compute core, so copies (host threads) and
    // compute do not fight over this machine's cores; SPYRE_OVERLAP_CORES
    // overrides it.
    spyre::DeviceOptions options;
    const char* cores = std::getenv("SPYRE_OVERLAP_CORES");
    options.embedded_mock.extra_args = {"--cores", cores ? cores : "1"};
    spyre::Device dev = spyre::Device::Open(options);
    spyre::SpyreStream setup = spyre::SpyreStream::Default(dev);
    const auto kernel = spyre::KernelBuilder().Matmul(p.rows, p.k, p.n, spyre::DType::FP32);
    auto plan = spyre::LoadExecutionPlan(setup, spyre::CompilerOutputFromKernel("overlap_matmul", kernel));
    DeviceBuffers d{{}, {}, spyre::SpyreTensor::FromHost(dev, setup.flex_stream(), p.b.data(), {p.k, p.n}, spyre::DType::FP32)};
    for (int i = 0; i < 2; ++i) {
        d.a.push_back(spyre::SpyreTensor::Empty(dev, {p.rows, p.k}, spyre::DType::FP32));
        d.c.push_back(spyre::SpyreTensor::Empty(dev, {p.rows, p.n}, spyre::DType::FP32));
    }
    setup.Synchronize();

    std::printf("%lld chunks of A[%lld,%lld] x B[%lld,%lld] (%.1f MiB in + %.1f MiB out per chunk)\n",
                (long long)p.chunks, (long long)p.rows, (long long)p.k, (long long)p.k, (long long)p.n,
                double(p.rows * p.k * 4) / (1 << 20), double(p.rows * p.n * 4) / (1 << 20));
    // Warm-up (first touch of device pages, BLAS threads), not timed.
    p.c.assign(size_t(p.chunks), std::vector<float>(size_t(p.rows * p.n), 0.0f));
    watchdog.Phase("warm-up");
    RunOneStream(dev, *plan, p, d);
    bool ok = true;
    double times[2];
    for (int two = 0; two < 2; ++two) {
        p.c.assign(size_t(p.chunks), std::vector<float>(size_t(p.rows * p.n), 0.0f));
        std::printf("%s:\n", two ? "two streams + events" : "one stream");
        watchdog.Phase(two ? "two streams + events" : "one stream");
        times[two] = two ? RunTwoStreams(dev, *plan, p, d) : RunOneStream(dev, *plan, p, d);
        const double err = Check(p);
        std::printf("  %.3f ms, max relative error %.2g %s\n", times[two], err, err < 1e-4 ? "OK" : "MISMATCH");
        ok = ok && err < 1e-4;
    }
    std::printf("two streams vs one: %.2fx\n", times[0] / times[1]);
    std::printf("RESULT: %s\n", ok ? "OK (both match host BLAS)" : "MISMATCH");
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    spyre::openblas::RunAgainWithTheCpusKernels(argv);  // first: before OpenBLAS or any thread is used
    return spyre::support::RunExample("spyre-overlap", kUsage, [&] { return Run(argc, argv); });
}
