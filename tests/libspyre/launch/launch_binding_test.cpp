// SPDX-License-Identifier: Apache-2.0
// The launch-binding step (libspyre/launch/launch_binding.hpp) and the
// per-Operation cache of tiling variants, seen from the public entry points:
// a repeated LaunchTiled of the same shapes uploads nothing, a new remainder
// adds one variant, the variants go with the plan, and a mismatched tensor
// gets the same message from SpyreStream::Launch/LaunchTiled, LaunchKernel
// and Program. Every result is checked against the CPU.
#include "spyre/compiler/plan_writer.hpp"
#include "spyre/launch/program.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/plan/execution_plan.hpp"
#include "stream_fixture.hpp"
#include "upper_layer_util.hpp"

using spyre::test::StreamTest;
using namespace spyre;
using namespace spyre::test;

namespace {

std::shared_ptr<const ExecutionPlan> LoadMatmul(SpyreStream& s, int64_t m, int64_t k, int64_t n) {
    return LoadExecutionPlan(s, CompilerOutputFromKernel("mm", KernelBuilder().Matmul(m, k, n, DType::FP32)));
}

// Allocations made so far on `dev` (every Allocate that succeeded, freed or not).
uint64_t Allocations(Device& dev) { return dev.allocator().Stats().allocations; }

struct Matmul {
    int64_t m, k, n;
    std::vector<float> a, b, c;
    std::vector<SpyreTensor> tensors;
};

Matmul MakeMatmul(Device& dev, SpyreStream& s, int64_t m, int64_t k, int64_t n) {
    Matmul mm{m, k, n, RandomFloats(size_t(m * k), uint32_t(m + 3 * k)), RandomFloats(size_t(k * n), uint32_t(n + 5 * k)),
              std::vector<float>(size_t(m * n), 0.0f), {}};
    mm.tensors = {SpyreTensor::FromHost(dev, s.flex_stream(), mm.a.data(), {m, k}, DType::FP32),
                  SpyreTensor::FromHost(dev, s.flex_stream(), mm.b.data(), {k, n}, DType::FP32),
                  SpyreTensor::Empty(dev, {m, n}, DType::FP32)};
    s.Synchronize();
    return mm;
}

// Runs LaunchTiled and checks C against the CPU; returns {allocations made,
// stream operations enqueued} by the launch itself.
std::pair<uint64_t, uint64_t> TiledAndChecked(Device& dev, SpyreStream& s, const Operation& op, Matmul& mm) {
    std::fill(mm.c.begin(), mm.c.end(), 0.0f);
    const uint64_t allocations = Allocations(dev), ops = s.flex_stream().enqueued();
    s.LaunchTiled(op, mm.tensors);
    const std::pair<uint64_t, uint64_t> made{Allocations(dev) - allocations, s.flex_stream().enqueued() - ops};
    mm.tensors[2].CopyToHost(s.flex_stream(), mm.c.data());
    s.Synchronize();
    EXPECT_EQ(CompareMatmul(mm.c, CpuMatmul(mm.a, mm.b, mm.m, mm.k, mm.n), mm.m, mm.n), 0);
    return made;
}

// The message of the spyre::Error `statement` throws ("" if none).
template <typename F>
std::string MessageOf(F statement) {
    try {
        statement();
    } catch (const Error& e) {
        return e.message();
    }
    ADD_FAILURE() << "no error";
    return "";
}

}  // namespace

// Tile 128x64x64 over 300x64x100: M and N have remainders and B, C are
// strided views, so every tile runs a re-specialised program. The first
// launch uploads them (3 allocations each: program, correction, table), a
// second one of the same shapes allocates and uploads nothing and enqueues
// exactly the tiles' groups again.
TEST_F(StreamTest, RepeatedLaunchTiledUploadsNothing) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    auto plan = LoadMatmul(s, 128, 64, 64);
    Matmul mm = MakeMatmul(dev, s, 300, 64, 100);
    const auto first = TiledAndChecked(dev, s, plan->operations[0], mm);
    EXPECT_GT(first.first, 0u);
    EXPECT_EQ(first.first % 3, 0u);
    const MemoryFigures memory = Memory(dev);
    for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE(round);
        const auto again = TiledAndChecked(dev, s, plan->operations[0], mm);
        EXPECT_EQ(again.first, 0u) << "a repeated LaunchTiled allocated";
        EXPECT_EQ(again.second, first.second) << "a repeated LaunchTiled enqueued other work";
        EXPECT_EQ(Memory(dev), memory);
    }
    // LaunchKernel and a Program over the same plan share its cache.
    const uint64_t before = Allocations(dev);
    LaunchKernel(s, *plan, mm.tensors);
    Program program(dev, plan);
    program.LaunchTiled(mm.tensors);
    s.Synchronize();
    EXPECT_EQ(Allocations(dev), before);
}

// With the compiled strides (N whole), only the partial last M tile needs a
// variant: a new remainder adds exactly one, an old one adds none.
TEST_F(StreamTest, ChangedRemainderAddsOneVariant) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    auto plan = LoadMatmul(s, 128, 64, 64);
    const Operation& op = plan->operations[0];
    Matmul m300 = MakeMatmul(dev, s, 300, 64, 64), m310 = MakeMatmul(dev, s, 310, 64, 64),
           m512 = MakeMatmul(dev, s, 512, 64, 64);
    EXPECT_EQ(TiledAndChecked(dev, s, op, m300).first, 3u);  // remainder 44
    EXPECT_EQ(TiledAndChecked(dev, s, op, m310).first, 3u);  // remainder 54: one more variant
    EXPECT_EQ(TiledAndChecked(dev, s, op, m300).first, 0u);
    EXPECT_EQ(TiledAndChecked(dev, s, op, m310).first, 0u);
    EXPECT_EQ(TiledAndChecked(dev, s, op, m512).first, 0u);  // whole tiles run the compiled program
}

// The variants live as long as the plan, and go with it.
TEST_F(StreamTest, TilingVariantsAreFreedWithThePlan) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    Matmul mm = MakeMatmul(dev, s, 200, 96, 80);
    const MemoryFigures before_load = Memory(dev);
    auto plan = LoadMatmul(s, 64, 32, 32);
    const MemoryFigures loaded = Memory(dev);
    TiledAndChecked(dev, s, plan->operations[0], mm);  // M, K and N remainders
    EXPECT_GT(Memory(dev).live_allocations, loaded.live_allocations);
    // A copy of the Operation keeps its variants (and its binaries) alive.
    std::optional<Operation> copy(plan->operations[0]);
    plan.reset();
    EXPECT_EQ(TiledAndChecked(dev, s, *copy, mm).first, 0u);
    copy.reset();
    EXPECT_EQ(Memory(dev), before_load);
}

// A copy of a loaded Operation edited to smaller tensors still runs the
// program on the device, compiled for the old ones: launches check against
// the Operation as loaded. (They checked the copy's edited specs, and the
// program wrote 32 rows into a 16-row C.)
TEST_F(StreamTest, AnEditedCopyOfALoadedOperationIsCheckedAsLoaded) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    auto plan = LoadMatmul(s, 32, 32, 32);
    Operation copy = plan->operations[0];
    for (size_t t : {size_t(0), size_t(2)}) {  // A and C: 16 rows
        TensorSpec& spec = copy.compute()->tensors[t];
        spec.shape[0] = 16;
        spec.bytes /= 2;
    }
    const std::vector<SpyreTensor> half = {SpyreTensor::Empty(dev, {16, 32}, DType::FP32),
                                           SpyreTensor::Empty(dev, {32, 32}, DType::FP32),
                                           SpyreTensor::Empty(dev, {16, 32}, DType::FP32)};
    for (bool tiled : {false, true}) {
        const std::string message = MessageOf([&] { tiled ? s.LaunchTiled(copy, half) : s.Launch(copy, half); });
        EXPECT_NE(message.find(tiled ? "smaller" : "dimension 0 is 16, compiled for 32"), std::string::npos) << message;
    }
    std::vector<DeviceHandle> handles;
    for (const SpyreTensor& t : half) handles.push_back(t.device_handle());
    EXPECT_NE(MessageOf([&] { s.Launch(copy, handles); }), "");  // 32 rows do not fit a 16-row allocation
    // The copy and the plan's own Operation still compute right at the compiled shapes.
    Matmul mm = MakeMatmul(dev, s, 32, 32, 32);
    TiledAndChecked(dev, s, copy, mm);
    TiledAndChecked(dev, s, plan->operations[0], mm);
}

// A compute launched on its own has no correction to put its tensors'
// addresses into its program. A copy of a loaded plan's compute ran at the
// last launch's tensors (and overwrote that launch's output), and a compute
// never loaded, added to a Program, ran at device address 0. Every launch
// path refuses them, and the tensors of both launches keep their bytes.
TEST_F(StreamTest, AComputeWithoutItsCorrectionIsRefusedByEveryLaunchPath) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    auto plan = LoadMatmul(s, 32, 32, 32);
    Matmul first = MakeMatmul(dev, s, 32, 32, 32);
    s.Launch(plan->operations[0], first.tensors);
    first.tensors[2].CopyToHost(s.flex_stream(), first.c.data());
    s.Synchronize();
    const auto expected = CpuMatmul(first.a, first.b, 32, 32, 32);
    ASSERT_EQ(CompareMatmul(first.c, expected, 32, 32), 0);

    Matmul second = MakeMatmul(dev, s, 32, 32, 32);
    const std::vector<float> sentinel(32 * 32, -42.0f);
    s.flex_stream().CopyToDevice(sentinel.data(), second.tensors[2].device_handle(), sentinel.size() * sizeof(float));
    std::vector<DeviceHandle> handles;
    for (const SpyreTensor& t : second.tensors) handles.push_back(t.device_handle());
    const Operation copied(*plan->operations[0].compute());
    const std::string refused = "has no loaded correction, but its program has";
    for (const std::string& message : {MessageOf([&] { s.Launch(copied, second.tensors); }),
                                       MessageOf([&] { s.LaunchTiled(copied, second.tensors); }),
                                       MessageOf([&] { s.Launch(copied, handles); })})
        EXPECT_NE(message.find(refused), std::string::npos) << message;
    ExecutionPlan unloaded(CompilerOutputFromKernel("mm", KernelBuilder().Matmul(32, 32, 32, DType::FP32)));
    for (const SpyreCompute* compute :
         std::vector<const SpyreCompute*>{&*plan->operations[0].compute(), &*unloaded.operations[0].compute()}) {
        Program program(dev);
        const std::string message = MessageOf([&] { program.AddInstruction(Instruction(*compute)); });
        EXPECT_EQ(message.rfind("Program::AddInstruction: ", 0), 0u) << message;
        EXPECT_NE(message.find(refused), std::string::npos) << message;
    }
    s.Synchronize();  // nothing failed on the stream: nothing ran

    std::vector<float> c(32 * 32);
    first.tensors[2].CopyToHost(s.flex_stream(), c.data());
    s.Synchronize();
    EXPECT_EQ(CompareMatmul(c, expected, 32, 32), 0) << "the earlier launch's output was overwritten";
    second.tensors[2].CopyToHost(s.flex_stream(), c.data());
    s.Synchronize();
    EXPECT_EQ(c, sentinel);
}

// A handle made by hand over a loaded plan's program (or the plan's own
// read-only handle) let a copy or a launch's output overwrite the program:
// every later launch of the plan, and of the cached plan a reload returned,
// failed with the device's PROGRAM_MAGIC. Every write path refuses that
// memory now; reading it is still allowed, and the plan still computes.
TEST_F(StreamTest, ALoadedPlansProgramIsNotWritable) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    auto plan = LoadMatmul(s, 2, 2, 2);
    s.Synchronize();
    const DeviceHandle program = *plan->operations[0].compute()->device_handle();
    const std::string refused = "lies in memory the runtime keeps for a program image";
    const std::vector<uint8_t> junk(16, 0xa5);
    EXPECT_SPYRE_ERROR(s.flex_stream().CopyToDevice(junk.data(), program, junk.size()), InvalidArgument, refused);
    EXPECT_SPYRE_ERROR(dev.dma().CopyToDevice(junk.data(), program, junk.size()), InvalidArgument, refused);
    const DeviceBuffer other = dev.AllocateBuffer(64);
    EXPECT_SPYRE_ERROR(dev.dma().CopyOnDevice(other.handle(), program, 16), InvalidArgument, refused);
    Matmul mm = MakeMatmul(dev, s, 2, 2, 2);
    const SpyreTensor over_program(program, {2, 2}, {8, 4}, DType::FP32, 2 * 2 * sizeof(float));  // inside it
    const std::vector<SpyreTensor> tensors = {mm.tensors[0], mm.tensors[1], over_program};
    EXPECT_NE(MessageOf([&] { s.Launch(plan->operations[0], tensors); }).find(refused), std::string::npos);
    EXPECT_NE(MessageOf([&] { s.LaunchTiled(plan->operations[0], tensors); }).find(refused), std::string::npos);
    const std::vector<DeviceHandle> handles = {mm.tensors[0].device_handle(), mm.tensors[1].device_handle(), program};
    EXPECT_NE(MessageOf([&] { s.Launch(plan->operations[0], handles); }).find(refused), std::string::npos);
    std::vector<uint8_t> read(16);
    s.flex_stream().CopyFromDevice(read.data(), program, read.size());
    s.Synchronize();
    EXPECT_NE(read, junk);
    TiledAndChecked(dev, s, plan->operations[0], mm);
    EXPECT_EQ(LoadMatmul(s, 2, 2, 2).get(), plan.get());  // the cached plan, still whole
    TiledAndChecked(dev, s, plan->operations[0], mm);
}

// A plan may give a tensor more bytes than its shape reaches
// (tensors[].bytes); an exact launch then needs that much. The error named
// only a range "not inside a live allocation", not the tensor, nor that the
// size came from the plan.
TEST_F(StreamTest, AnExactLaunchNamesTheTensorWhosePlanBytesDoNotFit) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    CompilerOutput out = CompilerOutputFromKernel("mm", KernelBuilder().Matmul(8, 8, 8, DType::FP32));
    const size_t field = out.manifest.find("\"bytes\"");
    ASSERT_NE(field, std::string::npos) << out.manifest;
    const size_t digits = out.manifest.find("256", field);
    ASSERT_LT(digits, field + 12) << out.manifest;
    out.manifest.replace(digits, 3, "300");
    auto plan = LoadExecutionPlan(s, out);
    Matmul mm = MakeMatmul(dev, s, 8, 8, 8);
    std::vector<DeviceHandle> handles;
    for (const SpyreTensor& t : mm.tensors) handles.push_back(t.device_handle());
    for (const std::string& message : {MessageOf([&] { s.Launch(plan->operations[0], mm.tensors); }),
                                       MessageOf([&] { s.Launch(plan->operations[0], handles); })}) {
        EXPECT_NE(message.find("tensor 0 ('"), std::string::npos) << message;
        EXPECT_NE(message.find("the plan compiled it for 300 bytes (its tensors[].bytes), which must lie in one live "
                               "allocation: range of 300 bytes at"),
                  std::string::npos)
            << message;
    }
    Matmul taller = MakeMatmul(dev, s, 16, 8, 8);
    TiledAndChecked(dev, s, plan->operations[0], taller);  // tiles go by the tensors they are given
}

// An output whose elements overlap each other (every row of C the same
// bytes, or rows one element apart) was launched, and C held whichever
// tile wrote last. Refused by every tensor launch path, naming the tensor.
TEST_F(StreamTest, AnOutputWhoseElementsOverlapIsRefused) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    auto plan = LoadMatmul(s, 8, 8, 8);
    Matmul mm = MakeMatmul(dev, s, 24, 8, 8);
    const SpyreTensor row = SpyreTensor::Empty(dev, {8 + 24}, DType::FP32);
    const SpyreTensor same_row(row.device_handle(), {24, 8}, {0, 4}, DType::FP32, row.size_bytes());
    const SpyreTensor sliding(row.device_handle(), {24, 8}, {4, 4}, DType::FP32, row.size_bytes());
    for (const SpyreTensor& c : {same_row, sliding}) {
        const std::vector<SpyreTensor> tensors = {mm.tensors[0], mm.tensors[1], c};
        const std::string tiled = MessageOf([&] { s.LaunchTiled(plan->operations[0], tensors); });
        EXPECT_NE(tiled.find("operation 'mm' tensor 2"), std::string::npos) << tiled;
        EXPECT_NE(tiled.find("is an output whose elements overlap"), std::string::npos) << tiled;
        EXPECT_EQ(MessageOf([&] { LaunchKernel(s, *plan, tensors); }), tiled);
    }
    s.Synchronize();
    TiledAndChecked(dev, s, plan->operations[0], mm);  // a dense C still computes
}

// An output over its input shifted by a tile: each tile's operands were
// apart, so the device's OVERLAP check passed tile by tile while each tile
// read rows the one before it had written (768 of 1024 elements wrong,
// no error). Refused before any tile runs; in place over the very input
// still tiles, and the exact launch is the device's OVERLAP as before.
TEST_F(StreamTest, ATiledOutputOverItsInputShiftedIsRefused) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    constexpr int64_t kRows = 32, kCols = 32, kTile = 8;
    DeviceBuffer buf = dev.AllocateBuffer(uint64_t(kRows + kTile) * kCols * 4);
    std::vector<float> rows(size_t((kRows + kTile) * kCols)), ones(size_t(kRows * kCols), 1.f);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(i / kCols);
    s.flex_stream().CopyToDevice(rows.data(), buf.handle(), rows.size() * 4);
    const SpyreTensor one = SpyreTensor::FromHost(dev, s.flex_stream(), ones.data(), {kRows, kCols}, DType::FP32);
    const uint64_t bytes = uint64_t(kRows * kCols * 4);
    const SpyreTensor x(buf.handle(), {kRows, kCols}, {kCols * 4, 4}, DType::FP32, bytes);
    const SpyreTensor y(buf.handle().Offset(uint64_t(kTile * kCols * 4), bytes, buf.allocation()), {kRows, kCols},
                        {kCols * 4, 4}, DType::FP32, bytes);
    auto tile = LoadExecutionPlan(
        s, CompilerOutputFromKernel("add", KernelBuilder().Elementwise(ElementwiseOp::Add, {kTile, kCols},
                                                                       {kTile, kCols}, DType::FP32)));
    Program program(dev, tile);
    for (const std::vector<SpyreTensor>& tensors : {std::vector{x, one, y}, std::vector{one, x, y}}) {
        const std::string message = MessageOf([&] { s.LaunchTiled(tile->operations[0], tensors); });
        EXPECT_NE(message.find("operation 'add' tensor 2"), std::string::npos) << message;
        EXPECT_NE(message.find("is an output that overlaps input tensor " + std::string(tensors[0].device_handle() ==
                                                                                             x.device_handle()
                                                                                         ? "0"
                                                                                         : "1")),
                  std::string::npos)
            << message;
        EXPECT_EQ(MessageOf([&] { LaunchKernel(s, *tile, tensors); }), message);
        EXPECT_EQ(MessageOf([&] { program.LaunchTiled(tensors); }), message);
    }
    s.Synchronize();
    std::vector<float> back(rows.size());
    s.flex_stream().CopyFromDevice(back.data(), buf.handle(), back.size() * 4);
    s.Synchronize();
    EXPECT_EQ(back, rows) << "a refused launch wrote";

    // In place over the very input: every tile reads only its own elements.
    s.LaunchTiled(tile->operations[0], std::vector{x, one, x});
    s.flex_stream().CopyFromDevice(back.data(), buf.handle(), back.size() * 4);
    s.Synchronize();
    for (size_t i = 0; i < back.size(); ++i)
        ASSERT_EQ(back[i], rows[i] + (i < size_t(kRows * kCols) ? 1.f : 0.f)) << "element " << i;
}

// One check, one message: whichever entry point finds the mismatch.
TEST_F(StreamTest, MismatchedTensorsGetTheSameMessageFromEveryEntryPoint) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    auto plan = LoadMatmul(s, 32, 32, 32);
    const Operation& op = plan->operations[0];
    Program program(dev, plan);
    auto make = [&](std::vector<int64_t> shape, DType dtype = DType::FP32) {
        return SpyreTensor::Empty(dev, std::move(shape), dtype);
    };
    const uint64_t before = s.flex_stream().enqueued();

    // A dtype is wrong for every kind of launch.
    const std::vector<SpyreTensor> ints = {make({32, 32}, DType::INT32), make({32, 32}), make({32, 32})};
    const std::string dtype = MessageOf([&] { s.Launch(op, ints); });
    EXPECT_NE(dtype.find("operation 'mm' tensor 0"), std::string::npos) << dtype;
    EXPECT_NE(dtype.find("int32"), std::string::npos) << dtype;
    EXPECT_EQ(MessageOf([&] { s.LaunchTiled(op, ints); }), dtype);
    EXPECT_EQ(MessageOf([&] { LaunchKernel(s, *plan, ints); }), dtype);
    EXPECT_EQ(MessageOf([&] { program.Launch(ints); }), dtype);
    EXPECT_EQ(MessageOf([&] { program.LaunchTiled(ints); }), dtype);

    // A larger tensor is wrong for an exact launch only.
    const std::vector<SpyreTensor> tall = {make({64, 32}), make({32, 32}), make({64, 32})};
    const std::string shape = MessageOf([&] { s.Launch(op, tall); });
    EXPECT_NE(shape.find("dimension 0 is 64, compiled for 32"), std::string::npos) << shape;
    EXPECT_EQ(MessageOf([&] { program.Launch(tall); }), shape);

    // A tensor smaller than its tile is wrong for a tiled launch.
    const std::vector<SpyreTensor> small = {make({16, 32}), make({32, 32}), make({16, 32})};
    const std::string tiled = MessageOf([&] { s.LaunchTiled(op, small); });
    EXPECT_NE(tiled.find("smaller"), std::string::npos) << tiled;
    EXPECT_EQ(tiled.rfind("operation 'mm': ", 0), 0u) << tiled;
    EXPECT_EQ(MessageOf([&] { LaunchKernel(s, *plan, small); }), tiled);
    EXPECT_EQ(MessageOf([&] { program.LaunchTiled(small); }), tiled);

    // Too few tensors.
    const std::vector<SpyreTensor> two = {make({32, 32}), make({32, 32})};
    const std::string count = MessageOf([&] { s.Launch(op, two); });
    EXPECT_EQ(count, "operation 'mm' takes 3 tensors, got 2");
    EXPECT_EQ(MessageOf([&] { s.LaunchTiled(op, two); }), count);

    EXPECT_EQ(s.flex_stream().enqueued(), before);
    EXPECT_EQ(program.stream().flex_stream().enqueued(), 0u);
}

// One tensor bound as a matmul's input and output: the device refuses the
// program (OVERLAP, contract 3.2), and the failure says what that means
// (it said only "Launch failed on the device: OVERLAP", an outside probe).
// The stream recovers, and the same launch on separate tensors computes.
TEST_F(StreamTest, AMatmulOverItsOwnOutputSaysWhatTheDeviceRefused) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    auto plan = LoadMatmul(s, 8, 8, 8);
    Matmul mm = MakeMatmul(dev, s, 8, 8, 8);
    LaunchKernel(s, *plan, std::vector{mm.tensors[0], mm.tensors[0], mm.tensors[0]});
    try {
        s.Synchronize();
        ADD_FAILURE() << "the device ran a matmul over its own output";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceError) << e.what();
        EXPECT_NE(std::string(e.what()).find("Launch failed on the device: OVERLAP (an op's output overlaps an input "
                                             "it reads other elements of"),
                  std::string::npos)
            << e.what();
    }
    s.flex_stream().Reset();
    LaunchKernel(s, *plan, mm.tensors);
    mm.tensors[2].CopyToHost(s.flex_stream(), mm.c.data());
    s.Synchronize();
    EXPECT_EQ(CompareMatmul(mm.c, CpuMatmul(mm.a, mm.b, 8, 8, 8), 8, 8), 0);
}
