// SPDX-License-Identifier: Apache-2.0
#include "c_api_error.hpp"

namespace spyre::capi {

namespace {
thread_local CallError tl_last;
}  // namespace

CallError& LastError() noexcept { return tl_last; }

void ClearLastError() noexcept {
    tl_last.code = 0;
    tl_last.kind = 0;
    tl_last.task_id = tl_last.kernel_id = -1;
    tl_last.device_code = 0;
    tl_last.call.clear();
    tl_last.message.clear();
}

int ErrnoOf(const Error& e) noexcept {
    if (e.context().sys_errno) return e.context().sys_errno;
    switch (e.kind()) {
        case ErrorKind::InvalidArgument:
        case ErrorKind::WrongDevice: return EINVAL;
        case ErrorKind::NotFound: return ENOENT;
        case ErrorKind::Busy: return EBUSY;
        case ErrorKind::PermissionDenied: return EACCES;
        case ErrorKind::Unsupported: return ENOTSUP;
        case ErrorKind::OutOfMemory: return ENOMEM;
        case ErrorKind::DeviceLost: return ENODEV;
        case ErrorKind::Timeout: return ETIMEDOUT;
        case ErrorKind::NotReady: return EAGAIN;
        default: return EIO;
    }
}

int32_t Record(const char* call, const Error& e) noexcept {
    const int32_t code = -ErrnoOf(e);
    try {
        ClearLastError();
        tl_last.code = code;
        tl_last.kind = int32_t(e.kind()) + 1;
        const ErrorContext& c = e.context();
        // A failed task's id (a host kernel that threw is TaskFailed, with its kernel named).
        const bool task = e.kind() == ErrorKind::DeviceError ||
                          ((e.kind() == ErrorKind::TaskFailed || e.kind() == ErrorKind::DeviceLost) && c.kernel_id);
        if (task && c.op_index) tl_last.task_id = int32_t(*c.op_index);
        if (c.kernel_id) tl_last.kernel_id = int32_t(*c.kernel_id);
        tl_last.device_code = c.device_code;
        tl_last.call = call;
        tl_last.message = e.what();
    } catch (...) {  // out of memory for the strings: the code still tells
    }
    return code;
}

int32_t Record(const char* call, ErrorKind kind, const char* message, int sys_errno) noexcept {
    try {
        return Record(call, Error(kind, message, {.sys_errno = sys_errno}));
    } catch (...) {
        tl_last.code = -sys_errno;
        tl_last.kind = int32_t(kind) + 1;
        return -sys_errno;
    }
}

}  // namespace spyre::capi
