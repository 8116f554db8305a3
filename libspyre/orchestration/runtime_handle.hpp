// SPDX-License-Identifier: Apache-2.0
// What a runtime handle stands for: the task graph and what it runs on (the
// device and its mapped memory, or host memory). Internal: the C++
// Orchestrator and the C API share it; C callers reach it only through its
// handle (handle_table.hpp), and a device executor reaches the task graph
// through it (graph->SetExecutor).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "forked.hpp"
#include "orchestration/task_graph.hpp"
#include "spyre/orchestration/orchestrator.hpp"

namespace spyre::orchestration {

struct RuntimeState {
    std::unique_ptr<TaskGraph> graph;
    // What the graph's memory lives in (a device's mapping and heap
    // allocation, or host memory): freed after the graph, whose destructor
    // waits for the tasks that use it.
    std::shared_ptr<void> backing;
    // What the graph's addresses point into (the mapping, or host memory):
    // a caller's view of it kept past the runtime holds it (on a device the
    // runtime's end turns the pages under it into private zeros).
    std::shared_ptr<const void> memory;
    Device* device = nullptr;     // the function it runs on; nullptr on host memory
    // How host bytes go to and from a checked device address of the graph's
    // memory: the device's DMAEngine (OnDevice sets them); unset, a memory copy.
    std::function<void(const void* host, uint64_t device_address, uint64_t size)> copy_in;
    std::function<void(void* host, uint64_t device_address, uint64_t size)> copy_out;
    ::Runtime* handle = nullptr;  // what C code and orchestration functions hold
    // Its worker threads stay with the process that created it: a child
    // forked since gets InvalidArgument from every call (CheckSameProcess),
    // and its destruction there leaves the parent's runtime alone.
    detail::MadeInProcess made_in;
    // The libraries pto_run_library loaded, closed after the graph: host
    // kernels their functions registered point into them.
    std::mutex libraries_mu;
    std::vector<void*> libraries;

    ~RuntimeState();

    void CheckSameProcess(const char* call) const {
        made_in.Check(call, "orchestration runtime", "create a runtime in the child");
    }

    // On `device` (runtime_device.cpp): maps its memory and takes the heap
    // from its allocator; `owned`, if set, is `device`, kept and closed last.
    static std::unique_ptr<RuntimeState> OnDevice(Device& device, const OrchestratorOptions& options,
                                                  std::unique_ptr<Device> owned = nullptr);
    // On host memory: the heap is the last heap_size bytes of memory_size.
    static std::unique_ptr<RuntimeState> OnHostMemory(uint64_t memory_size, const OrchestratorOptions& options);
    // fn(handle, args), the scopes it left open ended, then WaitAll
    // (pto_run: the function is not in a scope of its own); in `slices`,
    // if set (Orchestrator::WaitSlices).
    void Run(pto_orchestration_fn fn, uint64_t* args, const ProgressCallback& progress = {},
             const Orchestrator::WaitSlices* slices = nullptr);
    void RunLibrary(const char* path, const char* symbol, uint64_t* args, const ProgressCallback& progress = {});
    // Host bytes into and out of the graph's memory at `buffer` (checked):
    // by the device's DMAEngine, or a memory copy on host memory.
    void CopyIn(void* buffer, const void* host, uint64_t size);
    void CopyOut(void* host, const void* buffer, uint64_t size);
    // pto_device_malloc / pto_device_free (runtime_device.cpp): zeroed
    // memory of the function's allocator, outside the heap ring; Unsupported
    // on host memory.
    void* DeviceMalloc(uint64_t size);
    void DeviceFree(void* buffer);
};

// What both kinds of runtime take from the caller's options as they are;
// memory, heap and device name are each kind's own.
TaskGraphOptions TaskGraphOptionsFrom(const OrchestratorOptions& options);

// The first failed call an orchestration function made (through the C API
// or the C++ calls) while pto_run (RuntimeState::Run) ran it on this
// thread: pto_run reports it even when the function went on as if nothing
// happened. Task failures (DeviceError) are the wait's to report.
void NoteFailedCall(const RuntimeState& state, const Error& error, const char* call) noexcept;
// The same for a call the handle table refused (the runtime is being
// destroyed under the run): matched by handle, the state being out of reach.
void NoteRefusedCall(const ::Runtime* handle, const Error& error, const char* call) noexcept;

}  // namespace spyre::orchestration
