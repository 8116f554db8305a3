// SPDX-License-Identifier: Apache-2.0
// DeviceWorker: the executor that runs device kernels on the card's cores
// through the task queues of the Device the runtime was created on, served
// by a TaskPort (device/task_port.hpp) that the runtime's own threads drive:
// a submitter or a completing task kicks it, a waiter drives it. It turns
// ready tasks into descriptors (the kernel's program and a table of the
// task's parameter addresses, which the device applies to the program's
// relocation slots), spread by the port over the core groups under one
// doorbell per group, and reports completions as they come, out of order.
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
    void Kick() noexcept override;
    bool Drive(const std::atomic<uint32_t>& word, uint32_t expected) override;

private:
    // TaskPortClient (the port's drive lock held).
    void Fill(std::vector<spyre_cb>& out, uint32_t room) override;
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
    std::vector<CompletionSink::Done> finished_;  // reported with one call per reaped batch
    bool lost_ = false;  // the queues failed: every task from here fails
    // Tracing: when each table's task was sent, and one track per core
    // ("<pci> core N", from the completion's core index).
    std::vector<uint64_t> sent_ns_;
    std::vector<uint32_t> core_tracks_;
    uint64_t recording_ = 0;
};

}  // namespace spyre::orchestration
