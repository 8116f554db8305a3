// SPDX-License-Identifier: Apache-2.0
// Internal: the name of a program operand's dtype code (SPYRE_DTYPE_*), for
// messages. Header-only: the program-decoder fuzz target builds
// program_slots.cpp on its own.
#pragma once

#include <cstdint>

#include "spyre/uapi/spyre_program.h"

namespace spyre {

// "fp32", ...; nullptr for a code no dtype has.
inline const char* ProgramDTypeName(uint32_t code) noexcept {
    switch (code) {
    case SPYRE_DTYPE_FP16: return "fp16";
    case SPYRE_DTYPE_BF16: return "bf16";
    case SPYRE_DTYPE_FP32: return "fp32";
    case SPYRE_DTYPE_INT8: return "int8";
    case SPYRE_DTYPE_INT32: return "int32";
    default: return nullptr;
    }
}

}  // namespace spyre
