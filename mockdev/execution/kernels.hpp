// SPDX-License-Identifier: Apache-2.0
//
// The device's kernels: one function per op family, each running on
// operands the decoder has validated (shapes, dtypes and bounds), splitting
// its work into chunks across the card's cores. Each returns SPYRE_ERR_NONE,
// or why it stopped early (WATCHDOG, ABORTED).
#pragma once

#include <cstdint>

#include "execution/kernel_support.hpp"

namespace spyre::mockdev {

// C = A*B or C += A*B (fp32 BLAS; fp16 converted in blocks).
uint16_t RunMatmul(const KernelContext& ctx, const Tensor& a, const Tensor& b, const Tensor& c, bool accumulate);
// How RunMatmul splits an M x K x N matmul: chunks of rows (one chunk runs
// on the calling thread, more on the card's `workers`), and the blocks
// along N and K each BLAS call takes. `direct`: every operand is fp32 in
// place (no conversion scratch).
struct MatmulPlan {
    uint64_t rows_per_chunk;
    uint64_t chunks;
    uint64_t nb;  // block edge along N
    uint64_t kb;  // block edge along K
};
MatmulPlan PlanMatmul(uint64_t m, uint64_t k, uint64_t n, bool direct, unsigned workers);
// ADD, SUB, MUL, DIV with A and B broadcast to C.
uint16_t RunBinary(const KernelContext& ctx, uint16_t opcode, const Tensor& a, const Tensor& b, const Tensor& c);
// RELU, GELU.
uint16_t RunUnary(const KernelContext& ctx, uint16_t opcode, const Tensor& x, const Tensor& y);
// Y = X with dims permuted (any dtype).
uint16_t RunCopy(const KernelContext& ctx, const uint8_t* perm, const Tensor& x, const Tensor& y);
// Every element of Y = the low bytes of `value` (any dtype).
uint16_t RunFill(const KernelContext& ctx, uint64_t value, const Tensor& y);
// SOFTMAX along `axis`.
uint16_t RunSoftmax(const KernelContext& ctx, uint32_t axis, const Tensor& x, const Tensor& y);
// REDUCE_SUM, REDUCE_MAX along `axis` (Y keeps the axis with size 1).
uint16_t RunReduce(const KernelContext& ctx, uint16_t opcode, uint32_t axis, const Tensor& x, const Tensor& y);

}  // namespace spyre::mockdev
