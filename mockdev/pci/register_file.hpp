// SPDX-License-Identifier: Apache-2.0
//
// Typed, atomic access to a function's BAR0 register file, which lives in
// shared memory that drivers map. Every access is a single aligned atomic of
// the register's width, so a driver never sees a torn register.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <mutex>

#include "spyre/uapi/spyre_regdesc.hpp"
#include "spyre/uapi/spyre_regs.h"

namespace spyre::mockdev {

// A word of shared memory written by another process (doorbell page fields).
inline std::atomic_ref<uint32_t> SharedWord(uint32_t& word) { return std::atomic_ref<uint32_t>(word); }

// True for the registers the contract declares 8 bytes wide.
inline bool Is64BitRegister(uint64_t offset) {
    return std::any_of(std::begin(uapi::kRegisters), std::end(uapi::kRegisters),
                       [&](const uapi::RegDesc& r) { return r.offset == offset && r.width == 8; });
}

// What the error registers record about a fault.
struct ErrorRecord {
    uint32_t code = 0;
    uint32_t opcode = 0;
    uint32_t sq_pos = 0;
    uint64_t addr = 0;
    uint64_t user_data = 0;
};

class RegisterFile {
public:
    explicit RegisterFile(uint8_t* base) : base_(base) {}

    RegisterFile(const RegisterFile&) = delete;
    RegisterFile& operator=(const RegisterFile&) = delete;

    uint32_t Load32(uint32_t off) const { return Ref32(off).load(std::memory_order_acquire); }
    uint64_t Load64(uint32_t off) const { return Ref64(off).load(std::memory_order_acquire); }
    void Store32(uint32_t off, uint32_t v) { Ref32(off).store(v, std::memory_order_release); }
    void Store64(uint32_t off, uint64_t v) { Ref64(off).store(v, std::memory_order_release); }
    void SetBits32(uint32_t off, uint32_t bits) { Ref32(off).fetch_or(bits, std::memory_order_acq_rel); }
    void ClearBits32(uint32_t off, uint32_t bits) { Ref32(off).fetch_and(~bits, std::memory_order_acq_rel); }
    void Add64(uint32_t off, uint64_t delta) { Ref64(off).fetch_add(delta, std::memory_order_relaxed); }
    // A counter with one writer at a time (the ring lane's, written under
    // its exec lock, which a reset takes too): a load and a store, no locked
    // instruction. A NOP bumped four such counters; each locked add waits
    // for the store buffer to drain.
    void Count64(uint32_t off, uint64_t delta) {
        Ref64(off).store(Ref64(off).load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
    }

    // Latches the first fault (ERR_CODE == 0) into the error registers, counts
    // every fault in ERR_COUNT (saturating) and raises STATUS.ERROR.
    void LatchError(const ErrorRecord& e) {
        std::lock_guard lock(latch_mutex_);
        if (Load32(SPYRE_REG_ERR_CODE) == 0) {
            Store32(SPYRE_REG_ERR_OPCODE, e.opcode);
            Store32(SPYRE_REG_ERR_SQ_POS, e.sq_pos);
            Store64(SPYRE_REG_ERR_ADDR, e.addr);
            Store64(SPYRE_REG_ERR_USER_DATA, e.user_data);
            Store32(SPYRE_REG_ERR_CODE, e.code);
        }
        if (uint32_t n = Load32(SPYRE_REG_ERR_COUNT); n != UINT32_MAX) Store32(SPYRE_REG_ERR_COUNT, n + 1);
        SetBits32(SPYRE_REG_STATUS, SPYRE_STATUS_ERROR);
    }

    // ERR_CLEAR: forget the latched fault (ERR_COUNT keeps counting since reset).
    void ClearErrorLatch() {
        std::lock_guard lock(latch_mutex_);
        Store32(SPYRE_REG_ERR_CODE, 0);
        Store32(SPYRE_REG_ERR_OPCODE, 0);
        Store32(SPYRE_REG_ERR_SQ_POS, 0);
        Store64(SPYRE_REG_ERR_ADDR, 0);
        Store64(SPYRE_REG_ERR_USER_DATA, 0);
        ClearBits32(SPYRE_REG_STATUS, SPYRE_STATUS_ERROR);
    }

    // Copies [offset, offset + len) of the register file, every register
    // with one atomic load of its own width, however the range is cut: a
    // bulk read (a register dump) that loaded a 64-bit counter as two words
    // could see its low word wrap between them.
    void ReadSpan(uint32_t offset, void* buf, size_t len) const {
        auto* out = static_cast<uint8_t*>(buf);
        for (uint64_t at = offset; at < uint64_t(offset) + len;) {
            const uint32_t reg8 = uint32_t(at & ~uint64_t(7));
            const bool wide = Is64BitRegister(reg8);
            const uint32_t base = wide ? reg8 : uint32_t(at & ~uint64_t(3));
            uint64_t v = wide ? Load64(base) : Load32(base);
            const size_t skip = size_t(at - base);
            const size_t n = std::min<size_t>((wide ? 8 : 4) - skip, size_t(offset + len - at));
            std::memcpy(out + (at - offset), reinterpret_cast<const uint8_t*>(&v) + skip, n);
            at += n;
        }
    }

    const uint8_t* data() const { return base_; }

private:
    std::atomic_ref<uint32_t> Ref32(uint32_t off) const {
        return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(base_ + off));
    }
    std::atomic_ref<uint64_t> Ref64(uint32_t off) const {
        return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base_ + off));
    }

    uint8_t* base_;
    std::mutex latch_mutex_;  // a latch and a clear never interleave
};

}  // namespace spyre::mockdev
