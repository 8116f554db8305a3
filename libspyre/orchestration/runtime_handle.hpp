// SPDX-License-Identifier: Apache-2.0
// What the C API's opaque `Runtime` is: the task graph and what it runs on (the
// device and its mapped memory, or host memory). Internal: the C++
// Orchestrator and the C API share it, and a device executor reaches the
// task graph through it (graph->SetExecutor).
#pragma once

#include <cstdlib>
#include <memory>
#include <optional>

#include "orchestration/task_graph.hpp"
#include "spyre/device/device.hpp"
#include "spyre/driver/function.hpp"

struct Runtime {
    struct FreeDeleter {
        void operator()(uint8_t* p) const noexcept { std::free(p); }
    };
    std::unique_ptr<spyre::Device> owned_device;  // pto_runtime_create opened it
    spyre::Device* device = nullptr;
    spyre::driver::MappedRegion devmem;            // the function's memory, mapped
    std::optional<spyre::DeviceAllocation> heap;   // the heap ring's allocation
    std::unique_ptr<uint8_t, FreeDeleter> host_memory;
    std::unique_ptr<spyre::orchestration::TaskGraph> graph;

    ~Runtime();

    // On `device`: maps its memory and takes the heap from its allocator.
    static std::unique_ptr<Runtime> OnDevice(spyre::Device& device, const spyre::OrchestratorOptions& options);
    // On host memory: the heap is the last heap_size bytes of memory_size.
    static std::unique_ptr<Runtime> OnHostMemory(uint64_t memory_size, const spyre::OrchestratorOptions& options);
    // fn(this, args) in a scope, then WaitAll.
    void Run(pto_orchestration_fn fn, uint64_t* args, const spyre::ProgressCallback& progress = {});
    void RunLibrary(const char* path, const char* symbol, uint64_t* args,
                    const spyre::ProgressCallback& progress = {});
};
