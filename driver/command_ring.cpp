// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/command_ring.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <immintrin.h>
#include <thread>

#include "futex.hpp"
#include "spyre/error.hpp"

using namespace std::chrono;

namespace spyre::driver {

namespace {

template <typename T>
std::atomic_ref<T> Word(T& t) {
    return std::atomic_ref<T>(t);
}

bool IsPowerOfTwo(uint32_t v) { return v && !(v & (v - 1)); }

// How often a spinning or sleeping waiter checks that the device still lives.
constexpr auto kHealthPeriod = milliseconds(100);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

std::string Hex(uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

}  // namespace

void AppendCopyInline(std::vector<spyre_cb>& out, uint64_t dst_addr, std::span<const uint8_t> bytes,
                      uint64_t user_data, uint8_t flags) {
    if (bytes.empty() || bytes.size() > SPYRE_CB_INLINE_MAX_BYTES)
        throw Error(ErrorKind::InvalidArgument,
                    "an inline copy carries 1 to " + std::to_string(SPYRE_CB_INLINE_MAX_BYTES) + " bytes, not " +
                        std::to_string(bytes.size()),
                    ErrorContext{.address = dst_addr});
    if (flags & ~SPYRE_CB_F_DEFINED)
        throw Error(ErrorKind::InvalidArgument, "CB flags " + Hex(flags) + " set reserved bits (defined: LINK " +
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
    const uint32_t db_off = fn_.Read32(SPYRE_REG_DB_OFFSET);
    const uint32_t sq_off = fn_.Read32(SPYRE_REG_SQ_OFFSET);
    const uint32_t cq_off = fn_.Read32(SPYRE_REG_CQ_OFFSET);
    sq_entries_ = fn_.Read32(SPYRE_REG_SQ_ENTRIES);
    cq_entries_ = fn_.Read32(SPYRE_REG_CQ_ENTRIES);
    const uint32_t cb_size = fn_.Read32(SPYRE_REG_CB_SIZE);
    const uint32_t cqe_size = fn_.Read32(SPYRE_REG_CQE_SIZE);
    const uint64_t bar4 = SPYRE_BAR4_SIZE;
    // Refuse geometry this driver cannot use rather than corrupt memory.
    if (cb_size != sizeof(spyre_cb) || cqe_size != sizeof(spyre_cqe))
        throw Error(ErrorKind::ProtocolError, "device publishes CB/CQE sizes " + std::to_string(cb_size) + "/" +
                                                  std::to_string(cqe_size) + ", driver expects 64/32", ctx);
    if (!IsPowerOfTwo(sq_entries_) || !IsPowerOfTwo(cq_entries_) || cq_entries_ < sq_entries_)
        throw Error(ErrorKind::ProtocolError, "ring sizes must be powers of two with CQ >= SQ", ctx);
    if (db_off % 4096 || db_off + sizeof(spyre_doorbell_page) > bar4 || sq_off % 64 ||
        sq_off + uint64_t(sq_entries_) * cb_size > bar4 || cq_off % 32 || cq_off + uint64_t(cq_entries_) * cqe_size > bar4)
        throw Error(ErrorKind::ProtocolError, "ring geometry does not fit BAR4", ctx);
    db_ = reinterpret_cast<spyre_doorbell_page*>(fn_.bar4() + db_off);
    sq_ = reinterpret_cast<spyre_cb*>(fn_.bar4() + sq_off);
    cq_ = reinterpret_cast<const spyre_cqe*>(fn_.bar4() + cq_off);

    // Start from a clean ring whatever the previous owner left behind.
    fn_.Reset();
    sq_tail_ = Word(db_->sq_tail).load(std::memory_order_acquire);
    sq_head_ = sq_tail_;
    cq_head_ = Word(db_->cq_head).load(std::memory_order_acquire);
    cb_slots_.assign(sq_entries_, 0);
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

uint32_t CommandRing::Submit(std::span<const spyre_cb> slots) {
    const ErrorContext ctx{.device = fn_.pci_address()};
    if (slots.size() > FreeSlots())
        throw Error(ErrorKind::InvalidArgument, std::to_string(slots.size()) + " ring slots do not fit in " +
                                                    std::to_string(FreeSlots()) + " free ring slots (reap completions first)",
                    ctx);
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
                            ctx);
            used = declared;
        }
        cb_slots_[(cb_tail_ + cbs) & mask] = uint16_t(used);
        i += used;
    }
    const uint32_t first = sq_tail_;
    for (size_t done = 0; done < slots.size();) {
        const uint32_t at = spyre_ring_slot(sq_tail_, sq_entries_);
        const size_t n = std::min<size_t>(slots.size() - done, sq_entries_ - at);  // up to the ring's end
        std::memcpy(static_cast<void*>(&sq_[at]), slots.data() + done, n * sizeof(spyre_cb));
        done += n;
        sq_tail_ += uint32_t(n);
    }
    cb_tail_ += cbs;
    Word(db_->sq_tail).store(sq_tail_, std::memory_order_release);
    // Pairs with the device's fence between setting device_sleeping and
    // re-reading sq_tail: one of the two sides always sees the other.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (Word(db_->device_sleeping).load(std::memory_order_relaxed)) FutexWake(&db_->sq_tail, 1);
    return first;
}

bool CommandRing::CompletionsReady() const noexcept {
    return Word(db_->cq_tail).load(std::memory_order_acquire) != cq_head_;
}

size_t CommandRing::Reap(std::span<Completion> out) {
    const uint32_t tail = Word(db_->cq_tail).load(std::memory_order_acquire);
    if (spyre_ring_used(cq_head_, tail) > InFlight())
        throw Error(ErrorKind::ProtocolError,
                    "the device published " + std::to_string(spyre_ring_used(cq_head_, tail)) +
                        " completions with only " + std::to_string(InFlight()) + " CBs in flight",
                    ErrorContext{.device = fn_.pci_address(), .reg = "CQ_TAIL", .offset = SPYRE_REG_CQ_TAIL});
    const uint32_t mask = sq_entries_ - 1;
    size_t n = 0;
    while (cq_head_ != tail && n < out.size()) {
        const spyre_cqe& e = cq_[spyre_ring_slot(cq_head_, cq_entries_)];
        // Completions come in ring order: this one must be for the oldest CB.
        if (e.sq_pos != sq_head_) {
            if (n) Word(db_->cq_head).store(cq_head_, std::memory_order_release);
            throw Error(ErrorKind::ProtocolError,
                        "completion " + std::to_string(cq_head_) + " is for ring position " + std::to_string(e.sq_pos) +
                            ", but the oldest CB in flight starts at " + std::to_string(sq_head_),
                        ErrorContext{.device = fn_.pci_address()});
        }
        out[n++] = Completion{e.user_data, e.result, e.timestamp_ns, e.sq_pos, e.status, e.opcode};
        sq_head_ += cb_slots_[cb_head_ & mask];  // the CB's slots are free again
        ++cb_head_;
        ++cq_head_;
    }
    if (n) Word(db_->cq_head).store(cq_head_, std::memory_order_release);
    return n;
}

void CommandRing::CheckHealth() const {
    fn_.CheckAlive();
    if (fn_.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED)
        throw Error(ErrorKind::DeviceError, "the device halted its ring; reset the function to recover",
                    ErrorContext{.device = fn_.pci_address(), .reg = "ERR_CODE", .offset = SPYRE_REG_ERR_CODE,
                                 .device_code = fn_.Read32(SPYRE_REG_ERR_CODE)});
}

void CommandRing::WaitBlocking(steady_clock::time_point deadline) {
    // Announce the waiter before the last check so the device's wake cannot
    // slip between our check and our sleep.
    Word(db_->irq_waiters).fetch_add(1, std::memory_order_seq_cst);
    struct Disarm {
        uint32_t* w;
        ~Disarm() { std::atomic_ref<uint32_t>(*w).fetch_sub(1, std::memory_order_seq_cst); }
    } disarm{&db_->irq_waiters};
    while (true) {
        const uint32_t seq = Word(db_->irq_seq).load(std::memory_order_seq_cst);
        if (CompletionsReady()) return;
        const auto now = steady_clock::now();
        if (now >= deadline) return;
        FutexWait(&db_->irq_seq, seq, std::min<nanoseconds>(deadline - now, kHealthPeriod));
        if (!CompletionsReady()) CheckHealth();
    }
}

size_t CommandRing::Wait(std::span<Completion> out, size_t min_count, const WaitOptions& options) {
    min_count = std::min(min_count, out.size());
    if (min_count > InFlight())
        throw Error(ErrorKind::InvalidArgument, "waiting for " + std::to_string(min_count) + " completions with only " +
                                                    std::to_string(InFlight()) + " CBs in flight",
                    ErrorContext{.device = fn_.pci_address()});
    const auto start = steady_clock::now();
    const auto deadline = start + options.timeout;
    auto next_health = start + kHealthPeriod;
    size_t got = Reap(out);
    uint32_t spins = 0;
    while (got < min_count) {
        if (CompletionsReady()) {
            got += Reap(out.subspan(got));
            continue;
        }
        const bool spinning = options.mode == WaitMode::Poll ||
                              (options.mode == WaitMode::Adaptive && steady_clock::now() - start < options.spin);
        if (spinning) {
            CpuRelax();
            if ((++spins & 1023) != 0) continue;
            const auto now = steady_clock::now();
            if (now >= next_health) {
                CheckHealth();
                next_health = now + kHealthPeriod;
            }
        } else {
            WaitBlocking(deadline);
            if (CompletionsReady()) continue;
        }
        if (steady_clock::now() >= deadline)
            throw Error(ErrorKind::Timeout,
                        "no completion within " + std::to_string(duration_cast<milliseconds>(options.timeout).count()) +
                            " ms (" + std::to_string(InFlight()) + " CBs in flight)",
                        ErrorContext{.device = fn_.pci_address()});
    }
    return got;
}

}  // namespace spyre::driver
