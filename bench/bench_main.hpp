// SPDX-License-Identifier: Apache-2.0
// The end of every benchmark's main(): runs the registered benchmarks under
// a HangWatchdog (examples/support/hang_watchdog.hpp) that restarts its
// bound as each benchmark finishes, so a hang is reported with the name of
// the benchmark that was running ("after <last finished>"), and turns a
// spyre::Error into a message and exit code 1.
#pragma once

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "hang_watchdog.hpp"
#include "spyre/error.hpp"

namespace spyre::bench {

// The console reporter, telling the watchdog about every finished benchmark.
class WatchdogReporter : public benchmark::ConsoleReporter {
public:
    explicit WatchdogReporter(support::HangWatchdog& watchdog)
        : ConsoleReporter(::isatty(STDOUT_FILENO) ? OO_Color : OO_None), watchdog_(watchdog) {}
    void ReportRuns(const std::vector<Run>& reports) override {
        ConsoleReporter::ReportRuns(reports);
        if (!reports.empty()) watchdog_.Phase("the benchmark after " + reports.back().benchmark_name());
    }

private:
    support::HangWatchdog& watchdog_;
};

// Runs the benchmarks registered so far. The console display is this
// reporter (so --benchmark_format has no effect on it); machine-readable
// output still works through --benchmark_out=FILE --benchmark_out_format=json. `per_benchmark` bounds each one
// (setup included); keep it under the meson benchmark() timeout so the
// watchdog, not meson, reports a hang.
// `teardown` (closing devices) runs under the same bound, then
// benchmark::Shutdown(). Returns main's exit code.
inline int RunBenchmarks(const char* program, std::chrono::seconds per_benchmark,
                         const std::function<void()>& teardown = {}) {
    support::HangWatchdog watchdog(program, per_benchmark, "the first benchmark");
    WatchdogReporter reporter(watchdog);
    int status = 0;
    try {
        benchmark::RunSpecifiedBenchmarks(&reporter);
    } catch (const spyre::Error& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        status = 1;
    }
    watchdog.Phase("teardown");
    if (teardown) teardown();
    benchmark::Shutdown();
    return status;
}

}  // namespace spyre::bench
