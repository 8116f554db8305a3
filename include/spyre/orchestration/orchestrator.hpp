// SPDX-License-Identifier: Apache-2.0
// The orchestration runtime's C++ API (seed 004), over the same runtime as
// the C API in spyre/pto.h: RAII scopes, std::span parameters, spyre::Error
// exceptions. An Orchestrator hands its C handle (handle()) to
// orchestration functions written as the seed writes them.
//
//   spyre::Device dev = spyre::Device::Open();
//   auto orch = spyre::Orchestrator::Create(dev, {.task_ring_size = 256});
//   orch.RegisterHostKernel(KERNEL_ADD, add);
//   {
//       auto scope = orch.BeginScope();
//       TaskParam p[] = {{PARAM_INPUT, a, n}, {PARAM_INPUT, b, n}, {PARAM_OUTPUT, nullptr, n}};
//       int32_t t = orch.Submit(KERNEL_ADD, WORKER_VECTOR, p);
//       ...
//   }
//   orch.WaitAll();  // throws DeviceError naming the failed task, kernel and code
//
// docs/orchestration.md describes the data structures and a task's life.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "spyre/common/progress.hpp"
#include "spyre/dependency/task_failure.hpp"
#include "spyre/device/device.hpp"
#include "spyre/error.hpp"
#include "spyre/pto.h"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

namespace orchestration {
struct SPYRE_INTERNAL RuntimeState;
}

// How the ready queues between the task graph and its workers are built
// (docs/orchestration.md compares them): a mutex and condition variable, or a
// lock-free ring whose idle workers spin briefly, then sleep on a futex.
enum class ReadyQueueKind : uint8_t { Locked, LockFree };

// OrchestratorOptions::host_threads at most (InvalidArgument beyond).
inline constexpr unsigned kMaxHostThreads = 1024;

struct OrchestratorOptions {
    int32_t task_ring_size = 1024;    // task slots (live tasks at most)
    uint64_t heap_size = 64ull << 20;  // heap ring bytes, from the function's allocator
    unsigned host_threads = 0;         // host worker threads, 0..kMaxHostThreads; 0 = one per hardware thread
    ReadyQueueKind ready_queues = ReadyQueueKind::LockFree;
    // A host task that is ready when it is submitted runs on the submitting
    // thread, inside Submit, when its kernel's host runs so far averaged
    // under cheap_host_task_ns (a microsecond): handing so short a task to
    // a worker thread and its completion back costs more than the run.
    // Other tasks, and every task while this is false, run on the host
    // worker threads.
    bool run_cheap_host_tasks_here = true;
    uint32_t cheap_host_task_ns = 1000;
    // The function's task queues (core groups) this runtime takes; empty:
    // all of them. Several runtimes on one device take disjoint sets (a
    // queue another runtime holds is Busy).
    std::vector<uint32_t> task_queues;
};

// A host kernel: the task's parameter addresses and sizes; returns 0 or an error code.
using HostKernel = std::function<uint32_t(std::span<void* const> buffers, std::span<const uint64_t> sizes)>;

// A task that failed, or that was skipped because a task it depends on
// failed: the failure record the whole runtime shares (its fields task_id,
// kernel_id, skipped, root_task_id, root_kernel_id and device_code are the
// ones this name always had; task_id is now 64 bits wide).
using TaskFailure = TaskFailureInfo;

class Orchestrator {
public:
    // A runtime on `device` (which must outlive it): its heap ring is one
    // allocation of the device's SpyreAllocator.
    static Orchestrator Create(Device& device, OrchestratorOptions options = {});
    // A runtime on `memory_size` bytes of host memory, no device (every task
    // runs on the host worker): tests, benchmarks, CPU-only use.
    static Orchestrator CreateOnHostMemory(uint64_t memory_size, OrchestratorOptions options = {});

    Orchestrator(Orchestrator&&) noexcept;
    Orchestrator& operator=(Orchestrator&&) noexcept;
    ~Orchestrator();  // waits for the tasks on executors, then frees everything

    void RegisterHostKernel(int32_t kernel_id, HostKernel kernel);
    // Inside a host kernel, on the thread that runs it: the kind
    // (PTO_PARAM_INPUT, _OUTPUT, _INOUT) of each of its task's parameters,
    // in order; empty on a thread that runs no host kernel. A kernel must
    // not write an input: other tasks may read it at the same time, and a
    // chip call's In argument may be a device copy kept for later calls
    // (Python makes an input's view read-only with this).
    static std::vector<int32_t> RunningHostTaskParamKinds();
    void RegisterDeviceKernel(int32_t kernel_id, uint64_t program_address);

    void* Alloc(size_t size);
    void Free(void* buffer);
    // pto_device_malloc / pto_device_free: zeroed memory of the function's
    // allocator, outside the heap ring, for inputs and results that outlive
    // a scope (a long-lived Alloc buffer pins the heap ring's tail).
    // Unsupported on a runtime on host memory; freed with the runtime.
    void* DeviceMalloc(uint64_t size);
    void DeviceFree(void* buffer);

    // Ends the scope when it goes (errors are then reported by WaitAll);
    // End() ends it now and throws DeviceError if a task of it failed.
    // A scope of the runtime (not of this object: moving the Orchestrator
    // keeps it, and one ended after the runtime is gone is refused). Scopes
    // end in the reverse order they began; End() of one with an inner scope
    // still open is InvalidArgument (it stays open), and one destroyed then
    // ends as soon as its inner scopes have. One ended already (End(), or
    // pto_scope_end through handle()) is refused, also once another scope
    // has begun at its depth.
    class Scope {
    public:
        Scope(Scope&& o) noexcept : runtime_(o.runtime_), depth_(o.depth_), serial_(o.serial_) { o.runtime_ = nullptr; }
        Scope& operator=(Scope&&) = delete;
        ~Scope();
        void End();

    private:
        friend class Orchestrator;
        SPYRE_INTERNAL void End(bool once_inner_end);
        Scope(::Runtime* runtime, int32_t depth, uint32_t serial) : runtime_(runtime), depth_(depth), serial_(serial) {}
        ::Runtime* runtime_;  // the runtime's handle
        int32_t depth_;       // this thread's scope depth once it began
        uint32_t serial_;     // which of the runtime's scopes: not one begun at its depth after it ended
    };
    [[nodiscard]] Scope BeginScope();

    int32_t Submit(int32_t kernel_id, int32_t worker_type, std::span<const TaskParam> params);
    // EXTERNAL tasks: finish (or fail with a non-zero code) a task.
    void Complete(int32_t task_id);
    void Fail(int32_t task_id, uint32_t error_code);
    void* TaskOutput(int32_t task_id, int32_t index = 0);
    int32_t TaskState(int32_t task_id) const;  // PTO_TASK_*
    void WaitAll();
    // The same, telling `progress` the tasks completed of those submitted
    // since the last WaitAll (called on this thread, done rising to total).
    void WaitAll(const ProgressCallback& progress);
    // Waits up to `timeout` for every submitted task to finish; whether
    // none is left in flight. Reports nothing: a WaitAll after it returns
    // at once and throws for the failures, as it would have. For a caller
    // that waits in slices (Python's wait_all looks for Ctrl-C between
    // them). Refuses what WaitAll refuses.
    bool WaitAllFor(std::chrono::nanoseconds timeout);
    std::vector<TaskFailure> Failures() const;  // not yet reported by WaitAll
    // The bytes each argument slot of kernel `kernel_id`'s device program
    // spans (its operand's extent; 0 for a slot no relocation points at),
    // to match a call's arguments to the kernel's operands. Empty for a
    // host kernel or a program without relocations; NotFound for a kernel
    // not registered.
    std::vector<uint64_t> KernelOperandBytes(int32_t kernel_id) const;
    // The dtype of each argument slot's operand, as the program stores it
    // (SPYRE_DTYPE_*, compared with ProgramDType; 0 for a slot no
    // relocation points at). Empty and NotFound as KernelOperandBytes.
    std::vector<uint8_t> KernelOperandDTypes(int32_t kernel_id) const;

    uint64_t DeviceAddress(const void* buffer) const;
    void* HostAddress(uint64_t device_address, uint64_t size) const;
    uint64_t memory_size() const;
    // Keeps the memory HostAddress points into mapped while held, even past
    // this Orchestrator: for views of it that may outlive the runtime.
    std::shared_ptr<const void> MemoryHold() const;

    // Confines tasks to given memory: from now on a task parameter that is
    // not inside a pto_alloc buffer or the heap ring must lie inside one of
    // `regions` (buffer addresses, as HostAddress gives them, and sizes), or
    // Submit throws InvalidArgument. The host level sets a chip call's
    // argument copies here, so that a chip function cannot name bytes past
    // them (another tensor's copy). Unconfine lifts it.
    void ConfineTasksTo(std::vector<std::pair<const void*, uint64_t>> regions);
    // The same, some regions read-only: a task that writes (OUTPUT, INOUT)
    // a range of no writable region but of a read-only one is refused,
    // InvalidArgument. The host level makes a call's In arguments so: their
    // device copies may be kept for later calls that read the same bytes.
    struct TaskRegion {
        const void* at = nullptr;
        uint64_t bytes = 0;
        bool writable = true;
    };
    void ConfineTasksTo(std::vector<TaskRegion> regions);
    void Unconfine();

    // Copy `size` bytes between host memory and the runtime's memory at
    // `buffer` (what Alloc, TaskOutput or HostAddress gave): through the
    // device's DMAEngine (checked, counted and traced as every copy), or a
    // memory copy for a runtime on host memory. They wait for the bytes.
    // InvalidArgument when [buffer, buffer + size) leaves the memory.
    void CopyIn(void* buffer, const void* host, uint64_t size);
    void CopyOut(void* host, const void* buffer, uint64_t size);

    // fn(handle(), args), then WaitAll (with `progress`, if set): pto_run.
    void Run(pto_orchestration_fn fn, uint64_t* args, const ProgressCallback& progress = {});
    // How Run may wait for fn's tasks: in slices of `slice` (WaitAllFor),
    // calling `between` on this thread after each one that ended with tasks
    // in flight. What `between` throws ends the wait and comes out of Run
    // (only what fn threw comes first): the tasks go on, and the next
    // WaitAll reports them. For a caller that must stay responsive (Python's
    // run looks for Ctrl-C between slices).
    struct WaitSlices {
        std::chrono::nanoseconds slice{0};
        std::function<void()> between;
    };
    // The same as Run above, waiting as `slices` says (`progress` is told
    // once no task is left in flight).
    void Run(pto_orchestration_fn fn, uint64_t* args, const ProgressCallback& progress, const WaitSlices& slices);
    // The same with `symbol` from the shared object at `path`, kept loaded
    // until the runtime is destroyed (host kernels it registers point into it).
    void RunLibrary(const std::string& path, const std::string& symbol, uint64_t* args,
                    const ProgressCallback& progress = {});

    // The C handle of this runtime, for the pto_* calls and orchestration
    // functions; refused by every call once the Orchestrator is gone.
    ::Runtime* handle() const noexcept;

private:
    struct Deleter {
        void operator()(orchestration::RuntimeState* state) const noexcept;
    };
    explicit Orchestrator(orchestration::RuntimeState* state) : state_(state) {}
    std::unique_ptr<orchestration::RuntimeState, Deleter> state_;
};

}  // namespace spyre
SPYRE_API_END
