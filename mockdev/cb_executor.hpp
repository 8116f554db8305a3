// SPDX-License-Identifier: Apache-2.0
//
// Validation and execution of one control block. The engine copies each CB
// out of the ring and hands it here; every opcode has its own executor in the
// dispatch so LAUNCH, COPY and the semaphore CBs slot in beside NOP.
#pragma once

#include <cstdint>

#include "register_file.hpp"
#include "spyre/uapi/spyre_cb.h"
#include "spyre/uapi/spyre_errors.h"

namespace spyre::mockdev {

struct CbOutcome {
    uint16_t status = SPYRE_ERR_NONE;  // SPYRE_ERR_*
    uint64_t result = 0;               // CQE result
    uint64_t fault_addr = 0;           // ERR_ADDR when status != 0
};

class CbExecutor {
public:
    explicit CbExecutor(RegisterFile& regs) : regs_(regs) {}

    // Validates and runs `cb`. Never throws: a device-model fault becomes
    // SPYRE_ERR_INTERNAL and the device goes on with the next CB.
    CbOutcome Execute(const spyre_cb& cb) noexcept;

private:
    CbOutcome Dispatch(const spyre_cb& cb);
    CbOutcome ExecuteNop(const spyre_cb& cb);

    RegisterFile& regs_;  // per-opcode counters
};

}  // namespace spyre::mockdev
