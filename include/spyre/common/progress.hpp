// SPDX-License-Identifier: Apache-2.0
// Progress of long work, reported through a callback: plan loading
// (LoadExecutionPlan), large copies (DMAEngine), LaunchTiled with many
// tiles, and orchestration runs (Orchestrator::WaitAll / Run). Each
// operation calls it with `done` rising monotonically and ending at
// `total`; it may call it from another thread (the stream's callback
// thread, the waiting thread), one call at a time. docs/progress.md.
//
// spyre/common/progress_line.hpp draws it as a terminal line.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

struct ProgressInfo {
    std::string_view what;  // "loading plan", "copy to device", "LaunchTiled", "orchestration"
    uint64_t done = 0;
    uint64_t total = 0;
    std::string_view unit;  // "binaries", "bytes", "tiles", "tasks"
};

// Empty: no progress is reported (the operation costs what it did before).
using ProgressCallback = std::function<void(const ProgressInfo&)>;

}  // namespace spyre
SPYRE_API_END
