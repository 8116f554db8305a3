// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

#include "pci/register_file.hpp"
#include "spyre/common/futex.hpp"

namespace spyre::mockdev {

// The completion interrupt of a ring or task queue: bumps the doorbell
// page's irq_seq and wakes it if a driver said it waits (irq_waiters). The
// increment is a full barrier: the CQEs before it are visible, and the look
// at irq_waiters after it pairs with the driver's (count itself, then read
// irq_seq), so a waiter is either woken or sees the new irq_seq. True when a
// wake-up was sent.
inline bool RaiseCompletionIrq(uint32_t& irq_seq, uint32_t& irq_waiters) {
    SharedWord(irq_seq).fetch_add(1, std::memory_order_seq_cst);
    if (SharedWord(irq_waiters).load(std::memory_order_seq_cst) == 0) return false;
    FutexWake(&irq_seq);
    return true;
}

// A queue posted completions: the interrupt, counted in CNT_IRQS when it woke someone.
inline void SignalCompletion(uint32_t& irq_seq, uint32_t& irq_waiters, RegisterFile& regs) {
    if (RaiseCompletionIrq(irq_seq, irq_waiters)) regs.Add64(SPYRE_REG_CNT_IRQS, 1);
}

}  // namespace spyre::mockdev
