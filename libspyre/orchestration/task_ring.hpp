// SPDX-License-Identifier: Apache-2.0
// TaskRing (seed 004): task slots reused in submission order. A task id is a
// running number; its slot is id % capacity. The tail (oldest live task)
// advances only over CONSUMED tasks, so a slot is reused only once its task
// is done and nothing references it. Not thread-safe: the task graph calls it
// under its lock (state is an atomic so executors and tests may read it
// without it).
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dependency/fan_out.hpp"
#include "spyre/pto.h"

namespace spyre::orchestration {

// Values match PTO_TASK_* (spyre/pto.h); Free is a slot without a task.
enum class TaskState : uint8_t { Free = 0, Pending = 1, Ready = 2, Running = 3, Completed = 4, Consumed = 5 };
const char* ToString(TaskState state) noexcept;

// How a finished task ended.
enum class TaskOutcome : uint8_t { None, Ok, Failed, Skipped };

// A parameter as the task graph resolved it: where, how big, how used. No
// member initializers: a submission resolves its parameters into an array
// on the stack, and zeroing all PTO_MAX_PARAMS of them cost more than the
// rest of its checks. Only the first num_params of a task are ever read.
struct ResolvedParam {
    uint8_t* host;  // address in the function's mapped memory
    uint64_t size;
    int32_t kind;
    bool implicit;  // allocated from the heap ring for this task
    // In the heap ring outside any pto_alloc buffer: another task's
    // implicit outputs, which must be live and handed out.
    bool in_outputs;
};

struct KernelEntry;

struct TaskDescriptor {
    int32_t task_id = -1;
    int32_t func_id = 0;    // kernel id
    int32_t core_type = 0;  // worker type
    // Producers not yet completed, and the failure behind it once a
    // producer failed (do not run) or it failed itself.
    dependency::Gate gate;
    int32_t fanout_count = 0;     // consumers + scope depth
    int32_t fanout_refcount = 0;  // consumers completed + scopes ended
    uint64_t packed_buffer_base = 0;  // host address of the implicit outputs (0: none)
    std::atomic<TaskState> state{TaskState::Free};

    // The task graph's bookkeeping (kept across reuse so steady state allocates nothing).
    std::vector<int32_t> fanin;        // producers this task waits for
    // fanin[0, fanin_reads) are those it reads from (a failure passes along
    // those edges only, dependency/fan_out.hpp); the rest it only follows.
    size_t fanin_reads = 0;
    std::vector<int32_t> fanout;       // consumers waiting for this task
    std::vector<uint64_t> buffers;     // explicit buffers (BufferTracker bases) it references
    ResolvedParam params[PTO_MAX_PARAMS];
    int32_t num_params = 0;
    uint64_t heap_seq = 0;  // the heap block of its implicit outputs
    uint64_t heap_bytes = 0;  // and its size
    // It has implicit outputs: its scopes (or, outside any scope, its
    // submitting thread, the depth-0 rule) hold it.
    bool has_heap_block = false;
    // Submitted by the thread whose scopes were open: they hold it (when it
    // has implicit outputs) and count its failure. Another thread's task
    // keeps to the depth-0 rule on its own thread.
    bool in_scopes = false;
    // Of its params (bit i: params[i], an implicit output): those whose
    // address pto_task_output gave away (from then on a task may name
    // them). Which of them are still to be read is each asking thread's
    // (TaskGraph::Held::unread).
    static_assert(PTO_MAX_PARAMS <= 32);
    uint32_t outputs_handed_out = 0;
    std::thread::id submitter;  // the thread that submitted it: its copies follow it (WaitForTasksOver)
    const KernelEntry* kernel = nullptr;
    TaskOutcome outcome = TaskOutcome::None;
    // Its completion, when it came before its producers' were applied (an
    // EXTERNAL task completed by the caller, a task pushed early completed
    // by its executor): applied when its fan-in ends.
    bool early_done = false;
    uint32_t early_code = 0;
    // Pushed before its producers finished (Executor::OrdersAfterProducers):
    // the ones it waits for.
    static constexpr int32_t kMaxAfter = 4;
    int32_t after_count = 0;
    int32_t after_ids[kMaxAfter] = {};
    bool pushed_early = false;
    // The executor did not run it for a producer it only follows (WAW,
    // WAR) that did not succeed, so it went again, unordered (its
    // producers had all ended): its first completion was not its outcome.
    bool sent_again = false;
    // Where it ran on the timeline of the recording in progress (track 0:
    // not traced): its consumers' dependency arrows start at its end.
    uint32_t trace_track = 0;
    uint64_t trace_end_ns = 0;
    uint64_t trace_recording = 0;  // trace::detail::Recording() when traced
    // Its completion while parked in the task graph's inbox (ParkingInbox).
    TaskDescriptor* inbox_next = nullptr;
    uint32_t inbox_status = 0;
    // What its host kernel threw (status kHostKernelThrew), for the failure
    // record: written by the thread that ran it, before its completion.
    mutable std::string thrown;

    void Reset(int32_t id);
};

// Task ids are the submission sequence modulo period(): pto.h's ids are
// int32_t, and a runtime that lives long submits more than 2^31 tasks (ten
// minutes at full rate). The period is the largest multiple of the
// capacity that fits an int32_t, so an id's slot is its sequence number's,
// and it is far longer than the live window (at most capacity tasks), so a
// live task's id names it alone; an id of a task reclaimed a period ago
// names the newer task. Ids are compared by their sequence numbers, never
// as plain integers.
class TaskRing {
public:
    // `first_seq`: where the sequence starts (tests start it just before
    // the ids wrap); `period`: 0 for the default, or a multiple of the
    // capacity of at least twice it (tests make ids come round soon).
    explicit TaskRing(int32_t capacity, int64_t first_seq = 0, int32_t period = 0);

    int32_t capacity() const noexcept { return int32_t(slots_.size()); }
    int32_t period() const noexcept { return period_; }
    // The next task id, or nullopt when every slot is live.
    std::optional<int32_t> Allocate();
    // Undoes the last Allocate (a submission that failed before it was published).
    void Unallocate();
    TaskDescriptor& Get(int32_t id) noexcept { return slots_[size_t(id) % slots_.size()]; }
    const TaskDescriptor& Get(int32_t id) const noexcept { return slots_[size_t(id) % slots_.size()]; }
    // The task of sequence number `seq`, live or not.
    TaskDescriptor& AtSeq(int64_t seq) noexcept { return slots_[size_t(seq) % slots_.size()]; }
    const TaskDescriptor& AtSeq(int64_t seq) const noexcept { return slots_[size_t(seq) % slots_.size()]; }
    // True for a task submitted and not yet reclaimed (its sequence number in [tail, head)).
    bool IsLive(int32_t id) const noexcept {
        if (uint32_t(id) >= uint32_t(period_)) return false;
        int64_t ahead = int64_t(id) - tail_id_;  // of the tail, along the ring of ids
        if (ahead < 0) ahead += period_;
        return ahead < head_ - tail_;
    }
    // The sequence number of the latest task given `id`; -1 when none was
    // (or `id` is outside [0, period)).
    int64_t SeqOf(int32_t id) const noexcept;
    int32_t IdOf(int64_t seq) const noexcept { return int32_t(seq % period_); }
    // Advances the tail over CONSUMED tasks (their slots become Free); returns how many.
    int32_t Reclaim();

    int32_t head() const noexcept { return head_id_; }  // the next id
    int32_t tail() const noexcept { return tail_id_; }  // the oldest live task's id (head() when none)
    int64_t head_seq() const noexcept { return head_; }
    int64_t tail_seq() const noexcept { return tail_; }
    int32_t live() const noexcept { return int32_t(head_ - tail_); }

private:
    int32_t Next(int32_t id) const noexcept { return id + 1 == period_ ? 0 : id + 1; }

    std::vector<TaskDescriptor> slots_;
    int32_t period_ = 0;
    int64_t first_ = 0;   // the first sequence number
    int64_t head_ = 0;    // the next sequence number
    int64_t tail_ = 0;    // the oldest live one
    int32_t head_id_ = 0;  // their ids
    int32_t tail_id_ = 0;
};

}  // namespace spyre::orchestration
