// SPDX-License-Identifier: Apache-2.0
#include "orchestration/task_ring.hpp"

#include <algorithm>
#include <climits>
#include <string>

#include "host_memory.hpp"
#include "spyre/error.hpp"

namespace spyre::orchestration {

const char* ToString(TaskState state) noexcept {
    switch (state) {
        case TaskState::Free: return "FREE";
        case TaskState::Pending: return "PENDING";
        case TaskState::Ready: return "READY";
        case TaskState::Running: return "RUNNING";
        case TaskState::Completed: return "COMPLETED";
        case TaskState::Consumed: return "CONSUMED";
    }
    return "?";
}

void TaskDescriptor::Reset(int32_t id) {
    task_id = id;
    func_id = 0;
    core_type = 0;
    gate.fanin_remaining = 0;
    gate.root.reset();  // a failure is let go of when its slot is reused
    fanout_count = 0;
    fanout_refcount = 0;
    packed_buffer_base = 0;
    state.store(TaskState::Pending, std::memory_order_relaxed);
    fanin.clear();
    fanin_reads = 0;
    fanout.clear();
    buffers.clear();
    num_params = 0;
    heap_seq = 0;
    heap_bytes = 0;
    has_heap_block = false;
    in_scopes = false;
    outputs_handed_out = 0;
    kernel = nullptr;
    outcome = TaskOutcome::None;
    early_done = false;
    early_code = 0;
    after_count = 0;
    pushed_early = false;
    sent_again = false;
    trace_track = 0;
    thrown.clear();
}

TaskRing::TaskRing(int32_t capacity, int64_t first_seq, int32_t period) {
    if (capacity < 1)
        throw Error(ErrorKind::InvalidArgument,
                    "task ring size must be at least 1, got " + std::to_string(capacity));
    if (const uint64_t bytes = uint64_t(capacity) * sizeof(TaskDescriptor); bytes > detail::HostMemoryBytes())
        throw Error(ErrorKind::OutOfMemory, "task ring of " + std::to_string(capacity) + " slots needs " +
                                                std::to_string(bytes) + " bytes, more than this host's RAM and swap");
    slots_ = std::vector<TaskDescriptor>(size_t(capacity));
    period_ = INT32_MAX / capacity * capacity;
    if (period != 0) {
        if (period < 2 * int64_t(capacity) || period % capacity != 0 || period > period_)
            throw Error(ErrorKind::InvalidArgument, "task id period " + std::to_string(period) +
                                                        " is not a multiple of the ring size " +
                                                        std::to_string(capacity) + " of at least twice it");
        period_ = period;
    }
    first_ = head_ = tail_ = std::max<int64_t>(first_seq, 0);
    head_id_ = tail_id_ = IdOf(head_);
}

std::optional<int32_t> TaskRing::Allocate() {
    if (head_ - tail_ >= capacity()) return std::nullopt;
    const int32_t id = head_id_;
    ++head_;
    head_id_ = Next(head_id_);
    Get(id).Reset(id);
    return id;
}

void TaskRing::Unallocate() {
    --head_;
    head_id_ = head_id_ == 0 ? period_ - 1 : head_id_ - 1;
    Get(head_id_).state.store(TaskState::Free, std::memory_order_relaxed);
}

int64_t TaskRing::SeqOf(int32_t id) const noexcept {
    if (uint32_t(id) >= uint32_t(period_)) return -1;
    int64_t back = int64_t(head_id_) - id;  // steps from `id` up to the next id
    if (back <= 0) back += period_;
    const int64_t seq = head_ - back;
    return seq >= first_ ? seq : -1;
}

int32_t TaskRing::Reclaim() {
    int32_t n = 0;
    while (tail_ < head_ && Get(tail_id_).state.load(std::memory_order_relaxed) == TaskState::Consumed) {
        Get(tail_id_).state.store(TaskState::Free, std::memory_order_relaxed);
        ++tail_;
        tail_id_ = Next(tail_id_);
        ++n;
    }
    return n;
}

}  // namespace spyre::orchestration
