// SPDX-License-Identifier: Apache-2.0
// spyre::Orchestrator: the C++ face of the runtime behind a handle.
#include "orchestration/cpu_worker.hpp"
#include "orchestration/handle_table.hpp"
#include "orchestration/runtime_handle.hpp"
#include "spyre/orchestration/orchestrator.hpp"
#include "deadline.hpp"
#include "moved_from.hpp"

#include <chrono>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

namespace spyre {

using orchestration::HandleTable;
using orchestration::KernelEntry;
using orchestration::RuntimeState;

namespace {

orchestration::TaskGraph& Graph(RuntimeState& state) { return *state.graph; }

// Runs a call that changes the runtime's work (f of its task graph); a
// failure inside pto_run's orchestration function is noted for the run to
// report (as the C calls are), under the seed's name of the call.
template <typename F>
decltype(auto) Changing(RuntimeState& state, const char* call, F&& f) {
    try {
        return f(Graph(state));
    } catch (const Error& e) {
        orchestration::NoteFailedCall(state, e, call);
        throw;
    }
}

// `state` with a handle of its own that an Orchestrator owns.
RuntimeState* Registered(std::unique_ptr<RuntimeState> state) {
    state->handle = HandleTable::Instance().Register(state.get(), false);
    return state.release();
}

template <typename Owner>
RuntimeState& Live(const Owner& state) {
    RuntimeState& live = detail::LiveState(state, "Orchestrator");
    live.CheckSameProcess("Orchestrator");
    return live;
}

}  // namespace

void Orchestrator::Deleter::operator()(RuntimeState* state) const noexcept {
    // In a child forked since it was created: the runtime's threads and the
    // calls its handle counts are the parent's, so retiring or freeing it
    // here would wait for threads this process does not have. The child's
    // copy is left as it is (its exit frees it); the parent's is untouched.
    if (state->made_in.ForkedAway()) return;
    try {
        HandleTable::Instance().Retire(state->handle, false);  // C calls on it in other threads finish first
    } catch (...) {
        // Cannot happen for an Orchestrator's own handle; the state goes regardless.
    }
    // Destroyed by one of its own host kernels: freeing the runtime waits
    // for every task, the calling one too, so here it waited for itself for
    // good. It is freed on a thread of its own instead, once that kernel
    // has returned (the C API refuses the same call with -EBUSY; a
    // destructor cannot refuse).
    if (state->graph && orchestration::CpuWorker::RunningTaskOf() == state->graph.get()) {
        try {
            std::thread([state] { delete state; }).detach();
            return;
        } catch (const std::system_error&) {
            // No thread to spare: the wait below is what it was.
        }
    }
    delete state;
}

namespace {

// A runtime made by `make`, with std::bad_alloc (a task ring or heap past
// what the host has) as OutOfMemory, as the C calls report it.
template <typename Make>
std::unique_ptr<RuntimeState> Made(const OrchestratorOptions& options, Make&& make) {
    try {
        return make();
    } catch (const std::bad_alloc&) {
        throw Error(ErrorKind::OutOfMemory, "cannot allocate a runtime of " + std::to_string(options.task_ring_size) +
                                                " task slots and a heap ring of " + std::to_string(options.heap_size) +
                                                " bytes on the host");
    }
}

}  // namespace

Orchestrator Orchestrator::Create(Device& device, OrchestratorOptions options) {
    return Orchestrator(Registered(Made(options, [&] { return RuntimeState::OnDevice(device, options); })));
}

Orchestrator Orchestrator::CreateOnHostMemory(uint64_t memory_size, OrchestratorOptions options) {
    return Orchestrator(Registered(Made(options, [&] { return RuntimeState::OnHostMemory(memory_size, options); })));
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
    Graph(Live(state_)).RegisterKernel(std::move(k));
}

std::vector<int32_t> Orchestrator::RunningHostTaskParamKinds() {
    std::vector<int32_t> kinds;
    if (const auto* frame = orchestration::CpuWorker::RunningTasks())
        for (int32_t i = 0; i < frame->task->num_params; ++i) kinds.push_back(frame->task->params[i].kind);
    return kinds;
}

void Orchestrator::RegisterDeviceKernel(int32_t kernel_id, uint64_t program_address) {
    Graph(Live(state_)).RegisterDeviceKernel(kernel_id, program_address);
}

void Orchestrator::ConfineTasksTo(std::vector<std::pair<const void*, uint64_t>> regions) {
    std::vector<TaskRegion> all;
    all.reserve(regions.size());
    for (const auto& [at, bytes] : regions) all.push_back({at, bytes, true});
    ConfineTasksTo(std::move(all));
}
void Orchestrator::ConfineTasksTo(std::vector<TaskRegion> regions) {
    Graph(Live(state_)).ConfineTasksTo(std::move(regions));
}
void Orchestrator::Unconfine() { Graph(Live(state_)).ConfineTasksTo(std::nullopt); }

void* Orchestrator::Alloc(size_t size) {
    return Changing(Live(state_), "pto_alloc", [&](orchestration::TaskGraph& g) { return g.Alloc(size); });
}
void Orchestrator::Free(void* buffer) {
    Changing(Live(state_), "pto_free", [&](orchestration::TaskGraph& g) { g.Free(buffer); });
}

void* Orchestrator::DeviceMalloc(uint64_t size) {
    RuntimeState& state = Live(state_);
    return Changing(state, "pto_device_malloc", [&](orchestration::TaskGraph&) { return state.DeviceMalloc(size); });
}
void Orchestrator::DeviceFree(void* buffer) {
    RuntimeState& state = Live(state_);
    Changing(state, "pto_device_free", [&](orchestration::TaskGraph&) { state.DeviceFree(buffer); });
}

Orchestrator::Scope Orchestrator::BeginScope() {
    RuntimeState& state = Live(state_);
    return Changing(state, "pto_scope_begin",
                    [&](orchestration::TaskGraph& g) {
                        uint32_t serial = 0;
                        const int32_t depth = g.ScopeBegin(&serial);
                        return Scope(state.handle, depth, serial);
                    });
}

Orchestrator::Scope::~Scope() {
    if (!runtime_) return;
    try {
        End(/*once_inner_end=*/true);
    } catch (const Error&) {
        // Failures stay recorded: WaitAll reports them.
    }
}

void Orchestrator::Scope::End() { End(false); }

void Orchestrator::Scope::End(bool once_inner_end) {
    if (!runtime_) throw Error(ErrorKind::InvalidArgument, "scope ended already");
    // Through the handle: the Orchestrator may have moved (or gone: then
    // the handle is refused, and the scope went with its runtime).
    ::Runtime* const runtime = std::exchange(runtime_, nullptr);
    const HandleTable::Call entered = HandleTable::Instance().Enter(runtime, "Orchestrator::Scope::End");
    entered->CheckSameProcess("Orchestrator::Scope::End");
    Changing(*entered, "pto_scope_end", [&](orchestration::TaskGraph& g) {
        // Checked and ended under one lock; refuses what is not this thread's to end.
        if (const int32_t inner = g.ScopeEnd(depth_, serial_, once_inner_end); inner > 0) {
            if (once_inner_end) return;  // ends with the last of them
            runtime_ = runtime;  // still open: it ends after its inner scopes
            throw Error(ErrorKind::InvalidArgument,
                        "scopes end in the reverse order they began: this one (depth " + std::to_string(depth_) +
                            ") still has " + std::to_string(inner) + " inner scope(s) open");
        }
    });
}

int32_t Orchestrator::Submit(int32_t kernel_id, int32_t worker_type, std::span<const TaskParam> params) {
    return Changing(Live(state_), "pto_submit_task",
                    [&](orchestration::TaskGraph& g) { return g.Submit(kernel_id, worker_type, params); });
}

void Orchestrator::Complete(int32_t task_id) {
    Changing(Live(state_), "pto_task_complete", [&](orchestration::TaskGraph& g) { g.Complete(task_id, 0); });
}

void Orchestrator::Fail(int32_t task_id, uint32_t error_code) {
    Changing(Live(state_), "pto_task_fail", [&](orchestration::TaskGraph& g) {
        if (error_code == 0) throw Error(ErrorKind::InvalidArgument, "a failed task needs a non-zero error code");
        g.Complete(task_id, error_code);
    });
}

void* Orchestrator::TaskOutput(int32_t task_id, int32_t index) { return Graph(Live(state_)).TaskOutput(task_id, index); }
int32_t Orchestrator::TaskState(int32_t task_id) const { return int32_t(Graph(Live(state_)).State(task_id)); }
void Orchestrator::WaitAll() { Graph(Live(state_)).WaitAll(); }
void Orchestrator::WaitAll(const ProgressCallback& progress) { Graph(Live(state_)).WaitAll(progress); }
bool Orchestrator::WaitAllFor(std::chrono::nanoseconds timeout) {
    return Graph(Live(state_)).WaitAllUntil(DeadlineAfter(timeout));
}

std::vector<TaskFailureInfo> Orchestrator::Failures() const { return Graph(Live(state_)).Failures(); }
std::vector<uint64_t> Orchestrator::KernelOperandBytes(int32_t kernel_id) const {
    return Graph(Live(state_)).OperandBytes(kernel_id);
}
std::vector<uint8_t> Orchestrator::KernelOperandDTypes(int32_t kernel_id) const {
    return Graph(Live(state_)).OperandDTypes(kernel_id);
}

uint64_t Orchestrator::DeviceAddress(const void* buffer) const { return Graph(Live(state_)).DeviceAddress(buffer); }
void* Orchestrator::HostAddress(uint64_t device_address, uint64_t size) const {
    return Graph(Live(state_)).HostAddress(device_address, size);
}
uint64_t Orchestrator::memory_size() const { return Graph(Live(state_)).memory_size(); }
std::shared_ptr<const void> Orchestrator::MemoryHold() const { return Live(state_).memory; }

void Orchestrator::CopyIn(void* buffer, const void* host, uint64_t size) { Live(state_).CopyIn(buffer, host, size); }
void Orchestrator::CopyOut(void* host, const void* buffer, uint64_t size) { Live(state_).CopyOut(host, buffer, size); }

void Orchestrator::Run(pto_orchestration_fn fn, uint64_t* args, const ProgressCallback& progress) {
    Live(state_).Run(fn, args, progress);
}
void Orchestrator::Run(pto_orchestration_fn fn, uint64_t* args, const ProgressCallback& progress,
                       const WaitSlices& slices) {
    if (slices.slice <= std::chrono::nanoseconds(0) || !slices.between)
        throw Error(ErrorKind::InvalidArgument, "Orchestrator::Run: WaitSlices needs a slice > 0 and a between");
    Live(state_).Run(fn, args, progress, &slices);
}
void Orchestrator::RunLibrary(const std::string& path, const std::string& symbol, uint64_t* args,
                              const ProgressCallback& progress) {
    Live(state_).RunLibrary(path.c_str(), symbol.c_str(), args, progress);
}

}  // namespace spyre
