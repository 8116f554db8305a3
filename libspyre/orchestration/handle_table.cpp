// SPDX-License-Identifier: Apache-2.0
#include "orchestration/handle_table.hpp"

#include <algorithm>
#include <string>

#include "orchestration/runtime_handle.hpp"
#include "spyre/common/eventcount.hpp"
#include "spyre/common/hex.hpp"
#include "spyre/error.hpp"

namespace spyre::orchestration {

struct HandleTable::Call::Slot {
    // generation (high 32 bits) | closing (bit 31) | calls in flight (low 31)
    std::atomic<uint64_t> word{0};
    EventCount left;  // a call left a closing slot
    std::atomic<RuntimeState*> state{nullptr};
    bool c_owned = false;
};

namespace {

constexpr uint64_t kClosing = 1ull << 31;
constexpr uint64_t kCalls = kClosing - 1;

uint32_t GenerationOf(uint64_t word) { return uint32_t(word >> 32); }

// The slots of the calls this thread is inside, with each call's name,
// innermost last: Retire must not wait for the caller's own calls, and
// names the one it is called from.
struct Inside {
    const void* slot;
    const char* call;
};
thread_local std::vector<Inside> tl_inside;

// What of `call` runs the caller's code, for Retire's refusal.
std::string RunsCallerCode(const char* call) {
    const std::string c = call;
    if (c == "pto_run" || c == "pto_run_library") return "its orchestration function";
    if (c == "pto_wait_all_progress") return "its progress callback";
    return "a function it calls back";
}

[[noreturn]] void Stale(::Runtime* handle, const char* call) {
    throw Error(ErrorKind::InvalidArgument,
                std::string(call) + ": runtime handle " + Hex(uint64_t(reinterpret_cast<uintptr_t>(handle))) +
                    " is not a live runtime (destroyed, or never created)");
}

}  // namespace

HandleTable& HandleTable::Instance() {
    // Never destroyed: calls on handles may come from threads that outlive
    // static destruction.
    static HandleTable* table = new HandleTable;
    return *table;
}

HandleTable::HandleTable() : slots_(new Call::Slot[kSlots]) {}

::Runtime* HandleTable::Register(RuntimeState* state, bool c_owned) {
    std::lock_guard lock(mu_);
    uint32_t index;
    if (!free_.empty()) {
        index = free_.back();
        free_.pop_back();
    } else if (next_unused_ < kSlots) {
        index = next_unused_++;
        slots_[index].word.store(uint64_t(1) << 32, std::memory_order_relaxed);  // generation 1
    } else {
        throw Error(ErrorKind::OutOfMemory,
                    "too many orchestration runtimes alive at once (" + std::to_string(kSlots) + ")");
    }
    Call::Slot& s = slots_[index];
    s.c_owned = c_owned;
    s.state.store(state, std::memory_order_release);
    const uint64_t generation = GenerationOf(s.word.load(std::memory_order_relaxed));
    return reinterpret_cast<::Runtime*>(uintptr_t((generation << 32) | (index + 1)));
}

HandleTable::Call::Slot& HandleTable::SlotOf(::Runtime* handle, const char* call, uint32_t* generation) {
    if (!handle) throw Error(ErrorKind::InvalidArgument, std::string(call) + ": no runtime (NULL)");
    const auto h = uint64_t(reinterpret_cast<uintptr_t>(handle));
    const uint64_t index = (h & 0xffffffffu) - 1;
    *generation = GenerationOf(h);
    if (index >= kSlots || *generation == 0) Stale(handle, call);
    return slots_[index];
}

HandleTable::Call HandleTable::Enter(::Runtime* handle, const char* call) {
    uint32_t generation;
    Call::Slot& s = SlotOf(handle, call, &generation);
    uint64_t w = s.word.load(std::memory_order_acquire);
    do {
        if (GenerationOf(w) != generation) Stale(handle, call);
        if (w & kClosing)
            throw Error(ErrorKind::InvalidArgument,
                        std::string(call) + ": runtime handle " + Hex(uint64_t(reinterpret_cast<uintptr_t>(handle))) +
                            " is being destroyed (its destroy waits for the calls already in it)");
    } while (!s.word.compare_exchange_weak(w, w + 1, std::memory_order_acquire, std::memory_order_acquire));
    RuntimeState* state = s.state.load(std::memory_order_acquire);
    tl_inside.push_back({&s, call});
    Call c(&s, state);
    if (!state) Stale(handle, call);  // a made-up handle of a free slot (c leaves it)
    return c;
}

HandleTable::Call::~Call() {
    if (!slot_) return;
    if (!tl_inside.empty()) tl_inside.pop_back();  // calls of one thread nest
    const uint64_t w = slot_->word.fetch_sub(1, std::memory_order_release) - 1;
    if (w & kClosing) slot_->left.Notify();  // the slot's memory is never freed: a late wake is harmless
}

RuntimeState* HandleTable::Retire(::Runtime* handle, bool from_c) {
    const char* call = from_c ? "pto_runtime_destroy" : "Orchestrator::~Orchestrator";
    uint32_t generation;
    Call::Slot& s = SlotOf(handle, call, &generation);
    uint64_t w = s.word.load(std::memory_order_acquire);
    if (GenerationOf(w) != generation || (w & kClosing)) Stale(handle, call);
    if (from_c && !s.c_owned)
        throw Error(ErrorKind::InvalidArgument,
                    "pto_runtime_destroy: this runtime belongs to a spyre::Orchestrator; destroy that object instead");
    const auto own = uint64_t(
        std::count_if(tl_inside.begin(), tl_inside.end(), [&](const Inside& i) { return i.slot == &s; }));
    if (own && from_c) {
        const auto inner = std::find_if(tl_inside.rbegin(), tl_inside.rend(), [&](const Inside& i) { return i.slot == &s; });
        throw Error(ErrorKind::Busy, std::string("pto_runtime_destroy called from inside ") + inner->call +
                                         " on the same runtime (" + RunsCallerCode(inner->call) +
                                         "): it would wait for itself",
                    {.sys_errno = EBUSY});
    }
    do {
        if (GenerationOf(w) != generation || (w & kClosing)) Stale(handle, call);  // another thread destroys it
    } while (!s.word.compare_exchange_weak(w, w | kClosing, std::memory_order_acq_rel, std::memory_order_acquire));
    w |= kClosing;
    // A call of another thread waiting for room may wait for this thread
    // (its pto_free, its next task): it fails instead of holding us here.
    if (RuntimeState* state = s.state.load(std::memory_order_acquire); state && state->graph)
        state->graph->Closing();
    while ((w & kCalls) > own)  // calls of other threads finish what they do (no bound: 1 s is how often it looks)
        s.left.SleepUnless([&] { return ((w = s.word.load(std::memory_order_acquire)) & kCalls) <= own; },
                           std::chrono::seconds(1));
    RuntimeState* state = s.state.exchange(nullptr, std::memory_order_acq_rel);
    const uint32_t next = generation + 1 == 0 ? 1 : generation + 1;
    s.word.store((uint64_t(next) << 32) | own, std::memory_order_release);
    std::lock_guard lock(mu_);
    free_.push_back(uint32_t(&s - slots_));
    return state;
}

}  // namespace spyre::orchestration
