// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/command_ring.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <immintrin.h>
#include <thread>

#include "completion_wait.hpp"
#include "device_checks.hpp"
#include "spyre/common/futex.hpp"
#include "spyre/common/hex.hpp"
#include "spyre/error.hpp"

using namespace std::chrono;

namespace spyre::driver {

using detail::Word;

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

CommandRing::CommandRing(Function& function) : fn_(function) {
    ErrorContext ctx{.device = fn_.pci_address()};
    const checks::RingRegisters geometry{
        .db_offset = fn_.Read32(SPYRE_REG_DB_OFFSET),
        .sq_offset = fn_.Read32(SPYRE_REG_SQ_OFFSET),
        .cq_offset = fn_.Read32(SPYRE_REG_CQ_OFFSET),
        .sq_entries = fn_.Read32(SPYRE_REG_SQ_ENTRIES),
        .cq_entries = fn_.Read32(SPYRE_REG_CQ_ENTRIES),
        .cb_size = fn_.Read32(SPYRE_REG_CB_SIZE),
        .cqe_size = fn_.Read32(SPYRE_REG_CQE_SIZE),
    };
    // Refuse geometry this driver cannot use rather than corrupt memory:
    // checked against the bytes actually mapped, not the contract's BAR4 size.
    checks::CheckRingGeometry(geometry, fn_.bar4_size(), ctx);
    sq_entries_ = geometry.sq_entries;
    cq_entries_ = geometry.cq_entries;
    const uint32_t db_off = geometry.db_offset, sq_off = geometry.sq_offset, cq_off = geometry.cq_offset;
    db_ = reinterpret_cast<spyre_doorbell_page*>(fn_.bar4() + db_off);
    sq_ = reinterpret_cast<spyre_cb*>(fn_.bar4() + sq_off);
    cq_ = reinterpret_cast<const spyre_cqe*>(fn_.bar4() + cq_off);

    // Start from a clean ring whatever the previous owner left behind.
    fn_.Reset();
    sq_tail_ = Word(db_->sq_tail).load(std::memory_order_acquire);
    sq_head_ = sq_tail_;
    cq_head_ = Word(db_->cq_head).load(std::memory_order_acquire);
    cq_published_ = cq_head_;
    publish_every_ = std::max(1u, cq_entries_ / 4);
    cb_slots_.assign(sq_entries_, 0);
    // Completions are polled by their phase (spyre_cb.h, "CQE phase").
    if (!(fn_.Read32(SPYRE_REG_CAPS) & SPYRE_CAP_CQE_PHASE))
        throw Error(ErrorKind::DeviceError, "the device does not write CQE phases (contract 1.3), which this driver polls",
                    ErrorContext{.device = fn_.pci_address(), .reg = "CAPS", .offset = SPYRE_REG_CAPS});
    fn_.Write32(SPYRE_REG_CONTROL, SPYRE_CONTROL_RING_ENABLE);
    if (!(fn_.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_RING_ENABLED))
        throw Error(ErrorKind::DeviceError, "device did not enable its ring",
                    ErrorContext{.device = fn_.pci_address(), .reg = "STATUS", .offset = SPYRE_REG_STATUS});
}

CommandRing::~CommandRing() {
    try {
        if (fn_.Alive()) fn_.Write32(SPYRE_REG_CONTROL, 0);
    } catch (const Error&) {
        // The device went away; nothing left to disable.
    }
}

ErrorContext CommandRing::Context() const { return ErrorContext{.device = fn_.pci_address()}; }

uint32_t CommandRing::Submit(std::span<const spyre_cb> slots) {
    if (slots.size() > FreeSlots())
        throw Error(ErrorKind::InvalidArgument, std::to_string(slots.size()) + " ring slots do not fit in " +
                                                    std::to_string(FreeSlots()) + " free ring slots (reap completions first)",
                    Context());
    if (fn_.lost() || Word(db_->device_state).load(std::memory_order_relaxed) != SPYRE_DEVSTATE_ALIVE) fn_.CheckAlive();
    // Frame the slots the way the device will (spyre_cb.h), recording each
    // CB's slot count. The records are committed only once all is valid: at
    // most slots.size() <= FreeSlots() new CBs, so they never overwrite the
    // records of CBs in flight.
    const uint32_t mask = sq_entries_ - 1;
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
                            Context());
            used = declared;
        }
        cb_slots_[(cb_tail_ + cbs) & mask] = uint16_t(used);
        i += used;
    }
    // The device posts a completion only into room it can see: with the
    // consumed completions it has not been told of, every CB in flight must
    // still fit in the completion ring.
    if (InFlight() + cbs + (cq_head_ - cq_published_) > cq_entries_) PublishHead();
    const uint32_t first = sq_tail_;
    detail::CopyToRing(sq_, sq_entries_, sq_tail_, slots);
    cb_tail_ += cbs;
    Word(db_->sq_tail).store(sq_tail_, std::memory_order_release);
    // Pairs with the device's fence between setting device_sleeping and
    // re-reading sq_tail: one of the two sides always sees the other.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (Word(db_->device_sleeping).load(std::memory_order_relaxed)) FutexWake(&db_->sq_tail, 1);
    return first;
}

bool CommandRing::CompletionPosted(uint32_t cq_pos) const noexcept {
    return detail::CqePosted(cq_, cq_entries_, cq_pos);
}

// A completion is known by the line that carries it (one cache-line transfer,
// where cq_tail and then the CQE took two), and never more are looked for
// than CBs are in flight. cq_tail is for the device's interrupt waiters.
bool CommandRing::CompletionsReady() const noexcept {
    return InFlight() != 0 && CompletionPosted(cq_head_);
}

size_t CommandRing::Reap(std::span<Completion> out) {
    const uint32_t mask = sq_entries_ - 1;
    size_t n = 0;
    while (n < out.size() && CompletionsReady()) {
        const spyre_cqe e = detail::ReadCqe(cq_, cq_entries_, cq_head_);
        // Completions come in ring order: this one must be for the oldest CB.
        if (e.sq_pos != sq_head_) {
            PublishHead();
            checks::CheckCompletion(e, cq_head_, sq_head_, Context());
        }
        out[n++] = Completion{e.user_data, e.result, e.timestamp_ns, e.sq_pos, e.status, e.opcode};
        sq_head_ += cb_slots_[cb_head_ & mask];  // the CB's slots are free again
        ++cb_head_;
        ++cq_head_;
    }
    if (cq_head_ - cq_published_ >= publish_every_) PublishHead();
    return n;
}

void CommandRing::PublishHead() noexcept {
    if (cq_head_ == cq_published_) return;
    Word(db_->cq_head).store(cq_head_, std::memory_order_release);
    cq_published_ = cq_head_;
}

void CommandRing::CheckHealth() const {
    fn_.CheckAlive();
    if (fn_.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED)
        throw Error(ErrorKind::DeviceError, "the device halted its ring; reset the function to recover",
                    ErrorContext{.device = fn_.pci_address(), .reg = "ERR_CODE", .offset = SPYRE_REG_ERR_CODE,
                                 .device_code = fn_.Read32(SPYRE_REG_ERR_CODE)});
}

void CommandRing::WaitBlocking(steady_clock::time_point deadline) {
    detail::BlockOnInterrupt(db_->irq_waiters, db_->irq_seq, [this] { return CompletionsReady(); },
                             [this] { CheckHealth(); }, deadline);
}

size_t CommandRing::Wait(std::span<Completion> out, size_t min_count, const WaitOptions& options) {
    min_count = std::min(min_count, out.size());
    if (min_count > InFlight())
        throw Error(ErrorKind::InvalidArgument, "waiting for " + std::to_string(min_count) + " completions with only " +
                                                    std::to_string(InFlight()) + " CBs in flight",
                    ErrorContext{.device = fn_.pci_address()});
    return detail::WaitForCompletions(
        min_count, options, [this] { return CompletionsReady(); }, [&](size_t done) { return Reap(out.subspan(done)); },
        [this] { CheckHealth(); }, [this](steady_clock::time_point deadline) { WaitBlocking(deadline); },
        [&] {
            return Error(ErrorKind::Timeout,
                         "no completion within " + std::to_string(duration_cast<milliseconds>(options.timeout).count()) +
                             " ms (" + std::to_string(InFlight()) + " CBs in flight)",
                         ErrorContext{.device = fn_.pci_address()});
        });
}

}  // namespace spyre::driver
