// SPDX-License-Identifier: Apache-2.0
// Internal: the shared state behind Device, FlexStream and Event. Streams,
// events and plans hold a shared_ptr to it, so the function, allocator and
// scheduler outlive every object that can still reach them.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "spyre/memory/allocator.hpp"
#include "spyre/memory/device_buffer.hpp"
#include "spyre/device/device.hpp"
#include "spyre/memory/dma_engine.hpp"
#include "spyre/driver/device_environment.hpp"
#include "spyre/driver/dma_queue.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/driver/task_queue.hpp"
#include "spyre/stream/scheduler.hpp"
#include "stream/stream_state.hpp"

namespace spyre {

class ExecutionPlan;
namespace detail {
class SchedulerCore;
}

class DeviceCore final : public std::enable_shared_from_this<DeviceCore>, public DeviceMemory {
public:
    // Opens `function` of `environment` (shared with every Device opened
    // from the same Host; kept alive as long as this core).
    DeviceCore(std::shared_ptr<const driver::DeviceEnvironment> environment, const driver::FunctionInfo& function,
               DeviceOptions options);
    ~DeviceCore();

    // Declared first, so it goes last: while it lives the core is open or
    // still closing (its device node held), which Host::Open waits for.
    const std::shared_ptr<const void> lifetime = std::make_shared<char>(0);
    std::shared_ptr<const driver::DeviceEnvironment> environment;
    std::optional<driver::Function> function;
    std::optional<SpyreAllocator> allocator;
    std::optional<driver::DmaQueue> dma_queue;
    std::optional<DMAEngine> dma;
    std::unique_ptr<detail::SchedulerCore> sched;  // the scheduler itself (stream/scheduler_core.hpp)
    std::unique_ptr<Scheduler> scheduler;          // its public face
    driver::TaskTopology task_topology;             // read once at open

    // The function's card and function index (objects of this device carry it).
    const DeviceId& id() const { return allocator->device(); }
    // SpyreAllocator's, for libspyre's launch and copy paths.
    uint64_t AddressToWrite(const DeviceHandle& handle, uint64_t size) const {
        return allocator->DeviceAddressToWrite(handle, size);
    }
    // The same check by function-relative address, for what a program
    // bound on the host names (it holds addresses, not handles):
    // InvalidArgument unless [address, address + size) lies in one live
    // allocation that is no program image.
    void CheckAddressToWrite(uint64_t address, uint64_t size) const;
    void KeepForPrograms(const DeviceHandle& handle) { allocator->KeepForPrograms(handle); }

    // Loaded ExecutionPlans by content hash (LoadExecutionPlan).
    std::mutex plans_mu;
    std::map<uint64_t, std::weak_ptr<const ExecutionPlan>> plans;

    // The scheduler's wake-up: DMA completions and enqueues bump it.
    void WakeScheduler();

    // Its owner let go of it on a thread that is closing it (a Worker
    // destroyed from one of its own tasks is freed on a thread of its own):
    // Host::Open of the function waits for that instead of refusing it.
    std::atomic<bool> closing{false};

    StreamState* CreateStream(int priority);
    void RetireStream(StreamState* state);

    // InvalidArgument in a child forked after this device was opened: the
    // scheduler's thread and the queues' state stayed with the parent, so
    // waits there would never end. A load and a compare.
    void CheckSameProcess() const {
        if (fork_generation_ != ForkGeneration()) [[unlikely]]
            ThrowForked();
    }
    // How many fork()s this process descends through (pthread_atfork).
    static uint64_t ForkGeneration() noexcept;
    // Whether the calling process is a child forked since the open. Its
    // copy of the device is let go of untouched: the threads to join are
    // the parent's, a lock one of them held stays held here, and the rings,
    // registers and memory are shared with the parent (a child freeing or
    // destroying what it inherited crashed, or waited for good).
    bool ForkedAway() const noexcept { return fork_generation_ != ForkGeneration(); }

    // Blocks until `counter` >= target, per the scheduler's wait options
    // (the waiting thread reaps the ring itself when it can). Throws
    // InvalidArgument if called from the scheduler thread (a host callback).
    // With `until`: gives up then; whether the counter got there.
    bool WaitUntil(const std::atomic<uint64_t>& counter, uint64_t target, EventCount& word,
                   std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max()) const;
    bool OnSchedulerThread() const;
    // Frees device memory the runtime owns (tensors, plans, tiling
    // variants, Program binaries). First waits for the work every stream
    // has enqueued so far (as cudaFree does), so nothing queued can still
    // touch the memory once it is handed out again; on the scheduler thread
    // (a host callback, which may not wait) the scheduler frees the blocks
    // once the streams got there.
    void FreeAfterQueuedWork(std::span<const DeviceAllocation> blocks) noexcept override;
    // Waits for the work every stream has enqueued so far and the copies
    // submitted to the DMA queue (not on the scheduler thread).
    void WaitForQueuedWork() noexcept;
    SpyreAllocator& buffer_allocator() noexcept override { return *allocator; }

private:
    [[noreturn]] void ThrowForked() const;
    const uint64_t fork_generation_ = ForkGeneration();
    const pid_t opened_by_ = ::getpid();
};

}  // namespace spyre
