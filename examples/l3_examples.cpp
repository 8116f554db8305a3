// SPDX-License-Identifier: Apache-2.0
// spyre-l3-examples: seed 003's host-level (level 3) programs on a Worker
// over several devices, each checked against the CPU and timed.
//
//   dependency  L3DependencyProgram: chip task a + b -> SubWorker verify,
//               in-place (f passed in) and return style (f allocated)
//   parallel    L3ParallelReduceProgram: chip add and chip sub on two
//               devices -> SubWorker reduce, f = 2a
//   matmul      C[M,K]x[K,N] with A's rows split over every device, each
//               chip task writing its rows of C (block_dim core tasks each)
//
// Usage: spyre-l3-examples [dependency|parallel|matmul|all] [--device-root DIR] [M K N]
//   M K N: each an integer from 1 to 1048576, M a multiple of devices x
//   block_dim (2); default K = N = 256 and M the first such multiple from
//   512 up. A bad argument is a usage error (exit code 2).
//   default: an embedded mock with 2 cards x 2 VFs, the four VFs as devices;
//   --device-root DIR: the VFs (else every function) under a mounted spyre-mockdev.
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "example_main.hpp"
#include "hang_watchdog.hpp"
#include "l3_chip_functions.hpp"
#include "result_check.hpp"
#include "spyre/common/progress_line.hpp"
#include "spyre/host.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace spyre;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Runs `run` five times: the first run's ms (devices cold: first touch of
// their memory, first upload) and the best of the others (warm).
struct Timing {
    double first_ms = 0, best_ms = 0;
};
template <typename F>
Timing Time(F run) {
    Timing t;
    for (int i = 0; i < 5; ++i) {
        const auto t0 = Clock::now();
        run();
        const double ms = Ms(Clock::now() - t0);
        if (i == 0) t.first_ms = t.best_ms = ms;
        else if (i == 1 || ms < t.best_ms) t.best_ms = ms;
    }
    return t;
}

bool AllEqual(const HostTensor& t, float want, const char* what) {
    for (float x : t.floats())
        if (x != want) {
            std::printf("  %s: FAILED (%g, want %g)\n", what, double(x), double(want));
            return false;
        }
    return true;
}

bool Dependency(Worker& w) {
    HostTensor a = HostTensor::Full({128, 128}, 2.0f), b = HostTensor::Full({128, 128}, 3.0f);
    HostTensor f = HostTensor::Zeros({128, 128});
    HostTensor g;
    const Timing in_place = Time([&] { w.Run(l3::DependencyProgram(), {a, b, f}); });  // compiled(a, b, f)
    const Timing returned = Time([&] { g = w.Run(l3::DependencyProgram(), {a, b})[0]; });  // f = compiled(a, b)
    const bool ok = AllEqual(f, 5.0f, "in-place f") && AllEqual(g, 5.0f, "returned f");
    std::printf("dependency: chip_add -> verify on [128x128]: in-place %.3f ms (first run %.3f), return style %.3f ms %s\n",
                in_place.best_ms, in_place.first_ms, returned.best_ms, ok ? "OK" : "FAILED");
    return ok;
}

bool Parallel(Worker& w) {
    std::vector<float> av(128 * 128), bv(128 * 128);
    for (size_t i = 0; i < av.size(); ++i) av[i] = float(i % 512) * 0.25f, bv[i] = float(i % 300) - 7.0f;
    HostTensor a = HostTensor::FromFloats({128, 128}, av), b = HostTensor::FromFloats({128, 128}, bv);
    HostTensor f;
    const Timing t = Time([&] { f = w.Run(l3::ParallelReduceProgram(), {a, b})[0]; });
    bool ok = true;
    for (size_t i = 0; i < av.size() && ok; ++i) ok = f.floats()[i] == (av[i] + bv[i]) + (av[i] - bv[i]);
    std::printf("parallel: chip_add || chip_sub -> reduce_sum (f = 2a) on [128x128]: %.3f ms (first run %.3f) %s\n",
                t.best_ms, t.first_ms, ok ? "OK" : "FAILED");
    return ok;
}

// The rows of A split over every device and each device's rows over
// block_dim core tasks: M must be a multiple of devices x block_dim. M = 0
// (no M given) is the smallest such multiple from kDefaultM up.
constexpr int64_t kDefaultM = 512;

bool Matmul(Worker& w, int64_t m, int64_t k, int64_t n) {
    const int parts = int(w.device_count());
    const int64_t split = int64_t(parts) * w.config().block_dim;
    if (m == 0) m = (kDefaultM + split - 1) / split * split;
    if (m % split)
        throw support::UsageError("matmul: M = " + std::to_string(m) + " must be a multiple of devices (" +
                                  std::to_string(parts) + ") x block_dim (" + std::to_string(w.config().block_dim) +
                                  ") = " + std::to_string(split));
    const int64_t task_rows = m / split;
    // The chip matmul for this split: a kernel of task_rows x k x n on every device.
    const KernelBuilder kb;
    w.RegisterKernel(l3::KERNEL_MATMUL_2, kb.Matmul(task_rows, k, n, DType::FP32).program);
    w.RegisterChipFunction("chip_matmul_" + std::to_string(task_rows), l3::ChipMatmul(task_rows, k, n, l3::KERNEL_MATMUL_2));
    std::vector<float> av(size_t(m * k)), bv(size_t(k * n));
    for (size_t i = 0; i < av.size(); ++i) av[i] = float(int(i * 7 % 23) - 11) / 16.0f;
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = float(int(i * 5 % 17) - 8) / 8.0f;
    HostTensor a = HostTensor::FromFloats({m, k}, av), b = HostTensor::FromFloats({k, n}, bv);
    const std::string fn = "chip_matmul_" + std::to_string(task_rows);
    HostProgram p{"row_parallel_matmul", 2, {{{m, n}}}, [&](HostGraph& g, std::span<const HostTensor> x) {
                      const int64_t rows = m / parts;
                      for (int i = 0; i < parts; ++i)
                          g.Chip(fn, {In(x[0].Rows(i * rows, (i + 1) * rows)), In(x[1]), Out(x[2].Rows(i * rows, (i + 1) * rows))});
                  }};
    HostTensor c;
    int runs = 0;
    const Timing t = Time([&] {
        if (runs++ > 0) {
            c = w.Run(p, {a, b})[0];
            return;
        }
        // The first (cold) run shows its tasks finished as a line on a
        // terminal (nothing in a pipe or CI); the warm runs stay unobserved.
        ProgressLine line;
        c = w.Run(p, {a, b}, line.Callback())[0];
    });
    // The CPU reference (a naive loop: a correctness check, not a baseline to beat).
    const auto t0 = Clock::now();
    std::vector<float> want(size_t(m * n), 0.0f);
    for (int64_t r = 0; r < m; ++r)
        for (int64_t x = 0; x < k; ++x)
            for (int64_t col = 0; col < n; ++col) want[size_t(r * n + col)] += av[size_t(r * k + x)] * bv[size_t(x * n + col)];
    const double cpu_ms = Ms(Clock::now() - t0);
    const double worst = support::WorstRelativeError(c.floats(), want);  // +infinity on a NaN
    const bool ok = worst < 1e-4;
    std::printf("matmul: [%lldx%lld]x[%lldx%lld] rows over %d devices x %d core tasks: %.3f ms (first run %.3f; naive CPU "
                "loop %.3f ms), max relative error %.2g %s\n",
                (long long)m, (long long)k, (long long)k, (long long)n, parts, w.config().block_dim, t.best_ms, t.first_ms,
                cpu_ms, worst,
                ok ? "OK" : "FAILED");
    return ok;
}

constexpr const char* kUsage =
    "spyre-l3-examples [dependency|parallel|matmul|all] [--device-root DIR] [M K N]\n"
    "  M K N: the matmul's sizes, each an integer from 1 to 1048576, M a multiple of devices x 2\n"
    "  (default: K = N = 256, M the first such multiple from 512 up)";

int Run(int argc, char** argv) {
    using support::ParseInteger, support::UsageError;
    std::string which = "all", root;
    std::vector<std::string> mkn;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--device-root") {
            if (i + 1 == argc) throw UsageError("--device-root needs a directory");
            root = argv[++i];
        } else if (arg == "dependency" || arg == "parallel" || arg == "matmul" || arg == "all") {
            which = arg;
        } else if (!arg.empty() && std::isdigit(static_cast<unsigned char>(arg[arg[0] == '-' && arg.size() > 1 ? 1 : 0]))) {
            mkn.push_back(arg);  // a size (ParseInteger refuses a bad one by name)
        } else {
            throw UsageError("unknown argument '" + arg + "' (an example: dependency, parallel, matmul or all)");
        }
    }
    if (!mkn.empty() && mkn.size() != 3) throw UsageError("give M K N together");
    if (!mkn.empty() && which != "matmul" && which != "all")
        throw UsageError("M K N size the matmul example; '" + which + "' takes none");
    int64_t m = 0, k = 256, n = 256;  // M = 0: the default for the devices found
    if (!mkn.empty()) {
        m = ParseInteger("M", mkn[0], 1, support::kMaxDimension);
        k = ParseInteger("K", mkn[1], 1, support::kMaxDimension);
        n = ParseInteger("N", mkn[2], 1, support::kMaxDimension);
    }
    support::HangWatchdog watchdog(argv[0], std::chrono::seconds(300), "the examples");
    Host host = Host::Open(root.empty() ? HostOptions::EmbeddedMock(2, 2, "2G") : HostOptions::DeviceRootAt(root));
    DistributedConfig config;
    config.device_ids.clear();
    for (const auto& f : host.functions())
        if (f.kind == driver::FunctionKind::VF) config.device_ids.push_back(int(f.index));
    if (config.device_ids.empty())
        for (const auto& f : host.functions()) config.device_ids.push_back(int(f.index));
    config.num_sub_workers = 1;
    config.block_dim = 2;
    Worker w(host, config);
    l3::RegisterChipFunctions(w);
    w.RegisterSubWorker("verify", [](std::span<const HostTensor> t) {
        for (float x : t[0].floats())
            if (x != 5.0f) throw std::runtime_error("SubWorker verify failed: expected 5.0, got " + std::to_string(x));
    });
    std::printf("%s: %zu devices:", host.Describe().c_str(), w.device_count());
    for (size_t d = 0; d < w.device_count(); ++d) std::printf(" %s", w.DescribeDevice(d).c_str());
    std::printf("\n");
    bool ok = true;
    if (which == "dependency" || which == "all") ok &= Dependency(w);
    if (which == "parallel" || which == "all") ok &= Parallel(w);
    if (which == "matmul" || which == "all") ok &= Matmul(w, m, k, n);
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return spyre::support::RunExample("spyre-l3-examples", kUsage, [&] { return Run(argc, argv); });
}
