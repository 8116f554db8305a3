// SPDX-License-Identifier: Apache-2.0
// The C API (spyre/pto.h): every call catches what the runtime throws and
// turns it into a negative errno (or NULL) and a thread-local message.
#include <cerrno>
#include <new>
#include <string>
#include <type_traits>

#include "orchestration/runtime_handle.hpp"
#include "spyre/pto.h"

namespace {

thread_local std::string g_last_error;

int ErrnoOf(const spyre::Error& e) {
    if (e.context().sys_errno) return e.context().sys_errno;
    switch (e.kind()) {
        case spyre::ErrorKind::InvalidArgument:
        case spyre::ErrorKind::WrongDevice: return EINVAL;
        case spyre::ErrorKind::NotFound: return ENOENT;
        case spyre::ErrorKind::Busy: return EBUSY;
        case spyre::ErrorKind::PermissionDenied: return EACCES;
        case spyre::ErrorKind::Unsupported: return ENOTSUP;
        case spyre::ErrorKind::OutOfMemory: return ENOMEM;
        case spyre::ErrorKind::DeviceLost: return ENODEV;
        case spyre::ErrorKind::Timeout: return ETIMEDOUT;
        case spyre::ErrorKind::NotReady: return EAGAIN;
        default: return EIO;
    }
}

// Runs `body`; on an exception records its message and returns -errno.
template <typename Body>
int32_t Guard(Body&& body) noexcept {
    try {
        return body();
    } catch (const spyre::Error& e) {
        g_last_error = e.what();
        return -ErrnoOf(e);
    } catch (const std::bad_alloc&) {
        g_last_error = "out of host memory";
        return -ENOMEM;
    } catch (const std::exception& e) {
        g_last_error = e.what();
        return -EIO;
    } catch (...) {
        g_last_error = "unknown error";
        return -EIO;
    }
}

// Runs `body(*rt)` under Guard; -EINVAL without a runtime. A body that
// returns nothing gives 0.
template <typename Body>
int32_t OnRuntime(Runtime* rt, Body&& body) noexcept {
    if (!rt) {
        g_last_error = "no runtime (NULL)";
        return -EINVAL;
    }
    return Guard([&]() -> int32_t {
        if constexpr (std::is_void_v<decltype(body(*rt))>) {
            body(*rt);
            return 0;
        } else {
            return int32_t(body(*rt));
        }
    });
}

// The same for calls that return a pointer: NULL on error.
template <typename Body>
void* PointerFrom(Runtime* rt, Body&& body) noexcept {
    void* p = nullptr;
    OnRuntime(rt, [&](Runtime& r) { p = body(r); });
    return p;
}

spyre::orchestration::KernelEntry Kernel(int32_t kernel_id) {
    spyre::orchestration::KernelEntry k;
    k.kernel_id = kernel_id;
    return k;
}

}  // namespace

extern "C" {

const char* pto_last_error(void) { return g_last_error.c_str(); }

Runtime* pto_runtime_create(const char* function, int32_t task_ring_size, uint64_t heap_size) {
    Runtime* out = nullptr;
    Guard([&] {
        spyre::DeviceOptions options;
        if (function) options.function = function;
        auto device = std::make_unique<spyre::Device>(spyre::Device::Open(std::move(options)));
        auto rt = Runtime::OnDevice(*device, {.task_ring_size = task_ring_size, .heap_size = heap_size});
        rt->owned_device = std::move(device);
        out = rt.release();
        return 0;
    });
    return out;
}

Runtime* pto_runtime_create_host(uint64_t memory_size, int32_t task_ring_size, uint64_t heap_size) {
    Runtime* out = nullptr;
    Guard([&] {
        out = Runtime::OnHostMemory(memory_size, {.task_ring_size = task_ring_size, .heap_size = heap_size}).release();
        return 0;
    });
    return out;
}

void pto_runtime_destroy(Runtime* rt) {
    // The task graph's destructor waits for running tasks and does not throw.
    delete rt;
}

int32_t pto_register_host_kernel(Runtime* rt, int32_t kernel_id, pto_host_fn fn, void* user_data) {
    return OnRuntime(rt, [&](Runtime& r) {
        auto k = Kernel(kernel_id);
        k.host_fn = fn;
        k.user_data = user_data;
        r.graph->RegisterKernel(std::move(k));
    });
}

int32_t pto_register_device_kernel(Runtime* rt, int32_t kernel_id, uint64_t program_address) {
    return OnRuntime(rt, [&](Runtime& r) {
        auto k = Kernel(kernel_id);
        k.program_address = program_address;
        k.has_program = true;
        r.graph->RegisterKernel(std::move(k));
    });
}

void* pto_alloc(Runtime* rt, size_t size) {
    return PointerFrom(rt, [&](Runtime& r) { return r.graph->Alloc(size); });
}

int32_t pto_free(Runtime* rt, void* buffer) {
    return OnRuntime(rt, [&](Runtime& r) { r.graph->Free(buffer); });
}

int32_t pto_scope_begin(Runtime* rt) {
    return OnRuntime(rt, [](Runtime& r) { r.graph->ScopeBegin(); });
}

int32_t pto_submit_task(Runtime* rt, int32_t kernel_id, int32_t worker_type, TaskParam* params, int32_t num_params) {
    return OnRuntime(rt, [&](Runtime& r) {
        if (num_params < 0 || (num_params > 0 && !params))
            throw spyre::Error(spyre::ErrorKind::InvalidArgument,
                               "pto_submit_task: " + std::to_string(num_params) + " parameters at " +
                                   (params ? "a valid pointer" : "NULL"));
        return r.graph->Submit(kernel_id, worker_type, std::span<const TaskParam>(params, size_t(num_params)));
    });
}

int32_t pto_scope_end(Runtime* rt) {
    return OnRuntime(rt, [](Runtime& r) { r.graph->ScopeEnd(); });
}

int32_t pto_task_complete(Runtime* rt, int32_t task_id) {
    return OnRuntime(rt, [&](Runtime& r) { r.graph->Complete(task_id, 0); });
}

int32_t pto_task_fail(Runtime* rt, int32_t task_id, uint32_t error_code) {
    return OnRuntime(rt, [&](Runtime& r) {
        if (error_code == 0)
            throw spyre::Error(spyre::ErrorKind::InvalidArgument, "pto_task_fail needs a non-zero error code");
        r.graph->Complete(task_id, error_code);
    });
}

void* pto_task_output(Runtime* rt, int32_t task_id, int32_t index) {
    return PointerFrom(rt, [&](Runtime& r) { return r.graph->TaskOutput(task_id, index); });
}

int32_t pto_task_state(Runtime* rt, int32_t task_id) {
    return OnRuntime(rt, [&](Runtime& r) { return int32_t(r.graph->State(task_id)); });
}

int32_t pto_wait_all(Runtime* rt) {
    return OnRuntime(rt, [](Runtime& r) { r.graph->WaitAll(); });
}

int32_t pto_wait_all_progress(Runtime* rt, pto_progress_fn progress, void* user) {
    return OnRuntime(rt, [&](Runtime& r) {
        spyre::ProgressCallback cb;
        if (progress) cb = [progress, user](const spyre::ProgressInfo& p) { progress(p.done, p.total, user); };
        r.graph->WaitAll(cb);
    });
}

int32_t pto_device_address(Runtime* rt, const void* buffer, uint64_t* device_address) {
    return OnRuntime(rt, [&](Runtime& r) {
        const uint64_t a = r.graph->DeviceAddress(buffer);
        if (device_address) *device_address = a;
    });
}

void* pto_host_address(Runtime* rt, uint64_t device_address, uint64_t size) {
    return PointerFrom(rt, [&](Runtime& r) { return r.graph->HostAddress(device_address, size); });
}

int32_t pto_run(Runtime* rt, pto_orchestration_fn fn, uint64_t* args) {
    return OnRuntime(rt, [&](Runtime& r) { r.Run(fn, args); });
}

int32_t pto_run_library(Runtime* rt, const char* path, const char* symbol, uint64_t* args) {
    return OnRuntime(rt, [&](Runtime& r) { r.RunLibrary(path, symbol, args); });
}

}  // extern "C"
