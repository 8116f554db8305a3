// SPDX-License-Identifier: Apache-2.0
// The host-level dispatcher's trace probes: a finished task's span on the
// track of its device ("host-level <device>") or SubWorker thread
// ("host-level subworker N"), a chip task's upload and download phases
// nested in it, and an arrow from each producer's span into it.
// docs/trace.md lists the tracks.
#pragma once

#include <cstdint>
#include <string>

#include "host_task.hpp"
#include "spyre/host/chip_executor.hpp"

namespace spyre::host {

// Draws `task` (ran from `start_ns` to `end_ns` on the calling thread;
// `device` "" for a SubWorker) and the arrows from its producers, and
// remembers its span in `task.trace` for its consumers. Call only while
// trace::Enabled(), and only from the thread that ran the task.
void TraceTask(HostTask& task, const std::string& device, uint64_t start_ns, uint64_t end_ns,
               const ChipCallStats& moved);

// Called under the dispatcher's lock as `task` finishes: hands its span's
// end to each consumer (a no-op when the task drew no span).
void TraceHandOff(const HostTask& task);

}  // namespace spyre::host
