// SPDX-License-Identifier: Apache-2.0
// DeviceWorker: the executor that runs device kernels on the card's cores
// through the task queues of the Device the runtime was created on
// (Device::TakeTaskQueue, uapi/spyre_task.h).
// One thread serves every core group it took: it turns ready tasks into
// descriptors (the kernel's program and a table of the task's parameter
// addresses, which the device applies to the program's relocation slots),
// spreads each batch over the groups under one doorbell per group, and
// reports completions as they come, out of order. One thread, not one per
// group: on a host of few CPUs every spinning waiter takes a CPU from the
// device's cores and the submitting thread.
#pragma once

#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "device/device_internals.hpp"
#include "orchestration/executor.hpp"
#include "spyre/device/device.hpp"

namespace spyre::orchestration {

class TaskGraph;

class DeviceWorker final : public Executor {
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
    // runtime holds one) and starts the thread that serves them.
    void Start(ReadyQueue& queue, CompletionSink& sink) override;
    void Stop() override;

private:
    // `tables`: argument tables in all (one per task that can be in flight).
    void Serve(uint32_t tables, ReadyQueue& ready, CompletionSink& sink);

    Device& device_;    // only until Start: its queues are taken then
    std::string pci_;   // names the log lines and the cores' trace tracks
    SpyreAllocator& allocator_;
    const TaskGraph& graph_;
    std::vector<uint32_t> queues_;
    std::optional<DeviceAllocation> tables_;
    uint8_t* tables_host_ = nullptr;
    uint64_t tables_device_ = 0;
    std::vector<std::unique_ptr<driver::TaskQueue>> queues_taken_;
    std::thread thread_;
};

}  // namespace spyre::orchestration
