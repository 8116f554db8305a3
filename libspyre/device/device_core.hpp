// SPDX-License-Identifier: Apache-2.0
// Internal: the shared state behind Device, FlexStream and Event. Streams,
// events and plans hold a shared_ptr to it, so the function, allocator and
// scheduler outlive every object that can still reach them.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "spyre/memory/allocator.hpp"
#include "spyre/device/device.hpp"
#include "spyre/memory/dma_engine.hpp"
#include "spyre/driver/device_environment.hpp"
#include "spyre/driver/dma_queue.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/stream/scheduler.hpp"

namespace spyre {

class ExecutionPlan;

// Waits until counter >= target: spins for the scheduler's spin budget,
// then sleeps on `seq` (bumped by the producer when `waiters` is non-zero).
struct CompletionWord {
    std::atomic<uint32_t> seq{0};
    std::atomic<uint32_t> waiters{0};
    // Producer side: call after the counter moved.
    void Notify();
};

struct StreamState {
    StreamState(int index, int priority) : index(index), priority(priority) {}

    const int index;
    const int priority;

    // Producer side, guarded by mu.
    std::mutex mu;
    std::vector<ControlBlock> incoming;
    uint64_t enqueued = 0;
    std::optional<Error> fault;
    std::atomic<bool> pending{false};       // incoming is non-empty
    std::atomic<bool> faulted{false};       // mirrors fault.has_value()
    std::atomic<uint64_t> enqueued_count{0};
    std::atomic<uint64_t> completed{0};     // ops done (including dropped), in order
    std::atomic<bool> retired{false};
    CompletionWord done;

    // Scheduler thread only.
    std::deque<ControlBlock> local;         // taken from incoming, in order
    uint64_t next_seq = 0;                  // op index of local.front()
    uint32_t ring_inflight = 0;             // CBs of this stream in the ring
    bool host_busy = false;                 // a DMA copy of this stream is running
    uint32_t skipped_turns = 0;             // Priority policy: aging
};

struct EventState {
    std::shared_ptr<DeviceCore> core;
    std::optional<DeviceAllocation> semaphore;  // one u64 in device memory
    uint64_t sem_addr = 0;
    std::atomic<uint64_t> recorded{0};   // Record calls so far (the last record's sequence)
    std::atomic<uint64_t> submitted{0};  // last sequence whose SEM_WRITE is in the ring (scheduler)
    std::atomic<uint64_t> completed{0};  // last sequence completed
    std::atomic<uint64_t> timestamp_ns{0};  // device time of `completed`
    CompletionWord done;
    std::mutex mu;
    std::optional<Error> error;          // the recording stream's fault, if it had one
    ~EventState();
};

class DeviceCore : public std::enable_shared_from_this<DeviceCore> {
public:
    // Opens `function` of `environment` (shared with every Device opened
    // from the same Host; kept alive as long as this core).
    DeviceCore(std::shared_ptr<const driver::DeviceEnvironment> environment, const driver::FunctionInfo& function,
               DeviceOptions options);
    ~DeviceCore();

    std::shared_ptr<const driver::DeviceEnvironment> environment;
    std::optional<driver::Function> function;
    std::optional<SpyreAllocator> allocator;
    std::optional<driver::DmaQueue> dma_queue;
    std::optional<DMAEngine> dma;
    std::unique_ptr<Scheduler> scheduler;

    // The function's card and function index (objects of this device carry it).
    const DeviceId& id() const { return allocator->device(); }

    // Loaded ExecutionPlans by content hash (LoadExecutionPlan).
    std::mutex plans_mu;
    std::map<uint64_t, std::weak_ptr<const ExecutionPlan>> plans;

    // The scheduler's wake-up: DMA completions and enqueues bump it.
    void WakeScheduler();

    StreamState* CreateStream(int priority);
    void RetireStream(StreamState* state);
    std::vector<std::shared_ptr<StreamState>> Streams();

    // Blocks until `counter` >= target, per the scheduler's wait options.
    // Throws DeviceLost if the device goes away meanwhile; InvalidArgument
    // if called from the scheduler thread (a host callback).
    void WaitUntil(const std::atomic<uint64_t>& counter, uint64_t target, CompletionWord& word) const;
    bool OnSchedulerThread() const;
    // Frees device memory the runtime owns (tensors, plans, tiling
    // variants, Program binaries). First waits for the work every stream
    // has enqueued so far (as cudaFree does), so nothing queued can still
    // touch the memory once it is handed out again; on the scheduler thread
    // (cleanup callbacks, which run in stream order) it frees at once.
    void FreeAfterQueuedWork(std::span<const DeviceAllocation> blocks) noexcept;
};

}  // namespace spyre
