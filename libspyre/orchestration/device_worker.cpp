// SPDX-License-Identifier: Apache-2.0
#include "orchestration/device_worker.hpp"

#include <string>

#include "device/device_internals.hpp"
#include "orchestration/task_graph.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre_errors.h"
#include "trace/recorder.hpp"

namespace spyre::orchestration {

namespace {

constexpr uint64_t kTableBytes = PTO_MAX_PARAMS * sizeof(uint64_t);

// The descriptor's task id carries the argument table's index beside the
// runtime's task id, so a completion frees its table without a lookup.
uint64_t PackId(uint32_t table, int32_t task_id) { return (uint64_t(table) << 32) | uint32_t(task_id); }
uint32_t TableOf(uint64_t packed) { return uint32_t(packed >> 32); }
int32_t TaskOf(uint64_t packed) { return int32_t(uint32_t(packed)); }

}  // namespace

bool DeviceWorker::Available(const Device& device) { return DeviceInternals::TaskTopology(device).queues() > 0; }

DeviceWorker::DeviceWorker(Device& device, const TaskGraph& graph, std::vector<uint32_t> queues)
    : device_(device),
      pci_(device.pci_address()),
      allocator_(device.allocator()),
      graph_(graph),
      queues_(std::move(queues)) {}

DeviceWorker::~DeviceWorker() {
    Stop();
    if (tables_) {
        try {
            allocator_.Free(tables_->handle);
        } catch (const Error&) {
            // The device is gone: its memory went with it.
        }
    }
}

void DeviceWorker::Start(ReadyQueue& ready, CompletionSink& sink) {
    ready_ = &ready;
    sink_ = &sink;
    TaskPortClient& client = *this;
    port_ = std::make_unique<TaskPort>(device_, queues_, client);
    const uint32_t tables = port_->capacity();
    tables_ = allocator_.Allocate(uint64_t(tables) * kTableBytes);
    tables_device_ = allocator_.DeviceAddress(tables_->handle, tables_->size);
    tables_host_ = graph_.HostAddress(tables_device_, tables_->size);
    for (uint32_t i = tables; i > 0; --i) free_tables_.push_back(i - 1);
    in_flight_ids_.assign(tables, -1);
    sent_ns_.assign(tables, 0);
}

void DeviceWorker::Stop() {
    if (!port_) return;
    // The graph waited for every task it gave us; what is left ready (the
    // queue closed) is drained by the port's last passes.
    const std::atomic<uint32_t> never_moves{0};
    while (port_->Drive(never_moves, 0)) {
    }
    port_->Kick();
    port_.reset();
}

void DeviceWorker::Kick() noexcept {
    if (port_) port_->Kick();
}

bool DeviceWorker::Drive(const std::atomic<uint32_t>& word, uint32_t expected) {
    return port_ && port_->Drive(word, expected);
}

void DeviceWorker::Fill(std::vector<spyre_cb>& out, uint32_t room) {
    batch_.clear();
    if (lost_) {
        ready_->TryPopBatch(batch_, SIZE_MAX);
        finished_.clear();
        for (const ReadyTask& r : batch_) finished_.push_back({r.task_id, SPYRE_ERR_ABORTED});
        if (!finished_.empty()) sink_->OnTasksComplete(finished_);
        return;
    }
    if (room == 0 || free_tables_.empty()) return;
    ready_->TryPopBatch(batch_, std::min<size_t>(room, free_tables_.size()));
    const bool traced = trace::Enabled() && !batch_.empty();
    const uint64_t now = traced ? trace::detail::NowNs() : 0;
    for (const ReadyTask& r : batch_) {
        const TaskDescriptor& t = *r.task;
        const uint32_t table = free_tables_.back();
        free_tables_.pop_back();
        auto* entries = reinterpret_cast<uint64_t*>(tables_host_ + uint64_t(table) * kTableBytes);
        for (int32_t i = 0; i < t.num_params; ++i) entries[i] = graph_.DeviceAddress(t.params[i].host, t.params[i].size);
        in_flight_ids_[table] = r.task_id;
        sent_ns_[table] = now;
        out.push_back(driver::TaskCb(PackId(table, r.task_id), t.kernel->program_address,
                                     tables_device_ + uint64_t(table) * kTableBytes, uint32_t(t.num_params)));
    }
}

void DeviceWorker::Finished(std::span<const spyre_cqe> done) {
    const bool traced = trace::Enabled();
    TaskTiming timing;
    timing.category = "device";
    if (traced) [[unlikely]] {
        if (recording_ != trace::detail::Recording()) {
            recording_ = trace::detail::Recording();
            core_tracks_.clear();
        }
        timing.reaped_ns = trace::detail::NowNs();
    }
    finished_.clear();
    for (const spyre_cqe& c : done) {
        const uint32_t table = TableOf(c.user_data);
        free_tables_.push_back(table);
        in_flight_ids_[table] = -1;
        // The task ran on `core` from end - run_ns to end (spyre_task.h).
        // A completion without a time (or a core index past any card's) is
        // reported without a place on the timeline.
        const uint64_t end_ns = c.timestamp_ns;
        const uint64_t run_ns = spyre_task_result_run_ns(c.result);
        const uint16_t core = spyre_task_result_core(c.result);
        if (!traced || end_ns == 0 || run_ns >= end_ns || core >= 1024) [[likely]] {
            finished_.push_back({TaskOf(c.user_data), c.status});
            continue;
        }
        while (core_tracks_.size() <= core)
            core_tracks_.push_back(trace::detail::NamedTrack(pci_ + " core " + std::to_string(core_tracks_.size())));
        timing.track = core_tracks_[core];
        timing.start_ns = end_ns - run_ns;
        timing.end_ns = end_ns;
        timing.sent_ns = sent_ns_[table];
        sink_->OnTaskComplete(TaskOf(c.user_data), c.status, &timing);
    }
    if (!finished_.empty()) sink_->OnTasksComplete(finished_);
}

void DeviceWorker::Failed(const Error&) {
    // What is in flight will never complete: it fails, and so does every
    // task that comes later (Fill).
    lost_ = true;
    finished_.clear();
    for (int32_t& id : in_flight_ids_)
        if (id >= 0) {
            finished_.push_back({id, SPYRE_ERR_ABORTED});
            id = -1;
        }
    if (!finished_.empty()) sink_->OnTasksComplete(finished_);
}

}  // namespace spyre::orchestration
