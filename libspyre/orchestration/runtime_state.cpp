// SPDX-License-Identifier: Apache-2.0
// The runtime behind a handle: over host memory here (the device kind is
// runtime_device.cpp), and pto_run's way of running an orchestration
// function.
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "deadline.hpp"
#include "orchestration/heap_ring.hpp"
#include "orchestration/runtime_handle.hpp"
#include "spyre/common/hex.hpp"
#include "spyre/common/memory_copy.hpp"

namespace spyre::orchestration {

namespace {

// The run in progress on this thread (pto_run inside pto_run nests): the
// C API notes there the first call of its function that failed.
struct RunRecord {
    const RuntimeState* state;
    const ::Runtime* handle;  // the state's, for calls refused before they reach it
    RunRecord* outer;
    std::optional<Error> failed_call;
    std::string call;
};
thread_local RunRecord* tl_run = nullptr;

}  // namespace

TaskGraphOptions TaskGraphOptionsFrom(const OrchestratorOptions& options) {
    // 100,000 threads started 32k of them before the host ran out.
    if (options.host_threads > kMaxHostThreads)
        throw Error(ErrorKind::InvalidArgument, "OrchestratorOptions::host_threads is " +
                                                    std::to_string(options.host_threads) + ": at most " +
                                                    std::to_string(kMaxHostThreads) + " (0: one per hardware thread)");
    // A value past the named ones ran as Locked.
    if (options.ready_queues != ReadyQueueKind::Locked && options.ready_queues != ReadyQueueKind::LockFree)
        throw Error(ErrorKind::InvalidArgument, "OrchestratorOptions::ready_queues " +
                                                    std::to_string(int(options.ready_queues)) + " is none of Locked, LockFree");
    TaskGraphOptions o;
    o.task_ring_size = options.task_ring_size;
    o.host_threads = options.host_threads;
    o.ready_queues = options.ready_queues;
    o.run_cheap_host_tasks_here = options.run_cheap_host_tasks_here;
    o.cheap_host_task_ns = options.cheap_host_task_ns;
    return o;
}

namespace {

// Notes `error` in the innermost run on this thread that `is_this_run` picks.
template <typename IsThisRun>
void NoteIn(IsThisRun&& is_this_run, const Error& error, const char* call) noexcept {
    // A task's failure (a scope's or a nested run's report of one) is not
    // a failed call: the run's wait reports it, with every task done.
    if (error.kind() == ErrorKind::DeviceError) return;
    for (RunRecord* r = tl_run; r; r = r->outer)
        if (is_this_run(*r)) {
            if (!r->failed_call) try {
                    r->failed_call = error;
                    r->call = call;
                } catch (...) {  // out of memory: the call's own return value still told
                }
            return;
        }
}

}  // namespace

void NoteFailedCall(const RuntimeState& state, const Error& error, const char* call) noexcept {
    NoteIn([&](const RunRecord& r) { return r.state == &state; }, error, call);
}

void NoteRefusedCall(const ::Runtime* handle, const Error& error, const char* call) noexcept {
    NoteIn([&](const RunRecord& r) { return r.handle == handle; }, error, call);
}

RuntimeState::~RuntimeState() {
    graph.reset();  // waits for running tasks first: they use the memory below
    backing.reset();
    for (void* lib : libraries) ::dlclose(lib);  // no kernel of theirs runs any more
}

std::unique_ptr<RuntimeState> RuntimeState::OnHostMemory(uint64_t memory_size, const OrchestratorOptions& options) {
    if (options.heap_size == 0) throw Error(ErrorKind::InvalidArgument, "heap ring size must be > 0");
    // Whole granules (HeapRing::kAlignment; 0 on overflow, refused below).
    const uint64_t heap_size = HeapRing::RoundUp(options.heap_size);
    if (heap_size == 0 || heap_size > memory_size)
        throw Error(ErrorKind::InvalidArgument, "heap ring of " + std::to_string(options.heap_size) +
                                                    " bytes (whole 128-byte granules) does not fit host memory of " +
                                                    std::to_string(memory_size) + " bytes");
    TaskGraphOptions o = TaskGraphOptionsFrom(options);  // checks them before anything is taken
    const uint64_t rounded = (memory_size + 4095) / 4096 * 4096;
    void* memory = rounded < memory_size ? nullptr : std::aligned_alloc(4096, rounded);  // rounding may overflow
    if (!memory) throw Error(ErrorKind::OutOfMemory, "cannot allocate " + std::to_string(memory_size) + " bytes");
    std::shared_ptr<uint8_t> host(static_cast<uint8_t*>(memory), [](uint8_t* p) { std::free(p); });
    std::memset(host.get(), 0, rounded);
    auto rt = std::make_unique<RuntimeState>();
    o.memory = host.get();
    o.memory_size = memory_size;
    // At the end of the memory, on a granule; whole granules only.
    o.heap_offset = (memory_size - heap_size) / HeapRing::kAlignment * HeapRing::kAlignment;
    o.heap_size = (memory_size - o.heap_offset) / HeapRing::kAlignment * HeapRing::kAlignment;
    o.device = "host memory";
    rt->memory = host;
    rt->backing = std::move(host);
    rt->graph = std::make_unique<TaskGraph>(o);
    return rt;
}

void RuntimeState::Run(pto_orchestration_fn fn, uint64_t* args, const ProgressCallback& progress,
                       const Orchestrator::WaitSlices* slices) {
    if (!fn) throw Error(ErrorKind::InvalidArgument, "no orchestration function");
    // No scope of its own around the function: a scope holds its tasks'
    // implicit outputs until it ends, so a function with a loop of scopes
    // could never run more of them than the ring holds. Its scopes are its
    // own (the floor keeps it from ending the caller's); what it leaves
    // open is ended for it.
    const int32_t depth = graph->ScopeDepthOfThisThread();
    const int32_t floor = graph->SetScopeFloor(depth);
    RunRecord record{this, handle, tl_run, std::nullopt, {}};
    tl_run = &record;
    std::exception_ptr thrown;
    try {
        fn(handle, args);
    } catch (...) {  // a C++ orchestration function may throw: finish its tasks first
        thrown = std::current_exception();
    }
    tl_run = record.outer;
    graph->SetScopeFloor(floor);
    const int32_t left_open = graph->ScopeDepthOfThisThread() - depth;
    for (int32_t d = 0; d < left_open; ++d) {
        try {
            graph->ScopeEnd();
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::DeviceError) throw;  // task failures: WaitAll reports them
        }
    }
    std::exception_ptr waited;
    std::exception_ptr stopped;  // what the caller's `between` threw: the wait ended early
    try {
        if (slices) {
            while (!graph->WaitAllUntil(DeadlineAfter(slices->slice))) {
                try {
                    slices->between();
                } catch (...) {
                    stopped = std::current_exception();
                    break;
                }
            }
        }
        if (!stopped) graph->WaitAll(progress);
    } catch (...) {
        waited = std::current_exception();
    }
    // The function's own error first: it is why tasks are missing. Then the
    // caller's stop: it asked not to wait for the rest.
    if (thrown) std::rethrow_exception(thrown);
    if (stopped) std::rethrow_exception(stopped);
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
    {
        // Open for the runtime's life: a host kernel the function registers
        // points into the library (unloaded after the call, the kernel's
        // next task ran unmapped code: found probing from outside). One
        // reference per library: dlopen gives a loaded one's handle again.
        std::lock_guard lock(libraries_mu);
        if (std::find(libraries.begin(), libraries.end(), lib) == libraries.end()) libraries.push_back(lib);
        else ::dlclose(lib);
    }
    void* sym = ::dlsym(lib, symbol);
    if (!sym)
        throw Error(ErrorKind::NotFound, std::string("no orchestration function '") + symbol + "' in " + path);
    Run(reinterpret_cast<pto_orchestration_fn>(sym), args, progress);
}

void RuntimeState::CopyIn(void* buffer, const void* host, uint64_t size) {
    if (!host && size) throw Error(ErrorKind::InvalidArgument, "pto_copy_in: the host address is NULL");
    const uint64_t at = graph->DeviceAddress(buffer, size);
    graph->CheckNotAProgram(at, size, "pto_copy_in");
    // A chip call's copies go where its tasks may go: a kept In copy was
    // overwritten this way, and later runs computed with it (found
    // probing from outside).
    graph->CheckCopyConfined(buffer, size, true, "pto_copy_in");
    graph->WaitForTasksOver(buffer, size, true, "pto_copy_in");
    if (copy_in) copy_in(host, at, size);
    else CopyMemory(buffer, host, size);
}

void RuntimeState::CopyOut(void* host, const void* buffer, uint64_t size) {
    if (!host && size) throw Error(ErrorKind::InvalidArgument, "pto_copy_out: the host address is NULL");
    const uint64_t at = graph->DeviceAddress(buffer, size);
    graph->CheckCopyConfined(buffer, size, false, "pto_copy_out");
    graph->WaitForTasksOver(buffer, size, false, "pto_copy_out");
    if (copy_out) copy_out(host, at, size);
    else CopyMemory(host, buffer, size);
}

}  // namespace spyre::orchestration
