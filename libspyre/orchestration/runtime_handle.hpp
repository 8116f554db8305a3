// SPDX-License-Identifier: Apache-2.0
// What a runtime handle stands for: the task graph and what it runs on (the
// device and its mapped memory, or host memory). Internal: the C++
// Orchestrator and the C API share it; C callers reach it only through its
// handle (handle_table.hpp), and a device executor reaches the task graph
// through it (graph->SetExecutor).
#pragma once

#include <cstdlib>
#include <memory>
#include <optional>

#include "orchestration/task_graph.hpp"
#include "spyre/device/device.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/orchestration/orchestrator.hpp"

namespace spyre::orchestration {

struct RuntimeState {
    struct FreeDeleter {
        void operator()(uint8_t* p) const noexcept { std::free(p); }
    };
    std::unique_ptr<spyre::Device> owned_device;  // pto_runtime_create opened it
    spyre::Device* device = nullptr;
    spyre::driver::MappedRegion devmem;            // the function's memory, mapped
    std::optional<spyre::DeviceAllocation> heap;   // the heap ring's allocation
    std::unique_ptr<uint8_t, FreeDeleter> host_memory;
    std::unique_ptr<TaskGraph> graph;
    ::Runtime* handle = nullptr;  // what C code and orchestration functions hold

    ~RuntimeState();

    // On `device`: maps its memory and takes the heap from its allocator.
    static std::unique_ptr<RuntimeState> OnDevice(spyre::Device& device, const spyre::OrchestratorOptions& options);
    // On host memory: the heap is the last heap_size bytes of memory_size.
    static std::unique_ptr<RuntimeState> OnHostMemory(uint64_t memory_size, const spyre::OrchestratorOptions& options);
    // fn(handle, args), the scopes it left open ended, then WaitAll
    // (pto_run: the function is not in a scope of its own).
    void Run(pto_orchestration_fn fn, uint64_t* args, const spyre::ProgressCallback& progress = {});
    void RunLibrary(const char* path, const char* symbol, uint64_t* args,
                    const spyre::ProgressCallback& progress = {});
};

// The first failed call an orchestration function made through the C API
// while pto_run (RuntimeState::Run) ran it on this thread: pto_run reports
// it even when the function went on as if nothing happened.
void NoteFailedCall(const RuntimeState& state, const Error& error, const char* call) noexcept;

}  // namespace spyre::orchestration
