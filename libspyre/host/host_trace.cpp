// SPDX-License-Identifier: Apache-2.0
#include "host_trace.hpp"

#include "dependency/job_threads.hpp"
#include "trace/recorder.hpp"

namespace spyre::host {

using dependency::JobThreads;

namespace {

// A pool thread runs one device's chip tasks or one SubWorker slot for its
// whole life (JobThreads), so it names one track: looked up once per
// recording, not per task. A run's waiter runs tasks of any device
// (JobThreads::RunOneOf): its track follows the name.
uint32_t TrackOf(const std::string& device) {
    thread_local uint64_t recording = 0;
    thread_local uint32_t track = 0;
    thread_local std::string cached_device;
    thread_local int cached_index = 0;
    const int index = device.empty() ? JobThreads::CurrentIndex() : 0;
    if (recording != trace::detail::Recording() || cached_device != device || cached_index != index) {
        recording = trace::detail::Recording();
        cached_device = device;
        cached_index = index;
        track = trace::detail::NamedTrack(!device.empty()                      ? "host-level " + device
                                          : index == JobThreads::kHelperIndex ? "host-level subworker (a run's waiter)"
                                                                              : "host-level subworker " + std::to_string(index));
    }
    return track;
}

}  // namespace

void TraceTask(HostTask& task, const std::string& device, uint64_t start_ns, uint64_t end_ns,
               const ChipCallStats& moved) {
    const uint32_t track = TrackOf(device);
    const uint64_t recording = trace::detail::Recording();
    trace::detail::HostTaskSpan(track, task.name, device, start_ns, end_ns, task.id, moved.bytes_uploaded,
                                moved.bytes_downloaded, task.function,
                                task.inbox_failure ? trace::detail::HostTaskState::Failed
                                                   : trace::detail::HostTaskState::Done);
    if (moved.run_start_ns > start_ns && moved.run_start_ns <= end_ns)
        trace::detail::Span(track, "host-level", "upload", start_ns, moved.run_start_ns, int64_t(moved.bytes_uploaded));
    if (moved.run_end_ns >= start_ns && moved.run_end_ns < end_ns)
        trace::detail::Span(track, "host-level", "download", moved.run_end_ns, end_ns, int64_t(moved.bytes_downloaded));
    for (const HostTask::TraceEnd& p : task.trace_in)
        if (p.recording == recording) trace::detail::Arrow(p.track, p.end_ns, track, start_ns);
    // The tail just inside this span, so a viewer binds it here.
    task.trace = {track, end_ns > start_ns ? end_ns - 1 : end_ns, recording};
}

void TraceHandOff(const HostTask& task) {
    if (task.trace.track == 0) return;
    for (HostTask* c : task.consumers) c->trace_in.push_back(task.trace);
}

}  // namespace spyre::host
