// SPDX-License-Identifier: Apache-2.0
// spyre-l4-examples: seed 003's host-level programs over the devices of
// several ranks (level 4, docs/multihost.md). Run under mpirun; every rank
// opens its own devices (an embedded mock card with 2 VFs unless
// --device-root names a mounted one) and registers the same chip functions;
// rank 0 runs the programs, checks them against the CPU and times them, the
// other ranks serve its chip tasks.
//
//   mpirun -np 2 build/examples/spyre-l4-examples
//
//   dependency  chip task a + b -> SubWorker verify (f = 5)
//   parallel    chip add || chip sub -> SubWorker reduce (f = 2a)
//   matmul      C = A x B with A's rows split over every rank's devices
//   cross-rank  one chip task on another rank's device, then a SubWorker on
//               rank 0 reading its output: the cost of a dependency across ranks
// A line "RESULT l4-ok ranks=N" says every check passed (the test reads it).
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
#include "spyre/host.hpp"
#include "spyre/host/mpi_transport.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace spyre;

// The best of five runs, in ms.
template <typename F>
double BestMs(F run) {
    double best = 1e300;
    for (int i = 0; i < 5; ++i) {
        const auto t0 = Clock::now();
        run();
        best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return best;
}

HostTensor Pattern(int64_t rows, int64_t cols, int mul, int mod, float scale) {
    HostTensor t = HostTensor::Zeros({rows, cols});
    auto v = t.floats();
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(int(i * size_t(mul) % size_t(mod)) - mod / 2) * scale;
    return t;
}

bool Dependency(Worker& w) {
    HostTensor a = HostTensor::Full({l3::kTile, l3::kTile}, 2.0f), b = HostTensor::Full({l3::kTile, l3::kTile}, 3.0f);
    HostTensor f = HostTensor::Zeros({l3::kTile, l3::kTile});
    const double ms = BestMs([&] { w.Run(l3::DependencyProgram(), {a, b, f}); });  // verify throws unless f == 5
    std::printf("dependency: chip_add -> verify: %.3f ms OK\n", ms);
    return true;
}

bool Parallel(Worker& w) {
    HostTensor a = Pattern(l3::kTile, l3::kTile, 7, 101, 0.5f), b = Pattern(l3::kTile, l3::kTile, 3, 37, 1.0f), f;
    const double ms = BestMs([&] { f = w.Run(l3::ParallelReduceProgram(), {a, b})[0]; });
    bool ok = true;
    for (size_t i = 0; i < f.floats().size() && ok; ++i) ok = f.floats()[i] == 2 * a.floats()[i];
    std::printf("parallel: chip_add || chip_sub -> reduce_sum (f = 2a): %.3f ms %s\n", ms, ok ? "OK" : "FAILED");
    return ok;
}

bool Matmul(Worker& w) {
    const int parts = int(w.device_count());
    const int64_t m = 64 * parts, k = 128, n = 128;  // chip_matmul: 64-row blocks, block_dim 1
    HostTensor a = Pattern(m, k, 7, 23, 1.0f / 16), b = Pattern(k, n, 5, 17, 1.0f / 8), c;
    const double ms = BestMs([&] { c = w.Run(l3::RowParallelMatmul(m, n, parts), {a, b})[0]; });
    double worst = 0;  // +infinity on a NaN
    for (int64_t r = 0; r < m; ++r)
        for (int64_t col = 0; col < n; ++col) {
            double want = 0;
            for (int64_t x = 0; x < k; ++x) want += double(a.floats()[size_t(r * k + x)]) * b.floats()[size_t(x * n + col)];
            worst = std::max(worst, support::RelativeError(c.floats()[size_t(r * n + col)], want));
        }
    const bool ok = worst < 1e-4;
    std::printf("matmul: [%lldx%lld]x[%lldx%lld], rows over %d devices: %.3f ms, max relative error %.2g %s\n",
                (long long)m, (long long)k, (long long)k, (long long)n, parts, ms, worst, ok ? "OK" : "FAILED");
    return ok;
}

bool CrossRank(Worker& w, size_t remote_device) {
    HostTensor a = HostTensor::Full({l3::kTile, l3::kTile}, 2.0f), b = HostTensor::Full({l3::kTile, l3::kTile}, 3.0f);
    HostTensor f = HostTensor::Zeros({l3::kTile, l3::kTile});
    const HostProgram p{"cross_rank", 2, {{{l3::kTile, l3::kTile}}}, [&](HostGraph& g, std::span<const HostTensor> x) {
                            g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.device = remote_device});
                            g.Sub("verify", {In(x[2])});
                        }};
    const double ms = BestMs([&] { w.Run(p, {a, b, f}); });
    std::printf("cross-rank: chip_add on %s -> verify on rank 0 (2 x 64 KiB there, 64 KiB back): %.3f ms OK\n",
                w.DescribeDevice(remote_device).c_str(), ms);
    return true;
}

constexpr const char* kUsage = "mpirun -np N spyre-l4-examples [--device-root DIR]";

}  // namespace

int main(int argc, char** argv) {
    std::string root;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--device-root" && i + 1 < argc) {
            root = argv[++i];
        } else {
            std::fprintf(stderr, "%s: '%s' is not an argument (or --device-root has no directory)\nusage: %s\n", argv[0],
                         arg.c_str(), kUsage);
            return support::kUsageExitCode;
        }
    }
    spyre::support::HangWatchdog watchdog(argv[0], std::chrono::seconds(120), "the level-4 examples");
    int rank = -1;
    try {
        host::MpiTransport transport;
        rank = transport.rank();
        setvbuf(stdout, nullptr, _IOLBF, 0);
        Host host = Host::Open(root.empty() ? HostOptions::EmbeddedMock(1, 2, "1G") : HostOptions::DeviceRootAt(root));
        DistributedConfig config{.device_ids = {}, .num_sub_workers = 1};
        for (const auto& f : host.functions())
            if (f.kind == driver::FunctionKind::VF) config.device_ids.push_back(int(f.index));
        MultiHostWorker mw(transport, host, config);
        // The same registrations on every rank (SPMD).
        l3::RegisterChipFunctions(mw.worker());
        mw.worker().RegisterSubWorker("verify", [](std::span<const HostTensor> t) {
            for (float x : t[0].floats())
                if (x != 5.0f) throw Error(ErrorKind::TaskFailed, "verify: expected 5.0, got " + std::to_string(x));
        });
        if (rank != 0) {
            mw.Serve();
            return 0;
        }
        Worker& w = mw.worker();
        std::printf("rank 0 of %d: %zu devices:", mw.ranks(), w.device_count());
        for (size_t d = 0; d < w.device_count(); ++d) std::printf(" [%s]", w.DescribeDevice(d).c_str());
        std::printf("\n");
        bool ok = Dependency(w);
        ok &= Parallel(w);
        ok &= Matmul(w);
        if (mw.ranks() > 1) ok &= CrossRank(w, config.device_ids.size());  // the first device of rank 1
        if (ok) std::printf("RESULT l4-ok ranks=%d\n", mw.ranks());
        return ok ? 0 : 1;
    } catch (const std::exception& e) {  // spyre::Error, or what the host could not allocate
        std::fprintf(stderr, "%s, rank %d: %s\n", argv[0], rank, e.what());
        return 1;
    }
}
