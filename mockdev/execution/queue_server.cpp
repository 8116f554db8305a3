// SPDX-License-Identifier: Apache-2.0
#include "execution/queue_server.hpp"

#include "execution/completion_irq.hpp"
#include "spyre/common/futex.hpp"

namespace spyre::mockdev {

QueueServer::QueueServer(RegisterFile& regs, ShmObject& bar4, const RingGeometry& ring, const TaskGeometry& tasks,
                         CbExecutor& executor, const std::atomic<uint32_t>& watchdog_ms, DeviceMemory memory,
                         CardCores& cores, HostLink& host_link, std::chrono::microseconds poll)
    // Each kind keeps a reference to its lane, made below, for aborting();
    // nothing reads it before the lanes exist.
    : ring_(regs, bar4, ring, executor, host_link, ring_lane_),
      tasks_(regs, bar4, tasks, watchdog_ms, memory, cores, host_link, task_lane_),
      ring_lane_(regs, ring_, LaneWords{&ring_.doorbell()->sq_tail, false, &ring_.doorbell()->device_sleeping},
                 SPYRE_STATUS_SLEEPING, poll),
      task_lane_(regs, tasks_, LaneWords{&tasks_.doorbell()->wake_seq, true, &tasks_.doorbell()->device_sleeping}, 0,
                 poll) {}

void QueueServer::Start(const std::string& address) {
    ring_lane_.Start("spyre-" + address);
    task_lane_.Start("spyre-t" + address);
}

void QueueServer::Stop() {
    task_lane_.Stop();  // first: a LAUNCH the ring finishes may wait for running tasks
    ring_lane_.Stop();
}

void QueueServer::SetRingEnabled(bool enabled) {
    ring_.SetEnabled(enabled);
    if (enabled) ring_lane_.Kick();  // CBs may already be waiting in the ring
}

void QueueServer::Clear(const Paused&) {
    ring_.Clear();
    tasks_.Clear();
}

void QueueServer::SetServing(bool serving, const Paused&) {
    ring_lane_.SetServing(serving);
    task_lane_.SetServing(serving);
}

void QueueServer::RaiseIrqs() {
    RaiseCompletionIrq(ring_.doorbell()->irq_seq, ring_.doorbell()->irq_waiters);
    RaiseCompletionIrq(tasks_.doorbell()->irq_seq, tasks_.doorbell()->irq_waiters);
}

void QueueServer::Gone() {
    spyre_doorbell_page* db = ring_.doorbell();
    SharedWord(db->device_state).store(SPYRE_DEVSTATE_GONE);
    // Every ring waiter, whether or not it counted itself in irq_waiters.
    SharedWord(db->irq_seq).fetch_add(1);
    FutexWake(&db->irq_seq);
    RaiseCompletionIrq(tasks_.doorbell()->irq_seq, tasks_.doorbell()->irq_waiters);  // task waiters too
}

}  // namespace spyre::mockdev
