// SPDX-License-Identifier: Apache-2.0
// The C API's Runtime* values: a slot index and a generation, never a
// pointer, so a handle of a destroyed runtime (or a made-up one) is refused
// instead of dereferenced. A call holds its slot (a count in the slot's
// word) for its whole length; destroying marks the slot closing, waits for
// the calls of other threads to leave, then bumps the generation.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

struct Runtime;  // opaque: never defined, only handles

namespace spyre::orchestration {

struct RuntimeState;

class HandleTable {
public:
    static constexpr uint32_t kSlots = 4096;  // runtimes alive at once in one process

    static HandleTable& Instance();

    // A handle for `state`; `c_owned`: pto_runtime_destroy may destroy it
    // (else a spyre::Orchestrator owns it). OutOfMemory when kSlots live.
    ::Runtime* Register(RuntimeState* state, bool c_owned);

    // A call on a handle: the runtime, which stays alive until the Call goes.
    class Call {
    public:
        Call(Call&& o) noexcept : slot_(o.slot_), state_(o.state_) { o.slot_ = nullptr; }
        Call& operator=(Call&&) = delete;
        ~Call();
        RuntimeState& operator*() const noexcept { return *state_; }
        RuntimeState* operator->() const noexcept { return state_; }

    private:
        friend class HandleTable;
        struct Slot;
        Call(Slot* slot, RuntimeState* state) : slot_(slot), state_(state) {}
        Slot* slot_;
        RuntimeState* state_;
    };
    // InvalidArgument for NULL, a destroyed handle or one never handed out.
    Call Enter(::Runtime* handle, const char* call);

    // Closes `handle` to new calls, waits for the calls of other threads on
    // it to leave and frees the slot; returns the runtime for the caller to
    // delete. `from_c`: pto_runtime_destroy (refused on an Orchestrator's
    // handle). Busy when the calling thread is inside a call on it.
    RuntimeState* Retire(::Runtime* handle, bool from_c);

private:
    HandleTable();
    Call::Slot& SlotOf(::Runtime* handle, const char* call, uint32_t* generation);

    Call::Slot* slots_;
    std::mutex mu_;                // the free list
    std::vector<uint32_t> free_;   // slots to reuse
    uint32_t next_unused_ = 0;     // slots never used yet start here
};

}  // namespace spyre::orchestration
