// SPDX-License-Identifier: Apache-2.0
// Ready-made chip functions over one registered device kernel, for callers
// with no orchestration logic of their own (the examples, the Python front
// end's ChipFunction.matmul).
#pragma once

#include <cstdint>
#include <string>

#include "spyre/host/chip_executor.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// C[r x n] = A[r x k] * B[k x n] with arguments (A, B, C), fp32 row-major:
// A and C split into ctx.block_dim core tasks of `task_rows` rows each
// (rows of a row-major matrix are contiguous), each running `kernel_id`, a
// task_rows x k x n matmul program. Other arguments are InvalidArgument
// naming `name`, and so is a dim below 1 (when the function is made).
ChipFunction RowBlockMatmulChip(std::string name, int32_t kernel_id, int64_t task_rows, int64_t k, int64_t n);

// InvalidArgument ("<what><i> is int32, the kernel's operand <i> is fp32")
// when argument i's dtype is not the one operand i of `kernel_id`'s device
// program holds: the same bytes of another dtype compute garbage.
void CheckArgumentDTypes(const ChipContext& ctx, int32_t kernel_id, const std::string& what);

// InvalidArgument ("<what><i> is Out, but the kernel reads it: pass it as
// In or InOut") when one of the first `read` arguments, which the kernel
// reads, is Out: an Out argument is not uploaded, so the kernel would read
// whatever its device copy held. (One it writes, given as In, the runtime
// refuses at submit: Orchestrator::ConfineTasksTo.)
void CheckArgumentsRead(const ChipContext& ctx, size_t read, const std::string& what);

}  // namespace spyre
SPYRE_API_END
