// SPDX-License-Identifier: Apache-2.0
// spyre-pto-examples: seed 004's two examples on the card's cores, through
// the orchestration runtime (spyre/pto.h, spyre/orchestration.hpp).
//
//   pipeline   Example 1: (A + B) * C on 256 floats, two dependent tasks
//              with implicit outputs from the heap ring
//   matmul     Example 2: C[M,N] = A[M,K] * B[K,N] in 128^3 tiles (smaller
//              at the edges of sizes that are not multiples), a scope and
//              an explicit C_tile per output tile; beside one task of the
//              whole matmul on one core and the host BLAS
//
// The orchestration functions and the kernels' registration are C
// (examples/pto/*.c: the seed's functions, and spyre_build_kernel with
// pto_register_program); this program runs them and checks every result
// against the CPU.
//
// Usage: spyre-pto-examples [pipeline|matmul|all] [--cores N] [M K N]
//   M K N       each an integer from 1 to 1048576 (default 256 256 256)
//   --cores N   the private mock's compute cores, 1 to 32 (FLEX_DEVICE=MOCK)
// A bad argument is a usage error (exit code 2).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "example_main.hpp"
#include "hang_watchdog.hpp"
#include "pto/kernels.h"
#include "result_check.hpp"
#include "spyre/compiler/kernel_builder.h"
#include "spyre/orchestration.hpp"
#include "spyre/spyre.hpp"
#include "spyre/common/openblas_kernels.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// A C call's failure: its message is whole already ("spyre: <kind>: ...").
struct CallFailed : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Throws the runtime's error when a C call failed.
int64_t Check(int64_t r) {
    if (r < 0) throw CallFailed(pto_last_error());
    return r;
}

// The worst relative error of `got` (as many elements as `want`); +infinity
// when an element is NaN or infinite.
double WorstRelative(const float* got, const std::vector<float>& want) {
    return spyre::support::WorstRelativeError({got, want.size()}, want);
}

bool Pipeline(spyre::Orchestrator& orch) {
    Check(register_pipeline_kernels(orch.handle()));

    const size_t bytes = PIPELINE_ELEMENTS * sizeof(float);
    auto* a = static_cast<float*>(orch.Alloc(bytes));
    auto* b = static_cast<float*>(orch.Alloc(bytes));
    auto* c = static_cast<float*>(orch.Alloc(bytes));
    std::vector<float> ha(PIPELINE_ELEMENTS), hb(PIPELINE_ELEMENTS), hc(PIPELINE_ELEMENTS), want(PIPELINE_ELEMENTS);
    for (size_t i = 0; i < want.size(); ++i) {
        ha[i] = float(i) * 0.5f;
        hb[i] = 1.0f - float(i);
        hc[i] = float(i % 7) - 3.0f;
        want[i] = (ha[i] + hb[i]) * hc[i];
    }
    // Host data reaches the device by DMA, as on a card whose memory the
    // host does not map.
    orch.CopyIn(a, ha.data(), bytes);
    orch.CopyIn(b, hb.data(), bytes);
    orch.CopyIn(c, hc.data(), bytes);
    float* result = nullptr;
    uint64_t args[] = {uint64_t(a), uint64_t(b), uint64_t(c), uint64_t(&result)};
    // An outer scope keeps the result (a task's implicit output) alive
    // after the run's wait (docs/orchestration.md, the depth-0 rule).
    auto outer = orch.BeginScope();
    const auto t0 = Clock::now();
    orch.Run(simple_orch, args);
    const double ms = Ms(Clock::now() - t0);
    if (!result) {
        std::printf("pipeline: FAILED (no result: %s)\n", pto_last_error());
        return false;
    }
    std::vector<float> got(PIPELINE_ELEMENTS);
    orch.CopyOut(got.data(), result, bytes);
    const double err = WorstRelative(got.data(), want);
    std::printf("pipeline: (A + B) * C on %d floats in 2 device tasks: %.3f ms, max relative error %.2g %s\n",
                PIPELINE_ELEMENTS, ms, err, err < 1e-6 ? "OK" : "FAILED");
    outer.End();
    orch.Free(a), orch.Free(b), orch.Free(c);
    return err < 1e-6;
}

bool Matmul(spyre::Device& dev, spyre::Orchestrator& orch, int64_t m, int64_t k, int64_t n) {
    Check(register_matmul_kernels(orch.handle(), m, k, n));
    constexpr int32_t kWhole = 100;  // the whole matmul as one task
    const spyre_kernel_spec whole = {.kind = SPYRE_KERNEL_MATMUL, .dtype = SPYRE_DTYPE_FP32, .rank = 3, .shape = {m, k, n}};
    std::vector<uint8_t> program(size_t(Check(spyre_build_kernel(&whole, nullptr, 0))));
    Check(spyre_build_kernel(&whole, program.data(), program.size()));
    Check(pto_register_program(orch.handle(), kWhole, program.data(), program.size()));

    // A, B and C from the function's allocator, not the heap ring: they
    // live through the whole run, and in the ring they would pin its tail
    // (the ring is for the tiles, which come and go).
    const uint64_t bytes = uint64_t(m * k + k * n + m * n) * 4;
    spyre::DeviceBuffer abc = dev.AllocateBuffer(bytes);
    auto* a = static_cast<float*>(orch.HostAddress(dev.allocator().DeviceAddress(abc.handle(), bytes), bytes));
    float* b = a + m * k;
    float* c = b + k * n;
    // Integer values in [-1, 1]: every product and partial sum is an
    // integer below 2^24 in magnitude (for K < 2^24), so fp32 computes the
    // result exactly in any order of summation, and the check can ask for
    // equality at any K. (Random reals drift by K * 2^-24 with the order,
    // and a tolerance loose enough for K = 665,600 would miss a lost tile.)
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> dist(-1, 1);
    std::vector<float> host(size_t(m * k + k * n + m * n), 0.0f);  // A, B, then C zeroed
    for (int64_t i = 0; i < m * k + k * n; ++i) host[size_t(i)] = float(dist(rng));
    const float* ha = host.data();
    const float* hb = ha + m * k;
    const double tolerance = k < (1 << 24) ? 0.0 : double(k) * 0x1p-24;

    std::vector<float> want(size_t(m * n));
    auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, ha, int(k), hb, int(n), 0.0f,
                want.data(), int(n));
    const double blas_ms = Ms(Clock::now() - t0);

    // Host data reaches the device by DMA, as on a card whose memory the
    // host does not map; so does the result come back.
    const uint64_t c_bytes = uint64_t(m * n) * 4;
    const std::vector<float> zeros(size_t(m * n), 0.0f);
    std::vector<float> got(size_t(m * n));
    orch.CopyIn(a, host.data(), bytes);
    uint64_t args[] = {uint64_t(a), uint64_t(b), uint64_t(c), uint64_t(m), uint64_t(k), uint64_t(n)};
    t0 = Clock::now();
    {
        // Tasks completed, as a line on a terminal (nothing in a pipe or CI).
        spyre::ProgressLine line;
        orch.Run(matmul_orch, args, line.Callback());
    }
    const double tiled_ms = Ms(Clock::now() - t0);
    orch.CopyOut(got.data(), c, c_bytes);
    const double tiled_err = WorstRelative(got.data(), want);
    const int64_t tiles = ((m + TILE_M - 1) / TILE_M) * ((n + TILE_N - 1) / TILE_N);
    const int64_t tasks = tiles * ((k + TILE_K - 1) / TILE_K + 1);

    orch.CopyIn(c, zeros.data(), c_bytes);
    t0 = Clock::now();
    {
        auto scope = orch.BeginScope();
        TaskParam p[] = {{PARAM_INPUT, a, uint64_t(m * k) * 4, {}},
                         {PARAM_INPUT, b, uint64_t(k * n) * 4, {}},
                         {PARAM_OUTPUT, c, uint64_t(m * n) * 4, {}}};
        orch.Submit(kWhole, WORKER_CUBE, p);
    }
    orch.WaitAll();
    const double whole_ms = Ms(Clock::now() - t0);
    orch.CopyOut(got.data(), c, c_bytes);
    const double whole_err = WorstRelative(got.data(), want);

    const bool ok = tiled_err <= tolerance && whole_err <= tolerance;
    std::printf("matmul %lldx%lldx%lld fp32: %lld tiles, %lld device tasks: %.3f ms, max relative error %.2g\n",
                (long long)m, (long long)k, (long long)n, (long long)tiles, (long long)tasks, tiled_ms, tiled_err);
    std::printf("  one task of the whole matmul (one core): %.3f ms, max relative error %.2g\n", whole_ms, whole_err);
    std::printf("  (integer-valued inputs: exact in fp32, so the check allows an error of %.2g)\n", tolerance);
    std::printf("  host BLAS (cblas_sgemm): %.3f ms\n", blas_ms);
    std::printf("matmul: %s\n", ok ? "OK" : "FAILED");
    return ok;
}

constexpr const char* kUsage =
    "spyre-pto-examples [pipeline|matmul|all] [--cores N] [M K N]\n"
    "  M K N: the matmul's sizes, each an integer from 1 to 1048576 (default 256 256 256)\n"
    "  --cores N: the private mock's compute cores, 1 to 32 (FLEX_DEVICE=MOCK)";

int Run(int argc, char** argv) {
    using spyre::support::ParseInteger, spyre::support::UsageError;
    std::string which = "all";
    std::string cores;
    std::vector<std::string> dims;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--cores") {
            if (i + 1 == argc) throw UsageError("--cores needs a value");
            cores = std::to_string(ParseInteger("--cores", argv[++i], 1, 32));
        } else if (arg == "pipeline" || arg == "matmul" || arg == "all") {
            which = arg;
        } else if (arg == "-h" || arg == "--help") {
            std::printf("usage: %s\n", kUsage);
            return 0;
        } else {
            dims.push_back(arg);
        }
    }
    if (!dims.empty() && dims.size() != 3) throw UsageError("give M K N together");
    int64_t m = 256, k = 256, n = 256;
    if (!dims.empty()) {
        m = ParseInteger("M", dims[0], 1, spyre::support::kMaxDimension);
        k = ParseInteger("K", dims[1], 1, spyre::support::kMaxDimension);
        n = ParseInteger("N", dims[2], 1, spyre::support::kMaxDimension);
    }
    spyre::support::HangWatchdog watchdog("spyre-pto-examples", std::chrono::seconds(300), "run");
    try {
        spyre::DeviceOptions options;
        if (!cores.empty()) options.embedded_mock.extra_args = {"--cores", cores};
        spyre::Device dev = spyre::Device::Open(options);
        auto orch = spyre::Orchestrator::Create(dev, {.task_ring_size = 1024, .heap_size = 64ull << 20});
        bool ok = true;
        if (which != "matmul") ok &= Pipeline(orch);
        if (which != "pipeline") ok &= Matmul(dev, orch, m, k, n);
        std::printf("RESULT: %s\n", ok ? "OK" : "FAILED");
        return ok ? 0 : 1;
    } catch (const std::exception& e) {  // spyre::Error, CallFailed, a host allocation
        // The runtime's own error (a refused call names itself), not a
        // numeric mismatch of results that were never computed.
        std::fprintf(stderr, "spyre-pto-examples: %s\n", e.what());
        std::printf("RESULT: FAILED\n");
        return 1;
    }
}

}  // namespace

int main(int argc, char** argv) {
    spyre::openblas::RunAgainWithTheCpusKernels(argv);  // first: before OpenBLAS or any thread is used
    return spyre::support::RunExample("spyre-pto-examples", kUsage, [&] { return Run(argc, argv); });
}
