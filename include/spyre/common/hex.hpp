// SPDX-License-Identifier: Apache-2.0
// Hex: how error messages print an address, a register value or a flag set
// ("0x1f"), the same way in every layer.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

inline std::string Hex(uint64_t v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
}

}  // namespace spyre
SPYRE_API_END
