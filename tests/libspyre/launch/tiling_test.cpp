// SPDX-License-Identifier: Apache-2.0
// Tiled-execution planning (PlanTiling, SpecializeProgram): iterations,
// offsets, variants and errors, plus a CPU emulation of a tiled matmul that
// uses nothing but the plan and the specialised programs.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <random>

#include "spyre/error.hpp"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/launch/tiling.hpp"

namespace spyre {
namespace {

constexpr uint64_t MiB = 1 << 20;

TensorSpec Spec(const KernelTensor& t, std::string name, TensorRole role, std::vector<int> loops = {}) {
    TensorSpec s;
    s.name = std::move(name);
    s.shape = t.shape;
    s.strides = t.strides;
    s.dtype = t.dtype;
    s.role = role;
    s.loops = std::move(loops);
    s.bytes = t.bytes;
    return s;
}

SpyreCompute FromKernel(const BuiltKernel& k) {
    SpyreCompute c;
    c.name = k.name;
    c.binary = k.program;
    return c;
}

// C[m,n] = A[m,k] B[k,n]: loops m=0, k=1 (reduction), n=2.
SpyreCompute MatmulCompute(int64_t m, int64_t k, int64_t n, DType dtype = DType::FP32) {
    const BuiltKernel kernel = KernelBuilder().Matmul(m, k, n, dtype);
    SpyreCompute c = FromKernel(kernel);
    c.tensors = {Spec(kernel.inputs[0], "A", TensorRole::Input, {0, 1}),
                 Spec(kernel.inputs[1], "B", TensorRole::Input, {1, 2}),
                 Spec(kernel.outputs[0], "C", TensorRole::Output, {0, 2})};
    for (const TensorSpec& t : c.tensors) c.expected_input_shapes.push_back(t.shape);
    c.reduction_loops = {1};
    return c;
}

TiledTensor Dense(std::vector<int64_t> shape, DType dtype = DType::FP32) {
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t d = shape.size() - 1; d-- > 0;) strides[d] = strides[d + 1] * shape[d + 1];
    return {std::move(shape), std::move(strides), dtype};
}

std::vector<TiledTensor> Matmul(int64_t m, int64_t k, int64_t n, DType dtype = DType::FP32) {
    return {Dense({m, k}, dtype), Dense({k, n}, dtype), Dense({m, n}, dtype)};
}

// Runs `fn` and returns the spyre::Error it throws (fails if it does not).
template <typename Fn>
Error Catch(Fn fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e;
    }
    ADD_FAILURE() << "no spyre::Error thrown";
    return Error(ErrorKind::Internal, "none");
}

TEST(Tiling, RfcExampleTilesAlongM) {
    const SpyreCompute mm = MatmulCompute(1024, 1024, 1024);
    const TilingPlan plan = PlanTiling(mm, Matmul(4096, 1024, 1024));
    ASSERT_EQ(plan.loops.size(), 1u);
    EXPECT_EQ(plan.loops[0].loop, 0);
    EXPECT_EQ(plan.loops[0].extent, 4096);
    EXPECT_EQ(plan.loops[0].tile, 1024);
    EXPECT_EQ(plan.loops[0].count, 4);
    EXPECT_EQ(plan.loops[0].remainder, 0);
    EXPECT_FALSE(plan.loops[0].reduction);
    ASSERT_EQ(plan.variants.size(), 1u);
    EXPECT_TRUE(plan.variants[0].compiled);
    EXPECT_FALSE(plan.variants[0].accumulate);
    EXPECT_EQ(plan.variants[0].shapes, mm.expected_input_shapes);
    EXPECT_TRUE(plan.strides_match);
    EXPECT_FALSE(plan.exact);
    ASSERT_EQ(plan.iterations.size(), 4u);
    for (uint64_t i = 0; i < 4; ++i) {
        const TileIteration& it = plan.iterations[i];
        EXPECT_EQ(it.index, std::vector<int64_t>{int64_t(i)});
        EXPECT_EQ(it.variant, 0u);
        EXPECT_EQ(it.byte_offsets, (std::vector<uint64_t>{i * 4 * MiB, 0, i * 4 * MiB})) << "iteration " << i;
    }
    const std::string text = Describe(plan);
    EXPECT_NE(text.find("4 iterations"), std::string::npos) << text;
    EXPECT_NE(text.find("4 tiles of 1024"), std::string::npos) << text;
}

TEST(Tiling, ExactMatchNeedsPlainLaunch) {
    const SpyreCompute mm = MatmulCompute(64, 32, 16, DType::FP16);
    const TilingPlan plan = PlanTiling(mm, Matmul(64, 32, 16, DType::FP16));
    EXPECT_TRUE(plan.exact);
    EXPECT_TRUE(plan.loops.empty());
    ASSERT_EQ(plan.iterations.size(), 1u);
    EXPECT_EQ(plan.iterations[0].byte_offsets, (std::vector<uint64_t>{0, 0, 0}));
    ASSERT_EQ(plan.variants.size(), 1u);
    EXPECT_TRUE(plan.variants[0].compiled);
}

TEST(Tiling, ExactShapesWithOtherStridesAreNotExact) {
    const SpyreCompute mm = MatmulCompute(64, 32, 16);
    std::vector<TiledTensor> t = Matmul(64, 32, 16);
    t[0].strides = {40, 1};  // A is a view into rows of 40
    const TilingPlan plan = PlanTiling(mm, t);
    EXPECT_FALSE(plan.exact);
    EXPECT_FALSE(plan.strides_match);
    ASSERT_EQ(plan.iterations.size(), 1u);
    EXPECT_FALSE(plan.variants[0].compiled);
}

TEST(Tiling, MAndNTiledNestMOutside) {
    const SpyreCompute mm = MatmulCompute(256, 128, 64);
    const TilingPlan plan = PlanTiling(mm, Matmul(512, 128, 192));  // m: 2 tiles, n: 3 tiles
    ASSERT_EQ(plan.loops.size(), 2u);
    EXPECT_EQ(plan.loops[0].loop, 0);
    EXPECT_EQ(plan.loops[0].count, 2);
    EXPECT_EQ(plan.loops[1].loop, 2);
    EXPECT_EQ(plan.loops[1].count, 3);
    EXPECT_FALSE(plan.strides_match);  // B and C rows are 192 long, compiled 64
    ASSERT_EQ(plan.variants.size(), 1u);
    EXPECT_FALSE(plan.variants[0].compiled);
    ASSERT_EQ(plan.iterations.size(), 6u);
    size_t i = 0;
    for (uint64_t m = 0; m < 2; ++m)
        for (uint64_t n = 0; n < 3; ++n, ++i) {
            const TileIteration& it = plan.iterations[i];
            EXPECT_EQ(it.index, (std::vector<int64_t>{int64_t(m), int64_t(n)})) << "iteration " << i;
            const uint64_t a = m * 256 * 128 * 4;
            const uint64_t b = n * 64 * 4;
            const uint64_t c = m * 256 * 192 * 4 + n * 64 * 4;
            EXPECT_EQ(it.byte_offsets, (std::vector<uint64_t>{a, b, c})) << "iteration " << i;
            EXPECT_EQ(it.variant, 0u);
        }
}

TEST(Tiling, StridedTileOfBWhenNTiled) {
    const SpyreCompute mm = MatmulCompute(64, 32, 16);
    const std::vector<TiledTensor> tensors = Matmul(64, 32, 48);
    const TilingPlan plan = PlanTiling(mm, tensors);
    ASSERT_EQ(plan.iterations.size(), 3u);
    EXPECT_FALSE(plan.strides_match);
    const ProgramImage image = ProgramImage::Decode(SpecializeProgram(mm.binary, mm, tensors, plan.variants[0]));
    ASSERT_EQ(image.operands.size(), 3u);
    // A keeps its compiled strides; B and C tiles are rows of the full 48-wide tensors.
    EXPECT_EQ(image.operands[0].strides[0], 32u);
    EXPECT_EQ(image.operands[1].strides[0], 48u);
    EXPECT_EQ(image.operands[2].strides[0], 48u);
    EXPECT_EQ(image.operands[1].strides[1], 1u);
    EXPECT_EQ(image.operands[1].shape[0], 32u);
    EXPECT_EQ(image.operands[1].shape[1], 16u);
    EXPECT_EQ(image.operands[2].shape[1], 16u);
}

TEST(Tiling, RemainderGetsASmallerVariant) {
    const SpyreCompute mm = MatmulCompute(1024, 1024, 1024);
    const std::vector<TiledTensor> tensors = Matmul(4000, 1024, 1024);
    const TilingPlan plan = PlanTiling(mm, tensors);
    ASSERT_EQ(plan.loops.size(), 1u);
    EXPECT_EQ(plan.loops[0].count, 4);
    EXPECT_EQ(plan.loops[0].remainder, 928);
    ASSERT_EQ(plan.iterations.size(), 4u);
    ASSERT_EQ(plan.variants.size(), 2u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(plan.iterations[i].variant, 0u);
    EXPECT_EQ(plan.iterations[3].variant, 1u);
    EXPECT_EQ(plan.iterations[3].byte_offsets, (std::vector<uint64_t>{12 * MiB, 0, 12 * MiB}));
    const TileVariant& last = plan.variants[1];
    EXPECT_FALSE(last.compiled);
    EXPECT_FALSE(last.accumulate);
    EXPECT_EQ(last.shapes, (std::vector<std::vector<int64_t>>{{928, 1024}, {1024, 1024}, {928, 1024}}));

    const std::vector<uint8_t> program = SpecializeProgram(mm.binary, mm, tensors, last);
    const ProgramImage image = ProgramImage::Decode(program);  // verifies framing and checksum
    spyre_program_header h;
    std::memcpy(&h, program.data(), sizeof h);
    EXPECT_EQ(h.checksum, uapi::ProgramChecksum(program.data(), program.size()));
    ASSERT_EQ(image.operands.size(), 3u);
    EXPECT_EQ(image.operands[0].shape[0], 928u);
    EXPECT_EQ(image.operands[0].shape[1], 1024u);
    EXPECT_EQ(image.operands[1].shape[0], 1024u);
    EXPECT_EQ(image.operands[2].shape[0], 928u);
    EXPECT_EQ(image.operands[2].shape[1], 1024u);
    EXPECT_EQ(image.ops[0].flags & SPYRE_PROG_OPF_ACCUMULATE, 0u);
    // Everything but the shapes is as compiled: relocations, addresses, ops.
    const ProgramImage compiled = ProgramImage::Decode(mm.binary);
    EXPECT_EQ(image.relocs.size(), compiled.relocs.size());
    EXPECT_EQ(image.operands[0].addr, 0u);

    // The full-tile variant re-specialised is the compiled binary itself.
    EXPECT_EQ(SpecializeProgram(mm.binary, mm, tensors, plan.variants[0]), mm.binary);
}

TEST(Tiling, ReductionTilingAccumulatesAfterTheFirstStep) {
    const SpyreCompute mm = MatmulCompute(1024, 1024, 1024);
    const std::vector<TiledTensor> tensors = Matmul(1024, 3072, 1024);
    const TilingPlan plan = PlanTiling(mm, tensors);
    ASSERT_EQ(plan.loops.size(), 1u);
    EXPECT_TRUE(plan.loops[0].reduction);
    ASSERT_EQ(plan.variants.size(), 2u);
    EXPECT_FALSE(plan.variants[0].accumulate);
    EXPECT_TRUE(plan.variants[1].accumulate);
    EXPECT_EQ(plan.variants[0].shapes, plan.variants[1].shapes);
    ASSERT_EQ(plan.iterations.size(), 3u);
    const uint32_t variants[] = {0, 1, 1};
    for (uint64_t k = 0; k < 3; ++k) {
        EXPECT_EQ(plan.iterations[k].variant, variants[k]);
        EXPECT_EQ(plan.iterations[k].byte_offsets, (std::vector<uint64_t>{k * 4096, k * 4 * MiB, 0}));
    }
    const ProgramImage first = ProgramImage::Decode(SpecializeProgram(mm.binary, mm, tensors, plan.variants[0]));
    const ProgramImage later = ProgramImage::Decode(SpecializeProgram(mm.binary, mm, tensors, plan.variants[1]));
    EXPECT_EQ(first.ops[0].flags & SPYRE_PROG_OPF_ACCUMULATE, 0u);
    EXPECT_EQ(later.ops[0].flags & SPYRE_PROG_OPF_ACCUMULATE, SPYRE_PROG_OPF_ACCUMULATE);
}

TEST(Tiling, ReductionLoopIsInnermost) {
    const SpyreCompute mm = MatmulCompute(8, 8, 8);
    const TilingPlan plan = PlanTiling(mm, Matmul(16, 16, 16));
    ASSERT_EQ(plan.loops.size(), 3u);
    EXPECT_EQ(plan.loops[0].loop, 0);  // m
    EXPECT_EQ(plan.loops[1].loop, 2);  // n
    EXPECT_EQ(plan.loops[2].loop, 1);  // k, innermost
    ASSERT_EQ(plan.iterations.size(), 8u);
    for (size_t i = 0; i < 8; i += 2) {
        // Both k steps into one C tile are adjacent: same C offset, first one plain.
        EXPECT_EQ(plan.iterations[i].byte_offsets[2], plan.iterations[i + 1].byte_offsets[2]);
        EXPECT_FALSE(plan.variants[plan.iterations[i].variant].accumulate);
        EXPECT_TRUE(plan.variants[plan.iterations[i + 1].variant].accumulate);
    }
}

TEST(Tiling, BroadcastDimIsNotTiled) {
    // C[32,64] = A[32,64] + B[1,64], run on 128 rows: B is reused as it is.
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {32, 64}, {1, 64}, DType::FP32);
    SpyreCompute c = FromKernel(add);
    c.tensors = {Spec(add.inputs[0], "A", TensorRole::Input), Spec(add.inputs[1], "B", TensorRole::Input),
                 Spec(add.outputs[0], "C", TensorRole::Output)};
    const TilingPlan plan = PlanTiling(c, std::vector<TiledTensor>{Dense({128, 64}), Dense({1, 64}), Dense({128, 64})});
    ASSERT_EQ(plan.iterations.size(), 4u);
    for (uint64_t i = 0; i < 4; ++i)
        EXPECT_EQ(plan.iterations[i].byte_offsets, (std::vector<uint64_t>{i * 32 * 64 * 4, 0, i * 32 * 64 * 4}));

    // B of 4 rows would not broadcast the way the kernel was compiled.
    const Error e = Catch([&] {
        PlanTiling(c, std::vector<TiledTensor>{Dense({128, 64}), Dense({4, 64}), Dense({128, 64})});
    });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("tensor 1 (B) dim 0 is 4"), std::string::npos) << e.message();
}

TEST(Tiling, RejectsRankMismatch) {
    std::vector<TiledTensor> t = Matmul(4096, 1024, 1024);
    t[0] = Dense({4096, 1024, 1});
    const Error e = Catch([&] { PlanTiling(MatmulCompute(1024, 1024, 1024), t); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("tensor 0 (A) has rank 3"), std::string::npos) << e.message();
}

TEST(Tiling, RejectsDTypeMismatch) {
    std::vector<TiledTensor> t = Matmul(4096, 1024, 1024);
    t[1].dtype = DType::FP16;
    const Error e = Catch([&] { PlanTiling(MatmulCompute(1024, 1024, 1024), t); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("tensor 1 (B) is fp16"), std::string::npos) << e.message();
}

TEST(Tiling, RejectsTensorSmallerThanTile) {
    const Error e = Catch([&] { PlanTiling(MatmulCompute(1024, 1024, 1024), Matmul(512, 1024, 1024)); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("tensor 0 (A) dim 0 is 512, smaller than its compiled tile 1024"), std::string::npos)
        << e.message();
}

// The tile count of an extent near INT64_MAX was computed as (e + t - 1) / t,
// which wrapped: "loop 0 ... alone has -288230376151711743 tiles". It is
// counted without the wrap, and the plan is refused naming the real count.
TEST(Tiling, AnExtentNearInt64MaxIsRefusedWithItsTileCount) {
    const Error e = Catch([&] { PlanTiling(MatmulCompute(8, 8, 8), Matmul(INT64_MAX, 8, 8)); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("tiling needs more than 1048576 iterations"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("alone has " + std::to_string(INT64_MAX / 8 + 1) + " tiles"), std::string::npos)
        << e.message();
    EXPECT_EQ(PlanTiling(MatmulCompute(8, 8, 8), Matmul(9, 8, 8)).iterations.size(), 2u);  // ceil(9 / 8)
}

TEST(Tiling, RejectsInconsistentExtents) {
    std::vector<TiledTensor> t = Matmul(4096, 1024, 1024);
    t[2] = Dense({2048, 1024});
    const Error e = Catch([&] { PlanTiling(MatmulCompute(1024, 1024, 1024), t); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("loop 0"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("tensor 0 (A) dim 0 is 4096"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("tensor 2 (C) dim 0 is 2048"), std::string::npos) << e.message();
}

TEST(Tiling, RejectsSlotCountAndNegativeStrides) {
    const SpyreCompute mm = MatmulCompute(8, 8, 8);
    std::vector<TiledTensor> t = Matmul(8, 8, 8);
    t.pop_back();
    EXPECT_EQ(Catch([&] { PlanTiling(mm, t); }).kind(), ErrorKind::InvalidArgument);
    t = Matmul(16, 8, 8);
    t[0].strides = {-8, 1};
    EXPECT_EQ(Catch([&] { PlanTiling(mm, t); }).kind(), ErrorKind::InvalidArgument);
}

TEST(Tiling, UntileableLoopIsRefused) {
    const BuiltKernel sm = KernelBuilder().Softmax({8, 64}, DType::FP32);
    SpyreCompute c = FromKernel(sm);
    c.tensors = {Spec(sm.inputs[0], "X", TensorRole::Input), Spec(sm.outputs[0], "Y", TensorRole::Output)};
    c.untileable_loops = {1};  // the softmax axis
    // More rows are fine ...
    EXPECT_EQ(PlanTiling(c, std::vector<TiledTensor>{Dense({32, 64}), Dense({32, 64})}).iterations.size(), 4u);
    // ... a longer softmax axis is not.
    const Error e = Catch([&] { PlanTiling(c, std::vector<TiledTensor>{Dense({8, 128}), Dense({8, 128})}); });
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.message().find("loop 1 (X dim 1, Y dim 1)"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("untileable"), std::string::npos) << e.message();
}

// The program's own ops say which loops must stay whole and which dims go
// together, whatever the (hand-edited) metadata lists: a softmax whose
// untileable_loops were dropped, or a transpose whose loop map was made the
// identity, would otherwise tile into a wrong answer.
TEST(Tiling, TheProgramsOpsOverruleMetadataThatWouldTileWrong) {
    const BuiltKernel sm = KernelBuilder().Softmax({8, 64}, DType::FP32);
    SpyreCompute c = FromKernel(sm);
    c.tensors = {Spec(sm.inputs[0], "X", TensorRole::Input), Spec(sm.outputs[0], "Y", TensorRole::Output)};
    ASSERT_TRUE(c.untileable_loops.empty());
    EXPECT_EQ(PlanTiling(c, std::vector<TiledTensor>{Dense({32, 64}), Dense({32, 64})}).iterations.size(), 4u);
    Error e = Catch([&] { PlanTiling(c, std::vector<TiledTensor>{Dense({8, 128}), Dense({8, 128})}); });
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.message().find("loop 1 (X dim 1, Y dim 1) would be split (extent 128, tile 64)"), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("op 0 (softmax) needs all of tensor 0 (X) dim 1 (loop 1) at once"), std::string::npos)
        << e.message();

    // A square transpose with the identity loop map on Y: tiling would pair
    // X's tile (i, j) with Y's tile (i, j), not (j, i).
    const BuiltKernel tr = KernelBuilder().Transpose({32, 32}, {1, 0}, DType::FP32);
    SpyreCompute t = FromKernel(tr);
    t.tensors = {Spec(tr.inputs[0], "X", TensorRole::Input, {0, 1}), Spec(tr.outputs[0], "Y", TensorRole::Output, {0, 1})};
    e = Catch([&] { PlanTiling(t, std::vector<TiledTensor>{Dense({64, 64}), Dense({64, 64})}); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("op 0 (copy) pairs tensor 1 (Y) dim 0 (loop 0) with tensor 0 (X) dim 1 (loop 1)"),
              std::string::npos)
        << e.message();

    // Matmul whose B is mapped on (m, n) instead of (k, n): with M = K the
    // extents agree, and B's tiles would walk M.
    SpyreCompute mm = MatmulCompute(16, 16, 16);
    mm.tensors[1].loops = {0, 2};
    e = Catch([&] { PlanTiling(mm, Matmul(32, 32, 16)); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("op 0 (matmul) pairs tensor 0 (A) dim 1 (loop 1) with tensor 1 (B) dim 0 (loop 0)"),
              std::string::npos)
        << e.message();
    // The right map still tiles the same shapes.
    EXPECT_EQ(PlanTiling(MatmulCompute(16, 16, 16), Matmul(32, 32, 16)).iterations.size(), 4u);
}

TEST(Tiling, ReductionTilingOfANonMatmulIsRefused) {
    const BuiltKernel sum = KernelBuilder().Reduce(ReduceKind::Sum, {8, 64}, 1, DType::FP32);
    SpyreCompute c = FromKernel(sum);
    c.tensors = {Spec(sum.inputs[0], "X", TensorRole::Input), Spec(sum.outputs[0], "Y", TensorRole::Output)};
    const std::vector<TiledTensor> tensors{Dense({8, 128}), Dense({8, 1})};
    // Without reduction_loops the output would be overwritten by every tile.
    Error e = Catch([&] { PlanTiling(c, tensors); });
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.message().find("does not vary along it"), std::string::npos) << e.message();
    c.reduction_loops = {1};
    e = Catch([&] { PlanTiling(c, tensors); });
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.message().find("loop 1"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("MATMUL"), std::string::npos) << e.message();
}

TEST(Tiling, RejectsAbsurdCounts) {
    const BuiltKernel relu = KernelBuilder().Relu({1, 1}, DType::FP32);
    SpyreCompute c = FromKernel(relu);
    c.tensors = {Spec(relu.inputs[0], "X", TensorRole::Input), Spec(relu.outputs[0], "Y", TensorRole::Output)};
    const int64_t big = int64_t(1) << 11;  // 2^11 x 2^11 = 2^22 tiles
    Error e = Catch([&] { PlanTiling(c, std::vector<TiledTensor>{Dense({big, big}), Dense({big, big})}); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("iterations"), std::string::npos) << e.message();
    // Products that overflow 64 bits are caught too.
    const int64_t huge = int64_t(1) << 40;
    e = Catch([&] { PlanTiling(c, std::vector<TiledTensor>{Dense({huge, huge}), Dense({huge, huge})}); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    // So are offsets: few tiles, enormous strides.
    std::vector<TiledTensor> t{Dense({4, 1}), Dense({4, 1})};
    t[0].strides = {int64_t(1) << 62, 1};
    e = Catch([&] { PlanTiling(c, t); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("overflows"), std::string::npos) << e.message();
}

TEST(Tiling, StickLayoutNeedsAlignedTiles) {
    // fp32 sticks hold 32 elements: N tiles of 16 would start mid-stick.
    const BuiltKernel k = KernelBuilder(TensorLayout::Sticks).Matmul(8, 8, 16, DType::FP32);
    SpyreCompute c = FromKernel(k);
    c.tensors = {Spec(k.inputs[0], "A", TensorRole::Input, {0, 1}), Spec(k.inputs[1], "B", TensorRole::Input, {1, 2}),
                 Spec(k.outputs[0], "C", TensorRole::Output, {0, 2})};
    c.reduction_loops = {1};
    std::vector<TiledTensor> t = Matmul(16, 8, 32);
    for (TiledTensor& x : t) x.strides[0] = 32;  // rows are one stick
    const Error e = Catch([&] { PlanTiling(c, t); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    // The compiled operand is in sticks, whatever the tensor's own layout:
    // the message said the tensor "has a stick layout" of a dense one.
    EXPECT_NE(e.message().find("the compiled program reads it as a stick-layout operand, whose tiles must start at "
                               "multiples of 128 bytes, but its tiles along dim 1 start every 64 bytes"),
              std::string::npos)
        << e.message();
    // Tiling M only moves whole rows: fine.
    t = Matmul(16, 8, 16);
    for (TiledTensor& x : t) x.strides[0] = 32;
    EXPECT_EQ(PlanTiling(c, t).iterations.size(), 2u);
}

TEST(Tiling, SpecializeRejectsMismatchedVariant) {
    const SpyreCompute mm = MatmulCompute(8, 8, 8);
    const std::vector<TiledTensor> t = Matmul(16, 8, 8);
    TileVariant v = PlanTiling(mm, t).variants[0];
    v.shapes[0] = {32, 8};  // larger than the tensor
    EXPECT_EQ(Catch([&] { SpecializeProgram(mm.binary, mm, t, v); }).kind(), ErrorKind::InvalidArgument);
    v.shapes.pop_back();
    EXPECT_EQ(Catch([&] { SpecializeProgram(mm.binary, mm, t, v); }).kind(), ErrorKind::InvalidArgument);
}

// A SpyreCompute with the metadata the kernel builder emits (loops,
// reduction and untileable loops), as an ExecutionPlan would carry it.
SpyreCompute FromBuilder(const BuiltKernel& k) {
    SpyreCompute c = FromKernel(k);
    auto add = [&](const KernelTensor& t, TensorRole role) {
        TensorSpec s = Spec(t, "", role, t.loops);
        s.name = (role == TensorRole::Input ? "in" : "out") + std::to_string(c.tensors.size());
        c.tensors.push_back(std::move(s));
    };
    for (const KernelTensor& t : k.inputs) add(t, TensorRole::Input);
    for (const KernelTensor& t : k.outputs) add(t, TensorRole::Output);
    c.reduction_loops = k.reduction_loops;
    c.untileable_loops = k.untileable_loops;
    return c;
}

TEST(Tiling, UsesTheBuilderMetadata) {
    const KernelBuilder builder;
    // Matmul: K split accumulates.
    const SpyreCompute mm = FromBuilder(builder.Matmul(16, 16, 16, DType::FP32));
    TilingPlan plan = PlanTiling(mm, Matmul(32, 32, 16));
    ASSERT_EQ(plan.loops.size(), 2u);
    EXPECT_EQ(plan.loops[1].loop, 1);
    EXPECT_TRUE(plan.loops[1].reduction);

    // Elementwise with a lower-rank operand right-aligned: bias[64] is reused.
    const SpyreCompute add = FromBuilder(builder.Elementwise(ElementwiseOp::Add, {8, 64}, {64}, DType::FP32));
    plan = PlanTiling(add, std::vector<TiledTensor>{Dense({24, 64}), Dense({64}), Dense({24, 64})});
    ASSERT_EQ(plan.iterations.size(), 3u);
    EXPECT_EQ(plan.iterations[2].byte_offsets, (std::vector<uint64_t>{2 * 8 * 64 * 4, 0, 2 * 8 * 64 * 4}));
    const ProgramImage image =
        ProgramImage::Decode(SpecializeProgram(add.binary, add, std::vector<TiledTensor>{Dense({24, 64}), Dense({64}), Dense({24, 64})},
                                               plan.variants[0]));
    EXPECT_EQ(image.operands[1].rank, 2u);  // still right-aligned with a leading 1
    EXPECT_EQ(image.operands[1].shape[0], 1u);
    EXPECT_EQ(image.operands[1].shape[1], 64u);

    // Transpose: output dim i walks input dim perm[i], so both tensors move on both loops.
    const SpyreCompute tr = FromBuilder(builder.Transpose({32, 64}, {1, 0}, DType::FP32));
    plan = PlanTiling(tr, std::vector<TiledTensor>{Dense({64, 128}), Dense({128, 64})});
    ASSERT_EQ(plan.iterations.size(), 4u);
    for (const TileIteration& it : plan.iterations) {
        const uint64_t i0 = uint64_t(it.index[0]), i1 = uint64_t(it.index[1]);
        EXPECT_EQ(it.byte_offsets[0], (i0 * 32 * 128 + i1 * 64) * 4);
        EXPECT_EQ(it.byte_offsets[1], (i1 * 64 * 64 + i0 * 32) * 4);
    }

    // Softmax and reduce axes cannot be split; their other dims can.
    const SpyreCompute sm = FromBuilder(builder.Softmax({4, 32}, DType::FP32));
    EXPECT_EQ(PlanTiling(sm, std::vector<TiledTensor>{Dense({8, 32}), Dense({8, 32})}).iterations.size(), 2u);
    EXPECT_EQ(Catch([&] { PlanTiling(sm, std::vector<TiledTensor>{Dense({4, 64}), Dense({4, 64})}); }).kind(),
              ErrorKind::Unsupported);
    const SpyreCompute sum = FromBuilder(builder.Reduce(ReduceKind::Sum, {4, 32}, 1, DType::FP32));
    EXPECT_EQ(PlanTiling(sum, std::vector<TiledTensor>{Dense({8, 32}), Dense({8, 1})}).iterations.size(), 2u);
    EXPECT_EQ(Catch([&] { PlanTiling(sum, std::vector<TiledTensor>{Dense({4, 64}), Dense({4, 1})}); }).kind(),
              ErrorKind::Unsupported);
}

// The device's matmul as the program describes it: operands by descriptor
// (shape, strides in elements) at byte offsets into host buffers.
void EmulateMatmul(const ProgramImage& program, float* a, float* b, float* c) {
    ASSERT_EQ(program.ops.size(), 1u);
    const spyre_program_op& op = program.ops[0];
    ASSERT_EQ(op.opcode, SPYRE_PROG_OP_MATMUL);
    const spyre_program_operand& A = program.operands[op.operands[0]];
    const spyre_program_operand& B = program.operands[op.operands[1]];
    const spyre_program_operand& C = program.operands[op.operands[2]];
    const uint64_t m = A.shape[0], k = A.shape[1], n = B.shape[1];
    ASSERT_EQ(B.shape[0], k);
    ASSERT_EQ(C.shape[0], m);
    ASSERT_EQ(C.shape[1], n);
    const bool accumulate = op.flags & SPYRE_PROG_OPF_ACCUMULATE;
    for (uint64_t i = 0; i < m; ++i)
        for (uint64_t j = 0; j < n; ++j) {
            float& out = c[i * C.strides[0] + j * C.strides[1]];
            float sum = accumulate ? out : 0.0f;
            for (uint64_t p = 0; p < k; ++p) sum += a[i * A.strides[0] + p * A.strides[1]] * b[p * B.strides[0] + j * B.strides[1]];
            out = sum;
        }
}

TEST(Tiling, CpuEmulationMatchesFullMatmul) {
    // m=70, k=50, n=30 with tiles m=32, k=16, n=8: remainders on every loop.
    const int64_t M = 70, K = 50, N = 30;
    const SpyreCompute mm = MatmulCompute(32, 16, 8);
    const std::vector<TiledTensor> tensors = Matmul(M, K, N);
    const TilingPlan plan = PlanTiling(mm, tensors);
    ASSERT_EQ(plan.iterations.size(), size_t(3 * 4 * 4));
    // Partial m (2) x partial n (2) x {first k step, later full k step, last partial k step} (3).
    EXPECT_EQ(plan.variants.size(), 12u);
    std::vector<ProgramImage> programs;
    for (const TileVariant& v : plan.variants)
        programs.push_back(ProgramImage::Decode(SpecializeProgram(mm.binary, mm, tensors, v)));

    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> a(size_t(M * K)), b(size_t(K * N)), c(size_t(M * N), 1234.0f), want(size_t(M * N), 0.0f);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
            for (int64_t p = 0; p < K; ++p) want[size_t(i * N + j)] += a[size_t(i * K + p)] * b[size_t(p * N + j)];

    auto at = [](std::vector<float>& buf, uint64_t offset) {
        EXPECT_EQ(offset % sizeof(float), 0u);
        EXPECT_LT(offset, buf.size() * sizeof(float));
        return reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(buf.data()) + offset);
    };
    for (const TileIteration& it : plan.iterations) {
        EmulateMatmul(programs[it.variant], at(a, it.byte_offsets[0]), at(b, it.byte_offsets[1]),
                      at(c, it.byte_offsets[2]));
        if (HasFatalFailure()) return;
    }
    for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], want[i], 1e-4) << "element " << i;
}

}  // namespace
}  // namespace spyre
