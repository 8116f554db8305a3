// SPDX-License-Identifier: Apache-2.0
#include "orchestration/device_worker.hpp"

#include <pthread.h>

#include <chrono>
#include <string>

#include "device/device_internals.hpp"
#include "orchestration/task_graph.hpp"
#include "spyre/common/log.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre_errors.h"
#include "trace/recorder.hpp"

namespace spyre::orchestration {

namespace {

constexpr uint64_t kTableBytes = PTO_MAX_PARAMS * sizeof(uint64_t);
// How long the worker looks for completions, yielding, before it sleeps on
// the completion interrupt. Yield, not spin: on a host with few CPUs the
// device's threads (a mock's server and cores) need the CPU a spinning
// waiter holds, and a short task's completion comes sooner when they get it.
constexpr auto kYieldPoll = std::chrono::microseconds(50);

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
      queues_(std::move(queues)) {
    const uint32_t have = DeviceInternals::TaskTopology(device_).queues();
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
        queues_taken_.push_back(DeviceInternals::TakeTaskQueue(device_, q));
        tables += queues_taken_.back()->capacity();
    }
    tables_ = allocator_.Allocate(uint64_t(tables) * kTableBytes);
    tables_device_ = allocator_.DeviceAddress(tables_->handle, tables_->size);
    tables_host_ = graph_.HostAddress(tables_device_, tables_->size);
    thread_ = std::thread([this, tables, &ready, &sink] { Serve(tables, ready, sink); });
    pthread_setname_np(thread_.native_handle(), "spyre-tasks");  // named once it exists, not when it first runs
}

void DeviceWorker::Stop() {
    if (thread_.joinable()) thread_.join();
}

void DeviceWorker::Serve(uint32_t tables, ReadyQueue& ready, CompletionSink& sink) {
    std::vector<driver::TaskQueue*> queues;
    for (auto& q : queues_taken_) queues.push_back(q.get());
    auto in_flight = [&] {
        uint32_t n = 0;
        for (driver::TaskQueue* q : queues) n += q->InFlight();
        return n;
    };
    auto free_slots = [&] {
        uint32_t n = 0;
        for (driver::TaskQueue* q : queues) n += q->Free();
        return n;
    };
    std::vector<uint32_t> free_tables;
    for (uint32_t i = tables; i > 0; --i) free_tables.push_back(i - 1);
    std::vector<ReadyTask> batch;
    std::vector<std::vector<spyre_cb>> descs(queues.size());
    std::vector<spyre_cqe> done(tables);
    std::vector<int32_t> in_flight_ids(tables, -1);  // by table
    driver::WaitOptions wait;
    wait.mode = driver::WaitMode::Blocking;  // after kYieldPoll of looking
    // A wait ends after this long to look for tasks that became ready
    // meanwhile (the completion interrupt does not see the ready queue).
    wait.timeout = std::chrono::microseconds(500);
    std::optional<Error> lost;  // the device failed: every task from here fails
    // Tracing: when each table's task was sent, and one track per core
    // ("<pci> core N", from the completion's core index).
    std::vector<uint64_t> sent_ns(tables, 0);
    std::vector<CompletionSink::Done> finished;  // reported with one call per reaped batch
    std::vector<uint32_t> core_tracks;
    uint64_t recording = 0;
    TaskTiming timing;
    timing.category = "device";
    size_t next_queue = 0;  // where the spreading of the next batch starts

    for (;;) {
        batch.clear();
        if (in_flight() == 0 || lost) {
            if (!ready.PopBatch(batch, lost ? 64 : free_slots())) break;  // closed and drained
        } else if (free_slots() > 0) {
            ready.TryPopBatch(batch, free_slots());
        }
        if (lost) {
            for (const ReadyTask& r : batch) sink.OnTaskComplete(r.task_id, SPYRE_ERR_ABORTED);
            continue;
        }
        // Spread the batch over the core groups, each up to its free room.
        for (auto& d : descs) d.clear();
        for (const ReadyTask& r : batch) {
            size_t q = next_queue;
            while (descs[q].size() >= queues[q]->Free()) q = (q + 1) % queues.size();  // the batch fits in all
            next_queue = (q + 1) % queues.size();
            const TaskDescriptor& t = *r.task;
            const uint32_t table = free_tables.back();
            free_tables.pop_back();
            auto* entries = reinterpret_cast<uint64_t*>(tables_host_ + uint64_t(table) * kTableBytes);
            for (int32_t i = 0; i < t.num_params; ++i)
                entries[i] = graph_.DeviceAddress(t.params[i].host, t.params[i].size);
            in_flight_ids[table] = r.task_id;
            descs[q].push_back(driver::TaskCb(PackId(table, r.task_id), t.kernel->program_address,
                                              tables_device_ + uint64_t(table) * kTableBytes, uint32_t(t.num_params)));
        }
        try {
            if (trace::Enabled() && !batch.empty()) [[unlikely]] {
                const uint64_t now = trace::detail::NowNs();
                for (const auto& d : descs)
                    for (const spyre_cb& t : d) sent_ns[TableOf(t.user_data)] = now;
            }
            for (size_t q = 0; q < queues.size(); ++q)
                if (!descs[q].empty()) queues[q]->Submit(descs[q]);  // all fit: spread by Free()
            if (in_flight() == 0) continue;
            auto reap = [&] {
                size_t n = 0;
                for (driver::TaskQueue* q : queues) n += q->Reap(std::span(done).subspan(n));
                return n;
            };
            size_t n = reap();
            if (n == 0) {
                const auto until = std::chrono::steady_clock::now() + kYieldPoll;
                do std::this_thread::yield();
                while ((n = reap()) == 0 && std::chrono::steady_clock::now() < until);
            }
            if (n == 0) {
                try {
                    driver::TaskQueue::WaitAny(queues, wait);
                } catch (const Error& e) {
                    if (e.kind() != ErrorKind::Timeout) throw;
                }
                n = reap();
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
                const uint32_t table = TableOf(done[i].user_data);
                free_tables.push_back(table);
                in_flight_ids[table] = -1;
                // The task ran on `core` from end - run_ns to end (spyre_task.h).
                // A completion without a time (or a core index past any
                // card's) is reported without a place on the timeline.
                const uint64_t end_ns = done[i].timestamp_ns;
                const uint64_t run_ns = spyre_task_result_run_ns(done[i].result);
                const uint16_t core = spyre_task_result_core(done[i].result);
                if (!traced || end_ns == 0 || run_ns >= end_ns || core >= 1024) [[likely]] {
                    finished.push_back({TaskOf(done[i].user_data), done[i].status});
                    continue;
                }
                while (core_tracks.size() <= core)
                    core_tracks.push_back(trace::detail::NamedTrack(pci_ + " core " +
                                                                    std::to_string(core_tracks.size())));
                timing.track = core_tracks[core];
                timing.start_ns = end_ns - run_ns;
                timing.end_ns = end_ns;
                timing.sent_ns = sent_ns[table];
                sink.OnTaskComplete(TaskOf(done[i].user_data), done[i].status, &timing);
            }
            if (!finished.empty()) sink.OnTasksComplete(finished);
        } catch (const Error& e) {
            // The device is gone or a queue halted: what is in flight will
            // never complete. Fail it, and every task that comes later.
            SPYRE_LOG_WARN("task queues of %s: %s (their tasks fail from here)", pci_.c_str(), e.what());
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
