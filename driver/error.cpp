// SPDX-License-Identifier: Apache-2.0
#include "spyre/error.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "spyre/common/hex.hpp"
#include "spyre/uapi/spyre_errors.h"

namespace spyre {

const char* ToString(ErrorKind kind) noexcept {
    switch (kind) {
    case ErrorKind::InvalidArgument: return "invalid argument";
    case ErrorKind::NotFound: return "not found";
    case ErrorKind::Busy: return "busy";
    case ErrorKind::PermissionDenied: return "permission denied";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::DeviceError: return "device error";
    case ErrorKind::DeviceLost: return "device lost";
    case ErrorKind::Timeout: return "timeout";
    case ErrorKind::NotReady: return "not ready";
    case ErrorKind::OutOfMemory: return "out of memory";
    case ErrorKind::IoError: return "I/O error";
    case ErrorKind::ProtocolError: return "protocol error";
    case ErrorKind::Internal: return "internal error";
    case ErrorKind::WrongDevice: return "wrong device";
    case ErrorKind::TaskFailed: return "task failed";
    }
    return "error";
}

namespace {

std::string Describe(ErrorKind kind, const std::string& message, const ErrorContext& c) {
    std::string out = std::string("spyre: ") + ToString(kind) + ": " + message;
    std::string ctx;
    auto add = [&ctx](const std::string& part) { ctx += (ctx.empty() ? "" : ", ") + part; };
    if (!c.device.empty()) add("device " + c.device);
    if (!c.reg.empty()) add("register " + c.reg);
    if (c.offset) add("offset " + Hex(*c.offset));
    if (c.address) add("address " + Hex(*c.address));
    if (c.stream) add("stream " + std::to_string(*c.stream));
    if (c.op_index) add("op " + std::to_string(*c.op_index));
    if (c.kernel_id) add("kernel " + std::to_string(*c.kernel_id));
    if (c.device_code && c.host_kernel_code) add("host code " + std::to_string(c.device_code));
    else if (c.device_code) add(std::string("device code ") + spyre_error_name(c.device_code) + " (" + Hex(c.device_code) + ")");
    if (c.sys_errno) add(std::string("errno ") + std::to_string(c.sys_errno) + " " + std::strerror(c.sys_errno));
    if (!ctx.empty()) out += " [" + ctx + "]";
    return out;
}

ErrorKind KindFromErrno(int e) {
    switch (e) {
    case ENOENT: case ENODEV: case ENXIO: return ErrorKind::NotFound;
    case EBUSY: case EAGAIN: return ErrorKind::Busy;
    case EACCES: case EPERM: return ErrorKind::PermissionDenied;
    case EINVAL: case ERANGE: return ErrorKind::InvalidArgument;
    case ENOTTY: case EOPNOTSUPP: case ENOSYS: return ErrorKind::Unsupported;
    case ENOMEM: case ENOSPC: return ErrorKind::OutOfMemory;
    case ENOTCONN: case ECONNABORTED: case ESRCH: return ErrorKind::DeviceLost;
    case ETIMEDOUT: return ErrorKind::Timeout;
    default: return ErrorKind::IoError;
    }
}

}  // namespace

Error::Error(ErrorKind kind, const std::string& message, ErrorContext context)
    : std::runtime_error(Describe(kind, message, context)), kind_(kind), message_(message), context_(std::move(context)) {}

Error SystemError(const std::string& what, ErrorContext context) {
    int e = errno;
    context.sys_errno = e;
    return Error(KindFromErrno(e), what, std::move(context));
}

}  // namespace spyre
