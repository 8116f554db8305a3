// SPDX-License-Identifier: Apache-2.0
// How a pto_* call reaches its runtime: through the handle table (a stale
// handle is refused, and the runtime cannot be destroyed under the call),
// with what it throws turned into a negative errno (or NULL) and this
// thread's last error (c_api_error.hpp).
#pragma once

#include <type_traits>

#include "c_api_error.hpp"
#include "orchestration/handle_table.hpp"
#include "orchestration/runtime_handle.hpp"

namespace spyre::orchestration {

// Whether a failed call changed nothing the function meant to do (a query)
// or left its work incomplete: pto_run reports the first failure of the
// latter kind even when the function ignored it.
enum class CallKind : bool { Query, Changes };

// Runs `body(state)` on the runtime behind `rt`: 0 for a body that returns
// nothing, its value otherwise; a negative errno on error.
template <typename Body>
int32_t OnRuntime(const char* call, ::Runtime* rt, CallKind kind, Body&& body) noexcept {
    return capi::Guard(call, [&]() -> int32_t {
        const HandleTable::Call entered = [&] {
            try {
                return HandleTable::Instance().Enter(rt, call);
            } catch (const Error& e) {
                if (kind == CallKind::Changes) NoteRefusedCall(rt, e, call);
                throw;
            }
        }();
        entered->CheckSameProcess(call);
        try {
            if constexpr (std::is_void_v<decltype(body(*entered))>) {
                body(*entered);
                return 0;
            } else {
                return int32_t(body(*entered));
            }
        } catch (const Error& e) {
            if (kind == CallKind::Changes) NoteFailedCall(*entered, e, call);
            throw;
        }
    });
}

// The same for calls that return a pointer: NULL on error.
template <typename Body>
void* PointerFrom(const char* call, ::Runtime* rt, CallKind kind, Body&& body) noexcept {
    void* p = nullptr;
    OnRuntime(call, rt, kind, [&](RuntimeState& s) { p = body(s); });
    return p;
}

// A runtime the C caller owns (pto_runtime_destroy frees it).
inline ::Runtime* OwnedByC(std::unique_ptr<RuntimeState> state) {
    state->handle = HandleTable::Instance().Register(state.get(), true);
    return state.release()->handle;
}

}  // namespace spyre::orchestration
