// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "spyre/export.h"
#include "spyre/uapi/spyre_regs.h"  // SPYRE_VERSION_GET_MAJOR/MINOR decode ContractVersion()

SPYRE_API_BEGIN

namespace spyre {

// The libspyre version, "MAJOR.MINOR.PATCH".
const char* Version() noexcept;
// The hardware contract version this build speaks, as SPYRE_VERSION.
unsigned ContractVersion() noexcept;

}  // namespace spyre
SPYRE_API_END
