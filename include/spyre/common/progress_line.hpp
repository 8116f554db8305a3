// SPDX-License-Identifier: Apache-2.0
// A progress line on a terminal: "\r<what>: <done>/<total> <unit> (NN%)",
// redrawn at most every 100 ms and once at the end, then a newline. It
// draws only when its stream (stderr by default) is a terminal and the
// environment has no CI variable; otherwise it prints nothing at all, so
// pipes and CI logs never see a carriage return. docs/progress.md.
//
//   spyre::ProgressLine line;
//   orch.WaitAll(line.Callback());
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "spyre/common/progress.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

class ProgressLine {
public:
    // Draws on `fd` (stderr by default) when it is a terminal and CI is unset.
    explicit ProgressLine(int fd = STDERR_FILENO) : fd_(fd), active_(Wanted(fd)) {}
    ~ProgressLine() { Finish(); }
    ProgressLine(const ProgressLine&) = delete;
    ProgressLine& operator=(const ProgressLine&) = delete;

    // Whether a terminal will see anything.
    static bool Wanted(int fd) {
        const char* ci = std::getenv("CI");
        return isatty(fd) == 1 && (ci == nullptr || *ci == '\0');
    }
    bool active() const noexcept { return active_; }

    void Update(const ProgressInfo& p) {
        if (!active_) return;
        std::lock_guard lock(mu_);
        const auto now = std::chrono::steady_clock::now();
        const bool last = p.total != 0 && p.done >= p.total;
        if (!last && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
        last_draw_ = now;
        char line[160];
        const int pct = p.total ? int(p.done * 100 / p.total) : 0;
        int n = std::snprintf(line, sizeof line, "\r%.*s: %llu/%llu %.*s (%d%%)\033[K", int(p.what.size()),
                              p.what.data(), static_cast<unsigned long long>(p.done),
                              static_cast<unsigned long long>(p.total), int(p.unit.size()), p.unit.data(), pct);
        if (n > int(sizeof line) - 1) n = int(sizeof line) - 1;
        Write(line, size_t(n));
        drawn_ = true;
        if (last) EndLine();
    }

    // A callback for the operations that take one (this line must outlive it).
    ProgressCallback Callback() {
        if (!active_) return {};  // nothing to draw: the operation skips its progress work
        return [this](const ProgressInfo& p) { Update(p); };
    }

    // Ends a line left unfinished (an operation that failed part way).
    void Finish() {
        if (!active_) return;
        std::lock_guard lock(mu_);
        EndLine();
    }

private:
    void EndLine() {
        if (drawn_) Write("\n", 1);
        drawn_ = false;
    }
    void Write(const char* s, size_t n) {
        while (n > 0) {
            const ssize_t w = ::write(fd_, s, n);
            if (w <= 0) return;  // a terminal that went away: drop the line
            s += w;
            n -= size_t(w);
        }
    }

    int fd_;
    bool active_;
    std::mutex mu_;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace spyre
SPYRE_API_END
