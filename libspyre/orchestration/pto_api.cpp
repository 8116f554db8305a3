// SPDX-License-Identifier: Apache-2.0
// The C API (spyre/pto.h) over host memory and any runtime; the calls that
// need a device are runtime_device.cpp's. Every call goes through
// OnRuntime (c_calls.hpp).
#include <cerrno>
#include <memory>
#include <string>

#include "orchestration/c_calls.hpp"
#include "orchestration/cpu_worker.hpp"
#include "spyre/pto.h"

namespace {

using spyre::Error;
using spyre::ErrorKind;
using spyre::capi::Guard;
using spyre::orchestration::HandleTable;
using spyre::orchestration::KernelEntry;
using spyre::orchestration::OnRuntime;
using spyre::orchestration::PointerFrom;
using spyre::orchestration::RuntimeState;
using Kind = spyre::orchestration::CallKind;

static_assert(PTO_ERROR_INVALID_ARGUMENT == int(ErrorKind::InvalidArgument) + 1);
static_assert(PTO_ERROR_DEVICE_ERROR == int(ErrorKind::DeviceError) + 1);
static_assert(PTO_ERROR_TASK_FAILED == int(ErrorKind::TaskFailed) + 1);

KernelEntry Kernel(int32_t kernel_id) {
    KernelEntry k;
    k.kernel_id = kernel_id;
    return k;
}

}  // namespace

extern "C" {

const char* pto_last_error(void) { return spyre::capi::LastError().message.c_str(); }

int32_t pto_last_error_info(pto_error_info* info) {
    const spyre::capi::CallError& e = spyre::capi::LastError();
    if (info) {
        info->code = e.code;
        info->kind = e.kind;
        info->task_id = e.task_id;
        info->kernel_id = e.kernel_id;
        info->device_code = e.device_code;
        info->call = e.call.c_str();
        info->message = e.message.c_str();
    }
    return e.code;
}

void pto_clear_error(void) { spyre::capi::ClearLastError(); }

Runtime* pto_runtime_create_host(uint64_t memory_size, int32_t task_ring_size, uint64_t heap_size) {
    Runtime* out = nullptr;
    Guard("pto_runtime_create_host", [&] {
        out = spyre::orchestration::OwnedByC(RuntimeState::OnHostMemory(memory_size, {.task_ring_size = task_ring_size, .heap_size = heap_size}));
        return 0;
    });
    return out;
}

int32_t pto_runtime_destroy(Runtime* rt) {
    if (!rt) return 0;
    return Guard("pto_runtime_destroy", [&] {
        {
            const HandleTable::Call entered = HandleTable::Instance().Enter(rt, "pto_runtime_destroy");
            // The parent's: its threads are not in this process to be waited for.
            entered->CheckSameProcess("pto_runtime_destroy");
            // Its tasks are waited for, and a task waits for itself forever.
            if (spyre::orchestration::CpuWorker::RunningTaskOf() == entered->graph.get())
                throw Error(ErrorKind::Busy, "pto_runtime_destroy called from inside a task of the same runtime: it "
                                             "would wait for that task itself",
                            {.sys_errno = EBUSY});
        }
        const std::unique_ptr<RuntimeState> state(HandleTable::Instance().Retire(rt, true));
        const int64_t abandoned = state->graph->WaitForRunningTasks();
        if (abandoned != 0)  // destroyed all the same: the caller has no handle to try again with
            throw Error(ErrorKind::Busy,
                        "pto_runtime_destroy: " + std::to_string(abandoned) +
                            " task(s) never finished: they are, or wait for, EXTERNAL tasks that nobody completed "
                            "(pto_task_complete or pto_task_fail); the runtime was destroyed with them abandoned",
                        {.sys_errno = EDEADLK});
        return 0;
    });
}

int32_t pto_register_host_kernel(Runtime* rt, int32_t kernel_id, pto_host_fn fn, void* user_data) {
    return OnRuntime("pto_register_host_kernel", rt, Kind::Changes, [&](RuntimeState& r) {
        auto k = Kernel(kernel_id);
        k.host_fn = fn;
        k.user_data = user_data;
        r.graph->RegisterKernel(std::move(k));
    });
}

int32_t pto_register_device_kernel(Runtime* rt, int32_t kernel_id, uint64_t program_address) {
    // The same checks as Orchestrator::RegisterDeviceKernel: the address,
    // and the program's argument slots for every later submission.
    return OnRuntime("pto_register_device_kernel", rt, Kind::Changes,
                     [&](RuntimeState& r) { r.graph->RegisterDeviceKernel(kernel_id, program_address); });
}

void* pto_alloc(Runtime* rt, size_t size) {
    return PointerFrom("pto_alloc", rt, Kind::Changes, [&](RuntimeState& r) { return r.graph->Alloc(size); });
}

int32_t pto_free(Runtime* rt, void* buffer) {
    return OnRuntime("pto_free", rt, Kind::Changes, [&](RuntimeState& r) { r.graph->Free(buffer); });
}

int32_t pto_scope_begin(Runtime* rt) {
    return OnRuntime("pto_scope_begin", rt, Kind::Changes, [](RuntimeState& r) { r.graph->ScopeBegin(); });
}

int32_t pto_submit_task(Runtime* rt, int32_t kernel_id, int32_t worker_type, TaskParam* params, int32_t num_params) {
    return OnRuntime("pto_submit_task", rt, Kind::Changes, [&](RuntimeState& r) {
        if (num_params < 0 || (num_params > 0 && !params))
            throw Error(ErrorKind::InvalidArgument, "pto_submit_task: " + std::to_string(num_params) +
                                                        " parameters at " + (params ? "a valid pointer" : "NULL"));
        return r.graph->Submit(kernel_id, worker_type, std::span<const TaskParam>(params, size_t(num_params)));
    });
}

int32_t pto_scope_end(Runtime* rt) {
    return OnRuntime("pto_scope_end", rt, Kind::Changes, [](RuntimeState& r) { r.graph->ScopeEnd(); });
}

int32_t pto_task_complete(Runtime* rt, int32_t task_id) {
    return OnRuntime("pto_task_complete", rt, Kind::Changes, [&](RuntimeState& r) { r.graph->Complete(task_id, 0); });
}

int32_t pto_task_fail(Runtime* rt, int32_t task_id, uint32_t error_code) {
    return OnRuntime("pto_task_fail", rt, Kind::Changes, [&](RuntimeState& r) {
        if (error_code == 0) throw Error(ErrorKind::InvalidArgument, "pto_task_fail needs a non-zero error code");
        r.graph->Complete(task_id, error_code);
    });
}

void* pto_task_output(Runtime* rt, int32_t task_id, int32_t index) {
    return PointerFrom("pto_task_output", rt, Kind::Query,
                       [&](RuntimeState& r) { return r.graph->TaskOutput(task_id, index); });
}

int32_t pto_task_state(Runtime* rt, int32_t task_id) {
    return OnRuntime("pto_task_state", rt, Kind::Query, [&](RuntimeState& r) { return int32_t(r.graph->State(task_id)); });
}

int32_t pto_wait_all(Runtime* rt) {
    return OnRuntime("pto_wait_all", rt, Kind::Query, [](RuntimeState& r) { r.graph->WaitAll(); });
}

int32_t pto_wait_all_progress(Runtime* rt, pto_progress_fn progress, void* user) {
    return OnRuntime("pto_wait_all_progress", rt, Kind::Query, [&](RuntimeState& r) {
        spyre::ProgressCallback cb;
        if (progress) cb = [progress, user](const spyre::ProgressInfo& p) { progress(p.done, p.total, user); };
        r.graph->WaitAll(cb);
    });
}

int32_t pto_device_address(Runtime* rt, const void* buffer, uint64_t* device_address) {
    return OnRuntime("pto_device_address", rt, Kind::Query, [&](RuntimeState& r) {
        if (!device_address)
            throw Error(ErrorKind::InvalidArgument, "pto_device_address: device_address is NULL: nowhere to put the address");
        *device_address = r.graph->DeviceAddress(buffer);
    });
}

void* pto_host_address(Runtime* rt, uint64_t device_address, uint64_t size) {
    return PointerFrom("pto_host_address", rt, Kind::Query,
                       [&](RuntimeState& r) { return r.graph->HostAddress(device_address, size); });
}

int32_t pto_copy_in(Runtime* rt, void* buffer, const void* host, uint64_t size) {
    return OnRuntime("pto_copy_in", rt, Kind::Query, [&](RuntimeState& r) { r.CopyIn(buffer, host, size); });
}

int32_t pto_copy_out(Runtime* rt, void* host, const void* buffer, uint64_t size) {
    return OnRuntime("pto_copy_out", rt, Kind::Query, [&](RuntimeState& r) { r.CopyOut(host, buffer, size); });
}

int32_t pto_run(Runtime* rt, pto_orchestration_fn fn, uint64_t* args) {
    return OnRuntime("pto_run", rt, Kind::Changes, [&](RuntimeState& r) { r.Run(fn, args); });
}

int32_t pto_run_library(Runtime* rt, const char* path, const char* symbol, uint64_t* args) {
    return OnRuntime("pto_run_library", rt, Kind::Changes, [&](RuntimeState& r) { r.RunLibrary(path, symbol, args); });
}

}  // extern "C"
