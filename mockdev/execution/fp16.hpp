// SPDX-License-Identifier: Apache-2.0
//
// Block conversion between IEEE binary16 (fp16) and binary32, the way the
// matmul feeds fp16 operands to an fp32 BLAS. Uses the F16C instructions
// where the CPU has them, else GCC's _Float16; both round to nearest even
// and keep subnormals, infinities and NaNs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace spyre::mockdev {

// Exact: every half is a float.
void HalfToFloat(const uint16_t* src, float* dst, size_t n);
// Rounds to nearest, ties to even; too large -> infinity; NaN stays NaN.
void FloatToHalf(const float* src, uint16_t* dst, size_t n);

}  // namespace spyre::mockdev
