// SPDX-License-Identifier: Apache-2.0
// Loading ExecutionPlans (seed 001 Workflow 2): the per-device cache by
// content, device memory freed with the last reference, plans read from a
// compiler-output directory, and malformed directories rejected before any
// device memory is taken.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "spyre/plan/execution_plan.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/compiler/plan_writer.hpp"
#include "stream_fixture.hpp"
#include "upper_layer_util.hpp"

using spyre::test::StreamTest;
using namespace spyre;
using namespace spyre::test;
namespace fs = std::filesystem;

namespace {

class PlanLoadTest : public StreamTest {
protected:
    void SetUp() override {
        StreamTest::SetUp();
        if (IsSkipped()) return;
        dir_ = fs::temp_directory_path() /
               ("spyre_plan_load_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
    }
    void TearDown() override {
        if (!dir_.empty()) fs::remove_all(dir_);
        StreamTest::TearDown();
    }
    fs::path dir_;
};

CompilerOutput MatmulOutput(int64_t m = 64, int64_t k = 64, int64_t n = 64) {
    return CompilerOutputFromKernel("mm", KernelBuilder().Matmul(m, k, n, DType::FP32));
}

// Runs the loaded matmul plan once and checks it against the CPU.
void CheckPlanRuns(Device& dev, SpyreStream& s, const ExecutionPlan& plan, int64_t M, int64_t K, int64_t N) {
    const std::vector<float> a = RandomFloats(size_t(M * K), 41), b = RandomFloats(size_t(K * N), 42);
    std::vector<float> c(size_t(M * N));
    std::vector<SpyreTensor> t = {SpyreTensor::FromHost(dev, s.flex_stream(), a.data(), {M, K}, DType::FP32),
                                  SpyreTensor::FromHost(dev, s.flex_stream(), b.data(), {K, N}, DType::FP32),
                                  SpyreTensor::Empty(dev, {M, N}, DType::FP32)};
    LaunchKernel(s, plan, t);
    t[2].CopyToHost(s.flex_stream(), c.data());
    s.Synchronize();
    EXPECT_EQ(CompareMatmul(c, CpuMatmul(a, b, M, K, N), M, N), 0);
}

void Truncate(const fs::path& file, size_t keep) {
    std::ifstream in(file, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    ASSERT_GT(bytes.size(), keep);
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(keep));
}

void FlipByte(const fs::path& file, size_t at) {
    std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(std::streamoff(at));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x5a);
    f.seekp(std::streamoff(at));
    f.write(&c, 1);
}

}  // namespace

TEST_F(PlanLoadTest, EqualOutputLoadsOnceAndFreesWithTheLastReference) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    const MemoryFigures baseline = Memory(dev);
    {
        auto first = LoadExecutionPlan(s, MatmulOutput());
        const MemoryFigures loaded = Memory(dev);
        EXPECT_GT(loaded.live_allocations, baseline.live_allocations);
        const uint64_t enqueued = s.flex_stream().enqueued();
        // A separately built but equal output: the cached plan, no device work.
        auto second = LoadExecutionPlan(s, MatmulOutput());
        EXPECT_EQ(first.get(), second.get());
        EXPECT_EQ(Memory(dev), loaded);
        EXPECT_EQ(s.flex_stream().enqueued(), enqueued);
        // Another stream of the same device shares the cache too.
        SpyreStream other(dev);
        auto third = LoadExecutionPlan(other, MatmulOutput());
        EXPECT_EQ(first.get(), third.get());
        EXPECT_EQ(Memory(dev), loaded);
        // A different output is a different plan.
        auto different = LoadExecutionPlan(s, MatmulOutput(64, 64, 32));
        EXPECT_NE(first.get(), different.get());
        EXPECT_GT(Memory(dev).live_allocations, loaded.live_allocations);
        different.reset();
        EXPECT_EQ(Memory(dev), loaded);

        first.reset();
        third.reset();
        EXPECT_EQ(Memory(dev), loaded);  // `second` still holds it
        CheckPlanRuns(dev, s, *second, 64, 64, 64);
    }
    EXPECT_EQ(Memory(dev), baseline);
    // Loading again after it was freed loads afresh, and works.
    auto again = LoadExecutionPlan(s, MatmulOutput());
    EXPECT_GT(Memory(dev).live_allocations, baseline.live_allocations);
    CheckPlanRuns(dev, s, *again, 64, 64, 64);
    again.reset();
    EXPECT_EQ(Memory(dev), baseline);
}

TEST_F(PlanLoadTest, MultiOperationPlanWithInitPacketLoadsAndRuns) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    const MemoryFigures baseline = Memory(dev);
    KernelBuilder kb;
    // Two operations with their own tensors: C1 = A1*B1 (64x32x48), C2 = A2+B2.
    // The init packet is a fill bound to a scratch buffer: it must run once, at load.
    // Not the first buffer handed out (it was at device address 0, where
    // a program bound to it read as unbound; no buffer is there now).
    DeviceAllocation first = dev.allocator().Allocate(256);
    DeviceAllocation scratch = dev.allocator().Allocate(256);
    const BuiltKernel fill = kb.Fill({64}, 3.0, DType::FP32);
    const uint64_t scratch_addr = dev.allocator().DeviceAddress(scratch.handle, 256);
    InitPacket packet{"fill", fill.Bind(std::vector<uint64_t>{scratch_addr})};
    const CompilerOutput out = CompilerOutputFromKernels(
        "two", {{"mm", kb.Matmul(64, 32, 48, DType::FP32)}, {"add", kb.Elementwise(ElementwiseOp::Add, {16, 8}, {16, 8}, DType::FP32)}},
        {packet});
    {
        auto plan = LoadExecutionPlan(s, out);
        ASSERT_EQ(plan->operations.size(), 2u);
        ASSERT_EQ(plan->tensor_input_metadata.size(), 6u);
        ASSERT_EQ(plan->init_packets.size(), 1u);
        EXPECT_TRUE(plan->init_packets[0].device_handle().has_value());
        // The init packet ran once, at load.
        std::vector<float> filled(64, 0.0f);
        s.flex_stream().CopyFromDevice(filled.data(), scratch.handle, 256);
        s.Synchronize();
        EXPECT_EQ(filled, std::vector<float>(64, 3.0f));

        const std::vector<float> a = RandomFloats(64 * 32, 51), b = RandomFloats(32 * 48, 52);
        const std::vector<float> x = RandomFloats(16 * 8, 53), y = RandomFloats(16 * 8, 54);
        std::vector<float> c(64 * 48), z(16 * 8);
        FlexStream& f = s.flex_stream();
        std::vector<SpyreTensor> t = {SpyreTensor::FromHost(dev, f, a.data(), {64, 32}, DType::FP32),
                                      SpyreTensor::FromHost(dev, f, b.data(), {32, 48}, DType::FP32),
                                      SpyreTensor::Empty(dev, {64, 48}, DType::FP32),
                                      SpyreTensor::FromHost(dev, f, x.data(), {16, 8}, DType::FP32),
                                      SpyreTensor::FromHost(dev, f, y.data(), {16, 8}, DType::FP32),
                                      SpyreTensor::Empty(dev, {16, 8}, DType::FP32)};
        const uint64_t before = f.enqueued();
        LaunchKernel(s, *plan, t);
        EXPECT_EQ(f.enqueued() - before, 6u);  // two copy -> correct -> compute triples
        t[2].CopyToHost(f, c.data());
        t[5].CopyToHost(f, z.data());
        s.Synchronize();
        EXPECT_EQ(CompareMatmul(c, CpuMatmul(a, b, 64, 32, 48), 64, 48), 0);
        std::vector<float> want(16 * 8);
        for (size_t i = 0; i < want.size(); ++i) want[i] = x[i] + y[i];
        EXPECT_EQ(z, want);
    }
    dev.allocator().Free(scratch.handle);
    dev.allocator().Free(first.handle);
    EXPECT_EQ(Memory(dev), baseline);
}

// An init packet left as the compiler emits it (relocations unbound) would
// run at device address 0 at load: refused before anything is taken, and
// what the caller keeps at address 0 stays as it was (it was zeroed: found
// probing from outside).
TEST_F(PlanLoadTest, AnInitPacketWithUnboundRelocationsIsRefused) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    FlexStream& f = s.flex_stream();
    const std::vector<float> ones(64, -1.0f);
    SpyreTensor kept = SpyreTensor::FromHost(dev, f, ones.data(), {8, 8}, DType::FP32);
    s.Synchronize();
    const MemoryFigures baseline = Memory(dev);
    const uint64_t enqueued = f.enqueued();
    KernelBuilder kb;
    const CompilerOutput out = CompilerOutputFromKernels(
        "unbound_init", {{"add", kb.Elementwise(ElementwiseOp::Add, {8, 8}, {8, 8}, DType::FP32)}},
        {InitPacket{"relu", kb.Relu({8, 8}, DType::FP32).program}});
    EXPECT_SPYRE_ERROR(LoadExecutionPlan(s, out), InvalidArgument,
                       "init packet 'relu' has 2 relocation(s) unbound (address 0 as compiled)");
    // Bound in part: its output operand still at 0 (it was taken as bound).
    const uint64_t kept_at = dev.allocator().DeviceAddress(kept.device_handle(), kept.size_bytes());
    const BuiltKernel relu = kb.Relu({8, 8}, DType::FP32);
    const CompilerOutput part = CompilerOutputFromKernels(
        "part_init", {{"add", kb.Elementwise(ElementwiseOp::Add, {8, 8}, {8, 8}, DType::FP32)}},
        {InitPacket{"relu", relu.Bind(std::vector<uint64_t>{kept_at, 0})}});
    EXPECT_SPYRE_ERROR(LoadExecutionPlan(s, part), InvalidArgument,
                       "init packet 'relu' has 1 relocation(s) unbound (address 0 as compiled)");
    EXPECT_EQ(Memory(dev), baseline);
    EXPECT_EQ(f.enqueued(), enqueued);
    std::vector<float> back(64, 0.0f);
    kept.CopyToHost(f, back.data());
    s.Synchronize();
    EXPECT_EQ(back, ones);
}

TEST_F(PlanLoadTest, WriteDirectoryThenLoadFromDirectory) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    const MemoryFigures baseline = Memory(dev);
    const CompilerOutput out = MatmulOutput(96, 64, 32);
    out.WriteDirectory(dir_);
    EXPECT_TRUE(fs::exists(dir_ / "plan.json"));
    EXPECT_TRUE(fs::exists(dir_ / "mm.bin"));
    EXPECT_TRUE(fs::exists(dir_ / "mm.correction.bin"));
    EXPECT_EQ(CompilerOutput::ReadDirectory(dir_).ContentHash(), out.ContentHash());
    {
        auto from_dir = LoadExecutionPlan(s, dir_);
        EXPECT_EQ(from_dir->name, "mm");
        CheckPlanRuns(dev, s, *from_dir, 96, 64, 32);
        // The same content from memory is the same cached plan.
        auto from_memory = LoadExecutionPlan(s, out);
        EXPECT_EQ(from_dir.get(), from_memory.get());
    }
    EXPECT_EQ(Memory(dev), baseline);
    // Writing into a non-empty directory is refused.
    EXPECT_SPYRE_ERROR(out.WriteDirectory(dir_), InvalidArgument, "not empty");
}

TEST_F(PlanLoadTest, MalformedDirectoriesAllocateNothing) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    const CompilerOutput out = MatmulOutput();
    const uint64_t bin_size = out.blobs.at("mm.bin").size();
    const MemoryFigures baseline = Memory(dev);
    const uint64_t enqueued = s.flex_stream().enqueued();

    // No such directory.
    EXPECT_SPYRE_ERROR(LoadExecutionPlan(s, dir_ / "absent"), NotFound, "absent");
    // A good plan written to dir_/name, then broken by `damage`.
    auto broken = [&](const char* name, const std::function<void(const fs::path&)>& damage) {
        const fs::path d = dir_ / name;
        out.WriteDirectory(d);
        damage(d);
        return d;
    };
    // plan.json missing.
    EXPECT_SPYRE_ERROR(LoadExecutionPlan(s, broken("no_manifest", [](const fs::path& d) { fs::remove(d / "plan.json"); })),
                       NotFound, "plan.json");
    // A truncated compute blob.
    EXPECT_SPYRE_ERROR(
        LoadExecutionPlan(s, broken("truncated", [&](const fs::path& d) { Truncate(d / "mm.bin", size_t(bin_size / 2)); })),
        InvalidArgument, "mm.bin");
    // A compute blob with the right size but a flipped byte: its CRC is wrong.
    try {
        LoadExecutionPlan(s, broken("bad_crc", [&](const fs::path& d) { FlipByte(d / "mm.bin", size_t(bin_size - 9)); }));
        ADD_FAILURE() << "a corrupted blob loaded";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
        EXPECT_NE(std::string(e.what()).find("mm.bin"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("CRC"), std::string::npos) << e.what();
    }
    // A corrupted correction blob.
    EXPECT_SPYRE_ERROR(
        LoadExecutionPlan(s, broken("bad_correction", [](const fs::path& d) { FlipByte(d / "mm.correction.bin", 70); })),
        InvalidArgument, "mm.correction.bin");
    // A blob missing.
    EXPECT_SPYRE_ERROR(
        LoadExecutionPlan(s, broken("missing_blob", [](const fs::path& d) { fs::remove(d / "mm.correction.bin"); })),
        InvalidArgument, "mm.correction.bin");
    // A stray file the manifest does not name.
    EXPECT_SPYRE_ERROR(
        LoadExecutionPlan(s, broken("stray", [](const fs::path& d) { std::ofstream(d / "extra.bin") << "x"; })),
        InvalidArgument, "extra.bin");
    // A manifest that is not JSON.
    EXPECT_SPYRE_ERROR(LoadExecutionPlan(s, broken("bad_json",
                                                   [](const fs::path& d) {
                                                       std::ofstream(d / "plan.json", std::ios::trunc) << "{\"format\": ";
                                                   })),
                       InvalidArgument, "plan.json");
    EXPECT_EQ(Memory(dev), baseline);
    EXPECT_EQ(s.flex_stream().enqueued(), enqueued);
    EXPECT_EQ(s.flex_stream().Query(), StreamStatus::Idle);
    // A good one still loads afterwards.
    auto plan = LoadExecutionPlan(s, out);
    CheckPlanRuns(dev, s, *plan, 64, 64, 64);
}

// Loading on a stream that already faulted reports that fault and leaves it
// sticky (it is the caller's to Reset), with nothing allocated.
TEST_F(PlanLoadTest, LoadOnAFaultedStreamKeepsTheFault) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    FlexStream& f = s.flex_stream();
    DeviceAllocation junk = dev.allocator().Allocate(4096);
    std::vector<uint8_t> garbage(4096, 0xAB);
    f.CopyToDevice(garbage.data(), junk.handle, 4096);
    f.Launch(junk.handle, 256);  // not a program: the stream faults
    const MemoryFigures baseline = Memory(dev);
    EXPECT_SPYRE_ERROR(LoadExecutionPlan(s, MatmulOutput()), DeviceError, "op #1");
    EXPECT_EQ(f.Query(), StreamStatus::Faulted);
    EXPECT_SPYRE_ERROR(f.Synchronize(), DeviceError, "op #1");
    EXPECT_EQ(Memory(dev), baseline);
    f.Reset();
    auto plan = LoadExecutionPlan(s, MatmulOutput());
    CheckPlanRuns(dev, s, *plan, 64, 64, 64);
    plan.reset();
    dev.allocator().Free(junk.handle);
}
