// SPDX-License-Identifier: Apache-2.0
//
// What executing one CB produced: the CQE status and result, and for a fault
// the device address the error registers report (ERR_ADDR).
#pragma once

#include <cstdint>

#include "spyre/uapi/spyre_errors.h"

namespace spyre::mockdev {

struct CbOutcome {
    uint16_t status = SPYRE_ERR_NONE;  // SPYRE_ERR_*
    uint64_t result = 0;               // CQE result
    uint64_t fault_addr = 0;           // ERR_ADDR when status != 0
};

inline CbOutcome Fail(uint16_t status, uint64_t fault_addr = 0) { return CbOutcome{status, 0, fault_addr}; }

}  // namespace spyre::mockdev
