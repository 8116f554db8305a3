// SPDX-License-Identifier: Apache-2.0
// What the C APIs (pto_*, spyre_build_kernel) do with errors: no exception
// crosses them; a call that fails returns a negative errno (or NULL) and
// leaves its error, structured, in this thread's record (pto_last_error,
// pto_last_error_info).
#pragma once

#include <cerrno>
#include <cstdint>
#include <new>
#include <string>

#include "spyre/error.hpp"

namespace spyre::capi {

struct CallError {
    int32_t code = 0;  // the negative errno the call returned; 0: none
    int32_t kind = 0;  // ErrorKind + 1; 0: none
    int32_t task_id = -1;
    int32_t kernel_id = -1;
    uint32_t device_code = 0;
    std::string call;
    std::string message;
};

// This thread's last error.
CallError& LastError() noexcept;
void ClearLastError() noexcept;
// The errno a C caller gets for `e`.
int ErrnoOf(const Error& e) noexcept;
// Records `e` as the failure of `call`; returns its negative errno.
int32_t Record(const char* call, const Error& e) noexcept;
int32_t Record(const char* call, ErrorKind kind, const char* message, int sys_errno) noexcept;

// Runs `body` (returning an int32_t); turns any exception into a record
// and a negative errno.
template <typename Body>
int32_t Guard(const char* call, Body&& body) noexcept {
    try {
        return body();
    } catch (const Error& e) {
        return Record(call, e);
    } catch (const std::bad_alloc&) {
        return Record(call, ErrorKind::OutOfMemory, "out of host memory", ENOMEM);
    } catch (const std::exception& e) {
        return Record(call, ErrorKind::Internal, e.what(), EIO);
    } catch (...) {
        return Record(call, ErrorKind::Internal, "unknown error", EIO);
    }
}

}  // namespace spyre::capi
