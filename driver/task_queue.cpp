// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/task_queue.hpp"

#include <algorithm>

#include "completion_wait.hpp"
#include "device_queue_submit.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre_errors.h"

using namespace std::chrono;

namespace spyre::driver {

uint32_t TaskTopology::cores() const noexcept {
    uint32_t n = 0;
    for (uint32_t c : group_cores) n += c;
    return n;
}

TaskTopology ReadTaskTopology(const Function& fn) {
    const uint32_t queues = fn.Read32(SPYRE_REG_TQ_COUNT);
    if (queues > SPYRE_TQ_MAX_QUEUES)
        throw Error(ErrorKind::ProtocolError,
                    "device publishes " + std::to_string(queues) + " task queues, the contract allows " +
                        std::to_string(SPYRE_TQ_MAX_QUEUES),
                    ErrorContext{.device = fn.pci_address(), .reg = "TQ_COUNT", .offset = SPYRE_REG_TQ_COUNT});
    TaskTopology t;
    for (uint32_t q = 0; q < queues; ++q) {
        const uint32_t cores = fn.Read32(SPYRE_REG_TQ_GROUP_CORES(q));
        if (cores == 0)
            throw Error(ErrorKind::ProtocolError, "task queue " + std::to_string(q) + "'s core group has no cores",
                        ErrorContext{.device = fn.pci_address(), .reg = "TQ" + std::to_string(q) + "_CORES",
                                     .offset = SPYRE_REG_TQ_GROUP_CORES(q)});
        t.group_cores.push_back(cores);
    }
    return t;
}

TaskQueue::TaskQueue(Function& function, uint32_t group) : queue_(function, QueueId::Task(group)) {
    Function& fn = queue_.function();
    cores_ = ReadTaskTopology(fn).group_cores.at(group);
    // The device takes a CB only while its completion has room.
    capacity_ = std::min(queue_.sq_entries(), queue_.cq_entries());
    fn.CheckAlive();
    // Held first: a queue another TaskQueue of this process holds is busy
    // with that one's tasks, and "reset the function" would wreck them.
    if (!fn.HoldTaskQueue(group))
        throw Error(ErrorKind::Busy, "task queue " + std::to_string(group) + " is held by another TaskQueue of this process",
                    queue_.Context());
    try {
        if (!queue_.DeviceIdle() || queue_.Halted())
            throw Error(ErrorKind::Busy,
                        "task queue " + std::to_string(group) +
                            " is not idle (tasks submitted and not reaped, or halted): reset the function first",
                        queue_.Context());
        queue_.Attach();
    } catch (...) {
        fn.ReleaseTaskQueue(group);
        throw;
    }
}

TaskQueue::~TaskQueue() { queue_.function().ReleaseTaskQueue(group()); }

size_t TaskQueue::Submit(std::span<const spyre_cb> tasks) {
    const size_t n = std::min<size_t>(tasks.size(), Free());
    queue_.Submit(tasks.first(n), uint32_t(n));
    return n;
}

size_t TaskQueue::Reap(std::span<spyre_cqe> out) {
    size_t n = 0;
    while (n < out.size() && queue_.CompletionsReady()) {
        const spyre_cqe e = queue_.Peek();
        // ABORTED ends work a reset dropped: said as the reset (DeviceLost),
        // not as the task's failure (found probing from outside).
        if (e.status == SPYRE_ERR_ABORTED) [[unlikely]]
            queue_.ExplainedByAReset();
        out[n++] = e;
        queue_.Pop();
    }
    queue_.ReturnHead();
    if (n == 0) queue_.ProbeNowAndThen();  // a reap-only loop learns of a dead daemon too
    return n;
}

void TaskQueue::CheckNotReset() const { queue_.CheckNotReset(); }

size_t TaskQueue::Wait(std::span<spyre_cqe> out, size_t min_count, const WaitOptions& options) {
    return detail::WaitOnQueue(queue_, out.size(), min_count, options,
                               [&](size_t done) { return Reap(out.subspan(done)); });
}

namespace {

// The tasks in flight on `queues`, which must be task queues of one function.
uint32_t CheckWaitable(std::span<TaskQueue* const> queues, const DeviceQueue& (*queue_of)(const TaskQueue&)) {
    if (queues.empty()) throw Error(ErrorKind::InvalidArgument, "waiting for task completions on no queue");
    const DeviceQueue& first = queue_of(*queues.front());
    Function& fn = first.function();
    uint32_t in_flight = 0;
    for (TaskQueue* q : queues) {
        if (&queue_of(*q).function() != &fn)
            throw Error(ErrorKind::InvalidArgument, "waiting on task queues of two functions (" + fn.pci_address() +
                                                        ", " + queue_of(*q).function().pci_address() + ") at once",
                        first.Context());
        in_flight += q->InFlight();
    }
    if (in_flight == 0)
        throw Error(ErrorKind::InvalidArgument, "waiting for task completions with no task in flight", first.Context());
    return in_flight;
}

}  // namespace

void TaskQueue::WaitAnyOr(std::span<TaskQueue* const> queues, std::span<const FutexWord> words,
                          std::chrono::nanoseconds timeout) {
    CheckWaitable(queues, [](const TaskQueue& q) -> const DeviceQueue& { return q.queue_; });
    auto ready = [&] {
        for (TaskQueue* q : queues)
            if (q->queue_.CompletionsReady()) return true;
        return false;
    };
    DeviceQueue::SleepOnInterruptOr(queues.front()->queue_.interrupt(), ready, words, timeout);
    if (!ready())
        for (TaskQueue* q : queues) q->queue_.CheckHealth();
}

void TaskQueue::WaitAny(std::span<TaskQueue* const> queues, const WaitOptions& options) {
    const uint32_t in_flight = CheckWaitable(queues, [](const TaskQueue& q) -> const DeviceQueue& { return q.queue_; });
    const DeviceQueue& first = queues.front()->queue_;
    auto ready = [&] {
        for (TaskQueue* q : queues)
            if (q->queue_.CompletionsReady()) return true;
        return false;
    };
    auto health = [&] {
        for (TaskQueue* q : queues) q->queue_.CheckHealth();
    };
    detail::WaitForCompletions(
        1, options, ready, [&](size_t) { return ready() ? size_t{1} : size_t{0}; }, health,
        [&](steady_clock::time_point deadline) {
            detail::BlockOnInterrupt(first.interrupt(), ready, health, deadline);
        },
        [&] {
            return Error(ErrorKind::Timeout,
                         "no task completion within " +
                             std::to_string(duration_cast<milliseconds>(options.timeout).count()) + " ms (" +
                             std::to_string(in_flight) + " tasks in flight on " + std::to_string(queues.size()) +
                             " queues)",
                         first.Context());
        });
}

}  // namespace spyre::driver
