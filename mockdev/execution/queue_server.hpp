// SPDX-License-Identifier: Apache-2.0
//
// The queue server of one function: it serves the function's CB ring and
// its task queues. Each kind of queue has its doorbell page and so its lane
// (queue_lane.hpp), a thread that watches that page: a CB ring blocked in a
// SEM_WAIT or a long LAUNCH never holds up the task queues, which run
// concurrently with it (spyre_task.h), and neither kind's doorbell waits
// behind the other's. Intake, completion posting and the interrupt
// (queue_pair.hpp, completion_irq.hpp), the sleep, the kicks, the pause and
// the stop are the same code for both; what a turn does with the CBs it
// takes is the kind's: the ring runs them in order through the CbExecutor
// (ring_queue.hpp), the task queues hand them to the card's cores
// (task_queues.hpp). Everything it touches is the function's own: its BAR4
// object, its registers, its memory window.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "execution/card_cores.hpp"
#include "execution/cb_executor.hpp"
#include "execution/device_memory.hpp"
#include "execution/host_link.hpp"
#include "execution/queue_lane.hpp"
#include "execution/ring_queue.hpp"
#include "execution/task_queues.hpp"
#include "pci/register_file.hpp"
#include "pci/shm_object.hpp"

namespace spyre::mockdev {

class QueueServer {
public:
    // `bar4` holds the doorbell pages and rings; `executor` runs the ring's
    // CBs; task CBs run on `cores` in the function's `memory` under the card's
    // `watchdog_ms`; `host_link` is the card's.
    QueueServer(RegisterFile& regs, ShmObject& bar4, const RingGeometry& ring, const TaskGeometry& tasks,
                CbExecutor& executor, const std::atomic<uint32_t>& watchdog_ms, DeviceMemory memory, CardCores& cores,
                HostLink& host_link, std::chrono::microseconds poll);

    QueueServer(const QueueServer&) = delete;
    QueueServer& operator=(const QueueServer&) = delete;

    // Threads named spyre-<address> (the ring) and spyre-t<address> (tasks).
    void Start(const std::string& address);
    // Idempotent: no CB or task of this function runs or starts once it returns.
    void Stop();

    // A trapped write changed a doorbell.
    void RingDoorbell() { ring_lane_.Doorbell(); }
    void TaskDoorbell() { task_lane_.Doorbell(); }

    void SetRingEnabled(bool enabled);
    bool ring_enabled() const { return ring_.enabled(); }
    bool ring_halted() const { return ring_.halted(); }
    uint32_t task_queues() const { return tasks_.queues(); }
    uint32_t group_cores(uint32_t queue) const { return tasks_.group_cores(queue); }
    uint32_t tasks_halted_mask() const { return tasks_.halted_mask(); }
    spyre_doorbell_page* doorbell() const { return ring_.doorbell(); }

    // Holds every queue: running CBs and tasks are told to stop (ABORTED),
    // and the tasks have posted their completions when it is made; nothing
    // is served until it goes. The task queues are held first: a LAUNCH the
    // ring's pause waits for may wait for running tasks.
    class Paused {
    public:
        explicit Paused(QueueServer& server) : tasks_(server.task_lane_), ring_(server.ring_lane_) {}

    private:
        QueueLane::Paused tasks_;
        QueueLane::Paused ring_;
    };
    [[nodiscard]] Paused Pause() { return Paused(*this); }

    // While paused: power-on state of every queue (RingQueue::Clear,
    // TaskQueues::Clear).
    void Clear(const Paused& paused);
    // While paused: whether the queues are served at all (QueueLane::
    // SetServing). A function serves only while a process holds it: an
    // unheld one runs nothing, and its ring cannot be enabled (Function).
    void SetServing(bool serving, const Paused& paused);
    bool serving() const { return ring_lane_.serving(); }

    // Both completion interrupts: a driver blocked on either looks again.
    void RaiseIrqs();
    // device_state GONE, and every blocked driver woken to see it (shutdown,
    // a change of owner).
    void Gone();

private:
    RingQueue ring_;
    TaskQueues tasks_;
    QueueLane ring_lane_;
    QueueLane task_lane_;
};

}  // namespace spyre::mockdev
