// SPDX-License-Identifier: Apache-2.0
// The runtime handle (device or host memory) and the C++ Orchestrator.
#include <dlfcn.h>

#include <cstring>
#include <exception>

#include "orchestration/device_worker.hpp"
#include "orchestration/handle_table.hpp"
#include "orchestration/runtime_handle.hpp"
#include "spyre/orchestration/orchestrator.hpp"
#include "spyre/uapi/spyre_ioctl.h"

namespace spyre::orchestration {

namespace {

// The run in progress on this thread (pto_run inside pto_run nests): the
// C API notes there the first call of its function that failed.
struct RunRecord {
    const RuntimeState* state;
    RunRecord* outer;
    std::optional<Error> failed_call;
    std::string call;
};
thread_local RunRecord* tl_run = nullptr;

// What both kinds of runtime take from the caller's options as they are;
// memory, heap and device name are each kind's own.
TaskGraphOptions TaskGraphOptionsFrom(const OrchestratorOptions& options) {
    TaskGraphOptions o;
    o.task_ring_size = options.task_ring_size;
    o.host_threads = options.host_threads;
    o.ready_queues = options.ready_queues;
    o.run_cheap_host_tasks_here = options.run_cheap_host_tasks_here;
    o.cheap_host_task_ns = options.cheap_host_task_ns;
    return o;
}

}  // namespace

void NoteFailedCall(const RuntimeState& state, const Error& error, const char* call) noexcept {
    for (RunRecord* r = tl_run; r; r = r->outer)
        if (r->state == &state) {
            if (!r->failed_call) try {
                    r->failed_call = error;
                    r->call = call;
                } catch (...) {  // out of memory: the call's own return value still told
                }
            return;
        }
}

RuntimeState::~RuntimeState() {
    graph.reset();  // waits for running tasks first: they use the memory below
    if (heap && device) {
        try {
            device->allocator().Free(heap->handle);
        } catch (...) {
            // The device is gone: its memory went with it.
        }
    }
}

std::unique_ptr<RuntimeState> RuntimeState::OnDevice(Device& device, const OrchestratorOptions& options) {
    const uint64_t heap_size = options.heap_size;
    auto rt = std::make_unique<RuntimeState>();
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
    if (DeviceWorker::Available(device.function())) {
        auto worker = std::make_shared<DeviceWorker>(device.function(), device.allocator(), *rt->graph, options.task_queues);
        rt->graph->SetExecutor(WORKER_CUBE, worker);
        rt->graph->SetExecutor(WORKER_VECTOR, worker);
    }
    return rt;
}

std::unique_ptr<RuntimeState> RuntimeState::OnHostMemory(uint64_t memory_size, const OrchestratorOptions& options) {
    const uint64_t heap_size = options.heap_size;
    if (heap_size == 0 || heap_size > memory_size)
        throw Error(ErrorKind::InvalidArgument, "heap ring of " + std::to_string(heap_size) +
                                                    " bytes does not fit host memory of " + std::to_string(memory_size) +
                                                    " bytes");
    auto rt = std::make_unique<RuntimeState>();
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

void RuntimeState::Run(pto_orchestration_fn fn, uint64_t* args, const ProgressCallback& progress) {
    if (!fn) throw Error(ErrorKind::InvalidArgument, "no orchestration function");
    // No scope of its own around the function: a scope holds its tasks'
    // implicit outputs until it ends, so a function with a loop of scopes
    // could never run more of them than the ring holds. Its scopes are its
    // own (the floor keeps it from ending the caller's); what it leaves
    // open is ended for it.
    const int32_t depth = graph->Stats().scope_depth;
    const int32_t floor = graph->SetScopeFloor(depth);
    RunRecord record{this, tl_run, std::nullopt, {}};
    tl_run = &record;
    std::exception_ptr thrown;
    try {
        fn(handle, args);
    } catch (...) {  // a C++ orchestration function may throw: finish its tasks first
        thrown = std::current_exception();
    }
    tl_run = record.outer;
    graph->SetScopeFloor(floor);
    const int32_t left_open = graph->Stats().scope_depth - depth;
    for (int32_t d = 0; d < left_open; ++d) {
        try {
            graph->ScopeEnd();
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::DeviceError) throw;  // task failures: WaitAll reports them
        }
    }
    std::exception_ptr waited;
    try {
        graph->WaitAll(progress);
    } catch (...) {
        waited = std::current_exception();
    }
    // The function's own error first: it is why tasks are missing.
    if (thrown) std::rethrow_exception(thrown);
    if (record.failed_call) {
        const Error& e = *record.failed_call;
        throw Error(e.kind(), "the orchestration function's " + record.call + " failed: " + e.message(), e.context());
    }
    if (waited) std::rethrow_exception(waited);
    if (left_open > 0)
        throw Error(ErrorKind::InvalidArgument,
                    "the orchestration function left " + std::to_string(left_open) + " scope(s) open (ended for it)");
}

void RuntimeState::RunLibrary(const char* path, const char* symbol, uint64_t* args, const ProgressCallback& progress) {
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

}  // namespace spyre::orchestration

namespace spyre {

using orchestration::HandleTable;
using orchestration::KernelEntry;
using orchestration::RuntimeState;

namespace {

orchestration::TaskGraph& Graph(RuntimeState& state) { return *state.graph; }

// `state` with a handle of its own that an Orchestrator owns.
RuntimeState* Registered(std::unique_ptr<RuntimeState> state) {
    state->handle = HandleTable::Instance().Register(state.get(), false);
    return state.release();
}

}  // namespace

void Orchestrator::Deleter::operator()(RuntimeState* state) const noexcept {
    try {
        HandleTable::Instance().Retire(state->handle, false);  // C calls on it in other threads finish first
    } catch (...) {
        // Cannot happen for an Orchestrator's own handle; the state goes regardless.
    }
    delete state;
}

Orchestrator Orchestrator::Create(Device& device, OrchestratorOptions options) {
    return Orchestrator(Registered(RuntimeState::OnDevice(device, options)));
}

Orchestrator Orchestrator::CreateOnHostMemory(uint64_t memory_size, OrchestratorOptions options) {
    return Orchestrator(Registered(RuntimeState::OnHostMemory(memory_size, options)));
}

::Runtime* Orchestrator::handle() const noexcept { return state_ ? state_->handle : nullptr; }

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
    Graph(*state_).RegisterKernel(std::move(k));
}

void Orchestrator::RegisterDeviceKernel(int32_t kernel_id, uint64_t program_address) {
    KernelEntry k;
    k.kernel_id = kernel_id;
    k.program_address = program_address;
    k.has_program = true;
    Graph(*state_).RegisterKernel(std::move(k));
}

void* Orchestrator::Alloc(size_t size) { return Graph(*state_).Alloc(size); }
void Orchestrator::Free(void* buffer) { Graph(*state_).Free(buffer); }

Orchestrator::Scope Orchestrator::BeginScope() {
    Graph(*state_).ScopeBegin();
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
    Graph(*o->state_).ScopeEnd();
}

int32_t Orchestrator::Submit(int32_t kernel_id, int32_t worker_type, std::span<const TaskParam> params) {
    return Graph(*state_).Submit(kernel_id, worker_type, params);
}

void Orchestrator::Complete(int32_t task_id) { Graph(*state_).Complete(task_id, 0); }

void Orchestrator::Fail(int32_t task_id, uint32_t error_code) {
    if (error_code == 0) throw Error(ErrorKind::InvalidArgument, "a failed task needs a non-zero error code");
    Graph(*state_).Complete(task_id, error_code);
}

void* Orchestrator::TaskOutput(int32_t task_id, int32_t index) { return Graph(*state_).TaskOutput(task_id, index); }
int32_t Orchestrator::TaskState(int32_t task_id) const { return int32_t(Graph(*state_).State(task_id)); }
void Orchestrator::WaitAll() { Graph(*state_).WaitAll(); }
void Orchestrator::WaitAll(const ProgressCallback& progress) { Graph(*state_).WaitAll(progress); }

std::vector<TaskFailure> Orchestrator::Failures() const {
    std::vector<TaskFailure> out;
    for (const auto& r : Graph(*state_).Failures())
        out.push_back({r.task_id, r.kernel_id, r.outcome == orchestration::TaskOutcome::Skipped, r.cause.task_id,
                       r.cause.kernel_id, r.cause.device_code});
    return out;
}

uint64_t Orchestrator::DeviceAddress(const void* buffer) const { return Graph(*state_).DeviceAddress(buffer); }
void* Orchestrator::HostAddress(uint64_t device_address, uint64_t size) const {
    return Graph(*state_).HostAddress(device_address, size);
}
uint64_t Orchestrator::memory_size() const { return Graph(*state_).memory_size(); }

void Orchestrator::Run(pto_orchestration_fn fn, uint64_t* args, const ProgressCallback& progress) {
    state_->Run(fn, args, progress);
}
void Orchestrator::RunLibrary(const std::string& path, const std::string& symbol, uint64_t* args,
                              const ProgressCallback& progress) {
    state_->RunLibrary(path.c_str(), symbol.c_str(), args, progress);
}

}  // namespace spyre
