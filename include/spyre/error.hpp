// SPDX-License-Identifier: Apache-2.0
// The one error family of spyre: every failure is a spyre::Error with a kind
// (what went wrong, for code to branch on) and a context (where, for people).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

enum class ErrorKind {
    InvalidArgument,   // the caller passed something malformed
    NotFound,          // no such device, node, register or file
    Busy,              // the resource is claimed by someone else
    PermissionDenied,  // the OS refused access
    Unsupported,       // valid request the device or host cannot do
    DeviceError,       // the device reported a fault (device_code says which)
    DeviceLost,        // the device (or the daemon serving it) went away
    Timeout,           // a bounded wait ran out
    NotReady,          // asked for a result that is not there yet (an event still pending)
    OutOfMemory,       // host or device memory exhausted
    IoError,           // a system call failed unexpectedly
    ProtocolError,     // the device does not speak this contract (magic, version, geometry)
    Internal,          // a bug in spyre
    WrongDevice,       // objects of different devices (functions) mixed in one call
    TaskFailed,        // user code run as a task (a SubWorker, a host function) raised
};

const char* ToString(ErrorKind kind) noexcept;

struct ErrorContext {
    std::string device;                 // PCI address or node path
    std::string reg;                    // register name
    std::optional<uint64_t> offset;     // register or region offset
    std::optional<uint64_t> address;    // device address
    std::optional<int> stream;          // stream index
    std::optional<uint64_t> op_index;   // index of the failing operation (orchestration: the task id)
    std::optional<int64_t> kernel_id;   // orchestration: the failing task's kernel
    int sys_errno = 0;                  // errno of a failed system call
    uint32_t device_code = 0;           // SPYRE_ERR_* reported by the device
    // device_code is the host's own code, printed as a number, not a
    // SPYRE_ERR_* from the device: what a host kernel returned, or the code
    // an EXTERNAL task was failed with (pto_task_fail).
    bool host_kernel_code = false;
};

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, const std::string& message, ErrorContext context = {});

    ErrorKind kind() const noexcept { return kind_; }
    const ErrorContext& context() const noexcept { return context_; }
    // The message without the kind and context decoration of what().
    const std::string& message() const noexcept { return message_; }

private:
    ErrorKind kind_;
    std::string message_;
    ErrorContext context_;
};

// Builds an Error for a failed system call from the current errno, with a
// kind derived from it (ENOENT -> NotFound, EBUSY -> Busy, ...).
Error SystemError(const std::string& what, ErrorContext context = {});

}  // namespace spyre
SPYRE_API_END
