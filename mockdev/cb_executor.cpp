// SPDX-License-Identifier: Apache-2.0
#include "cb_executor.hpp"

#include <algorithm>
#include <exception>
#include <iterator>

#include "log.hpp"

namespace spyre::mockdev {

namespace {

CbOutcome Fail(uint16_t status) { return CbOutcome{status, 0, 0}; }

bool IsContractOpcode(uint8_t op) {
    switch (op) {
    case SPYRE_OP_NOP:
    case SPYRE_OP_LAUNCH:
    case SPYRE_OP_CORRECT:
    case SPYRE_OP_COPY:
    case SPYRE_OP_COPY_INLINE:
    case SPYRE_OP_SEM_WRITE:
    case SPYRE_OP_SEM_WAIT: return true;
    default: return false;
    }
}

// Header checks common to every opcode. Until COPY_INLINE carries a payload,
// every CB occupies exactly one slot.
uint16_t ValidateHeader(const spyre_cb& cb) {
    if (!IsContractOpcode(cb.opcode)) return SPYRE_ERR_INVALID_OPCODE;
    if (cb.flags != 0 || cb.reserved0 != 0) return SPYRE_ERR_RESERVED_NONZERO;
    if (cb.slots != 1) return SPYRE_ERR_BAD_SLOT_COUNT;
    return SPYRE_ERR_NONE;
}

}  // namespace

CbOutcome CbExecutor::Execute(const spyre_cb& cb) noexcept {
    try {
        if (uint16_t status = ValidateHeader(cb); status != SPYRE_ERR_NONE) return Fail(status);
        return Dispatch(cb);
    } catch (const std::exception& e) {
        LOG_ERROR("executor fault on opcode 0x%02x: %s", unsigned(cb.opcode), e.what());
    } catch (...) {
        LOG_ERROR("executor fault on opcode 0x%02x", unsigned(cb.opcode));
    }
    return Fail(SPYRE_ERR_INTERNAL);
}

CbOutcome CbExecutor::Dispatch(const spyre_cb& cb) {
    switch (cb.opcode) {
    case SPYRE_OP_NOP: return ExecuteNop(cb);
    // Known to the contract, not executed by this device yet (CAPS says so).
    case SPYRE_OP_LAUNCH:
    case SPYRE_OP_CORRECT:
    case SPYRE_OP_COPY:
    case SPYRE_OP_COPY_INLINE:
    case SPYRE_OP_SEM_WRITE:
    case SPYRE_OP_SEM_WAIT: return Fail(SPYRE_ERR_UNSUPPORTED);
    default: return Fail(SPYRE_ERR_INVALID_OPCODE);
    }
}

CbOutcome CbExecutor::ExecuteNop(const spyre_cb& cb) {
    if (std::any_of(std::begin(cb.u.args), std::end(cb.u.args), [](uint64_t a) { return a != 0; }))
        return Fail(SPYRE_ERR_RESERVED_NONZERO);
    regs_.Add64(SPYRE_REG_CNT_NOPS, 1);
    return CbOutcome{};
}

}  // namespace spyre::mockdev
