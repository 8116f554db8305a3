// SPDX-License-Identifier: Apache-2.0
// The byte format pto_api_fuzz reads (and make_corpus writes): a header,
// then operations on the pto_* API, each an opcode byte and its operands.
//
//   header   u8 task ring size (1 + b % 16), u8 heap size (128 << b % 10)
//   ALLOC    u8 size class (kSizes), u8 low bits
//   FREE     u8 which buffer (of those allocated; past the end: a wild pointer)
//   SUBMIT   u8 kernel (kKernels, else unknown), u8 worker type (any value),
//            u8 param count (> kMaxParams: too many), then per parameter:
//            u8 kind (any value), u8 where (kWhere), u8 which, u8 size class,
//            u8 low bits, u8 spelling (0 buffer/size, 1 region, 2 both)
//   COMPLETE u8 which EXTERNAL task, u8 code (0: complete, else fail)
//   QUERY    u8 which task (state and output)
//   SCOPE_BEGIN, SCOPE_END, WAIT: no operands
//   RUN      u8 ops: the next ops run inside pto_run as its orchestration function
//   COPY     u8 direction (bit 0: 0 pto_copy_in, 1 pto_copy_out), u8 where,
//            u8 which, u8 size class, u8 low bits, u8 offset into the host
//            scratch buffer (kMemory + 256 bytes)
#pragma once

#include <cstdint>

namespace spyre::fuzz::pto {

enum Op : uint8_t { ALLOC, FREE, SUBMIT, COMPLETE, QUERY, SCOPE_BEGIN, SCOPE_END, WAIT, RUN, COPY, kOps };
// Kernels the harness registers: writes its outputs, fails with code 7,
// and one run by nobody (submitted as EXTERNAL).
enum Kernel : uint8_t { K_WRITE = 1, K_FAIL = 2, K_EXT = 3, kKernels = 4 };
// Where a parameter points.
enum Where : uint8_t { W_NULL, W_BUFFER, W_OUTPUT, W_MEMORY, W_OUTSIDE, kWhere };
// Size classes: small, up to the heap, the whole memory, near 2^64.
enum SizeClass : uint8_t { S_SMALL, S_HEAP, S_MEMORY, S_HUGE, kSizes };
constexpr int kMaxParams = 16;
constexpr uint64_t kMemory = 1 << 20;

}  // namespace spyre::fuzz::pto
