// SPDX-License-Identifier: Apache-2.0
#include "spyre/version.hpp"

#include "spyre/uapi/spyre_regs.h"

#ifndef SPYRE_VERSION_STRING
#define SPYRE_VERSION_STRING "0.1.0"
#endif

namespace spyre {

const char* Version() noexcept { return SPYRE_VERSION_STRING; }
unsigned ContractVersion() noexcept { return SPYRE_VERSION; }

}  // namespace spyre
