// SPDX-License-Identifier: Apache-2.0
//
// One submission queue and its completion queue in BAR4, as the CB ring
// (spyre_regs.h) and every task queue (spyre_task.h) lay them out: a ring of
// CB slots, a ring of CQE slots and four free-running positions in a doorbell
// page. The device keeps its own copies of the positions it owns (sq_head,
// cq_tail) and publishes them: a driver scribbling on the shared words moves
// nothing the device relies on. Every access stays inside the function's own
// BAR4 object.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "execution/host_link.hpp"
#include "pci/shm_object.hpp"
#include "pci/register_file.hpp"
#include "spyre/uapi/spyre_cb.h"
#include "spyre/uapi/spyre_regs.h"

namespace spyre::mockdev {

// Where one queue lives in BAR4.
struct QueueLayout {
    uint32_t sq_tail, cq_head, sq_head, cq_tail;  // offsets of its position words
    uint64_t sq_offset;
    uint32_t sq_entries, slot_size;
    uint64_t cq_offset;
    uint32_t cq_entries, cqe_size;
};

// A CQE for `cb` taken at `sq_pos` (spyre_cb.h, spyre_task.h).
inline spyre_cqe MakeCqe(const spyre_cb& cb, uint32_t sq_pos, uint16_t status, uint64_t result, uint64_t timestamp_ns) {
    spyre_cqe cqe{};
    cqe.user_data = cb.user_data;
    cqe.result = result;
    cqe.timestamp_ns = timestamp_ns;
    cqe.sq_pos = sq_pos;
    cqe.status = status;
    cqe.opcode = cb.opcode;
    return cqe;
}

class QueuePair {
public:
    QueuePair(ShmObject& bar4, const QueueLayout& layout)
        : bar4_(bar4),
          layout_(layout),
          sq_tail_word_(Word(layout.sq_tail)),
          cq_head_word_(Word(layout.cq_head)),
          sq_head_word_(Word(layout.sq_head)),
          cq_tail_word_(Word(layout.cq_tail)),
          sq_(bar4.data() + layout.sq_offset),
          cq_(bar4.data() + layout.cq_offset) {}

    // What the driver has published (acquire: the CBs before it are visible).
    uint32_t tail() const { return SharedWord(*sq_tail_word_).load(std::memory_order_acquire); }
    // Slots taken: the device's own position, not the shared word.
    uint32_t head() const { return sq_head_; }
    bool halted() const { return halted_.load(std::memory_order_acquire); }
    // New CBs wait here (a cheap look while polling).
    bool Submitted() const {
        return !halted() && SharedWord(*sq_tail_word_).load(std::memory_order_relaxed) != sq_head_;
    }
    // sq_tail runs more slots ahead than the ring holds: a driver bug.
    bool TailValid(uint32_t tail) const { return spyre_ring_valid(sq_head_, tail, layout_.sq_entries); }

    // CQEs this queue may still promise, `taken` CBs owing one each until the
    // driver reaps it; nothing when cq_head claims completions never posted.
    std::optional<uint32_t> CqRoom(uint32_t taken) const {
        const uint32_t cq_head = SharedWord(*cq_head_word_).load(std::memory_order_acquire);
        if (!spyre_ring_valid(cq_head, cq_tail_, layout_.cq_entries)) return std::nullopt;
        const uint32_t owed = taken - cq_head;
        return owed >= layout_.cq_entries ? 0 : layout_.cq_entries - owed;
    }

    // A private copy of the CB at ring position `pos`: the driver may
    // scribble on its slot at any time.
    void Copy(uint32_t pos, void* out, size_t len = sizeof(spyre_cb)) const {
        std::memcpy(out, Slot(pos), len);
    }
    // The driver may reuse `slots` more slots.
    void Consume(uint32_t slots) {
        sq_head_ += slots;
        SharedWord(*sq_head_word_).store(sq_head_, std::memory_order_release);
    }
    // Posts `cqe` (its phase field ignored) at cq_tail and publishes it (one
    // writer at a time). The record's first 31 bytes go first, then its
    // phase byte with a release store (spyre_cb.h, "CQE phase"): a driver
    // that sees this lap's phase at its cq_head may read the rest.
    void Post(const spyre_cqe& cqe, HostLink& host_link) {
        uint8_t* slot = cq_ + size_t(spyre_ring_slot(cq_tail_, layout_.cq_entries)) * layout_.cqe_size;
        std::memcpy(slot, &cqe, SPYRE_CQE_PHASE_OFFSET);
        host_link.Published();
        std::atomic_ref<uint8_t>(slot[SPYRE_CQE_PHASE_OFFSET])
            .store(spyre_cqe_phase(cq_tail_, layout_.cq_entries), std::memory_order_release);
        ++cq_tail_;
        SharedWord(*cq_tail_word_).store(cq_tail_, std::memory_order_release);
    }
    uint32_t cq_tail() const { return cq_tail_; }

    // The driver published an impossible position: the queue stops until a
    // reset (ERR_CODE RING_OVERFLOW at the position it stopped at). The
    // error is latched first: a reader that sees the queue halted (a trapped
    // read of TQ_HALTED mirrors halted()) also sees why.
    void Halt(RegisterFile& regs) {
        regs.LatchError(ErrorRecord{SPYRE_ERR_RING_OVERFLOW, 0, sq_head_, 0, 0});
        halted_.store(true, std::memory_order_release);
    }
    // Power-on state: positions zero, rings zeroed, not halted (the server paused).
    void Clear() {
        sq_head_ = cq_tail_ = 0;
        halted_.store(false);
        for (uint32_t* word : {sq_tail_word_, cq_head_word_, sq_head_word_, cq_tail_word_}) SharedWord(*word).store(0);
        bar4_.Zero(layout_.sq_offset, uint64_t(layout_.sq_entries) * layout_.slot_size);
        bar4_.Zero(layout_.cq_offset, uint64_t(layout_.cq_entries) * layout_.cqe_size);
    }

private:
    // A renewed object keeps its address (ShmObject::Renew): the pointers stay good.
    uint32_t* Word(uint32_t offset) const { return reinterpret_cast<uint32_t*>(bar4_.data() + offset); }
    const uint8_t* Slot(uint32_t pos) const {
        return sq_ + size_t(spyre_ring_slot(pos, layout_.sq_entries)) * layout_.slot_size;
    }

    ShmObject& bar4_;
    const QueueLayout layout_;
    uint32_t* const sq_tail_word_;
    uint32_t* const cq_head_word_;
    uint32_t* const sq_head_word_;
    uint32_t* const cq_tail_word_;
    const uint8_t* const sq_;
    uint8_t* const cq_;
    uint32_t sq_head_ = 0;  // the server thread's (or paused)
    uint32_t cq_tail_ = 0;  // the poster's: the ring's thread, or under the task queues' lock
    std::atomic<bool> halted_{false};
};

}  // namespace spyre::mockdev
