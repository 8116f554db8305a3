// SPDX-License-Identifier: Apache-2.0
// DeviceWorker: the executor that runs device kernels on the card's cores
// through the function's task queues (driver::TaskQueue, uapi/spyre_task.h).
// One thread per core group: it turns ready tasks into descriptors (the
// kernel's program and a table of the task's parameter addresses, which the
// device applies to the program's relocation slots), sends each batch under
// one doorbell, and reports completions as they come, out of order.
#pragma once

#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "orchestration/executor.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/driver/task_queue.hpp"
#include "spyre/memory/allocator.hpp"

namespace spyre::orchestration {

class TaskGraph;

class DeviceWorker final : public Executor {
public:
    // Whether `function` publishes task queues at all.
    static bool Available(const driver::Function& function);

    // The argument tables come from `allocator` (one per task slot of every
    // queue); `graph` translates buffer addresses. Both outlive the worker.
    // `queues`: the task queues to take (empty: all); checked against the
    // device's topology (InvalidArgument naming the queue).
    DeviceWorker(driver::Function& function, SpyreAllocator& allocator, const TaskGraph& graph,
                 std::vector<uint32_t> queues = {});
    ~DeviceWorker() override;

    const char* name() const noexcept override { return "device"; }
    bool CanRun(const KernelEntry& kernel) const noexcept override { return kernel.has_program; }
    // Takes its task queues of the function (Busy if another process or
    // runtime holds one) and starts a thread per queue.
    void Start(ReadyQueue& queue, CompletionSink& sink) override;
    void Stop() override;

private:
    struct Group {
        std::unique_ptr<driver::TaskQueue> queue;
        uint32_t first_table = 0;
    };
    void Serve(Group& group, ReadyQueue& ready, CompletionSink& sink);

    driver::Function& function_;
    SpyreAllocator& allocator_;
    const TaskGraph& graph_;
    std::vector<uint32_t> queues_;
    std::optional<DeviceAllocation> tables_;
    uint8_t* tables_host_ = nullptr;
    uint64_t tables_device_ = 0;
    std::vector<Group> groups_;
    std::vector<std::thread> threads_;
};

}  // namespace spyre::orchestration
