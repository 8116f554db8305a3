// SPDX-License-Identifier: Apache-2.0
// Program (seed 000): the synchronous layer over SpyreStream. Strict Launch
// validation, LaunchTiled, AddInstruction/RemoveInstruction, empty programs.
#include "spyre/plan/execution_plan.hpp"
#include "spyre/launch/program.hpp"
#include "spyre/compiler/plan_writer.hpp"
#include "refused_program.hpp"
#include "stream_fixture.hpp"
#include "upper_layer_util.hpp"

using spyre::test::StreamTest;
using namespace spyre;
using namespace spyre::test;

namespace {

TensorSpec Spec(const std::string& name, const KernelTensor& t, TensorRole role) {
    return TensorSpec{name, t.shape, t.strides, t.dtype, role, t.loops, t.bytes};
}

// A SpyreCompute for `kernel` with its addresses bound on the host (no
// correction), not yet on the device: AddInstruction copies it there.
SpyreCompute BoundCompute(const BuiltKernel& kernel, std::span<const uint64_t> addresses) {
    SpyreCompute c;
    c.binary = kernel.Bind(addresses);
    for (size_t i = 0; i < kernel.inputs.size(); ++i) {
        c.tensors.push_back(Spec("in" + std::to_string(i), kernel.inputs[i], TensorRole::Input));
        c.expected_input_shapes.push_back(kernel.inputs[i].shape);
    }
    for (size_t i = 0; i < kernel.outputs.size(); ++i) {
        c.tensors.push_back(Spec("out" + std::to_string(i), kernel.outputs[i], TensorRole::Output));
        c.expected_input_shapes.push_back(kernel.outputs[i].shape);
    }
    c.reduction_loops = kernel.reduction_loops;
    c.untileable_loops = kernel.untileable_loops;
    c.name = kernel.name;
    return c;
}

// The operands of an add bound on the host: x and y random, z filled with
// -7 (what a launch that ran nothing leaves), all on the device.
struct AddOperands {
    static constexpr int64_t n = 64;
    std::vector<float> x, y, sentinel;
    SpyreTensor tx, ty, tz;
    AddOperands(Device& dev, FlexStream& f, uint32_t seed)
        : x(RandomFloats(n, seed)),
          y(RandomFloats(n, seed + 1)),
          sentinel(n, -7.0f),
          tx(SpyreTensor::FromHost(dev, f, x.data(), {n}, DType::FP32)),
          ty(SpyreTensor::FromHost(dev, f, y.data(), {n}, DType::FP32)),
          tz(SpyreTensor::FromHost(dev, f, sentinel.data(), {n}, DType::FP32)) {
        f.Synchronize();
    }
    static uint64_t Address(Device& dev, const SpyreTensor& t) {
        return dev.allocator().DeviceAddress(t.device_handle(), t.size_bytes());
    }
};

}  // namespace

TEST_F(StreamTest, ProgramLaunchIsStrictAndCorrect) {
    Device dev = OpenDevice();
    const int64_t M = 128, K = 64, N = 96;
    SpyreStream loader(dev);
    auto plan = LoadExecutionPlan(loader, CompilerOutputFromKernel("mm", KernelBuilder().Matmul(M, K, N, DType::FP32)));
    Program program(dev, plan);
    ASSERT_EQ(program.instructions().size(), 1u);
    FlexStream& f = program.stream().flex_stream();

    const std::vector<float> a = RandomFloats(size_t(M * K), 61), b = RandomFloats(size_t(K * N), 62);
    std::vector<float> c(size_t(M * N));
    SpyreTensor ta = SpyreTensor::FromHost(dev, f, a.data(), {M, K}, DType::FP32);
    SpyreTensor tb = SpyreTensor::FromHost(dev, f, b.data(), {K, N}, DType::FP32);
    SpyreTensor tc = SpyreTensor::Empty(dev, {M, N}, DType::FP32);
    program.stream().Synchronize();
    const uint64_t before = f.enqueued();

    // Wrong shape: the tensor and the dimension are named.
    SpyreTensor big = SpyreTensor::Empty(dev, {2 * M, K}, DType::FP32);
    EXPECT_SPYRE_ERROR(program.Launch(std::vector<SpyreTensor>{big, tb, tc}), InvalidArgument, "dimension 0");
    EXPECT_SPYRE_ERROR(program.Launch(std::vector<SpyreTensor>{big, tb, tc}), InvalidArgument, "mm.input0");
    SpyreTensor wide = SpyreTensor::Empty(dev, {M, 2 * N}, DType::FP32);
    // (its dim 0 stride differs too, but the shape is what is wrong)
    EXPECT_SPYRE_ERROR(program.Launch(std::vector<SpyreTensor>{ta, tb, wide}), InvalidArgument, "dimension 1 is");
    EXPECT_SPYRE_ERROR(program.Launch(std::vector<SpyreTensor>{ta, tb, wide}), InvalidArgument, "mm.output0");
    // Wrong rank.
    SpyreTensor flat = SpyreTensor::Empty(dev, {M * K}, DType::FP32);
    EXPECT_SPYRE_ERROR(program.Launch(std::vector<SpyreTensor>{flat, tb, tc}), InvalidArgument, "rank");
    // Wrong stride: the right shape, rows 2K elements apart (a view into a wider tensor).
    SpyreTensor backing = SpyreTensor::Empty(dev, {M, 2 * K}, DType::FP32);
    const SpyreTensor strided(backing.device_handle(), {M, K}, {2 * K * 4, 4}, DType::FP32, backing.size_bytes());
    EXPECT_SPYRE_ERROR(program.Launch(std::vector<SpyreTensor>{strided, tb, tc}), InvalidArgument, "stride");
    // Wrong dtype.
    SpyreTensor half = SpyreTensor::Empty(dev, {M, K}, DType::FP16);
    EXPECT_SPYRE_ERROR(program.Launch(std::vector<SpyreTensor>{half, tb, tc}), InvalidArgument, "fp16");
    // Too few tensors, or too many (one would be silently ignored).
    EXPECT_SPYRE_ERROR(program.Launch(std::vector<SpyreTensor>{ta, tb}), InvalidArgument, "tensor");
    EXPECT_SPYRE_ERROR(program.Launch(std::vector<SpyreTensor>{ta, tb, tc, tc}), InvalidArgument, "takes 3 tensors, got 4");
    EXPECT_SPYRE_ERROR(program.LaunchTiled(std::vector<SpyreTensor>{ta, tb, tc, tc}), InvalidArgument,
                       "takes 3 tensors, got 4");
    EXPECT_EQ(f.enqueued(), before);  // nothing ran

    program.Launch(std::vector<SpyreTensor>{ta, tb, tc});
    EXPECT_EQ(f.enqueued() - before, 3u);
    EXPECT_EQ(f.Query(), StreamStatus::Idle);  // Launch waited
    tc.CopyToHost(f, c.data());
    program.stream().Synchronize();
    EXPECT_EQ(CompareMatmul(c, CpuMatmul(a, b, M, K, N), M, N), 0);

    // The strided view is fine for LaunchTiled (a re-specialised program).
    std::vector<float> wide_a(size_t(M * 2 * K), 0.0f);
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < K; ++j) wide_a[size_t(i * 2 * K + j)] = a[size_t(i * K + j)];
    f.CopyToDevice(wide_a.data(), backing.device_handle(), wide_a.size() * 4);
    std::fill(c.begin(), c.end(), 0.0f);
    program.LaunchTiled(std::vector<SpyreTensor>{strided, tb, tc});
    tc.CopyToHost(f, c.data());
    program.stream().Synchronize();
    EXPECT_EQ(CompareMatmul(c, CpuMatmul(a, b, M, K, N), M, N), 0);
}

TEST_F(StreamTest, ProgramLaunchTiledOverLargerTensors) {
    Device dev = OpenDevice();
    const int64_t T = 64, M = 200, K = 96, N = 80;
    SpyreStream loader(dev);
    const MemoryFigures before_load = Memory(dev);
    auto plan = LoadExecutionPlan(loader, CompilerOutputFromKernel("mm", KernelBuilder().Matmul(T, 32, 32, DType::FP32)));
    {
        Program program(dev, plan);
        FlexStream& f = program.stream().flex_stream();
        const std::vector<float> a = RandomFloats(size_t(M * K), 71), b = RandomFloats(size_t(K * N), 72);
        std::vector<float> c(size_t(M * N));
        std::vector<SpyreTensor> t = {SpyreTensor::FromHost(dev, f, a.data(), {M, K}, DType::FP32),
                                      SpyreTensor::FromHost(dev, f, b.data(), {K, N}, DType::FP32),
                                      SpyreTensor::Empty(dev, {M, N}, DType::FP32)};
        EXPECT_SPYRE_ERROR(program.Launch(t), InvalidArgument, "LaunchTiled");
        program.LaunchTiled(t);
        EXPECT_EQ(f.Query(), StreamStatus::Idle);
        t[2].CopyToHost(f, c.data());
        program.stream().Synchronize();
        EXPECT_EQ(CompareMatmul(c, CpuMatmul(a, b, M, K, N), M, N), 0);
    }
    plan.reset();
    EXPECT_EQ(Memory(dev), before_load);  // the tiling variants went with the plan
}

TEST_F(StreamTest, ProgramAddAndRemoveInstructions) {
    Device dev = OpenDevice();
    const MemoryFigures baseline = Memory(dev);
    const int64_t n = 64;
    KernelBuilder kb;
    FlexStream f = dev.CreateStream();
    const std::vector<float> x = RandomFloats(n, 81), y = RandomFloats(n, 82);
    std::vector<float> z(n, 0.0f);
    {
        SpyreTensor tx = SpyreTensor::FromHost(dev, f, x.data(), {n}, DType::FP32);
        SpyreTensor ty = SpyreTensor::FromHost(dev, f, y.data(), {n}, DType::FP32);
        SpyreTensor tz = SpyreTensor::Empty(dev, {n}, DType::FP32);
        SpyreTensor tw = SpyreTensor::Empty(dev, {n}, DType::FP32);
        f.Synchronize();
        auto addr = [&](const SpyreTensor& t) { return dev.allocator().DeviceAddress(t.device_handle(), t.size_bytes()); };
        // z = x + y, then w = z * y: two instructions with host-bound addresses.
        const std::vector<uint64_t> add_addrs = {addr(tx), addr(ty), addr(tz)};
        const std::vector<uint64_t> mul_addrs = {addr(tz), addr(ty), addr(tw)};
        const Instruction add(BoundCompute(kb.Elementwise(ElementwiseOp::Add, {n}, {n}, DType::FP32), add_addrs));
        const Instruction mul(BoundCompute(kb.Elementwise(ElementwiseOp::Mul, {n}, {n}, DType::FP32), mul_addrs));
        {
            Program program(dev);
            EXPECT_TRUE(program.instructions().empty());
            // An empty program launches nothing.
            program.Launch(std::vector<SpyreTensor>{});
            program.LaunchTiled(std::vector<SpyreTensor>{});
            EXPECT_EQ(program.stream().flex_stream().enqueued(), 0u);

            program.AddInstruction(add);
            program.AddInstruction(mul);
            ASSERT_EQ(program.instructions().size(), 2u);
            EXPECT_TRUE(program.instructions()[0].operation().compute()->device_handle().has_value());
            const std::vector<SpyreTensor> tensors = {tx, ty, tz};
            program.Launch(tensors);  // each instruction binds its first 3 tensors (shapes all [n])
            std::vector<float> w(n);
            tw.CopyToHost(f, w.data());
            tz.CopyToHost(f, z.data());
            f.Synchronize();
            for (int64_t i = 0; i < n; ++i) {
                EXPECT_EQ(z[size_t(i)], x[size_t(i)] + y[size_t(i)]) << i;
                EXPECT_EQ(w[size_t(i)], (x[size_t(i)] + y[size_t(i)]) * y[size_t(i)]) << i;
            }

            // Removing by the caller's Instruction works after it was loaded.
            program.RemoveInstruction(mul);
            ASSERT_EQ(program.instructions().size(), 1u);
            EXPECT_EQ(program.instructions()[0].id(), add.id());
            // A second removal, or an instruction never added: NotFound.
            EXPECT_SPYRE_ERROR(program.RemoveInstruction(mul), NotFound, "not in this program");
            const Instruction foreign(BoundCompute(kb.Relu({n}, DType::FP32), std::vector<uint64_t>{addr(tx), addr(tz)}));
            EXPECT_SPYRE_ERROR(program.RemoveInstruction(foreign), NotFound, "not in this program");

            // The remaining instruction still runs.
            const std::vector<float> zeros(n, 0.0f);
            f.CopyToDevice(zeros.data(), tz.device_handle(), n * 4);
            f.Synchronize();
            program.Launch(tensors);
            tz.CopyToHost(f, z.data());
            f.Synchronize();
            for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[size_t(i)], x[size_t(i)] + y[size_t(i)]) << i;
            program.RemoveInstruction(add);
            EXPECT_TRUE(program.instructions().empty());

            // An instruction with neither a device handle nor a binary.
            SpyreCompute nothing;
            EXPECT_SPYRE_ERROR(program.AddInstruction(Instruction(nothing)), InvalidArgument, "binary");
        }
    }
    EXPECT_EQ(Memory(dev), baseline);  // the program freed the binaries it copied
}

// A program bound in part on the host (one operand left at address 0, as
// compiled) was taken as bound and ran that operand at device address 0,
// where the first buffer a device handed out lived. No buffer is there now
// (SpyreAllocator::kNullGuard), so such a program is refused, and the
// buffers keep their bytes.
TEST_F(StreamTest, AProgramBoundInPartIsRefused) {
    Device dev = OpenDevice();
    FlexStream f = dev.CreateStream();
    const AddOperands ops(dev, f, 85);
    const int64_t n = ops.n;
    const std::vector<float>& x = ops.x, &y = ops.y;
    const SpyreTensor &tx = ops.tx, &ty = ops.ty, &tz = ops.tz;
    auto addr = [&](const SpyreTensor& t) { return ops.Address(dev, t); };
    for (const SpyreTensor* t : {&tx, &ty, &tz}) EXPECT_NE(addr(*t), 0u);
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {n}, {n}, DType::FP32);
    Program program(dev);
    for (const std::vector<uint64_t>& addrs : {std::vector<uint64_t>{addr(tx), addr(ty), 0},
                                               std::vector<uint64_t>{0, addr(ty), addr(tz)}})
        EXPECT_SPYRE_ERROR(program.AddInstruction(Instruction(BoundCompute(add, addrs))), InvalidArgument,
                           "its program has 1 relocation(s) for its tensors unbound (address 0 as compiled)");
    EXPECT_TRUE(program.instructions().empty());
    program.AddInstruction(Instruction(BoundCompute(add, std::vector<uint64_t>{addr(tx), addr(ty), addr(tz)})));
    program.Launch(std::vector<SpyreTensor>{tx, ty, tz});
    std::vector<float> z(n);
    tz.CopyToHost(f, z.data());
    f.Synchronize();
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[size_t(i)], x[size_t(i)] + y[size_t(i)]) << i;
}

// A program bound on the host holds addresses, not buffers: bound to a
// tensor freed since, it ran at the freed block (the next owner's bytes,
// once handed out again), and bound over a program image it overwrote that
// program. Every launch now checks its operands against the device's live
// memory, and nothing runs.
TEST_F(StreamTest, AProgramBoundToMemoryNoBufferHoldsIsRefused) {
    Device dev = OpenDevice();
    FlexStream f = dev.CreateStream();
    const AddOperands ops(dev, f, 87);
    const int64_t n = ops.n;
    const std::vector<float>& x = ops.x, &y = ops.y, &sentinel = ops.sentinel;
    const SpyreTensor &tx = ops.tx, &ty = ops.ty, &tz = ops.tz;
    auto addr = [&](const SpyreTensor& t) { return ops.Address(dev, t); };
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {n}, {n}, DType::FP32);
    Program program(dev);
    program.AddInstruction(Instruction(BoundCompute(add, std::vector<uint64_t>{addr(tx), addr(ty), addr(tz)})));
    const std::vector<SpyreTensor> tensors = {tx, ty, tz};

    const uint64_t freed = ~uint64_t(0);  // stands for a tensor freed after the binding
    const uint64_t image = dev.allocator().DeviceAddress(*program.instructions()[0].operation().compute()->device_handle(), 1);
    const struct {
        std::vector<uint64_t> addresses;
        const char* says;
    } cases[] = {
        {{addr(tx), addr(ty), freed}, "is not inside a live allocation"},
        {{freed, addr(ty), addr(tz)}, "is not inside a live allocation"},
        {{addr(tx), addr(ty), image}, "lies in memory the runtime keeps for a program image"},
        {{addr(tx), addr(ty), uint64_t(1) << 44}, "is in none of this function's memory regions"},
        // the tensor's block, but the operand runs past its end
        {{addr(tx), addr(ty), addr(tz) + 4}, "runs past the end of its allocation"},
    };
    for (const auto& c : cases) {
        std::optional<SpyreTensor> gone = SpyreTensor::Empty(dev, {n}, DType::FP32);
        std::vector<uint64_t> addresses = c.addresses;
        std::replace(addresses.begin(), addresses.end(), freed, addr(*gone));
        Program stale(dev);
        stale.AddInstruction(Instruction(BoundCompute(add, addresses)));
        gone.reset();
        const uint64_t loaded = stale.stream().flex_stream().enqueued();  // the binary's copy
        EXPECT_SPYRE_ERROR(stale.Launch(tensors), InvalidArgument, "runs its program as bound on the host, and its operand");
        EXPECT_SPYRE_ERROR(stale.Launch(tensors), InvalidArgument, c.says);
        SpyreStream stream(dev);
        EXPECT_SPYRE_ERROR(stream.Launch(stale.instructions()[0].operation(), tensors), InvalidArgument, c.says);
        EXPECT_EQ(stale.stream().flex_stream().enqueued(), loaded);
    }
    std::vector<float> z(n);
    tz.CopyToHost(f, z.data());
    f.Synchronize();
    EXPECT_EQ(z, sentinel);  // nothing ran
    program.Launch(tensors);  // the program whose image was named still runs
    tz.CopyToHost(f, z.data());
    f.Synchronize();
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[size_t(i)], x[size_t(i)] + y[size_t(i)]) << i;
}

// A binary that is no program image was taken by AddInstruction, and the
// next Launch failed with the device's PROGRAM_FORMAT: it is refused up
// front, as LoadExecutionPlan refuses one. A binary that decodes but that
// the device refuses (an op it does not know) still fails at Launch, and
// the program's stream keeps that error as the stream contract says
// (docs/streams.md, "Sticky errors"): every later Launch throws it, the
// instruction removed or not, until the stream is Reset; then it runs.
TEST_F(StreamTest, ProgramRefusesABinaryThatIsNoProgramAndKeepsALaunchFailureUntilReset) {
    Device dev = OpenDevice();
    const int64_t n = 64;
    FlexStream f = dev.CreateStream();
    const std::vector<float> x = RandomFloats(n, 83), y = RandomFloats(n, 84);
    SpyreTensor tx = SpyreTensor::FromHost(dev, f, x.data(), {n}, DType::FP32);
    SpyreTensor ty = SpyreTensor::FromHost(dev, f, y.data(), {n}, DType::FP32);
    SpyreTensor tz = SpyreTensor::Empty(dev, {n}, DType::FP32);
    f.Synchronize();
    Program program(dev);
    SpyreCompute junk;
    junk.name = "junk";
    junk.binary = {0xde, 0xad};
    EXPECT_SPYRE_ERROR(program.AddInstruction(Instruction(junk)), InvalidArgument,
                       "Program::AddInstruction: compute 'junk': its binary is not a program image: program of 2 bytes "
                       "is shorter than its header");
    EXPECT_TRUE(program.instructions().empty());

    SpyreCompute refused;
    refused.name = "refused";
    refused.binary = RefusedProgram(0);
    const Instruction bad(refused);
    program.AddInstruction(bad);
    EXPECT_SPYRE_ERROR(program.Launch(std::vector<SpyreTensor>{}), DeviceError, "");
    program.RemoveInstruction(bad);
    EXPECT_SPYRE_ERROR(program.Launch(std::vector<SpyreTensor>{}), DeviceError, "");  // the stream's, kept
    program.stream().flex_stream().Reset();
    program.Launch(std::vector<SpyreTensor>{});

    auto addr = [&](const SpyreTensor& t) { return dev.allocator().DeviceAddress(t.device_handle(), t.size_bytes()); };
    const std::vector<uint64_t> add_addrs = {addr(tx), addr(ty), addr(tz)};
    program.AddInstruction(Instruction(BoundCompute(KernelBuilder().Elementwise(ElementwiseOp::Add, {n}, {n}, DType::FP32),
                                                    add_addrs)));
    program.Launch(std::vector<SpyreTensor>{tx, ty, tz});
    std::vector<float> z(n);
    tz.CopyToHost(f, z.data());
    f.Synchronize();
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[size_t(i)], x[size_t(i)] + y[size_t(i)]) << i;
}

// Instructions taken from a loaded plan can be removed and re-added.
TEST_F(StreamTest, ProgramFromPlanInstructionsCanBeRemoved) {
    Device dev = OpenDevice();
    SpyreStream loader(dev);
    KernelBuilder kb;
    auto plan = LoadExecutionPlan(
        loader, CompilerOutputFromKernels("two", {{"mm", kb.Matmul(32, 32, 32, DType::FP32)},
                                                  {"add", kb.Elementwise(ElementwiseOp::Add, {8}, {8}, DType::FP32)}}));
    Program program(dev, plan);
    ASSERT_EQ(program.instructions().size(), 2u);
    const Instruction mm = program.instructions()[0];
    program.RemoveInstruction(mm);
    ASSERT_EQ(program.instructions().size(), 1u);
    FlexStream& f = program.stream().flex_stream();
    // Only "add" remains: it binds plan tensors 3..5.
    const std::vector<float> x = RandomFloats(8, 91), y = RandomFloats(8, 92);
    std::vector<float> z(8);
    std::vector<SpyreTensor> t = {SpyreTensor::Empty(dev, {32, 32}, DType::FP32), SpyreTensor::Empty(dev, {32, 32}, DType::FP32),
                                  SpyreTensor::Empty(dev, {32, 32}, DType::FP32), SpyreTensor::FromHost(dev, f, x.data(), {8}, DType::FP32),
                                  SpyreTensor::FromHost(dev, f, y.data(), {8}, DType::FP32), SpyreTensor::Empty(dev, {8}, DType::FP32)};
    const uint64_t before = f.enqueued();
    program.Launch(t);
    EXPECT_EQ(f.enqueued() - before, 3u);
    t[5].CopyToHost(f, z.data());
    program.stream().Synchronize();
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(z[i], x[i] + y[i]) << i;
    // Re-adding the same instruction appends it again.
    program.AddInstruction(mm);
    EXPECT_EQ(program.instructions().size(), 2u);
    EXPECT_EQ(program.instructions()[1].id(), mm.id());
}

// Program::LaunchTiled checks every instruction before running any: a
// failure leaves nothing half done (and nothing in flight when it throws).
TEST_F(StreamTest, ProgramLaunchTiledRunsNothingWhenAnInstructionCannotTile) {
    Device dev = OpenDevice();
    SpyreStream loader(dev);
    KernelBuilder kb;
    auto plan = LoadExecutionPlan(loader, CompilerOutputFromKernels("two", {{"mm", kb.Matmul(32, 32, 32, DType::FP32)},
                                                                           {"softmax", kb.Softmax({8, 16}, DType::FP32)}}));
    Program program(dev, plan);
    auto make = [&](std::vector<int64_t> shape) { return SpyreTensor::Empty(dev, std::move(shape), DType::FP32); };
    const uint64_t before = program.stream().flex_stream().enqueued();
    EXPECT_SPYRE_ERROR(program.LaunchTiled(std::vector<SpyreTensor>{make({64, 32}), make({32, 32}), make({64, 32}),
                                                                    make({8, 32}), make({8, 32})}),
                       Unsupported, "untileable");
    EXPECT_EQ(program.stream().flex_stream().enqueued(), before);
}

// A Program keeps the device's core alive: it runs, loads new instructions
// and frees them after the Device object is gone (it held a raw Device*
// before, which this dereferenced after the Device was destroyed).
TEST_F(StreamTest, ProgramOutlivesItsDevice) {
    const int64_t M = 64, K = 32, N = 48, n = 64;
    std::optional<Device> dev(OpenDevice());
    std::optional<Program> program, bare;
    const std::vector<float> a = RandomFloats(size_t(M * K), 91), b = RandomFloats(size_t(K * N), 92),
                             x = RandomFloats(n, 93), y = RandomFloats(n, 94);
    std::vector<float> c(size_t(M * N)), z(n);
    std::vector<SpyreTensor> mm, add;
    {
        SpyreStream loader(*dev);
        FlexStream& f = loader.flex_stream();
        program.emplace(*dev, LoadExecutionPlan(loader, CompilerOutputFromKernel("mm", KernelBuilder().Matmul(
                                                                                          M, K, N, DType::FP32))));
        mm = {SpyreTensor::FromHost(*dev, f, a.data(), {M, K}, DType::FP32),
              SpyreTensor::FromHost(*dev, f, b.data(), {K, N}, DType::FP32), SpyreTensor::Empty(*dev, {M, N}, DType::FP32)};
        add = {SpyreTensor::FromHost(*dev, f, x.data(), {n}, DType::FP32),
               SpyreTensor::FromHost(*dev, f, y.data(), {n}, DType::FP32), SpyreTensor::Empty(*dev, {n}, DType::FP32)};
        loader.Synchronize();
    }
    bare.emplace(*dev);
    std::vector<uint64_t> add_addrs;
    for (const SpyreTensor& t : add) add_addrs.push_back(dev->allocator().DeviceAddress(t.device_handle(), t.size_bytes()));
    dev.reset();

    program->Launch(mm);
    FlexStream& f = program->stream().flex_stream();
    mm[2].CopyToHost(f, c.data());
    f.Synchronize();
    EXPECT_EQ(CompareMatmul(c, CpuMatmul(a, b, M, K, N), M, N), 0);

    // Loading an instruction allocates on the device the Program keeps.
    bare->AddInstruction(Instruction(BoundCompute(KernelBuilder().Elementwise(ElementwiseOp::Add, {n}, {n}, DType::FP32),
                                                  add_addrs)));
    bare->Launch(add);
    add[2].CopyToHost(bare->stream().flex_stream(), z.data());
    bare->stream().Synchronize();
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(z[size_t(i)], x[size_t(i)] + y[size_t(i)]) << i;
    // Destroyed last: their binaries go back to a device only they keep.
    bare.reset();
    program.reset();
}
