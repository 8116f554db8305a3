// SPDX-License-Identifier: Apache-2.0
//
// The task queues of one function (spyre_task.h). A server thread takes
// CBs out of the queues' submission rings as the doorbell protocol
// describes (poll for --poll-us after the last work, then publish that it
// sleeps and park on the wake_seq futex) and hands them to the card's cores
// (CardCores), whose idle workers take them one per core, validate and run
// them on the core and post their completions out of order. The server takes
// a CB only while its completion has room in the CQ, so no worker ever
// waits to post. Completions are posted as the CB ring posts them
// (cqe_post.hpp), in the order tasks finish.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "execution/card_cores.hpp"
#include "execution/device_memory.hpp"
#include "execution/host_link.hpp"
#include "execution/program_executor.hpp"
#include "execution/server_pause.hpp"
#include "pci/register_file.hpp"
#include "pci/shm_object.hpp"
#include "spyre/uapi/spyre_task.h"

namespace spyre::mockdev {

// Task queue layout inside BAR4, published in the TQ_* registers.
struct TaskGeometry {
    uint32_t db_offset = SPYRE_DEFAULT_TQ_DB_OFFSET;
    uint32_t offset = SPYRE_DEFAULT_TQ_OFFSET;
    uint32_t stride = SPYRE_DEFAULT_TQ_STRIDE;
    uint32_t sq_entries = SPYRE_DEFAULT_TQ_SQ_ENTRIES;
    uint32_t desc_size = sizeof(spyre_cb);
    uint32_t cq_offset = SPYRE_DEFAULT_TQ_CQ_OFFSET;
    uint32_t cq_entries = SPYRE_DEFAULT_TQ_CQ_ENTRIES;
    uint32_t cqe_size = sizeof(spyre_cqe);
};

class TaskServer final : public TaskSource {
public:
    // One queue per core group of `cores`. `memory` is the function's window,
    // `watchdog_ms` the card's bound on one task, `host_link` the card's (the
    // server acts on doorbells and posts completions through it).
    TaskServer(RegisterFile& regs, ShmObject& ring, const TaskGeometry& geometry,
               const std::atomic<uint32_t>& watchdog_ms, DeviceMemory memory, CardCores& cores,
               HostLink& host_link, std::chrono::microseconds poll);
    ~TaskServer() override;

    TaskServer(const TaskServer&) = delete;
    TaskServer& operator=(const TaskServer&) = delete;

    void Start(const std::string& name);
    // Idempotent: no task of this function runs or starts once it returns.
    void Stop();

    // A trapped write touched the task doorbell page: wake the server.
    void Doorbell();

    uint32_t queues() const { return queues_; }
    uint32_t group_cores(uint32_t queue) const { return cores_.group_cores(queue); }
    uint32_t halted_mask() const { return halted_.load(std::memory_order_acquire); }
    spyre_task_doorbell* doorbell() const { return db_; }

    // Holds the queues: running tasks are told to stop (ABORTED) and have
    // posted their completions when the constructor returns; no CB is
    // taken and no task starts until the object goes.
    class Paused {
    public:
        explicit Paused(TaskServer& server);
        ~Paused();
        Paused(const Paused&) = delete;
        Paused& operator=(const Paused&) = delete;

    private:
        TaskServer& server_;
        std::unique_lock<std::mutex> lock_;
    };
    [[nodiscard]] Paused Pause() { return Paused(*this); }

    // While paused: power-on queue state. Every queue empty (positions zero,
    // rings zeroed, tasks not yet run dropped), none halted.
    void ClearQueues(const Paused& paused);

    // The task completion "interrupt": bump irq_seq, wake its waiters.
    bool RaiseIrq();

    // TaskSource: the card's workers pull tasks through these.
    bool Take(uint32_t queue, CoreTask& out) override;
    void Run(const CoreTask& task, unsigned core) noexcept override;

private:
    struct Queue {
        struct Taken {
            spyre_cb cb;
            uint32_t sq_pos;
        };
        std::deque<Taken> pending;  // taken from the SQ, not yet on a core
        uint32_t sq_head = 0;       // CBs taken (server thread only, or paused)
        uint32_t cq_tail = 0;                 // completions posted (under mutex_)
    };

    void Loop();
    bool Intake();         // takes what the queues hold; true if it took any
    bool Submitted() const;  // some queue holds CBs not taken yet
    void Halt(uint32_t queue, uint32_t sq_head);
    spyre_task_queue_words& Words(uint32_t queue) const { return db_->queue[queue]; }
    uint8_t* Block(uint32_t queue) const { return base_ + geo_.offset + size_t(queue) * geo_.stride; }
    void WakeServer();
    uint16_t Execute(const spyre_cb& cb, unsigned core);

    RegisterFile& regs_;
    ShmObject& ring_;
    const TaskGeometry geo_;
    const std::atomic<uint32_t>& watchdog_ms_;
    CardCores& cores_;
    HostLink& host_link_;
    const std::chrono::microseconds poll_;
    uint8_t* const base_;
    spyre_task_doorbell* const db_;
    const uint32_t queues_;
    // Each core's private state: its copy of the program it runs.
    std::vector<std::unique_ptr<ProgramExecutor>> per_core_;

    std::mutex exec_mutex_;  // held while taking CBs; Pause takes it
    std::mutex mutex_;       // guards queues' pending and cq_tail, running_, accepting_
    std::condition_variable idle_;  // running_ dropped to 0
    std::array<Queue, SPYRE_TQ_MAX_QUEUES> q_;
    unsigned running_ = 0;
    bool accepting_ = true;  // false while paused or stopped: no task is handed out
    std::atomic<uint32_t> halted_{0};
    std::atomic<bool> stopping_{false};
    ServerPause pause_;
    std::atomic<bool> abort_{false};
    std::atomic<bool> registered_{false};
    std::atomic<bool> started_{false};  // a thread to wait for in a pause
    std::thread thread_;
};

}  // namespace spyre::mockdev
