// SPDX-License-Identifier: Apache-2.0
// DeviceWorker: the executor that runs device kernels on the card's cores
// through the task queues of the Device the runtime was created on, served
// by a TaskPort (device/task_port.hpp) that the runtime's own threads drive:
// a submitter or a completing task kicks it, a waiter drives it. It turns
// ready tasks into descriptors (the kernel's program and a table of the
// task's parameter addresses, which the device applies to the program's
// relocation slots), spread over the core groups under one doorbell per
// group, and reports completions as they come, out of order. A task the
// graph pushed before its producers finished (OrdersAfterProducers: on a
// contract 3.1 card) goes to the queue of the producers still in flight and
// names their positions (driver::After): the card starts it when they have
// ended, with no round trip through the host.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "device/device_internals.hpp"
#include "device/task_port.hpp"
#include "orchestration/executor.hpp"
#include "spyre/device/device.hpp"

namespace spyre::orchestration {

class TaskGraph;

class DeviceWorker final : public Executor, private TaskPortClient {
public:
    // Whether `device` has task queues at all.
    static bool Available(const Device& device);

    // The argument tables come from the device's allocator (one per task
    // slot of every queue); `graph` translates buffer addresses. Both
    // outlive the worker. `queues`: the task queues to take (empty: all);
    // checked against the device's topology (InvalidArgument naming the
    // queue).
    DeviceWorker(Device& device, const TaskGraph& graph, std::vector<uint32_t> queues = {});
    ~DeviceWorker() override;

    const char* name() const noexcept override { return "device"; }
    bool CanRun(const KernelEntry& kernel) const noexcept override { return kernel.has_program; }
    // Takes its task queues from the device (Busy if another process or
    // runtime holds one).
    void Start(ReadyQueue& queue, CompletionSink& sink) override;
    void Stop() override;
    bool driven() const noexcept override { return true; }
    bool OrdersAfterProducers() const noexcept override { return waits_on_card_; }
    void Kick() noexcept override;
    bool Drive(const std::atomic<uint32_t>& word, uint32_t expected, std::chrono::steady_clock::time_point until) override;

private:
    // TaskPortClient (the port's drive lock held).
    void FillQueues(std::span<std::vector<spyre_cb>> per_queue, std::span<const QueueRoom> rooms) override;
    // Sends `r` to a queue with room (the one its producers in flight are
    // on), or reports it failed when one of them failed; false: it waits
    // (held_) for room, or for producers in flight on several queues.
    bool Place(const ReadyTask& r, std::span<std::vector<spyre_cb>> per_queue);
    // Fails what waits here, and what is ready (the queues are lost).
    void FailHeld(uint32_t status);
    void FailReady(uint32_t status);
    void Finished(std::span<const spyre_cqe> done) override;
    void Failed(const Error& error) override;

    Device& device_;    // only until Start: its queues are taken then
    std::string pci_;   // names the log lines and the cores' trace tracks
    SpyreAllocator& allocator_;
    const TaskGraph& graph_;
    std::vector<uint32_t> queues_;
    std::optional<DeviceAllocation> tables_;
    uint8_t* tables_host_ = nullptr;
    uint64_t tables_device_ = 0;
    std::unique_ptr<TaskPort> port_;
    ReadyQueue* ready_ = nullptr;
    CompletionSink* sink_ = nullptr;

    // Under the port's drive lock.
    std::vector<uint32_t> free_tables_;
    std::vector<int32_t> in_flight_ids_;  // by table; -1: free
    std::vector<ReadyTask> batch_;
    // Each task seen, by task id modulo the task ring (live tasks have
    // distinct slots, and a producer outlives its consumers' completions):
    // where a consumer pushed early finds it.
    struct Placed {
        enum class State : uint8_t { InFlight, Ended, Failed, Held };
        int32_t id = -1;
        State state = State::Ended;
        uint32_t queue = 0;
        uint32_t position = 0;  // its submission position on `queue`
    };
    std::vector<Placed> placed_;
    // By ring slot: task ids wrap at a multiple of the ring's size (TaskRing).
    Placed& PlacedOf(int32_t id) { return placed_[uint32_t(id) % placed_.size()]; }
    std::vector<ReadyTask> held_;     // popped, not sent yet (in the order popped)
    std::vector<QueueRoom> left_;  // FillQueues' scratch: each queue's room, as the fill uses it up
    uint32_t next_queue_ = 0;  // where the spreading of tasks free to go anywhere goes on
    bool waits_on_card_ = false;  // contract 3.1: tasks may wait for tasks on the card
    std::vector<CompletionSink::Done> finished_;  // reported with one call per reaped batch
    bool lost_ = false;  // the queues failed: every task from here fails
    uint32_t lost_status_ = SPYRE_ERR_ABORTED;  // with this (kDeviceLostStatus: the device is gone)
    // Tracing: when each table's task was sent, and one track per core
    // ("<pci> core N", from the completion's core index).
    std::vector<uint64_t> sent_ns_;
    std::vector<uint32_t> core_tracks_;
    uint64_t recording_ = 0;
};

}  // namespace spyre::orchestration
