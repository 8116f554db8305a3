// SPDX-License-Identifier: Apache-2.0
// Operation dimensions and scales (seed 002): how each tensor of an operation
// takes part in its iteration space, and through the dim_map where each
// operation dimension lives in each tensor's device layout.
#pragma once

#include <string>
#include <vector>

#include "spyre/tensor/layout.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// Scale entries besides a host dimension index.
inline constexpr int kScaleAbsent = -1;  // broadcast, or reduced away, in this tensor
inline constexpr int kScaleElided = -3;  // the operation dimension has size 1 and is elided

struct OperationScales {
    std::vector<std::string> dim_names;  // "M", "K", "N", "B", or "d0", "d1", ...
    std::vector<int64_t> dim_sizes;      // the iteration space
    // One entry per tensor, inputs first, then the output; each has one
    // scale per operation dimension.
    std::vector<std::vector<int>> scales;
    std::vector<int64_t> output_size;    // host size of the result
};

// [M, K] @ [K, N] -> [M, N]. Throws InvalidArgument naming the mismatch.
OperationScales MatmulScales(const HostLayout& a, const HostLayout& b);
// [B, M, K] @ [B, K, N] -> [B, M, N].
OperationScales BatchedMatmulScales(const HostLayout& a, const HostLayout& b);
// Numpy broadcasting over any number of inputs (aligned at the last dimension).
OperationScales ElementwiseScales(const std::vector<HostLayout>& inputs);
// Reduction along `axis`; the output keeps that dimension with size 1 only
// if keep_dim.
OperationScales ReductionScales(const HostLayout& input, int axis, bool keep_dim);

// The index of host dimension h in the canonical form of `host` (size-1
// dimensions removed), or -1 if h has size 1.
int CanonicalDim(const HostLayout& host, int h);

// For each operation dimension, the device dimensions of one tensor that
// hold it, outer first (empty when the tensor does not have it): the
// "complete mapping chain" operation -> host -> device. Scales name host
// dimensions of `host`; the device layout describes its canonical form.
std::vector<std::vector<int>> OperationToDeviceDims(const std::vector<int>& scales, const HostLayout& host,
                                                    const DeviceLayout& device);

// Checks that the tensors of an operation fit together: every tensor that
// has an operation dimension has it with the operation's size (or 1 where it
// broadcasts), and tensors that carry the same operation dimension in their
// stick tile it the same way. Throws InvalidArgument naming the dimension
// and the tensors.
void CheckCompatible(const OperationScales& op, const std::vector<HostLayout>& hosts,
                     const std::vector<DeviceLayout>& devices);

}  // namespace spyre
SPYRE_API_END
