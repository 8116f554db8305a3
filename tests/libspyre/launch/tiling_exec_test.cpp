// SPDX-License-Identifier: Apache-2.0
// LaunchTiled on the device (seed 001 Workflow 4, open questions 1, 2, 5):
// 1-D and 2-D tiling, remainders, reduction tiling with accumulation, all of
// them at once, broadcasting elementwise tiles, and what cannot be tiled.
// Every result is checked against the CPU, and the device memory variant
// programs take goes back with the plan.
#include <cmath>

#include "spyre/plan/execution_plan.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/launch/tiling.hpp"
#include "spyre/compiler/plan_writer.hpp"
#include "stream_fixture.hpp"
#include "upper_layer_util.hpp"

using spyre::test::StreamTest;
using namespace spyre;
using namespace spyre::test;

namespace {

struct Tile {
    int64_t m, k, n;
};
struct Shape {
    int64_t m, k, n;
};

// Compiles a matmul for `tile`, runs it through LaunchKernel over `shape`
// and compares with the CPU. Returns the FlexStream ops LaunchKernel enqueued.
uint64_t RunTiledMatmul(Device& dev, SpyreStream& s, Tile tile, Shape shape,
                        TensorLayout layout = TensorLayout::Dense, bool direct = false) {
    SCOPED_TRACE(::testing::Message() << "tile " << tile.m << "x" << tile.k << "x" << tile.n << ", tensors "
                                      << shape.m << "x" << shape.k << "x" << shape.n);
    const MemoryFigures memory = Memory(dev);
    auto plan = LoadExecutionPlan(
        s, CompilerOutputFromKernel("mm", KernelBuilder(layout).Matmul(tile.m, tile.k, tile.n, DType::FP32)));
    const int64_t M = shape.m, K = shape.k, N = shape.n;
    const std::vector<float> a = RandomFloats(size_t(M * K), uint32_t(M * 7 + K)),
                             b = RandomFloats(size_t(K * N), uint32_t(N * 13 + K));
    std::vector<float> c(size_t(M * N), 12345.0f);
    std::vector<SpyreTensor> t = {SpyreTensor::FromHost(dev, s.flex_stream(), a.data(), {M, K}, DType::FP32, layout),
                                  SpyreTensor::FromHost(dev, s.flex_stream(), b.data(), {K, N}, DType::FP32, layout),
                                  SpyreTensor::Empty(dev, {M, N}, DType::FP32, layout)};
    s.Synchronize();
    const uint64_t before = s.flex_stream().enqueued();
    if (direct)
        s.LaunchTiled(plan->operations[0], t);
    else
        LaunchKernel(s, *plan, t);
    const uint64_t ops = s.flex_stream().enqueued() - before;
    t[2].CopyToHost(s.flex_stream(), c.data());
    s.Synchronize();
    EXPECT_EQ(CompareMatmul(c, CpuMatmul(a, b, M, K, N), M, N), 0);
    t.clear();
    plan.reset();
    EXPECT_EQ(Memory(dev), memory) << "variant programs not freed with the plan";
    return ops;
}

}  // namespace

TEST_F(StreamTest, TiledMatmulAlongM) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    // Evenly divided, no variants: exactly 3 ops per tile.
    EXPECT_EQ(RunTiledMatmul(dev, s, {128, 64, 64}, {512, 64, 64}), 12u);
    EXPECT_EQ(RunTiledMatmul(dev, s, {128, 64, 64}, {1024, 64, 64}), 24u);
    // The compiled shape exactly: LaunchTiled degenerates to Launch.
    EXPECT_EQ(RunTiledMatmul(dev, s, {128, 64, 64}, {128, 64, 64}, TensorLayout::Dense, /*direct=*/true), 3u);
}

TEST_F(StreamTest, TiledMatmulAlongMAndN) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    // Tiles of B and C are strided views (rows 256 apart, compiled 64):
    // every iteration runs a re-specialised program.
    const uint64_t ops = RunTiledMatmul(dev, s, {128, 64, 64}, {256, 64, 256});
    EXPECT_GE(ops, 8u * 3u);
    RunTiledMatmul(dev, s, {64, 32, 32}, {128, 32, 96});
}

TEST_F(StreamTest, TiledMatmulRemainders) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    RunTiledMatmul(dev, s, {128, 64, 64}, {300, 64, 64});   // M: 128, 128, 44
    RunTiledMatmul(dev, s, {64, 64, 64}, {64, 64, 100});    // N: 64, 36
    RunTiledMatmul(dev, s, {128, 64, 64}, {300, 64, 100});  // both
    RunTiledMatmul(dev, s, {128, 64, 64}, {129, 64, 64});   // a 1-row remainder
}

TEST_F(StreamTest, TiledMatmulAccumulatesAlongK) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    RunTiledMatmul(dev, s, {64, 128, 64}, {64, 512, 64});  // 4 partial sums into C
    RunTiledMatmul(dev, s, {64, 128, 64}, {64, 300, 64});  // with a K remainder of 44
}

TEST_F(StreamTest, TiledMatmulAlongMNKWithRemainders) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    RunTiledMatmul(dev, s, {128, 64, 64}, {300, 200, 150});  // 3 x 4 x 3 tiles, remainders 44, 8, 22
    RunTiledMatmul(dev, s, {32, 32, 32}, {33, 65, 97});      // remainders of 1 on every loop
}

TEST_F(StreamTest, TiledMatmulSticksLayout) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    RunTiledMatmul(dev, s, {64, 64, 64}, {200, 64, 64}, TensorLayout::Sticks);  // M with a remainder
    RunTiledMatmul(dev, s, {64, 64, 32}, {64, 64, 96}, TensorLayout::Sticks);   // N: tiles start on stick boundaries
    RunTiledMatmul(dev, s, {64, 64, 64}, {64, 192, 64}, TensorLayout::Sticks);  // K
}

TEST_F(StreamTest, TiledElementwiseAddBroadcastsARow) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    struct Case {
        int64_t tm, tn, m, n;
    };
    for (const Case& cs : {Case{128, 64, 512, 64}, Case{128, 64, 300, 200}, Case{64, 64, 64, 130}}) {
        SCOPED_TRACE(::testing::Message() << "tile " << cs.tm << "x" << cs.tn << ", tensors " << cs.m << "x" << cs.n);
        const MemoryFigures memory = Memory(dev);
        auto plan = LoadExecutionPlan(
            s, CompilerOutputFromKernel("add", KernelBuilder().Elementwise(ElementwiseOp::Add, {cs.tm, cs.tn},
                                                                           {1, cs.tn}, DType::FP32)));
        const std::vector<float> a = RandomFloats(size_t(cs.m * cs.n), 21), b = RandomFloats(size_t(cs.n), 22);
        std::vector<float> c(size_t(cs.m * cs.n), 0.0f);
        std::vector<SpyreTensor> t = {SpyreTensor::FromHost(dev, s.flex_stream(), a.data(), {cs.m, cs.n}, DType::FP32),
                                      SpyreTensor::FromHost(dev, s.flex_stream(), b.data(), {1, cs.n}, DType::FP32),
                                      SpyreTensor::Empty(dev, {cs.m, cs.n}, DType::FP32)};
        s.Synchronize();
        LaunchKernel(s, *plan, t);
        t[2].CopyToHost(s.flex_stream(), c.data());
        s.Synchronize();
        EXPECT_EQ(c, CpuAddBroadcast(a, b, cs.m, cs.n, true));  // one fp32 add: exact
        t.clear();
        plan.reset();
        EXPECT_EQ(Memory(dev), memory);
    }
}

TEST_F(StreamTest, TiledSoftmaxRowsWorkColumnsAreUnsupported) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    const int64_t R = 32, C = 64;
    auto plan = LoadExecutionPlan(s, CompilerOutputFromKernel("softmax", KernelBuilder().Softmax({R, C}, DType::FP32)));
    // More rows than the tile: every row is whole in one tile, so this tiles.
    {
        const int64_t rows = 100;
        const std::vector<float> x = RandomFloats(size_t(rows * C), 31);
        std::vector<float> y(size_t(rows * C), 0.0f);
        std::vector<SpyreTensor> t = {SpyreTensor::FromHost(dev, s.flex_stream(), x.data(), {rows, C}, DType::FP32),
                                      SpyreTensor::Empty(dev, {rows, C}, DType::FP32)};
        LaunchKernel(s, *plan, t);
        t[1].CopyToHost(s.flex_stream(), y.data());
        s.Synchronize();
        for (int64_t r = 0; r < rows; ++r) {
            double mx = -1e30, sum = 0;
            for (int64_t j = 0; j < C; ++j) mx = std::max(mx, double(x[size_t(r * C + j)]));
            for (int64_t j = 0; j < C; ++j) sum += std::exp(double(x[size_t(r * C + j)]) - mx);
            for (int64_t j = 0; j < C; ++j) {
                const double want = std::exp(double(x[size_t(r * C + j)]) - mx) / sum;
                ASSERT_NEAR(y[size_t(r * C + j)], want, 1e-5 * want + 1e-7) << "row " << r << " col " << j;
            }
        }
    }
    // Wider rows than the tile: a softmax row cannot be split.
    SpyreTensor x = SpyreTensor::Empty(dev, {R, 2 * C}, DType::FP32), y = SpyreTensor::Empty(dev, {R, 2 * C}, DType::FP32);
    s.Synchronize();
    const uint64_t before = s.flex_stream().enqueued();
    const MemoryFigures memory = Memory(dev);
    EXPECT_SPYRE_ERROR(LaunchKernel(s, *plan, std::vector<SpyreTensor>{x, y}), Unsupported, "untileable");
    EXPECT_SPYRE_ERROR(s.LaunchTiled(plan->operations[0], std::vector<SpyreTensor>{x, y}), Unsupported, "untileable");
    EXPECT_EQ(s.flex_stream().enqueued(), before);
    EXPECT_EQ(Memory(dev), memory);
}

// A split along K of a compute that is not all MATMUL would accumulate into
// a non-sum: the tiler refuses it (reduce along its axis is untileable).
TEST_F(StreamTest, TiledReduceAlongItsAxisIsUnsupported) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    auto plan = LoadExecutionPlan(
        s, CompilerOutputFromKernel("sum", KernelBuilder().Reduce(ReduceKind::Sum, {16, 64}, 1, DType::FP32)));
    SpyreTensor x = SpyreTensor::Empty(dev, {16, 128}, DType::FP32), y = SpyreTensor::Empty(dev, {16, 1}, DType::FP32);
    s.Synchronize();
    const uint64_t before = s.flex_stream().enqueued();
    EXPECT_SPYRE_ERROR(LaunchKernel(s, *plan, std::vector<SpyreTensor>{x, y}), Unsupported, "loop");
    EXPECT_EQ(s.flex_stream().enqueued(), before);
}
