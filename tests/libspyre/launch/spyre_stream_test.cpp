// SPDX-License-Identifier: Apache-2.0
// SpyreStream end to end (seed 001): Workflow 1 tensor round trips, the
// Example 1 / Example 2 decompositions, LaunchKernel routing (Launch vs
// LaunchTiled, Workflow 5), bad input that must enqueue nothing, and two
// streams sharing one loaded plan. Every result is checked against the CPU.
#include <cstring>
#include <numeric>
#include <thread>

#include "spyre/plan/execution_plan.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/compiler/plan_writer.hpp"
#include "stream_fixture.hpp"
#include "upper_layer_util.hpp"

using spyre::test::StreamTest;
using namespace spyre;
using namespace spyre::test;

namespace {

std::shared_ptr<const ExecutionPlan> LoadMatmul(SpyreStream& s, int64_t m, int64_t k, int64_t n,
                                                const std::string& name = "mm") {
    return LoadExecutionPlan(s, CompilerOutputFromKernel(name, KernelBuilder().Matmul(m, k, n, DType::FP32)));
}

// C = A[M,K] x B[K,N] through LaunchKernel with a plan compiled for `plan`'s
// tile, A and B random from `seed`: the FlexStream ops LaunchKernel enqueued,
// and C as it came back.
struct MatmulRun {
    uint64_t ops = 0;
    std::vector<float> a, b, c;
};
MatmulRun LaunchMatmul(Device& dev, SpyreStream& s, const ExecutionPlan& plan, int64_t M, int64_t K, int64_t N,
                       uint32_t seed) {
    MatmulRun run{0, RandomFloats(size_t(M * K), seed), RandomFloats(size_t(K * N), seed + 1),
                  std::vector<float>(size_t(M * N), 0.0f)};
    std::vector<SpyreTensor> t = {SpyreTensor::FromHost(dev, s.flex_stream(), run.a.data(), {M, K}, DType::FP32),
                                  SpyreTensor::FromHost(dev, s.flex_stream(), run.b.data(), {K, N}, DType::FP32),
                                  SpyreTensor::Empty(dev, {M, N}, DType::FP32)};
    s.Synchronize();
    const uint64_t before = s.flex_stream().enqueued();
    LaunchKernel(s, plan, t);
    run.ops = s.flex_stream().enqueued() - before;
    t[2].CopyToHost(s.flex_stream(), run.c.data());
    s.Synchronize();
    return run;
}

}  // namespace

// ------------------------------------------------------------ Workflow 1

TEST_F(StreamTest, FromHostCopyToHostRoundTripsDenseAndSticks) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    const MemoryFigures baseline = Memory(dev);
    // Dims of size 1 inside and last too: a Sticks [40, 1] (each element a
    // stick of its own) was refused by a CopyToHost that left its last dim
    // out (found probing from outside).
    const std::vector<std::vector<int64_t>> shapes = {{1},       {10},      {32},      {33},         {3, 5},    {7, 32},
                                                      {4, 65},   {2, 3, 100}, {257, 129}, {40, 1},   {3, 5, 1},
                                                      {7, 1, 1}, {1, 3, 1}, {2, 1, 3}, {1, 1, 1}};
    for (TensorLayout layout : {TensorLayout::Dense, TensorLayout::Sticks}) {
        for (DType dtype : {DType::FP32, DType::FP16, DType::INT8}) {
            for (const auto& shape : shapes) {
                SCOPED_TRACE(::testing::Message() << (layout == TensorLayout::Dense ? "Dense " : "Sticks ")
                                                  << ToString(dtype) << " rank " << shape.size() << " last "
                                                  << shape.back());
                int64_t numel = 1;
                for (int64_t d : shape) numel *= d;
                const size_t bytes = size_t(numel) * ElementSize(dtype);
                std::vector<uint8_t> in(bytes);
                for (size_t i = 0; i < bytes; ++i) in[i] = uint8_t(i * 131 + 7);
                std::vector<uint8_t> out(bytes, 0xEE);
                {
                    SpyreTensor t = SpyreTensor::FromHost(dev, s, in.data(), shape, dtype, layout);
                    EXPECT_EQ(t.shape(), shape);
                    EXPECT_EQ(t.data_type(), dtype);
                    EXPECT_EQ(t.layout(), layout);
                    EXPECT_GE(t.size_bytes(), bytes);
                    if (layout == TensorLayout::Sticks && shape.size() > 1) {
                        EXPECT_EQ(t.stride()[shape.size() - 2] % 128, 0);
                    }
                    t.CopyToHost(s, out.data());
                    s.Synchronize();
                }
                EXPECT_EQ(in, out);
            }
        }
    }
    EXPECT_EQ(Memory(dev), baseline);  // every tensor freed its memory
}

// A tensor over memory of the caller's: strides that reach past its
// size_bytes are refused when it is made (CopyToHost read past its staging
// buffer, up to a crash), and CopyToHost refuses what is not row-major, the
// innermost dim included (strided and transposed views came back wrong).
TEST_F(StreamTest, CopyToHostRefusesTensorsItCannotCopyRightly) {
    Device dev = OpenDevice();
    FlexStream& s = dev.default_stream();
    DeviceBuffer buf = dev.AllocateBuffer(256);
    std::vector<float> data(64);
    std::iota(data.begin(), data.end(), 0.0f);
    s.CopyToDevice(data.data(), buf.handle(), 256);
    s.Synchronize();
    EXPECT_SPYRE_ERROR(SpyreTensor(buf.handle(), {64, 8}, {64, 4}, DType::FP32, 256), InvalidArgument,
                       "reaches 4064 bytes, more than its size_bytes 256");
    EXPECT_SPYRE_ERROR(SpyreTensor(buf.handle(), {1ll << 40, 1ll << 40}, {1ll << 40, 4}, DType::FP32, 256),
                       InvalidArgument, "reaches past 2^64 bytes");
    EXPECT_SPYRE_ERROR(SpyreTensor(buf.handle(), {4}, {-4}, DType::FP32, 256), InvalidArgument, "is negative");
    std::vector<float> out(64, -1.0f);
    EXPECT_SPYRE_ERROR(SpyreTensor(buf.handle(), {32}, {8}, DType::FP32, 256).CopyToHost(s, out.data()), Unsupported,
                       "dim 0's stride 8 is not the element size");
    EXPECT_SPYRE_ERROR(SpyreTensor(buf.handle(), {8, 8}, {4, 32}, DType::FP32, 256).CopyToHost(s, out.data()),
                       Unsupported, "not row-major");
    // A size_bytes past its allocation is refused before the staging buffer
    // is taken: 2^40 threw std::bad_alloc, and sizes that fit took and
    // zero-filled that much host memory first (found probing from outside).
    for (const uint64_t lie : {uint64_t(1) << 40, uint64_t(1) << 62, uint64_t(384)})
        EXPECT_SPYRE_ERROR(SpyreTensor(buf.handle(), {4, 8}, {64, 4}, DType::FP32, lie).CopyToHost(s, out.data()),
                           InvalidArgument, "runs past the end of its allocation of 256 bytes");
    // What it does copy is right: rows at a pitch, one row at any pitch.
    SpyreTensor padded(buf.handle(), {4, 8}, {64, 4}, DType::FP32, 256);
    padded.CopyToHost(s, out.data());
    SpyreTensor one_row(buf.handle(), {1, 8}, {4, 4}, DType::FP32, 32);
    std::vector<float> row(8, -1.0f);
    one_row.CopyToHost(s, row.data());
    s.Synchronize();
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 8; ++c) EXPECT_EQ(out[size_t(r * 8 + c)], data[size_t(r * 16 + c)]) << r << "," << c;
    EXPECT_EQ(row, std::vector<float>(data.begin(), data.begin() + 8));
    // A dim of size 1 moves to no element, whatever its stride (torch's
    // permute(1, 0, 2) of a [1, 2, 3] tensor): such a row-major tensor was
    // refused "not row-major (dim 0)" (found probing from outside).
    std::vector<float> six(6, -1.0f), one(1, -1.0f);
    SpyreTensor(buf.handle(), {2, 1, 3}, {12, 24, 4}, DType::FP32, 24).CopyToHost(s, six.data());
    SpyreTensor(buf.handle(), {1, 1, 1}, {28, 4, 12}, DType::FP32, 4).CopyToHost(s, one.data());
    SpyreTensor(buf.handle(), {2, 1, 3}, {32, 4, 4}, DType::FP32, 256).CopyToHost(s, out.data());  // rows padded
    s.Synchronize();
    EXPECT_EQ(six, std::vector<float>(data.begin(), data.begin() + 6));
    EXPECT_EQ(one[0], data[0]);
    EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 6), (std::vector<float>{0, 1, 2, 8, 9, 10}));
    EXPECT_SPYRE_ERROR(SpyreTensor(buf.handle(), {2, 1, 3}, {4, 24, 8}, DType::FP32, 256).CopyToHost(s, out.data()),
                       Unsupported, "dim 2's stride 8 is not the element size");
    EXPECT_SPYRE_ERROR(SpyreTensor(buf.handle(), {2, 1, 2, 3}, {12, 4, 48, 4}, DType::FP32, 256).CopyToHost(s, out.data()),
                       Unsupported, "not row-major (dim 0)");
}

// The stick padding of a tensor FromHost fills is zero (a kernel reading
// whole sticks must not see stale bytes), and the host buffer is only read
// within its numel * element size bytes (ASan checks the latter).
TEST_F(StreamTest, FromHostSticksPaddingIsZero) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{10}, std::vector<int64_t>{3, 10}}) {
        SCOPED_TRACE(shape.size());
        // Dirty the memory the tensor will get first.
        DeviceAllocation dirt = dev.allocator().Allocate(4096);
        std::vector<uint8_t> junk(4096, 0xCD);
        s.CopyToDevice(junk.data(), dirt.handle, 4096);
        s.Synchronize();
        dev.allocator().Free(dirt.handle);

        auto in = std::make_unique<float[]>(size_t(shape.size() == 1 ? 10 : 30));
        for (int i = 0; i < (shape.size() == 1 ? 10 : 30); ++i) in[size_t(i)] = float(i + 1);
        SpyreTensor t = SpyreTensor::FromHost(dev, s, in.get(), shape, DType::FP32, TensorLayout::Sticks);
        std::vector<float> raw(t.size_bytes() / 4, -1.0f);
        s.CopyFromDevice(raw.data(), t.device_handle(), t.size_bytes());
        s.Synchronize();
        const size_t rows = shape.size() == 1 ? 1 : 3;
        const size_t pitch = raw.size() / rows;
        ASSERT_EQ(pitch, 32u);
        for (size_t r = 0; r < rows; ++r)
            for (size_t j = 0; j < pitch; ++j)
                EXPECT_EQ(raw[r * pitch + j], j < 10 ? float(r * 10 + j + 1) : 0.0f) << "row " << r << " col " << j;
    }
}

// Images over the DMA engine's inline threshold (1 MiB) are copied
// asynchronously, after the scheduler has let go of the control block: the
// staging buffers the runtime packs a Sticks tensor into (FromHost) and
// unpacks it from (CopyToHost) must live until the DMA engine is done. Checked
// byte for byte: the device image row by row, and the round trip.
TEST_F(StreamTest, LargeLayoutConvertingCopiesKeepTheirStagingBuffersAlive) {
    Device dev = OpenDevice();
    FlexStream s = dev.CreateStream();
    const std::vector<std::vector<int64_t>> shapes = {{300, 1000}, {3, 257, 999}, {1200, 1000}};
    for (TensorLayout layout : {TensorLayout::Sticks, TensorLayout::Dense}) {
        for (const auto& shape : shapes) {
            SCOPED_TRACE(::testing::Message() << (layout == TensorLayout::Dense ? "Dense " : "Sticks ") << shape.size()
                                              << "-d, last " << shape.back());
            int64_t numel = 1;
            for (int64_t d : shape) numel *= d;
            const size_t row = size_t(shape.back()) * 4;
            const size_t rows = size_t(numel / shape.back());
            std::vector<uint8_t> in(size_t(numel) * 4);
            for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t((i * 2654435761u) >> 13);
            ASSERT_GT(in.size(), size_t(1) << 20) << "must take the DMA path";

            SpyreTensor t = SpyreTensor::FromHost(dev, s, in.data(), shape, DType::FP32, layout);
            s.Synchronize();
            const size_t pitch = size_t(t.stride()[shape.size() - 2]);
            EXPECT_EQ(pitch, layout == TensorLayout::Sticks ? (row + 127) / 128 * 128 : row);
            std::vector<uint8_t> image(t.size_bytes(), 0xEE);
            s.CopyFromDevice(image.data(), t.device_handle(), t.size_bytes());
            s.Synchronize();
            size_t bad_rows = 0, bad_padding = 0;
            for (size_t r = 0; r < rows; ++r) {
                bad_rows += std::memcmp(image.data() + r * pitch, in.data() + r * row, row) != 0;
                for (size_t j = row; j < pitch; ++j) bad_padding += image[r * pitch + j] != 0;
            }
            EXPECT_EQ(bad_rows, 0u);
            EXPECT_EQ(bad_padding, 0u);

            std::vector<uint8_t> out(in.size(), 0xEE);
            t.CopyToHost(s, out.data());
            s.Synchronize();
            EXPECT_TRUE(out == in) << "round trip differs";
        }
    }
}

// ------------------------------------------------------------ Examples 1 and 2

TEST_F(StreamTest, Example1PreprocessingOnlyOperationIsOneCopy) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    std::vector<float> host = RandomFloats(1000, 1), back(1000, 0);
    DeviceAllocation a = dev.allocator().Allocate(4000);
    const Operation load({PreProcessCompute(PreProcessCompute::CopyToDevice{host.data(), a.handle, 4000})});
    EXPECT_FALSE(load.compute().has_value());
    const uint64_t before = s.flex_stream().enqueued();
    s.Launch(load, std::span<const DeviceHandle>{});
    EXPECT_EQ(s.flex_stream().enqueued() - before, 1u);  // one FlexStream call, no Launch
    const Operation read({PreProcessCompute(PreProcessCompute::CopyFromDevice{back.data(), a.handle, 4000})});
    s.Launch(read, std::span<const DeviceHandle>{});
    EXPECT_EQ(s.flex_stream().enqueued() - before, 2u);
    s.Synchronize();
    EXPECT_EQ(host, back);
    dev.allocator().Free(a.handle);
}

TEST_F(StreamTest, Example2LoadedMatmulIsCopyCorrectCompute) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    const int64_t M = 256, K = 128, N = 192;
    auto plan = LoadMatmul(s, M, K, N);
    ASSERT_EQ(plan->operations.size(), 1u);
    const Operation& op = plan->operations[0];
    // Loading filled the handles: correction binary, its input table, compute binary.
    ASSERT_TRUE(op.compute() && op.compute()->device_handle());
    ASSERT_TRUE(op.correction && op.correction->binary_handle() && op.correction->input_handle());
    EXPECT_EQ(op.device_handles().size(), 3u);
    ASSERT_EQ(op.preprocess().size(), 2u);
    EXPECT_STREQ(op.preprocess()[0].name(), "CopyToDevice");
    EXPECT_STREQ(op.preprocess()[1].name(), "DeviceLaunch");
    EXPECT_EQ(op.compute()->expected_input_shapes,
              (std::vector<std::vector<int64_t>>{{M, K}, {K, N}, {M, N}}));

    const std::vector<float> a = RandomFloats(size_t(M * K), 2), b = RandomFloats(size_t(K * N), 3);
    std::vector<float> c(size_t(M * N), -7.0f);
    SpyreTensor ta = SpyreTensor::FromHost(dev, s.flex_stream(), a.data(), {M, K}, DType::FP32);
    SpyreTensor tb = SpyreTensor::FromHost(dev, s.flex_stream(), b.data(), {K, N}, DType::FP32);
    SpyreTensor tc = SpyreTensor::Empty(dev, {M, N}, DType::FP32);
    const std::vector<DeviceHandle> handles = {ta.device_handle(), tb.device_handle(), tc.device_handle()};
    const uint64_t before = s.flex_stream().enqueued();
    s.Launch(op, handles);
    EXPECT_EQ(s.flex_stream().enqueued() - before, 3u);  // copy offsets, launch correction, launch compute
    tc.CopyToHost(s.flex_stream(), c.data());
    s.Synchronize();
    EXPECT_EQ(CompareMatmul(c, CpuMatmul(a, b, M, K, N), M, N), 0);

    // Again with the operands swapped into other tensors: the correction
    // re-patches the same program.
    const std::vector<float> a2 = RandomFloats(size_t(M * K), 12);
    SpyreTensor ta2 = SpyreTensor::FromHost(dev, s.flex_stream(), a2.data(), {M, K}, DType::FP32);
    s.Launch(op, std::vector<SpyreTensor>{ta2, tb, tc});
    tc.CopyToHost(s.flex_stream(), c.data());
    s.Synchronize();
    EXPECT_EQ(CompareMatmul(c, CpuMatmul(a2, b, M, K, N), M, N), 0);
}

// ------------------------------------------------------------ LaunchKernel routing

TEST_F(StreamTest, LaunchKernelExactShapesIsOneLaunch) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    const int64_t M = 128, K = 256, N = 64;
    auto plan = LoadMatmul(s, M, K, N);
    const MemoryFigures memory = Memory(dev);
    const MatmulRun run = LaunchMatmul(dev, s, *plan, M, K, N, 4);
    EXPECT_EQ(run.ops, 3u);
    EXPECT_EQ(CompareMatmul(run.c, CpuMatmul(run.a, run.b, M, K, N), M, N), 0);
    EXPECT_EQ(Memory(dev), memory);
}

TEST_F(StreamTest, LaunchKernelLargerTensorsTileAlongM) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    const int64_t T = 128, M = 512, K = 128, N = 128;
    auto plan = LoadMatmul(s, T, K, N);
    const MemoryFigures memory = Memory(dev);
    const MatmulRun run = LaunchMatmul(dev, s, *plan, M, K, N, 6);
    // 512 / 128 = 4 iterations of copy -> correct -> compute, no variant programs.
    EXPECT_EQ(run.ops, 12u);
    EXPECT_EQ(CompareMatmul(run.c, CpuMatmul(run.a, run.b, M, K, N), M, N), 0);
    EXPECT_EQ(Memory(dev), memory);
}

// Workflow 5 at the RFC's size: A[4096,1024] x B[1024,1024], kernel compiled
// for [1024,1024] x [1024,1024]: 4 iterations, 12 FlexStream ops.
TEST_F(StreamTest, Workflow5EndToEnd) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    const int64_t T = 1024, M = 4096, K = 1024, N = 1024;
    auto plan = LoadMatmul(s, T, K, N, "workflow5");
    const MatmulRun run = LaunchMatmul(dev, s, *plan, M, K, N, 8);
    EXPECT_EQ(run.ops, 12u);
    // Rows around every tile boundary plus a spread of others.
    std::vector<int64_t> rows;
    for (int64_t tile = 0; tile < 4; ++tile)
        for (int64_t r : {int64_t(0), int64_t(1), int64_t(511), T - 2, T - 1}) rows.push_back(tile * T + r);
    for (int64_t r = 3; r < M; r += 97) rows.push_back(r);
    EXPECT_EQ(CompareMatmul(run.c, CpuMatmul(run.a, run.b, M, K, N, rows), M, N, rows), 0);
}

// ------------------------------------------------------------ bad input

TEST_F(StreamTest, BadInputIsRejectedBeforeAnythingIsEnqueued) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    const int64_t M = 64, K = 64, N = 64;
    const CompilerOutput out = CompilerOutputFromKernel("mm", KernelBuilder().Matmul(M, K, N, DType::FP32));
    auto plan = LoadExecutionPlan(s, out);
    const Operation& op = plan->operations[0];
    SpyreTensor a = SpyreTensor::Empty(dev, {M, K}, DType::FP32), b = SpyreTensor::Empty(dev, {K, N}, DType::FP32),
                c = SpyreTensor::Empty(dev, {M, N}, DType::FP32);
    SpyreTensor ai = SpyreTensor::Empty(dev, {M, K}, DType::INT32);  // same bytes, wrong dtype
    s.Synchronize();
    const uint64_t before = s.flex_stream().enqueued();

    // Wrong number of tensors.
    EXPECT_SPYRE_ERROR(s.Launch(op, std::vector<DeviceHandle>{a.device_handle(), b.device_handle()}), InvalidArgument,
                       "tensor");
    EXPECT_SPYRE_ERROR(s.Launch(op, std::vector<SpyreTensor>{a, b}), InvalidArgument, "tensor");
    EXPECT_SPYRE_ERROR(s.Launch(op, std::vector<SpyreTensor>{a, b, c, c}), InvalidArgument, "tensor");
    EXPECT_SPYRE_ERROR(s.LaunchTiled(op, std::vector<SpyreTensor>{a, b}), InvalidArgument, "tensor");
    EXPECT_SPYRE_ERROR(LaunchKernel(s, *plan, std::vector<SpyreTensor>{a, b}), InvalidArgument, "tensor");
    // Dtype mismatch.
    EXPECT_SPYRE_ERROR(s.Launch(op, std::vector<SpyreTensor>{ai, b, c}), InvalidArgument, "int32");
    EXPECT_SPYRE_ERROR(s.LaunchTiled(op, std::vector<SpyreTensor>{ai, b, c}), InvalidArgument, "int32");
    EXPECT_SPYRE_ERROR(LaunchKernel(s, *plan, std::vector<SpyreTensor>{ai, b, c}), InvalidArgument, "int32");
    // A tensor whose memory is smaller than the compute touches.
    SpyreTensor small = SpyreTensor::Empty(dev, {M / 2, K}, DType::FP32);
    EXPECT_THROW(s.Launch(op, std::vector<DeviceHandle>{small.device_handle(), b.device_handle(), c.device_handle()}),
                 Error);
    // An Operation that was never loaded (parsed, no device handles).
    const ExecutionPlan unloaded(out);
    EXPECT_SPYRE_ERROR(s.Launch(unloaded.operations[0], std::vector<SpyreTensor>{a, b, c}), InvalidArgument, "load");
    EXPECT_SPYRE_ERROR(s.LaunchTiled(unloaded.operations[0], std::vector<SpyreTensor>{a, b, c}), InvalidArgument,
                       "device");
    EXPECT_SPYRE_ERROR(LaunchKernel(s, unloaded, std::vector<SpyreTensor>{a, b, c}), InvalidArgument, "not loaded");
    // A tiled launch whose tensors cannot be tiled (A smaller than its tile).
    EXPECT_SPYRE_ERROR(LaunchKernel(s, *plan, std::vector<SpyreTensor>{small, b, c}), InvalidArgument, "smaller");

    EXPECT_EQ(s.flex_stream().enqueued(), before);
    EXPECT_EQ(s.flex_stream().Query(), StreamStatus::Idle);
    // The stream still works.
    std::vector<float> ha = RandomFloats(size_t(M * K), 10), hb = RandomFloats(size_t(K * N), 11), hc(size_t(M * N));
    s.flex_stream().CopyToDevice(ha.data(), a.device_handle(), ha.size() * 4);
    s.flex_stream().CopyToDevice(hb.data(), b.device_handle(), hb.size() * 4);
    LaunchKernel(s, *plan, std::vector<SpyreTensor>{a, b, c});
    c.CopyToHost(s.flex_stream(), hc.data());
    s.Synchronize();
    EXPECT_EQ(CompareMatmul(hc, CpuMatmul(ha, hb, M, K, N), M, N), 0);
}

// ------------------------------------------------------------ two streams, one plan

// Both streams patch the same compute program through the same correction
// table; each Operation's copy -> correct -> compute is one group, so no
// other stream's correction can land between a correction and its compute.
// With max_ring_inflight below a group's 3 CBs the group goes down in parts,
// and still nothing of another stream goes between them.
static void TwoStreamsShareOneLoadedPlan(Device dev) {
    SpyreStream loader(dev);
    const int64_t M = 64, K = 96, N = 32;
    auto plan = LoadMatmul(loader, M, K, N);
    constexpr int kStreams = 2, kRounds = 40;
    struct Job {
        std::vector<std::vector<float>> a;
        std::vector<float> b;
        std::vector<std::vector<float>> c;
        std::vector<SpyreTensor> ta, tc;
        std::optional<SpyreTensor> tb;
    };
    std::vector<Job> jobs(kStreams);
    for (int j = 0; j < kStreams; ++j) {
        Job& job = jobs[size_t(j)];
        job.b = RandomFloats(size_t(K * N), uint32_t(100 + j));
        job.tb = SpyreTensor::FromHost(dev, loader.flex_stream(), job.b.data(), {K, N}, DType::FP32);
        for (int r = 0; r < kRounds; ++r) {
            job.a.push_back(RandomFloats(size_t(M * K), uint32_t(1000 * j + r)));
            job.c.emplace_back(size_t(M * N), 0.0f);
            job.ta.push_back(SpyreTensor::FromHost(dev, loader.flex_stream(), job.a.back().data(), {M, K}, DType::FP32));
            job.tc.push_back(SpyreTensor::Empty(dev, {M, N}, DType::FP32));
        }
    }
    loader.Synchronize();
    std::vector<std::thread> threads;
    for (int j = 0; j < kStreams; ++j) {
        threads.emplace_back([&, j] {
            Job& job = jobs[size_t(j)];
            SpyreStream s(dev);
            for (int r = 0; r < kRounds; ++r) {
                LaunchKernel(s, *plan, std::vector<SpyreTensor>{job.ta[size_t(r)], *job.tb, job.tc[size_t(r)]});
                job.tc[size_t(r)].CopyToHost(s.flex_stream(), job.c[size_t(r)].data());
            }
            s.Synchronize();
        });
    }
    for (auto& t : threads) t.join();
    for (int j = 0; j < kStreams; ++j)
        for (int r = 0; r < kRounds; ++r) {
            SCOPED_TRACE(::testing::Message() << "stream " << j << " round " << r);
            const Job& job = jobs[size_t(j)];
            ASSERT_EQ(CompareMatmul(job.c[size_t(r)], CpuMatmul(job.a[size_t(r)], job.b, M, K, N), M, N), 0);
        }
}

TEST_F(StreamTest, TwoStreamsShareOneLoadedPlan) { TwoStreamsShareOneLoadedPlan(OpenDevice()); }

TEST_F(StreamTest, TwoStreamsShareOneLoadedPlanWithGroupsLargerThanTheRingBudget) {
    for (uint32_t inflight : {1u, 2u}) {
        SCOPED_TRACE(::testing::Message() << "max_ring_inflight " << inflight);
        DeviceOptions o;
        o.scheduler.max_ring_inflight = inflight;
        TwoStreamsShareOneLoadedPlan(OpenDevice(-1, o));
    }
}

// The same, tiled: each stream's iterations re-patch the shared program and
// the plan's shared variant programs (uploaded once, by the first launch).
TEST_F(StreamTest, TwoStreamsTiledOnOneLoadedPlan) {
    Device dev = OpenDevice();
    SpyreStream loader(dev);
    const int64_t T = 64, M = 200, K = 64, N = 48;  // 4 tiles, the last of 8 rows
    const MemoryFigures before_load = Memory(dev);
    auto plan = LoadMatmul(loader, T, K, N);
    constexpr int kStreams = 2, kRounds = 8;
    std::vector<std::vector<float>> a(kStreams), b(kStreams);
    std::vector<std::vector<std::vector<float>>> c(kStreams, std::vector<std::vector<float>>(kRounds));
    std::vector<std::vector<SpyreTensor>> tensors;
    for (int j = 0; j < kStreams; ++j) {
        a[size_t(j)] = RandomFloats(size_t(M * K), uint32_t(200 + j));
        b[size_t(j)] = RandomFloats(size_t(K * N), uint32_t(300 + j));
        tensors.push_back({SpyreTensor::FromHost(dev, loader.flex_stream(), a[size_t(j)].data(), {M, K}, DType::FP32),
                           SpyreTensor::FromHost(dev, loader.flex_stream(), b[size_t(j)].data(), {K, N}, DType::FP32),
                           SpyreTensor::Empty(dev, {M, N}, DType::FP32)});
        for (auto& v : c[size_t(j)]) v.assign(size_t(M * N), 0.0f);
    }
    loader.Synchronize();
    const MemoryFigures loaded = Memory(dev);
    std::vector<std::thread> threads;
    for (int j = 0; j < kStreams; ++j)
        threads.emplace_back([&, j] {
            SpyreStream s(dev);
            for (int r = 0; r < kRounds; ++r) {
                LaunchKernel(s, *plan, tensors[size_t(j)]);
                tensors[size_t(j)][2].CopyToHost(s.flex_stream(), c[size_t(j)][size_t(r)].data());
            }
            s.Synchronize();
        });
    for (auto& t : threads) t.join();
    for (int j = 0; j < kStreams; ++j) {
        const MatmulRef ref = CpuMatmul(a[size_t(j)], b[size_t(j)], M, K, N);
        for (int r = 0; r < kRounds; ++r) {
            SCOPED_TRACE(::testing::Message() << "stream " << j << " round " << r);
            ASSERT_EQ(CompareMatmul(c[size_t(j)][size_t(r)], ref, M, N), 0);
        }
    }
    // One variant (the 8-row remainder): program, correction, table.
    EXPECT_EQ(Memory(dev).live_allocations, loaded.live_allocations + 3);
    plan.reset();
    tensors.clear();
    EXPECT_EQ(Memory(dev), before_load);  // the variant programs went with the plan
}

// LaunchKernel validates every Operation of the plan before it enqueues any:
// a second Operation whose tensors cannot be tiled must not leave the first
// one running.
TEST_F(StreamTest, LaunchKernelEnqueuesNothingWhenALaterOperationCannotRun) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    KernelBuilder kb;
    auto plan = LoadExecutionPlan(
        s, CompilerOutputFromKernels("two", {{"mm", kb.Matmul(32, 32, 32, DType::FP32)},
                                             {"softmax", kb.Softmax({8, 16}, DType::FP32)}}));
    ASSERT_EQ(plan->tensor_input_metadata.size(), 5u);
    auto make = [&](std::vector<int64_t> shape) { return SpyreTensor::Empty(dev, std::move(shape), DType::FP32); };
    s.Synchronize();
    const uint64_t before = s.flex_stream().enqueued();
    // mm exact; softmax rows wider than its tile (untileable).
    EXPECT_SPYRE_ERROR(LaunchKernel(s, *plan, std::vector<SpyreTensor>{make({32, 32}), make({32, 32}), make({32, 32}),
                                                                        make({8, 32}), make({8, 32})}),
                       Unsupported, "untileable");
    // mm tiled (M 64); softmax smaller than its tile.
    EXPECT_SPYRE_ERROR(LaunchKernel(s, *plan, std::vector<SpyreTensor>{make({64, 32}), make({32, 32}), make({64, 32}),
                                                                        make({4, 16}), make({4, 16})}),
                       InvalidArgument, "smaller");
    EXPECT_EQ(s.flex_stream().enqueued(), before);
    s.Synchronize();
}

// Two threads loading equal compiler output at once get the same plan, and
// the loser's copy on the device is freed.
TEST_F(StreamTest, ConcurrentLoadsOfEqualOutputShareOnePlan) {
    Device dev = OpenDevice();
    const MemoryFigures baseline = Memory(dev);
    const CompilerOutput out = CompilerOutputFromKernel("mm", KernelBuilder().Matmul(128, 128, 128, DType::FP32));
    for (int round = 0; round < 5; ++round) {
        std::shared_ptr<const ExecutionPlan> p[2];
        std::thread t0([&] { SpyreStream s(dev); p[0] = LoadExecutionPlan(s, out); });
        std::thread t1([&] { SpyreStream s(dev); p[1] = LoadExecutionPlan(s, out); });
        t0.join();
        t1.join();
        EXPECT_EQ(p[0].get(), p[1].get());
        SpyreStream s(dev);
        const std::vector<float> a = RandomFloats(128 * 128, 13), b = RandomFloats(128 * 128, 14);
        std::vector<float> c(128 * 128);
        std::vector<SpyreTensor> t = {SpyreTensor::FromHost(dev, s.flex_stream(), a.data(), {128, 128}, DType::FP32),
                                      SpyreTensor::FromHost(dev, s.flex_stream(), b.data(), {128, 128}, DType::FP32),
                                      SpyreTensor::Empty(dev, {128, 128}, DType::FP32)};
        LaunchKernel(s, *p[1], t);
        t[2].CopyToHost(s.flex_stream(), c.data());
        s.Synchronize();
        EXPECT_EQ(CompareMatmul(c, CpuMatmul(a, b, 128, 128, 128), 128, 128), 0);
    }
    EXPECT_EQ(Memory(dev), baseline);
}
