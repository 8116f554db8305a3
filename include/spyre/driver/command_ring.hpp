// SPDX-License-Identifier: Apache-2.0
// The control-block ring of a function: submission with one doorbell per
// batch (woken only when the device sleeps), and completion waits that poll,
// adapt or block on the completion interrupt (a futex word).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include "spyre/driver/function.hpp"

namespace spyre::driver {

enum class WaitMode {
    Poll,      // spin on the completion ring: lowest latency, burns a core
    Adaptive,  // spin for a short budget, then block
    Blocking,  // sleep on the completion interrupt right away
};

const char* ToString(WaitMode mode) noexcept;

// A valid NOP control block carrying user_data.
inline spyre_cb NopCb(uint64_t user_data) noexcept {
    spyre_cb cb{};
    cb.opcode = SPYRE_OP_NOP;
    cb.slots = 1;
    cb.user_data = user_data;
    return cb;
}

// Valid control blocks of the other opcodes (spyre_cb.h gives the fields).
inline spyre_cb LaunchCb(uint64_t program_addr, uint64_t program_size, uint64_t user_data = 0) noexcept {
    spyre_cb cb = NopCb(user_data);
    cb.opcode = SPYRE_OP_LAUNCH;
    cb.u.launch.program_addr = program_addr;
    cb.u.launch.program_size = program_size;
    return cb;
}
inline spyre_cb CorrectCb(uint64_t target_addr, uint64_t input_addr, uint64_t entry_count, uint64_t user_data = 0) noexcept {
    spyre_cb cb = NopCb(user_data);
    cb.opcode = SPYRE_OP_CORRECT;
    cb.u.args[0] = target_addr;
    cb.u.args[1] = input_addr;
    cb.u.args[2] = entry_count;
    return cb;
}
inline spyre_cb CopyCb(uint64_t src_addr, uint64_t dst_addr, uint64_t size, uint64_t user_data = 0) noexcept {
    spyre_cb cb = NopCb(user_data);
    cb.opcode = SPYRE_OP_COPY;
    cb.u.copy.src_addr = src_addr;
    cb.u.copy.dst_addr = dst_addr;
    cb.u.copy.size = size;
    return cb;
}
inline spyre_cb SemWriteCb(uint64_t addr, uint64_t value, uint64_t user_data = 0) noexcept {
    spyre_cb cb = NopCb(user_data);
    cb.opcode = SPYRE_OP_SEM_WRITE;
    cb.u.sem.addr = addr;
    cb.u.sem.value = value;
    return cb;
}
inline spyre_cb SemWaitCb(uint64_t addr, uint64_t value, uint64_t timeout_ns, uint64_t user_data = 0) noexcept {
    spyre_cb cb = SemWriteCb(addr, value, user_data);
    cb.opcode = SPYRE_OP_SEM_WAIT;
    cb.u.sem.timeout_ns = timeout_ns;
    return cb;
}

struct Completion {
    uint64_t user_data = 0;
    uint64_t result = 0;
    uint64_t timestamp_ns = 0;  // device clock at completion
    uint32_t sq_pos = 0;        // ring position of the CB
    uint16_t status = 0;        // SPYRE_ERR_*
    uint8_t opcode = 0;
    bool ok() const noexcept { return status == SPYRE_ERR_NONE; }
};

struct WaitOptions {
    WaitMode mode = WaitMode::Adaptive;
    std::chrono::nanoseconds spin{std::chrono::microseconds(20)};  // Adaptive: spin budget
    std::chrono::nanoseconds timeout{std::chrono::seconds(30)};
};

// Not thread-safe: one thread submits and reaps (the scheduler above owns it).
class CommandRing {
public:
    // Reads the geometry the device publishes, validates it and enables the
    // ring. The function must outlive the ring.
    explicit CommandRing(Function& function);
    ~CommandRing();
    CommandRing(const CommandRing&) = delete;
    CommandRing& operator=(const CommandRing&) = delete;

    uint32_t sq_entries() const noexcept { return sq_entries_; }
    uint32_t cq_entries() const noexcept { return cq_entries_; }
    // Slots free for Submit: CBs submitted and not yet reaped hold a slot.
    uint32_t FreeSlots() const noexcept { return spyre_ring_free(cq_head_, sq_tail_, sq_entries_); }
    // CBs submitted and not yet reaped.
    uint32_t InFlight() const noexcept { return spyre_ring_used(cq_head_, sq_tail_); }

    // Copies the CBs into the ring and rings the doorbell once. Returns the
    // ring position of the first CB. Throws InvalidArgument if they do not
    // fit in FreeSlots() (reap first), DeviceLost if the device is gone.
    uint32_t Submit(std::span<const spyre_cb> cbs);

    // Reaps completions that are ready, without waiting. Returns how many.
    size_t Reap(std::span<Completion> out);

    // Waits until at least min(min_count, out.size()) completions are ready
    // and reaps up to out.size(). Throws Timeout, DeviceLost (daemon died or
    // shut down: detected within ~100 ms) or DeviceError (ring halted).
    size_t Wait(std::span<Completion> out, size_t min_count, const WaitOptions& options = {});

private:
    bool CompletionsReady() const noexcept;
    void CheckHealth() const;
    void WaitBlocking(std::chrono::steady_clock::time_point deadline);

    Function& fn_;
    spyre_doorbell_page* db_ = nullptr;
    spyre_cb* sq_ = nullptr;
    const spyre_cqe* cq_ = nullptr;
    uint32_t sq_entries_ = 0;
    uint32_t cq_entries_ = 0;
    uint32_t sq_tail_ = 0;   // our producer position
    uint32_t cq_head_ = 0;   // our consumer position
};

}  // namespace spyre::driver
