// SPDX-License-Identifier: Apache-2.0
// The task queue of one core group of a function (uapi/spyre_task.h): many
// small programs at once on the group's cores, completing out of order.
// Tasks are CBs (TaskCb, command_ring.hpp) and complete with spyre_cqe
// records. Submission, completions, health and waits are the driver's one
// queue implementation (DeviceQueue, device_queue.hpp), as under
// CommandRing; this class adds what only a task queue has: its core group,
// the idle check and hold when it is taken, out-of-order completions handed
// over as they come, and WaitAny across the groups.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "spyre/driver/command_ring.hpp"
#include "spyre/driver/device_queue.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/uapi/spyre_task.h"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::driver {

// The card's cores as a function's task queues see them: one queue per core
// group, as the device publishes them (TQ_COUNT, TQ_GROUP_CORES).
struct TaskTopology {
    std::vector<uint32_t> group_cores;  // cores of group q (which runs queue q)
    uint32_t queues() const noexcept { return uint32_t(group_cores.size()); }
    uint32_t cores() const noexcept;    // all groups together
};
// Throws ProtocolError if the device publishes more queues than the contract
// allows, or a group without cores.
TaskTopology ReadTaskTopology(const Function& function);

// Not thread-safe: one thread submits to and reaps a queue; different
// queues (and the CB ring) may be used from different threads at once.
class TaskQueue {
public:
    // Reads and validates the task geometry the device publishes and takes
    // queue `group`. The queue must be idle (nothing submitted and not
    // reaped: a fresh or reset function). Throws InvalidArgument for a group
    // the device does not have, Busy for a queue with tasks in flight,
    // ProtocolError for geometry this driver cannot use, Busy too when
    // another TaskQueue of this process holds the queue. The function must
    // outlive the queue.
    TaskQueue(Function& function, uint32_t group);
    ~TaskQueue();
    TaskQueue(const TaskQueue&) = delete;
    TaskQueue& operator=(const TaskQueue&) = delete;

    uint32_t group() const noexcept { return queue_.id().group; }
    uint32_t cores() const noexcept { return cores_; }  // of this group: tasks that can run at once
    // Tasks that may be in flight (submitted and not reaped) at once.
    uint32_t capacity() const noexcept { return capacity_; }
    uint32_t InFlight() const noexcept { return queue_.InFlight(); }
    uint32_t Free() const noexcept { return capacity_ - InFlight(); }
    // The submission position the next CB submitted gets (its CQE's sq_pos):
    // what a later task of this queue names to wait for it (After).
    uint32_t NextPosition() const noexcept { return queue_.sq_tail(); }
    // How far back a task may name another (After): less than the SQ's entries.
    uint32_t AfterWindow() const noexcept { return queue_.sq_entries(); }

    // Copies as many CBs as fit (Free()) into the ring, in order, and rings
    // the doorbell once. Each takes one slot: TASK (TaskCb) or NOP; the device
    // answers any other opcode, or a CB with more slots, with an error
    // completion (WRONG_QUEUE, BAD_SLOT_COUNT). Returns how many it took (0
    // when full: reap first). Throws DeviceLost if the device is gone.
    size_t Submit(std::span<const spyre_cb> tasks);

    // Reaps completions that are ready, without waiting, in the order tasks
    // finished (never more than are in flight). Returns how many. A task's
    // result holds its core and run time (spyre_task_result_*). An ABORTED
    // completion of work a reset under the queue dropped is DeviceLost
    // (CheckNotReset), and stays unreaped.
    size_t Reap(std::span<spyre_cqe> out);
    // DeviceLost when the function was reset since the queue was taken: the
    // reset dropped its work and renumbered its positions, so what it
    // completes from then on is no task of this queue's.
    void CheckNotReset() const;

    // Waits until at least min(min_count, out.size()) completions are ready
    // and reaps up to out.size(). Throws InvalidArgument if min_count exceeds
    // InFlight(), Timeout, DeviceLost (daemon died or shut down: detected
    // within ~100 ms) or DeviceError (the queue halted).
    size_t Wait(std::span<spyre_cqe> out, size_t min_count, const WaitOptions& options = {});

    // Waits until one of `queues` (task queues of one function: they share
    // its completion interrupt) has a completion ready; reaps nothing. One
    // thread can so serve every core group. Throws InvalidArgument for no
    // queue, queues of different functions or none in flight, Timeout,
    // DeviceLost or DeviceError (a queue halted) as Wait does.
    static void WaitAny(std::span<TaskQueue* const> queues, const WaitOptions& options = {});
    // Sleeps on their interrupt until one of `queues` (as WaitAny) has a
    // completion ready, one of `words` (futex words of this process, at
    // most 4) no longer holds its expected value, or `timeout` passes; reaps
    // nothing. A thread that serves the queues and must also hear its own
    // producers (tasks made ready elsewhere) sleeps once for both. Throws
    // InvalidArgument as WaitAny, DeviceLost or DeviceError.
    static void WaitAnyOr(std::span<TaskQueue* const> queues, std::span<const FutexWord> words,
                          std::chrono::nanoseconds timeout);

private:
    DeviceQueue queue_;
    uint32_t cores_ = 0;
    uint32_t capacity_ = 0;
};

}  // namespace spyre::driver
SPYRE_API_END
