// SPDX-License-Identifier: Apache-2.0
//
// Typed, atomic access to a function's BAR0 register file, which lives in
// shared memory that drivers map. Every access is a single aligned atomic of
// the register's width, so a driver never sees a torn register.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "spyre/uapi/spyre_regs.h"

namespace spyre::mockdev {

// A word of shared memory written by another process (doorbell page fields).
inline std::atomic_ref<uint32_t> SharedWord(uint32_t& word) { return std::atomic_ref<uint32_t>(word); }

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
