// SPDX-License-Identifier: Apache-2.0
// The control-block ring of a function: submission with one doorbell per
// batch (woken only when the device sleeps), and completion waits that poll,
// adapt or block on the completion interrupt (a futex word). All of that is
// the driver's one queue implementation (DeviceQueue, device_queue.hpp);
// this class adds what only the CB ring has: multi-slot CBs and their
// in-order records, the ring's reset and enable.
//
// Submit takes ring slots, not CBs: a COPY_INLINE CB is followed by its
// payload slots (spyre_cb.h, "Ring framing"). The ring counts both: slots
// (FreeSlots) and CBs (InFlight, one completion each).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "spyre/driver/device_queue.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/driver_options.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::driver {

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

// A valid TASK CB (contract 3.0; task queues only, spyre_task.h): the
// program at `program_addr` (size from its header) run with the `arg_count`
// addresses of the table at `args_addr`. The task's id is the CB's user_data,
// echoed in its completion.
inline spyre_cb TaskCb(uint64_t task_id, uint64_t program_addr, uint64_t args_addr, uint32_t arg_count) noexcept {
    spyre_cb cb = NopCb(task_id);
    cb.opcode = SPYRE_OP_TASK;
    cb.u.task.program_addr = program_addr;
    cb.u.task.args_addr = args_addr;
    cb.u.task.arg_count = arg_count;
    return cb;
}

// TASK `task` waiting (contract 3.1) for the tasks of its own queue at
// submission positions `positions` (at most SPYRE_TASK_MAX_AFTER, each
// before its own and less than an SQ lap back: TaskQueue::NextPosition when
// they were submitted). It starts once they have all ended, and completes
// with DEPENDENCY_FAILED, without running, if one did not succeed.
inline spyre_cb After(spyre_cb task, std::span<const uint32_t> positions) noexcept {
    task.u.task.after_count = uint32_t(positions.size());
    for (size_t i = 0; i < positions.size() && i < SPYRE_TASK_MAX_AFTER; ++i) task.u.task.after[i] = positions[i];
    return task;
}

// `cb` with SPYRE_CB_F_LINK set: if it fails, the next CB in the ring is
// cancelled (SPYRE_ERR_CANCELED) instead of run.
inline spyre_cb Linked(spyre_cb cb) noexcept {
    cb.flags |= SPYRE_CB_F_LINK;
    return cb;
}

// Puts `cb` (the first slot of a CB) in ring stream `stream` (contract 1.4,
// < SPYRE_RING_STREAMS): once a CB of the stream fails, the device cancels
// its later CBs wherever they sit in the ring. `restart` forgets an earlier
// failure of the stream first.
inline void PutInRingStream(spyre_cb& cb, uint32_t stream, bool restart) noexcept {
    cb.flags |= SPYRE_CB_F_STREAM | (restart ? SPYRE_CB_F_STREAM_RESTART : 0);
    cb.stream = stream;
}

// Appends a COPY_INLINE CB writing `bytes` to device address `dst_addr`,
// followed by its payload slots (SPYRE_CB_INLINE_SLOTS(bytes.size()) slots in
// all; padding past the data is zero). `flags` may hold SPYRE_CB_F_LINK.
// Throws InvalidArgument for an empty payload, more than
// SPYRE_CB_INLINE_MAX_BYTES (4032) bytes, or an undefined flag; `out` is then
// unchanged.
void AppendCopyInline(std::vector<spyre_cb>& out, uint64_t dst_addr, std::span<const uint8_t> bytes,
                      uint64_t user_data = 0, uint8_t flags = 0);
// The same as a new vector.
std::vector<spyre_cb> CopyInlineCbs(uint64_t dst_addr, std::span<const uint8_t> bytes, uint64_t user_data = 0);

struct Completion {
    uint64_t user_data = 0;
    uint64_t result = 0;
    uint64_t timestamp_ns = 0;  // device clock at completion
    uint32_t sq_pos = 0;        // ring position of the CB
    uint16_t status = 0;        // SPYRE_ERR_*
    uint8_t opcode = 0;
    bool ok() const noexcept { return status == SPYRE_ERR_NONE; }
};

// Not thread-safe: one thread submits and reaps (the scheduler above owns it).
class CommandRing {
public:
    // Reads the geometry the device publishes, resets the function (a clean
    // ring), validates it and enables the ring. The function must outlive
    // the ring. Busy while another CommandRing of this process holds the
    // function's ring.
    explicit CommandRing(Function& function);
    ~CommandRing();
    CommandRing(const CommandRing&) = delete;
    CommandRing& operator=(const CommandRing&) = delete;

    uint32_t sq_entries() const noexcept { return queue_.sq_entries(); }
    uint32_t cq_entries() const noexcept { return queue_.cq_entries(); }
    // Ring slots free for Submit: a CB holds its slots (itself and its
    // payload) until its completion is reaped.
    uint32_t FreeSlots() const noexcept { return spyre_ring_free(sq_head_, queue_.sq_tail(), queue_.sq_entries()); }
    // CBs submitted and not yet reaped (each gets one completion).
    uint32_t InFlight() const noexcept { return queue_.InFlight(); }

    // Copies the ring slots into the ring and rings the doorbell once.
    // `slots` is a sequence of CBs, each followed by its payload slots, framed
    // as the device frames them: a CB whose `slots` is 1..SPYRE_CB_MAX_SLOTS
    // takes that many; one with 0 or more than SPYRE_CB_MAX_SLOTS takes one
    // slot (the device answers it with BAD_SLOT_COUNT). Returns the ring
    // position of the first slot. Throws InvalidArgument if the slots do not
    // fit in FreeSlots() (reap first) or a CB's payload runs past the end of
    // `slots` (a CB and its payload are published together), DeviceLost if
    // the device is gone.
    uint32_t Submit(std::span<const spyre_cb> slots);

    // True when the oldest CB in flight has completed: a Reap would take it.
    // Reads one CQE's phase byte, nothing else.
    bool CompletionsReady() const noexcept { return queue_.CompletionsReady(); }
    // The position of the next completion to reap.
    uint32_t cq_head() const noexcept { return queue_.cq_head(); }
    // True when the CQE slot of completion position `cq_pos` holds that
    // position's record. Reads only the ring's geometry and one phase byte,
    // so any thread may ask while another submits and reaps: a watcher that
    // learnt `cq_pos` from the reaping thread can spin on it.
    bool CompletionPosted(uint32_t cq_pos) const noexcept { return queue_.CompletionPosted(cq_pos); }

    // Reaps completions that are ready, without waiting. Returns how many.
    // Each completion frees its CB's slots. Throws ProtocolError if the
    // device publishes completions that do not match the CBs in flight.
    size_t Reap(std::span<Completion> out);

    // Waits until at least min(min_count, out.size()) completions are ready
    // and reaps up to out.size(). Throws Timeout, DeviceLost (daemon died or
    // shut down: detected within ~100 ms) or DeviceError (ring halted).
    size_t Wait(std::span<Completion> out, size_t min_count, const WaitOptions& options = {});

    // Sleeps until a completion is ready, `*word` (a futex word private to
    // this process) no longer holds `expected`, or `timeout` passes —
    // whichever comes first — so one thread can wait for the device and for
    // its own producers at once (futex_waitv; short sleeps where the kernel
    // lacks it). Throws DeviceLost / DeviceError like Wait.
    void WaitCompletionOr(const std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout);

private:
    DeviceQueue queue_;
    uint32_t sq_head_ = 0;  // first slot not yet freed: the oldest CB in flight starts here
    // Slots of each CB in flight, by its completion position modulo
    // sq_entries (each CB holds at least one slot, so they never outnumber
    // the slots).
    std::vector<uint16_t> cb_slots_;
};

}  // namespace spyre::driver
SPYRE_API_END
