// SPDX-License-Identifier: Apache-2.0
//
// Validation and execution of one control block. The server frames each CB
// (spyre_cb.h), copies it and its inline payload out of the ring and hands
// both here with a way to ask it to stop; every opcode has its own executor
// in the dispatch. Each CB runs under a budget:
// WATCHDOG_MS from its start, or sooner if the server aborts it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>

#include "execution/budget.hpp"
#include "execution/cb_outcome.hpp"
#include "execution/card_cores.hpp"
#include "execution/device_memory.hpp"
#include "execution/program_executor.hpp"
#include "pci/register_file.hpp"
#include "spyre/uapi/spyre_cb.h"

namespace spyre::mockdev {

class CbExecutor {
public:
    // `memory` is the function's window; `compute` the card's cores;
    // `watchdog_ms` the card's bound on one CB (card policy, never a register).
    CbExecutor(RegisterFile& regs, const std::atomic<uint32_t>& watchdog_ms, DeviceMemory memory,
               CardCores& compute)
        : regs_(regs), watchdog_ms_(watchdog_ms), memory_(memory), programs_(memory, compute) {}

    // Validates and runs `cb`. `payload` holds the ring slots that follow the
    // CB, (cb.slots - 1) * 64 bytes as framed by the server (empty for a
    // one-slot CB); a length that does not match cb.slots is BAD_SLOT_COUNT.
    // `aborted` (may be empty) tells a running CB to stop early. `started` is
    // when the CB started, the base of its watchdog deadline: the ring lane
    // passes the clock reading it already has (a clock read costs about as
    // much as a NOP). Never throws: a device-model fault becomes
    // SPYRE_ERR_INTERNAL and the device goes on with the next CB.
    CbOutcome Execute(const spyre_cb& cb, std::span<const uint8_t> payload = {},
                      const std::function<bool()>& aborted = {},
                      Budget::Clock::time_point started = Budget::Clock::now()) noexcept;

private:
    CbOutcome Dispatch(const spyre_cb& cb, std::span<const uint8_t> payload, const Budget& budget);
    CbOutcome ExecuteNop(const spyre_cb& cb);
    CbOutcome ExecuteLaunch(const spyre_cb& cb, const Budget& budget);
    CbOutcome ExecuteCorrect(const spyre_cb& cb);
    CbOutcome ExecuteCopy(const spyre_cb& cb, const Budget& budget);
    CbOutcome ExecuteCopyInline(const spyre_cb& cb, std::span<const uint8_t> payload);
    CbOutcome ExecuteSemWrite(const spyre_cb& cb);
    CbOutcome ExecuteSemWait(const spyre_cb& cb, const Budget& budget);

    RegisterFile& regs_;  // per-opcode counters
    const std::atomic<uint32_t>& watchdog_ms_;
    DeviceMemory memory_;
    ProgramExecutor programs_;
};

}  // namespace spyre::mockdev
