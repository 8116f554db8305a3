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
      queues_(std::move(queues)),
      waits_on_card_(SPYRE_VERSION_GET_MINOR(DeviceInternals::Function(device).device_info().contract_version) >= 1) {}

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
    // One per ring slot: live ids, consecutive and wrapping at a multiple of
    // the ring's size, get distinct slots.
    placed_.assign(size_t(std::max(graph_.task_ring_size(), 1)), Placed{});
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

bool DeviceWorker::Drive(const std::atomic<uint32_t>& word, uint32_t expected,
                         std::chrono::steady_clock::time_point until) {
    return port_ && port_->Drive(word, expected, until);
}

void DeviceWorker::FillQueues(std::span<std::vector<spyre_cb>> per_queue, std::span<const QueueRoom> rooms) {
    if (lost_) {
        FailHeld(lost_status_);
        FailReady(lost_status_);
        return;
    }
    left_.assign(rooms.begin(), rooms.end());
    uint32_t room = 0;
    for (const QueueRoom& r : rooms) room += r.free;
    finished_.clear();  // what fails here, without being sent (a producer failed)
    // What waited first, in order: a task held for a producer comes after it.
    size_t kept = 0;
    for (size_t i = 0; i < held_.size(); ++i)
        if (!Place(held_[i], per_queue)) held_[kept++] = held_[i];
    held_.resize(kept);
    batch_.clear();
    if (room != 0 && !free_tables_.empty()) ready_->TryPopBatch(batch_, std::min<size_t>(room, free_tables_.size()));
    for (const ReadyTask& r : batch_)
        if (!Place(r, per_queue)) held_.push_back(r);
    if (!finished_.empty()) sink_->OnTasksComplete(finished_);
}

bool DeviceWorker::Place(const ReadyTask& r, std::span<std::vector<spyre_cb>> per_queue) {
    const TaskDescriptor& t = *r.task;
    Placed& self = PlacedOf(r.task_id);
    auto hold = [&] {
        self = Placed{r.task_id, Placed::State::Held};
        return false;
    };
    // The producers it was pushed early for: ended well (nothing to wait
    // for), failed (it fails so too), held here (so is it), or in flight on
    // a queue (it goes to that queue and waits for them there).
    uint32_t positions[TaskDescriptor::kMaxAfter];
    uint32_t waits = 0;
    int64_t queue = -1;
    for (int32_t i = 0; i < t.after_count; ++i) {
        const Placed& p = PlacedOf(t.after_ids[i]);
        const bool known = p.id == t.after_ids[i];
        if (!known || p.state == Placed::State::Failed) {
            // A producer never seen cannot happen (it was pushed first): the
            // task fails rather than runs unordered.
            const uint32_t status = known ? SPYRE_ERR_DEPENDENCY_FAILED : SPYRE_ERR_INTERNAL;
            finished_.push_back({r.task_id, status});
            self = Placed{r.task_id, Placed::State::Failed};
            return true;
        }
        if (p.state == Placed::State::Held) return hold();
        if (p.state == Placed::State::InFlight) {
            if (queue >= 0 && uint32_t(queue) != p.queue) return hold();  // the card waits within one queue
            queue = p.queue;
            positions[waits++] = p.position;
        }
    }
    if (free_tables_.empty()) return hold();
    if (queue < 0) {  // free to go anywhere: spread over the groups with room
        for (size_t i = 0; i < per_queue.size() && queue < 0; ++i) {
            const uint32_t q = (next_queue_ + uint32_t(i)) % uint32_t(per_queue.size());
            if (left_[q].free != 0) queue = q;
        }
        if (queue < 0) return hold();
        next_queue_ = (uint32_t(queue) + 1) % uint32_t(per_queue.size());
    } else if (left_[size_t(queue)].free == 0) {
        return hold();
    } else {
        // A producer more than a lap of the SQ back (a long task while many
        // short ones went by) cannot be named: wait here until it ends.
        const QueueRoom& r = left_[size_t(queue)];
        for (uint32_t i = 0; i < waits; ++i)
            if (r.next_position - positions[i] >= r.after_window) return hold();
    }
    const uint32_t table = free_tables_.back();
    free_tables_.pop_back();
    auto* entries = reinterpret_cast<uint64_t*>(tables_host_ + uint64_t(table) * kTableBytes);
    for (int32_t i = 0; i < t.num_params; ++i) entries[i] = graph_.DeviceAddress(t.params[i].host, t.params[i].size);
    in_flight_ids_[table] = r.task_id;
    sent_ns_[table] = trace::Enabled() ? trace::detail::NowNs() : 0;
    spyre_cb cb = driver::TaskCb(PackId(table, r.task_id), t.kernel->program_address,
                                 tables_device_ + uint64_t(table) * kTableBytes, uint32_t(t.num_params));
    if (waits != 0) cb = driver::After(cb, std::span(positions, waits));
    const size_t q = size_t(queue);
    per_queue[q].push_back(cb);
    --left_[q].free;
    self = Placed{r.task_id, Placed::State::InFlight, uint32_t(q), left_[q].next_position++};
    return true;
}

void DeviceWorker::FailHeld(uint32_t status) {
    finished_.clear();
    for (const ReadyTask& r : held_) finished_.push_back({r.task_id, status});
    held_.clear();
    if (!finished_.empty()) sink_->OnTasksComplete(finished_);
}

void DeviceWorker::FailReady(uint32_t status) {
    batch_.clear();
    ready_->TryPopBatch(batch_, SIZE_MAX);
    finished_.clear();
    for (const ReadyTask& r : batch_) finished_.push_back({r.task_id, status});
    if (!finished_.empty()) sink_->OnTasksComplete(finished_);
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
    const spyre_cqe* stranger = nullptr;
    for (const spyre_cqe& c : done) {
        const uint32_t table = TableOf(c.user_data);
        Placed& placed = PlacedOf(TaskOf(c.user_data));
        // A completion of no task in flight here, at the position and with
        // the opcode it was sent with: after a reset the device numbers
        // positions afresh and completes what its emptied queue holds, and
        // those were taken as our tasks' (a hang behind tasks that never
        // came back, found probing from outside). Reported twice, a task
        // was parked twice, and the inbox looped for good; its table was
        // freed twice, for two tasks at once.
        if (table >= in_flight_ids_.size() || in_flight_ids_[table] != TaskOf(c.user_data) ||
            placed.id != TaskOf(c.user_data) || placed.position != c.sq_pos || c.opcode != SPYRE_OP_TASK) [[unlikely]] {
            if (!stranger) stranger = &c;
            continue;
        }
        free_tables_.push_back(table);
        in_flight_ids_[table] = -1;
        placed.state = c.status == SPYRE_ERR_NONE ? Placed::State::Ended : Placed::State::Failed;
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
    // The port fails the queues with it (or with the reset that explains it).
    if (stranger) [[unlikely]]
        throw Error(ErrorKind::ProtocolError,
                    "task queue completion for ring position " + std::to_string(stranger->sq_pos) + " (user_data " +
                        std::to_string(stranger->user_data) + ", opcode " + std::to_string(stranger->opcode) +
                        ") is for no task in flight there",
                    ErrorContext{.device = pci_});
}

void DeviceWorker::Failed(const Error& e) {
    // What is in flight will never complete: it fails, and so does every
    // task that comes later (FillQueues). A device that is gone says so
    // (DeviceLost); a queue that failed otherwise aborts them.
    lost_ = true;
    if (e.kind() == ErrorKind::DeviceLost) {
        lost_status_ = kDeviceLostStatus;
        sink_->OnDeviceLost(e.message());
    }
    FailHeld(lost_status_);
    finished_.clear();
    for (int32_t& id : in_flight_ids_)
        if (id >= 0) {
            finished_.push_back({id, lost_status_});
            id = -1;
        }
    if (!finished_.empty()) sink_->OnTasksComplete(finished_);
}

}  // namespace spyre::orchestration
