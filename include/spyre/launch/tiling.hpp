// SPDX-License-Identifier: Apache-2.0
// Tiled execution planning (seed 001 "Tiled Execution", LaunchTiled): given a
// compute compiled for tile-sized tensors and the actual, larger tensors,
// decide the iterations, each tensor's byte offset per iteration and the
// program variants (remainder tiles, accumulating reduction steps, actual
// strides) the iterations need. Pure host code; SpyreStream::LaunchTiled
// turns a plan into copy -> correction -> launch triples. docs/tiling.md
// explains the rules and the answers to the RFC's open questions.
#pragma once

#include <compare>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "spyre/tensor/layout.hpp"
#include "spyre/plan/operation.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// An actual tensor bound to one slot of a compute (slot i = compute.tensors[i]).
struct TiledTensor {
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;  // in elements, each >= 0
    DType dtype = DType::FP32;

    auto operator<=>(const TiledTensor&) const = default;
};

// One loop of the iteration space that is split into tiles (count > 1).
struct TileLoop {
    int loop = 0;            // iteration-space loop (TensorSpec::loops numbering)
    int64_t extent = 0;      // size of the actual tensors along it
    int64_t tile = 0;        // compiled size along it
    int64_t count = 0;       // tiles: ceil(extent / tile)
    int64_t remainder = 0;   // size of the last tile when it is partial (extent % tile), else 0
    bool reduction = false;  // in compute.reduction_loops: later steps accumulate
};

// One distinct program the plan needs.
struct TileVariant {
    std::vector<std::vector<int64_t>> shapes;  // per tensor slot: its tile shape in this variant
    // MATMUL ops accumulate (C += A*B): a reduction step after the first.
    // When false the compiled ACCUMULATE flags are kept as they are.
    bool accumulate = false;
    // The compiled binary runs this variant as it is (full tile, compiled
    // strides, no accumulation forced): no re-specialised program needed.
    bool compiled = false;
};

struct TileIteration {
    std::vector<int64_t> index;          // tile index per TilingPlan::loops entry
    std::vector<uint64_t> byte_offsets;  // per tensor slot, from the tensor's base address
    uint32_t variant = 0;                // into TilingPlan::variants
};

struct TilingPlan {
    // Only the loops that are split (count > 1), in nesting order: outermost
    // first, reduction loops innermost. Loops that fit in one tile are not
    // listed: every iteration covers them whole.
    std::vector<TileLoop> loops;
    // Deduplicated; variants[0] is the full-tile, non-accumulating one (the
    // first iteration always uses it).
    std::vector<TileVariant> variants;
    // Row-major over `loops`: the last (innermost) loop varies fastest, so
    // the partial sums into one output tile are consecutive.
    std::vector<TileIteration> iterations;
    // The actual strides equal the compiled ones on every dim with a tile
    // size > 1; when false every variant needs a re-specialised program.
    bool strides_match = true;
    // One iteration with compiled shapes and strides: plain Launch suffices.
    bool exact = false;
};

// Most iterations a plan may have: a larger count is almost certainly a shape
// typo, and would enqueue that many launches.
inline constexpr int64_t kMaxTileIterations = int64_t(1) << 20;

// Plans tiled execution of `compute` over `tensors` (one per slot, inputs then
// outputs). Throws Error InvalidArgument for tensors that do not fit the
// compute (count, rank, dtype, strides, a dim smaller than its tile,
// disagreeing extents, too many iterations, a loop map that puts two dims
// an op of the binary pairs on different loops) and Unsupported for tiling
// the compute cannot do (an untileable loop or the axis of a SOFTMAX or
// REDUCE op, a reduction loop of a compute that is not all MATMUL, a
// non-reduction loop an output does not vary along).
TilingPlan PlanTiling(const SpyreCompute& compute, std::span<const TiledTensor> tensors);

// The compute binary re-specialised for one variant: every relocated operand
// gets its slot's tile shape from the variant and the actual tensor's strides
// (on dims of size > 1; right-aligned into the operand's rank as the kernel
// builder lays operands out); with variant.accumulate every MATMUL op gets
// ACCUMULATE. Addresses are left for program correction. Re-encoded with a
// fresh checksum. Throws InvalidArgument if the binary does not match the
// compute's tensors.
std::vector<uint8_t> SpecializeProgram(std::span<const uint8_t> binary, const SpyreCompute& compute,
                                       std::span<const TiledTensor> tensors, const TileVariant& variant);

// A few lines for logs: loops, variants and the iteration count.
std::string Describe(const TilingPlan& plan);

}  // namespace spyre
SPYRE_API_END
