// SPDX-License-Identifier: Apache-2.0
// The compiler's side of the on-disk plan format (docs/execution_plan.md):
// built kernels -> CompilerOutput, which ExecutionPlan reads. The runtime
// never includes this header; it knows only CompilerOutput.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/plan/execution_plan.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// How the kernel builder writes compiler output: each kernel becomes one
// operation named by the pair's first member, with its own tensors
// ("<op>.input0", ..., "<op>.output0"), its compute blob "<op>.bin" and its
// correction blob "<op>.correction.bin". Operation names must be distinct
// plain file names: InvalidArgument otherwise.
CompilerOutput CompilerOutputFromKernels(const std::string& plan_name,
                                         const std::vector<std::pair<std::string, BuiltKernel>>& kernels,
                                         const std::vector<InitPacket>& init_packets = {});
// One kernel, operation and plan both named `name`.
CompilerOutput CompilerOutputFromKernel(const std::string& name, const BuiltKernel& kernel);

}  // namespace spyre
SPYRE_API_END
