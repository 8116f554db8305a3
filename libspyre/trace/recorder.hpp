// SPDX-License-Identifier: Apache-2.0
// Internal: the probes the runtime's layers call while a trace records
// (spyre/trace/trace.hpp starts and stops it). Every probe is a no-op when
// recording is off; callers test trace::Enabled() first where preparing
// the arguments costs something.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "spyre/trace/trace.hpp"

namespace spyre::trace::detail {

// For a recording that lasts until the process ends (SPYRE_TRACE): SIGTERM
// and SIGINT, where the program has not claimed them, write the trace
// before the process ends by them (save_on_signal.cpp). Once per process.
void SaveOnTerminatingSignals() noexcept;
// Events written to trace files so far: a crashed thread waits while the
// saver's count moves (a signal handler may read an atomic).
extern std::atomic<uint64_t> g_events_written;

// A row of the timeline that is not a host thread (a stream, a device's
// ring, a DMA engine), named once; the same name gives the same track.
uint32_t NamedTrack(const std::string& name);

// Which recording is running (changes with every Start and Stop): a cached
// track id is valid only within the recording that named it.
uint64_t Recording() noexcept;

// A fresh id for a flow arrow (never 0). 32 bits, so a queued op carries it
// in padding; ids repeat only after 4 billion arrows in one recording.
uint32_t NewFlow() noexcept;

// A span on `track` (0: the calling thread). `name` and `category` must be
// string literals. `arg` (an op index, bytes; < 0: none) and `queued_ns`
// (when the work was enqueued; 0: none) go into the span's args; `flow_in`
// (0: none) ends a flow arrow at the span's start; `device_code` (0: none)
// is the device's error code for the work, written as args.error.
void Span(uint32_t track, const char* category, const char* name, uint64_t start_ns, uint64_t end_ns,
          int64_t arg = -1, uint64_t queued_ns = 0, uint64_t flow_in = 0, uint32_t device_code = 0) noexcept;

// Starts flow arrow `flow` at `ts_ns` on the calling thread's track.
void FlowOut(uint64_t flow, uint64_t ts_ns) noexcept;

// A whole dependency arrow in one record (written as its 's' and 'f'
// events): from `from_ns` on `from_track` to `to_ns` on `to_track`, each end
// bound to the span that encloses it there (a span may take any number of
// arrows in and out).
void Arrow(uint32_t from_track, uint64_t from_ns, uint32_t to_track, uint64_t to_ns) noexcept;

// An orchestration task that ran on `track` from `start_ns` to `end_ns`,
// named "kernel <kernel_id>", args task, kernel and (when not 0) when the
// host sent it (`sent_ns`) and saw it complete (`reaped_ns`). `category`
// must be a string literal ("task": a host worker, "device": a core).
// `status` (0: success) is written as args.status, and a device's error
// code also as args.error.
void TaskSpan(uint32_t track, const char* category, uint64_t start_ns, uint64_t end_ns, int32_t task_id,
              int32_t kernel_id, uint64_t sent_ns = 0, uint64_t reaped_ns = 0, uint32_t status = 0) noexcept;

// How a host-level task ended, as its span says.
enum class HostTaskState : uint8_t { Unknown, Done, Failed };

// A host-level task (seed 003) that ran on `track` from `start_ns` to
// `end_ns`: a chip task on `device` (its bytes moved, when known) or, with
// `device` empty, a SubWorker task. `name` is the task's name (as the run's
// report gives it), `function` the chip function or SubWorker it ran ("":
// the same as `name`). The strings are copied once into a table kept for
// the process: devices and functions are a small set, and task names
// repeat from run to run (a run names its tasks "<function>#<n>" unless the
// program names them).
void HostTaskSpan(uint32_t track, const std::string& name, const std::string& device, uint64_t start_ns,
                  uint64_t end_ns, uint64_t task_id, uint64_t bytes_uploaded = 0, uint64_t bytes_downloaded = 0,
                  const std::string& function = {}, HostTaskState state = HostTaskState::Unknown) noexcept;

// A counter sample: `name` (a string literal) of what `track` shows, for
// example the ring depth of a device's ring track.
void Counter(uint32_t track, const char* name, uint64_t ts_ns, int64_t value) noexcept;

}  // namespace spyre::trace::detail
