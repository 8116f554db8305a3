// SPDX-License-Identifier: Apache-2.0
#include "orchestration/device_worker.hpp"

#include <pthread.h>

#include <chrono>
#include <string>

#include "orchestration/task_graph.hpp"
#include "spyre/common/log.hpp"
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

bool DeviceWorker::Available(const Device& device) { return device.task_topology().queues() > 0; }

DeviceWorker::DeviceWorker(Device& device, const TaskGraph& graph, std::vector<uint32_t> queues)
    : device_(device),
      pci_(device.pci_address()),
      allocator_(device.allocator()),
      graph_(graph),
      queues_(std::move(queues)) {
    const uint32_t have = device_.task_topology().queues();
    if (queues_.empty())
        for (uint32_t q = 0; q < have; ++q) queues_.push_back(q);
    for (size_t i = 0; i < queues_.size(); ++i) {
        if (queues_[i] >= have)
            throw Error(ErrorKind::InvalidArgument, "task queue " + std::to_string(queues_[i]) + " does not exist on " +
                                                        pci_ + ", which has " + std::to_string(have));
        for (size_t j = 0; j < i; ++j)
            if (queues_[j] == queues_[i])
                throw Error(ErrorKind::InvalidArgument, "task queue " + std::to_string(queues_[i]) + " named twice");
    }
}

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
    uint32_t tables = 0;
    for (uint32_t q : queues_) {
        Group g;
        g.queue = device_.TakeTaskQueue(q);
        g.first_table = tables;
        tables += g.queue->capacity();
        groups_.push_back(std::move(g));
    }
    tables_ = allocator_.Allocate(uint64_t(tables) * kTableBytes);
    tables_device_ = allocator_.DeviceAddress(tables_->handle, tables_->size);
    tables_host_ = graph_.HostAddress(tables_device_, tables_->size);
    for (Group& g : groups_) threads_.emplace_back([this, &g, &ready, &sink] { Serve(g, ready, sink); });
}

void DeviceWorker::Stop() {
    for (std::thread& t : threads_)
        if (t.joinable()) t.join();
    threads_.clear();
}

void DeviceWorker::Serve(Group& g, ReadyQueue& ready, CompletionSink& sink) {
    driver::TaskQueue& tq = *g.queue;
    pthread_setname_np(pthread_self(), ("spyre-tq" + std::to_string(tq.group())).c_str());
    std::vector<uint32_t> free_tables;
    for (uint32_t i = tq.capacity(); i > 0; --i) free_tables.push_back(g.first_table + i - 1);
    std::vector<ReadyTask> batch;
    std::vector<spyre_task_desc> descs;
    std::vector<spyre_task_cqe> done(tq.capacity());
    std::vector<int32_t> in_flight_ids(tq.capacity() + g.first_table, -1);  // by table
    driver::WaitOptions wait;
    wait.mode = driver::WaitMode::Adaptive;
    // A wait ends after this long to look for tasks that became ready
    // meanwhile (the completion interrupt does not see the ready queue).
    wait.timeout = std::chrono::microseconds(500);
    std::optional<Error> lost;  // the device failed: every task from here fails
    // Tracing: when each table's task was sent, and one track per core
    // ("<pci> core N", from the completion's core index).
    std::vector<uint64_t> sent_ns(in_flight_ids.size(), 0);
    std::vector<CompletionSink::Done> finished;  // reported with one call per reaped batch
    std::vector<uint32_t> core_tracks;
    uint64_t recording = 0;
    TaskTiming timing;
    timing.category = "device";

    for (;;) {
        batch.clear();
        if (tq.InFlight() == 0 || lost) {
            if (!ready.PopBatch(batch, lost ? 64 : tq.Free())) break;  // closed and drained
        } else if (tq.Free() > 0) {
            ready.TryPopBatch(batch, tq.Free());
        }
        if (lost) {
            for (const ReadyTask& r : batch) sink.OnTaskComplete(r.task_id, SPYRE_ERR_ABORTED);
            continue;
        }
        descs.clear();
        for (const ReadyTask& r : batch) {
            const TaskDescriptor& t = *r.task;
            const uint32_t table = free_tables.back();
            free_tables.pop_back();
            auto* entries = reinterpret_cast<uint64_t*>(tables_host_ + uint64_t(table) * kTableBytes);
            for (int32_t i = 0; i < t.num_params; ++i)
                entries[i] = graph_.DeviceAddress(t.params[i].host, t.params[i].size);
            in_flight_ids[table] = r.task_id;
            descs.push_back(driver::TaskDesc(PackId(table, r.task_id), t.kernel->program_address,
                                             tables_device_ + uint64_t(table) * kTableBytes, uint32_t(t.num_params)));
        }
        try {
            if (trace::Enabled() && !descs.empty()) [[unlikely]] {
                const uint64_t now = trace::detail::NowNs();
                for (const spyre_task_desc& d : descs) sent_ns[TableOf(d.task_id)] = now;
            }
            if (!descs.empty()) tq.Submit(descs);  // all fit: the batch was sized by Free()
            if (tq.InFlight() == 0) continue;
            size_t n = tq.Reap(done);
            if (n == 0) {
                try {
                    n = tq.Wait(done, 1, wait);
                } catch (const Error& e) {
                    if (e.kind() != ErrorKind::Timeout) throw;
                }
            }
            const bool traced = trace::Enabled() && n > 0;
            if (traced) [[unlikely]] {
                if (recording != trace::detail::Recording()) {
                    recording = trace::detail::Recording();
                    core_tracks.clear();
                }
                timing.reaped_ns = trace::detail::NowNs();
            }
            finished.clear();
            for (size_t i = 0; i < n; ++i) {
                const uint32_t table = TableOf(done[i].task_id);
                free_tables.push_back(table);
                in_flight_ids[table] = -1;
                // A completion without a time (or a core index past any
                // card's) is reported without a place on the timeline.
                if (!traced || done[i].start_ns == 0 || done[i].end_ns < done[i].start_ns || done[i].core >= 1024)
                    [[likely]] {
                    finished.push_back({TaskOf(done[i].task_id), done[i].status});
                    continue;
                }
                const uint16_t core = done[i].core;
                while (core_tracks.size() <= core)
                    core_tracks.push_back(trace::detail::NamedTrack(pci_ + " core " +
                                                                    std::to_string(core_tracks.size())));
                timing.track = core_tracks[core];
                timing.start_ns = done[i].start_ns;
                timing.end_ns = done[i].end_ns;
                timing.sent_ns = sent_ns[table];
                sink.OnTaskComplete(TaskOf(done[i].task_id), done[i].status, &timing);
            }
            if (!finished.empty()) sink.OnTasksComplete(finished);
        } catch (const Error& e) {
            // The device is gone or the queue halted: what is in flight will
            // never complete. Fail it, and every task that comes later.
            SPYRE_LOG_WARN("task queue %u: %s (its tasks fail from here)", tq.group(), e.what());
            lost = e;
            for (int32_t& id : in_flight_ids)
                if (id >= 0) {
                    sink.OnTaskComplete(id, SPYRE_ERR_ABORTED);
                    id = -1;
                }
        }
    }
}

}  // namespace spyre::orchestration
