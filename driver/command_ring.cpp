// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/command_ring.hpp"

#include <algorithm>
#include <cstring>

#include "completion_wait.hpp"
#include "device_queue_submit.hpp"
#include "device_checks.hpp"
#include "spyre/common/hex.hpp"
#include "spyre/error.hpp"

namespace spyre::driver {

void AppendCopyInline(std::vector<spyre_cb>& out, uint64_t dst_addr, std::span<const uint8_t> bytes,
                      uint64_t user_data, uint8_t flags) {
    if (bytes.empty() || bytes.size() > SPYRE_CB_INLINE_MAX_BYTES)
        throw Error(ErrorKind::InvalidArgument,
                    "an inline copy carries 1 to " + std::to_string(SPYRE_CB_INLINE_MAX_BYTES) + " bytes, not " +
                        std::to_string(bytes.size()),
                    ErrorContext{.address = dst_addr});
    // A ring stream needs its number too: PutInRingStream sets both.
    if (flags & ~SPYRE_CB_F_LINK)
        throw Error(ErrorKind::InvalidArgument, "CB flags " + Hex(flags) + " set reserved bits (defined here: LINK " +
                                                    Hex(SPYRE_CB_F_LINK) + ")",
                    ErrorContext{.address = dst_addr});
    const uint32_t slots = SPYRE_CB_INLINE_SLOTS(bytes.size());
    const size_t at = out.size();
    out.resize(at + slots);  // value-initialised: reserved words and payload padding are zero
    spyre_cb& cb = out[at];
    cb.opcode = SPYRE_OP_COPY_INLINE;
    cb.flags = flags;
    cb.slots = uint16_t(slots);
    cb.user_data = user_data;
    cb.u.copy.dst_addr = dst_addr;
    cb.u.copy.size = bytes.size();
    std::memcpy(static_cast<void*>(&out[at + 1]), bytes.data(), bytes.size());
}

std::vector<spyre_cb> CopyInlineCbs(uint64_t dst_addr, std::span<const uint8_t> bytes, uint64_t user_data) {
    std::vector<spyre_cb> out;
    AppendCopyInline(out, dst_addr, bytes, user_data);
    return out;
}

const char* ToString(WaitMode mode) noexcept {
    switch (mode) {
    case WaitMode::Poll: return "poll";
    case WaitMode::Adaptive: return "adaptive";
    case WaitMode::Blocking: return "blocking";
    }
    return "?";
}

CommandRing::CommandRing(Function& function) : queue_(function, QueueId::Ring()) {
    Function& fn = queue_.function();
    // Held first: the reset below would empty another CommandRing's ring
    // under it (a second one was accepted, and the first failed DeviceLost).
    if (!fn.HoldCommandRing())
        throw Error(ErrorKind::Busy, "the CB ring is held by another CommandRing of this process", queue_.Context());
    try {
        // Start from a clean ring whatever the previous owner left behind.
        fn.Reset();
        queue_.Attach();
        sq_head_ = queue_.sq_tail();
        cb_slots_.assign(queue_.sq_entries(), 0);
        // Completions are polled by their phase (spyre_cb.h, "CQE phase").
        if (!(fn.Read32(SPYRE_REG_CAPS) & SPYRE_CAP_CQE_PHASE))
            throw Error(ErrorKind::DeviceError,
                        "the device does not write CQE phases (contract 1.3), which this driver polls",
                        ErrorContext{.device = fn.pci_address(), .reg = "CAPS", .offset = SPYRE_REG_CAPS});
        fn.Write32(SPYRE_REG_CONTROL, SPYRE_CONTROL_RING_ENABLE);
        if (!(fn.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_RING_ENABLED))
            throw Error(ErrorKind::DeviceError, "device did not enable its ring",
                        ErrorContext{.device = fn.pci_address(), .reg = "STATUS", .offset = SPYRE_REG_STATUS});
    } catch (...) {
        fn.ReleaseCommandRing();
        throw;
    }
}

// A device that went away or stopped has nothing left to disable (its
// hand-over disables the ring too).
CommandRing::~CommandRing() {
    queue_.function().WriteTrapped32WhileServing(SPYRE_REG_CONTROL, 0);
    queue_.function().ReleaseCommandRing();
}

uint32_t CommandRing::Submit(std::span<const spyre_cb> slots) {
    if (slots.size() > FreeSlots())
        throw Error(ErrorKind::InvalidArgument, std::to_string(slots.size()) + " ring slots do not fit in " +
                                                    std::to_string(FreeSlots()) + " free ring slots (reap completions first)",
                    queue_.Context());
    // Frame the slots the way the device will (spyre_cb.h), recording each
    // CB's slot count. The records are committed only once all is valid: at
    // most slots.size() <= FreeSlots() new CBs, so they never overwrite the
    // records of CBs in flight.
    const uint32_t mask = queue_.sq_entries() - 1;
    uint32_t cbs = 0;
    for (size_t i = 0; i < slots.size(); ++cbs) {
        const uint16_t declared = slots[i].slots;
        size_t used = 1;  // 0 or more than the maximum: the device takes one slot and fails the CB
        if (declared >= 1 && declared <= SPYRE_CB_MAX_SLOTS) {
            if (declared > slots.size() - i)
                throw Error(ErrorKind::InvalidArgument,
                            "the CB at index " + std::to_string(i) + " (opcode " + Hex(slots[i].opcode) + ") declares " +
                                std::to_string(declared) + " ring slots but only " + std::to_string(slots.size() - i) +
                                " remain in the batch; a CB and its payload must be submitted together",
                            queue_.Context());
            used = declared;
        }
        cb_slots_[(queue_.cq_end() + cbs) & mask] = uint16_t(used);
        i += used;
    }
    const uint32_t first = queue_.sq_tail();
    queue_.Submit(slots, cbs);
    return first;
}

size_t CommandRing::Reap(std::span<Completion> out) {
    const uint32_t mask = queue_.sq_entries() - 1;
    size_t n = 0;
    while (n < out.size() && queue_.CompletionsReady()) {
        const spyre_cqe e = queue_.Peek();
        // Completions come in ring order: this one must be for the oldest
        // CB. An ABORTED one may end work a reset dropped: said as the reset.
        if (e.sq_pos != sq_head_ || e.status == SPYRE_ERR_ABORTED) [[unlikely]] {
            // A reset emptied the rings under us: said so (DeviceLost,
            // "was reset"), not as the device breaking the protocol
            // (found probing from outside, 6 of 11 resets under load).
            queue_.ExplainedByAReset();
            checks::CheckCompletion(e, queue_.cq_head(), sq_head_, queue_.Context());
        }
        out[n++] = Completion{e.user_data, e.result, e.timestamp_ns, e.sq_pos, e.status, e.opcode};
        sq_head_ += cb_slots_[queue_.cq_head() & mask];  // the CB's slots are free again
        queue_.Pop();
    }
    queue_.ReturnHead();
    if (n == 0) queue_.ProbeNowAndThen();  // a reap-only loop learns of a dead daemon too
    return n;
}

size_t CommandRing::Wait(std::span<Completion> out, size_t min_count, const WaitOptions& options) {
    return detail::WaitOnQueue(queue_, out.size(), min_count, options,
                               [&](size_t done) { return Reap(out.subspan(done)); });
}

void CommandRing::WaitCompletionOr(const std::atomic<uint32_t>& word, uint32_t expected,
                                   std::chrono::nanoseconds timeout) {
    queue_.WaitCompletionOr(word, expected, timeout);
}

}  // namespace spyre::driver
