// SPDX-License-Identifier: Apache-2.0
#include "execution/cb_executor.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <thread>

#include "execution/cb_fields.hpp"
#include "log.hpp"
#include "spyre/common/memory_copy.hpp"

namespace spyre::mockdev {

namespace {

// COPY moves this much between budget checks.
constexpr uint64_t kCopyChunk = 16ull << 20;
// SEM_WAIT spins this often before it starts sleeping, then sleeps with a
// doubling period up to the cap (a semaphore is host or device memory,
// which nothing can wake the device on).
constexpr int kSemSpins = 1000;
constexpr auto kSemSleepMin = std::chrono::microseconds(10);
constexpr auto kSemSleepMax = std::chrono::milliseconds(1);

// The u64 semaphore at `addr`, or the fault that forbids it.
CbOutcome SemaphoreAt(const DeviceMemory& memory, uint64_t addr, uint64_t*& word) {
    if (addr % sizeof(uint64_t) != 0) return Fail(SPYRE_ERR_MISALIGNED, addr);
    const auto span = memory.Span(addr, sizeof(uint64_t));
    if (!span) return Fail(SPYRE_ERR_ADDR_RANGE, addr);
    word = reinterpret_cast<uint64_t*>(span->data());
    return {};
}

}  // namespace

CbOutcome CbExecutor::Execute(const spyre_cb& cb, std::span<const uint8_t> payload,
                              const std::function<bool()>& aborted, Budget::Clock::time_point started) noexcept {
    try {
        if (uint16_t status = ValidateCbHeader(cb, payload.size(), CbQueue::Ring); status != SPYRE_ERR_NONE)
            return Fail(status);
        const auto bound = std::chrono::milliseconds(watchdog_ms_.load(std::memory_order_relaxed));
        return Dispatch(cb, payload, Budget(started, bound, aborted));
    } catch (const std::exception& e) {
        LOG_ERROR("executor fault on opcode 0x%02x: %s", unsigned(cb.opcode), e.what());
    } catch (...) {
        LOG_ERROR("executor fault on opcode 0x%02x", unsigned(cb.opcode));
    }
    return Fail(SPYRE_ERR_INTERNAL);
}

CbOutcome CbExecutor::Dispatch(const spyre_cb& cb, std::span<const uint8_t> payload, const Budget& budget) {
    switch (cb.opcode) {
    case SPYRE_OP_NOP: return ExecuteNop(cb);
    case SPYRE_OP_LAUNCH: return ExecuteLaunch(cb, budget);
    case SPYRE_OP_CORRECT: return ExecuteCorrect(cb);
    case SPYRE_OP_COPY: return ExecuteCopy(cb, budget);
    case SPYRE_OP_COPY_INLINE: return ExecuteCopyInline(cb, payload);
    case SPYRE_OP_SEM_WRITE: return ExecuteSemWrite(cb);
    case SPYRE_OP_SEM_WAIT: return ExecuteSemWait(cb, budget);
    default: return Fail(SPYRE_ERR_INVALID_OPCODE);
    }
}

CbOutcome CbExecutor::ExecuteNop(const spyre_cb& cb) {
    if (!ReservedArgsZero(cb, 0)) return Fail(SPYRE_ERR_RESERVED_NONZERO);
    regs_.Count64(SPYRE_REG_CNT_NOPS, 1);
    return CbOutcome{};
}

CbOutcome CbExecutor::ExecuteLaunch(const spyre_cb& cb, const Budget& budget) {
    if (!ReservedArgsZero(cb, 2)) return Fail(SPYRE_ERR_RESERVED_NONZERO);
    const CbOutcome out = programs_.Launch(cb.u.launch.program_addr, cb.u.launch.program_size, budget);
    if (out.status == SPYRE_ERR_NONE) regs_.Count64(SPYRE_REG_CNT_LAUNCHES, 1);
    return out;
}

CbOutcome CbExecutor::ExecuteCorrect(const spyre_cb& cb) {
    if (!ReservedArgsZero(cb, 3)) return Fail(SPYRE_ERR_RESERVED_NONZERO);
    return programs_.Correct(cb.u.correct.target_addr, cb.u.correct.input_addr, cb.u.correct.entry_count);
}

CbOutcome CbExecutor::ExecuteCopy(const spyre_cb& cb, const Budget& budget) {
    if (!ReservedArgsZero(cb, 3)) return Fail(SPYRE_ERR_RESERVED_NONZERO);
    const spyre_cb_copy& c = cb.u.copy;
    const auto src = memory_.Span(c.src_addr, c.size);
    if (!src) return Fail(SPYRE_ERR_ADDR_RANGE, c.src_addr);
    const auto dst = memory_.Span(c.dst_addr, c.size);
    if (!dst) return Fail(SPYRE_ERR_ADDR_RANGE, c.dst_addr);
    // memmove semantics in chunks: when dst is above src, copy from the end
    // so no chunk overwrites source bytes still to be read.
    const bool backwards = c.dst_addr > c.src_addr;
    for (uint64_t done = 0; done < c.size;) {
        if (uint16_t status = budget.Check()) return CbOutcome{status, done, c.dst_addr};
        const uint64_t n = std::min(kCopyChunk, c.size - done);
        const uint64_t at = backwards ? c.size - done - n : done;
        MoveMemory(dst->data() + at, src->data() + at, n);  // no 4 KiB aliasing stall (docs/dma.md)
        done += n;
    }
    regs_.Count64(SPYRE_REG_CNT_COPIES, 1);
    regs_.Count64(SPYRE_REG_CNT_COPY_BYTES, c.size);
    return CbOutcome{SPYRE_ERR_NONE, c.size, 0};
}

// The header check proved 1 <= size <= payload.size(). At most 4032 bytes:
// no budget check needed.
CbOutcome CbExecutor::ExecuteCopyInline(const spyre_cb& cb, std::span<const uint8_t> payload) {
    const spyre_cb_copy& c = cb.u.copy;
    if (c.src_addr != 0 || !ReservedArgsZero(cb, 3)) return Fail(SPYRE_ERR_RESERVED_NONZERO);
    const auto dst = memory_.Span(c.dst_addr, c.size);
    if (!dst) return Fail(SPYRE_ERR_ADDR_RANGE, c.dst_addr);
    std::memcpy(dst->data(), payload.data(), c.size);
    regs_.Count64(SPYRE_REG_CNT_COPIES, 1);
    regs_.Count64(SPYRE_REG_CNT_COPY_BYTES, c.size);
    return CbOutcome{SPYRE_ERR_NONE, c.size, 0};
}

CbOutcome CbExecutor::ExecuteSemWrite(const spyre_cb& cb) {
    if (!ReservedArgsZero(cb, 2)) return Fail(SPYRE_ERR_RESERVED_NONZERO);
    uint64_t* word = nullptr;
    if (CbOutcome f = SemaphoreAt(memory_, cb.u.sem.addr, word); f.status) return f;
    memory_.Published();  // the host may wait for this value, then act
    std::atomic_ref<uint64_t>(*word).store(cb.u.sem.value, std::memory_order_release);
    return CbOutcome{SPYRE_ERR_NONE, cb.u.sem.value, 0};
}

CbOutcome CbExecutor::ExecuteSemWait(const spyre_cb& cb, const Budget& watchdog) {
    if (!ReservedArgsZero(cb, 3)) return Fail(SPYRE_ERR_RESERVED_NONZERO);
    const spyre_cb_sem& s = cb.u.sem;
    uint64_t* word = nullptr;
    if (CbOutcome f = SemaphoreAt(memory_, s.addr, word); f.status) return f;
    // The cap keeps now + timeout representable; the watchdog is far sooner anyway.
    const auto timeout = std::chrono::nanoseconds(std::min<uint64_t>(s.timeout_ns, 1ull << 62));
    const Budget budget = s.timeout_ns == 0 ? watchdog : watchdog.Until(Budget::Clock::now() + timeout);
    std::chrono::nanoseconds sleep = kSemSleepMin;
    for (int spins = 0;; ++spins) {
        const uint64_t seen = std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire);
        if (seen == s.value) {
            memory_.Observed();  // the host may have written it, after what it waited for
            return CbOutcome{SPYRE_ERR_NONE, seen, 0};
        }
        if (uint16_t status = budget.Check()) return CbOutcome{status, seen, s.addr};
        if (spins < kSemSpins) continue;
        std::this_thread::sleep_for(sleep);
        sleep = std::min<std::chrono::nanoseconds>(sleep * 2, kSemSleepMax);
    }
}

}  // namespace spyre::mockdev
