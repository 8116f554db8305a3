// SPDX-License-Identifier: Apache-2.0
// The runtime handle (device or host memory) and the C++ Orchestrator.
#include <dlfcn.h>

#include <cstring>
#include <exception>

#include "orchestration/device_worker.hpp"
#include "orchestration/runtime_handle.hpp"
#include "spyre/orchestration/orchestrator.hpp"
#include "spyre/uapi/spyre_ioctl.h"

using spyre::Error;
using spyre::ErrorKind;
using spyre::orchestration::TaskGraph;
using spyre::orchestration::TaskGraphOptions;
using spyre::orchestration::KernelEntry;

namespace {

// What both kinds of runtime take from the caller's options as they are;
// memory, heap and device name are each kind's own.
TaskGraphOptions TaskGraphOptionsFrom(const spyre::OrchestratorOptions& options) {
    TaskGraphOptions o;
    o.task_ring_size = options.task_ring_size;
    o.host_threads = options.host_threads;
    o.ready_queues = options.ready_queues;
    o.run_cheap_host_tasks_here = options.run_cheap_host_tasks_here;
    o.cheap_host_task_ns = options.cheap_host_task_ns;
    return o;
}

}  // namespace

Runtime::~Runtime() {
    graph.reset();  // waits for running tasks first: they use the memory below
    if (heap && device) {
        try {
            device->allocator().Free(heap->handle);
        } catch (...) {
            // The device is gone: its memory went with it.
        }
    }
}

std::unique_ptr<Runtime> Runtime::OnDevice(spyre::Device& device, const spyre::OrchestratorOptions& options) {
    const uint64_t heap_size = options.heap_size;
    auto rt = std::make_unique<Runtime>();
    rt->device = &device;
    // Buffers are addresses in this mapping of the function's own memory
    // (region DEVMEM): host workers and the caller read them directly, and
    // device address = offset in the mapping (as the DMA engine uses it).
    rt->devmem = device.function().MapRegion(SPYRE_REGION_DEVMEM);
    if (heap_size == 0) throw Error(ErrorKind::InvalidArgument, "heap ring size must be > 0");
    rt->heap = device.allocator().Allocate(heap_size);
    const uint64_t heap_offset = device.allocator().DeviceAddress(rt->heap->handle, heap_size);
    TaskGraphOptions o = TaskGraphOptionsFrom(options);
    o.memory = rt->devmem.data();
    o.memory_size = rt->devmem.size();
    o.heap_offset = heap_offset;
    o.heap_size = heap_size;
    o.device = device.pci_address();
    rt->graph = std::make_unique<TaskGraph>(o);
    // CUBE and VECTOR kernels with a device program run on the card's cores
    // through the function's task queues (host-only kernels stay on the host).
    if (spyre::orchestration::DeviceWorker::Available(device.function())) {
        auto worker =
            std::make_shared<spyre::orchestration::DeviceWorker>(device.function(), device.allocator(), *rt->graph,
                                                                 options.task_queues);
        rt->graph->SetExecutor(WORKER_CUBE, worker);
        rt->graph->SetExecutor(WORKER_VECTOR, worker);
    }
    return rt;
}

std::unique_ptr<Runtime> Runtime::OnHostMemory(uint64_t memory_size, const spyre::OrchestratorOptions& options) {
    const uint64_t heap_size = options.heap_size;
    if (heap_size == 0 || heap_size > memory_size)
        throw Error(ErrorKind::InvalidArgument, "heap ring of " + std::to_string(heap_size) +
                                                    " bytes does not fit host memory of " + std::to_string(memory_size) +
                                                    " bytes");
    auto rt = std::make_unique<Runtime>();
    const uint64_t rounded = (memory_size + 4095) / 4096 * 4096;
    rt->host_memory.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, rounded)));
    if (!rt->host_memory) throw Error(ErrorKind::OutOfMemory, "cannot allocate " + std::to_string(memory_size) + " bytes");
    std::memset(rt->host_memory.get(), 0, rounded);
    TaskGraphOptions o = TaskGraphOptionsFrom(options);
    o.memory = rt->host_memory.get();
    o.memory_size = memory_size;
    o.heap_offset = (memory_size - heap_size) / 128 * 128;
    o.heap_size = memory_size - o.heap_offset;
    o.device = "host memory";
    rt->graph = std::make_unique<TaskGraph>(o);
    return rt;
}

void Runtime::Run(pto_orchestration_fn fn, uint64_t* args, const spyre::ProgressCallback& progress) {
    if (!fn) throw Error(ErrorKind::InvalidArgument, "no orchestration function");
    // No scope of its own around the function: a scope holds its tasks'
    // implicit outputs until it ends, so a function with a loop of scopes
    // could never run more of them than the ring holds. Its scopes are its
    // own (the floor keeps it from ending the caller's); what it leaves
    // open is ended for it.
    const int32_t depth = graph->Stats().scope_depth;
    const int32_t floor = graph->SetScopeFloor(depth);
    std::exception_ptr thrown;
    try {
        fn(this, args);
    } catch (...) {  // a C++ orchestration function may throw: finish its tasks first
        thrown = std::current_exception();
    }
    graph->SetScopeFloor(floor);
    const int32_t left_open = graph->Stats().scope_depth - depth;
    for (int32_t d = 0; d < left_open; ++d) {
        try {
            graph->ScopeEnd();
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::DeviceError) throw;  // task failures: WaitAll reports them
        }
    }
    try {
        graph->WaitAll(progress);
    } catch (...) {
        if (!thrown) throw;
    }
    if (thrown) std::rethrow_exception(thrown);  // the function's own error is the one to see
    if (left_open > 0)
        throw Error(ErrorKind::InvalidArgument,
                    "the orchestration function left " + std::to_string(left_open) + " scope(s) open (ended for it)");
}

void Runtime::RunLibrary(const char* path, const char* symbol, uint64_t* args,
                         const spyre::ProgressCallback& progress) {
    if (!path || !symbol) throw Error(ErrorKind::InvalidArgument, "a library path and a symbol name are needed");
    void* lib = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) throw Error(ErrorKind::NotFound, std::string("cannot load orchestration library: ") + ::dlerror());
    struct Close {
        void* lib;
        ~Close() { ::dlclose(lib); }
    } close{lib};
    void* sym = ::dlsym(lib, symbol);
    if (!sym)
        throw Error(ErrorKind::NotFound, std::string("no orchestration function '") + symbol + "' in " + path);
    Run(reinterpret_cast<pto_orchestration_fn>(sym), args, progress);
}

namespace spyre {

namespace {
TaskGraph& Graph(::Runtime* rt) { return *rt->graph; }
}  // namespace

void Orchestrator::Deleter::operator()(::Runtime* rt) const noexcept { delete rt; }

Orchestrator Orchestrator::Create(Device& device, OrchestratorOptions options) {
    return Orchestrator(::Runtime::OnDevice(device, options).release());
}

Orchestrator Orchestrator::CreateOnHostMemory(uint64_t memory_size, OrchestratorOptions options) {
    return Orchestrator(::Runtime::OnHostMemory(memory_size, options).release());
}

Orchestrator::Orchestrator(Orchestrator&&) noexcept = default;
Orchestrator& Orchestrator::operator=(Orchestrator&&) noexcept = default;
Orchestrator::~Orchestrator() = default;

void Orchestrator::RegisterHostKernel(int32_t kernel_id, HostKernel kernel) {
    if (!kernel) throw Error(ErrorKind::InvalidArgument, "kernel " + std::to_string(kernel_id) + ": empty host function");
    KernelEntry k;
    k.kernel_id = kernel_id;
    k.host_callable = [fn = std::move(kernel)](void* const* buffers, const uint64_t* sizes, int32_t n) {
        return fn(std::span<void* const>(buffers, size_t(n)), std::span<const uint64_t>(sizes, size_t(n)));
    };
    Graph(handle()).RegisterKernel(std::move(k));
}

void Orchestrator::RegisterDeviceKernel(int32_t kernel_id, uint64_t program_address) {
    KernelEntry k;
    k.kernel_id = kernel_id;
    k.program_address = program_address;
    k.has_program = true;
    Graph(handle()).RegisterKernel(std::move(k));
}

void* Orchestrator::Alloc(size_t size) { return Graph(handle()).Alloc(size); }
void Orchestrator::Free(void* buffer) { Graph(handle()).Free(buffer); }

Orchestrator::Scope Orchestrator::BeginScope() {
    Graph(handle()).ScopeBegin();
    return Scope(this);
}

Orchestrator::Scope::~Scope() {
    if (!orch_) return;
    try {
        End();
    } catch (const Error&) {
        // Failures stay recorded: WaitAll reports them.
    }
}

void Orchestrator::Scope::End() {
    if (!orch_) throw Error(ErrorKind::InvalidArgument, "scope ended already");
    Orchestrator* o = orch_;
    orch_ = nullptr;
    Graph(o->handle()).ScopeEnd();
}

int32_t Orchestrator::Submit(int32_t kernel_id, int32_t worker_type, std::span<const TaskParam> params) {
    return Graph(handle()).Submit(kernel_id, worker_type, params);
}

void Orchestrator::Complete(int32_t task_id) { Graph(handle()).Complete(task_id, 0); }

void Orchestrator::Fail(int32_t task_id, uint32_t error_code) {
    if (error_code == 0) throw Error(ErrorKind::InvalidArgument, "a failed task needs a non-zero error code");
    Graph(handle()).Complete(task_id, error_code);
}

void* Orchestrator::TaskOutput(int32_t task_id, int32_t index) { return Graph(handle()).TaskOutput(task_id, index); }
int32_t Orchestrator::TaskState(int32_t task_id) const { return int32_t(Graph(handle()).State(task_id)); }
void Orchestrator::WaitAll() { Graph(handle()).WaitAll(); }
void Orchestrator::WaitAll(const ProgressCallback& progress) { Graph(handle()).WaitAll(progress); }

std::vector<TaskFailure> Orchestrator::Failures() const {
    std::vector<TaskFailure> out;
    for (const auto& r : Graph(handle()).Failures())
        out.push_back({r.task_id, r.kernel_id, r.outcome == orchestration::TaskOutcome::Skipped, r.cause.task_id,
                       r.cause.kernel_id, r.cause.device_code});
    return out;
}

uint64_t Orchestrator::DeviceAddress(const void* buffer) const { return Graph(handle()).DeviceAddress(buffer); }
void* Orchestrator::HostAddress(uint64_t device_address, uint64_t size) const {
    return Graph(handle()).HostAddress(device_address, size);
}
uint64_t Orchestrator::memory_size() const { return Graph(handle()).memory_size(); }

void Orchestrator::Run(pto_orchestration_fn fn, uint64_t* args, const ProgressCallback& progress) {
    handle()->Run(fn, args, progress);
}
void Orchestrator::RunLibrary(const std::string& path, const std::string& symbol, uint64_t* args,
                              const ProgressCallback& progress) {
    handle()->RunLibrary(path.c_str(), symbol.c_str(), args, progress);
}

}  // namespace spyre
