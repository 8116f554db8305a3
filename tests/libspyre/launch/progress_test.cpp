// SPDX-License-Identifier: Apache-2.0
// Progress callbacks (spyre/common/progress.hpp) of the long operations on
// a device: plan loading, large DMA copies, LaunchTiled over many tiles and
// an orchestration run. Each must report done rising step by step and
// ending exactly at total, with the values the work implies.
#include <cstring>
#include <mutex>
#include <vector>

#include "spyre/common/progress.hpp"
#include "spyre/compiler/plan_writer.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/orchestration.hpp"
#include "stream_fixture.hpp"
#include "upper_layer_util.hpp"

using spyre::test::StreamTest;
using namespace spyre;
using namespace spyre::test;

namespace {

// Every report, in order (callbacks may come from another thread).
struct Recorder {
    std::mutex mu;
    std::vector<ProgressInfo> seen;
    std::vector<std::string> whats, units;
    ProgressCallback Callback() {
        return [this](const ProgressInfo& p) {
            std::lock_guard lock(mu);
            seen.push_back(p);
            whats.emplace_back(p.what);
            units.emplace_back(p.unit);
        };
    }
    // done never falls, total never changes, the last report is done == total.
    void ExpectMonotonicTo(uint64_t total, const char* what, const char* unit) {
        std::lock_guard lock(mu);
        ASSERT_FALSE(seen.empty()) << what << ": no progress reported";
        for (size_t i = 0; i < seen.size(); ++i) {
            EXPECT_EQ(seen[i].total, total) << what << " report " << i;
            EXPECT_LE(seen[i].done, seen[i].total) << what << " report " << i;
            if (i) {
                EXPECT_GT(seen[i].done, seen[i - 1].done) << what << " report " << i << " did not advance";
            }
            EXPECT_EQ(whats[i], what);
            EXPECT_EQ(units[i], unit);
        }
        EXPECT_EQ(seen.back().done, total) << what;
    }
};

}  // namespace

TEST_F(StreamTest, ProgressOfPlanLoadingCountsTheBinaries) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    const CompilerOutput out =
        CompilerOutputFromKernels("two", {{"mm", KernelBuilder().Matmul(32, 32, 32, DType::FP32)},
                                          {"add", KernelBuilder().Elementwise(ElementwiseOp::Add, {32, 32}, {32, 32},
                                                                              DType::FP32)}});
    Recorder r;
    auto plan = LoadExecutionPlan(s, out, r.Callback());
    // One compute binary per operation, plus a correction program where the
    // operation has one, plus init packets.
    uint64_t binaries = plan->init_packets.size();
    for (const Operation& op : plan->operations) binaries += 1 + (op.correction ? 1 : 0);
    ASSERT_GE(binaries, 2u);
    r.ExpectMonotonicTo(binaries, "loading plan", "binaries");
    EXPECT_EQ(r.seen.size(), binaries) << "one report per binary";

    // Loaded already (cached): one report, complete.
    Recorder again;
    auto cached = LoadExecutionPlan(s, out, again.Callback());
    EXPECT_EQ(cached.get(), plan.get());
    again.ExpectMonotonicTo(binaries, "loading plan", "binaries");
    EXPECT_EQ(again.seen.size(), 1u);
}

TEST_F(StreamTest, ProgressOfALargeCopyComesPerChunk) {
    Device dev = OpenDevice();
    constexpr uint64_t kSize = (10ull << 20) + 100;  // 4 MiB, 4 MiB, 2 MiB + 100
    const DeviceAllocation a = dev.allocator().Allocate(kSize);
    std::vector<uint8_t> in(kSize), back(kSize);
    for (size_t i = 0; i < kSize; ++i) in[i] = uint8_t(i * 131 + 7);
    Recorder to, from;
    EXPECT_EQ(dev.dma().CopyToDevice(in.data(), a.handle, kSize, to.Callback()), kSize);
    EXPECT_EQ(dev.dma().CopyFromDevice(back.data(), a.handle, kSize, from.Callback()), kSize);
    EXPECT_TRUE(in == back);
    to.ExpectMonotonicTo(kSize, "copy to device", "bytes");
    from.ExpectMonotonicTo(kSize, "copy from device", "bytes");
    ASSERT_EQ(to.seen.size(), 3u);
    EXPECT_EQ(to.seen[0].done, 4ull << 20);
    EXPECT_EQ(to.seen[1].done, 8ull << 20);
    // A copy outside the allocation is refused before anything moves or is reported.
    Recorder bad;
    EXPECT_THROW(dev.dma().CopyToDevice(in.data(), a.handle, kSize + 1, bad.Callback()), Error);
    EXPECT_TRUE(bad.seen.empty());
    dev.allocator().Free(a.handle);
}

TEST_F(StreamTest, ProgressOfLaunchTiledCountsTilesAsTheyComplete) {
    Device dev = OpenDevice();
    SpyreStream s(dev);
    auto plan = LoadExecutionPlan(
        s, CompilerOutputFromKernel("add", KernelBuilder().Elementwise(ElementwiseOp::Add, {16, 64}, {16, 64},
                                                                       DType::FP32)));
    constexpr int64_t kRows = 16 * 40;  // 40 tiles
    const std::vector<float> a = RandomFloats(size_t(kRows * 64), 1), b = RandomFloats(size_t(kRows * 64), 2);
    std::vector<float> c(a.size());
    std::vector<SpyreTensor> t = {SpyreTensor::FromHost(dev, s.flex_stream(), a.data(), {kRows, 64}, DType::FP32),
                                  SpyreTensor::FromHost(dev, s.flex_stream(), b.data(), {kRows, 64}, DType::FP32),
                                  SpyreTensor::Empty(dev, {kRows, 64}, DType::FP32)};
    Recorder r;
    s.LaunchTiled(plan->operations[0], t, r.Callback());
    t[2].CopyToHost(s.flex_stream(), c.data());
    s.Synchronize();
    for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i], a[i] + b[i]) << i;
    r.ExpectMonotonicTo(40, "LaunchTiled", "tiles");
    EXPECT_EQ(r.seen.size(), 40u);  // under 100 tiles: every tile
    for (size_t i = 0; i < r.seen.size(); ++i) EXPECT_EQ(r.seen[i].done, i + 1);
}

TEST_F(StreamTest, ProgressOfAnOrchestrationRunCountsTasks) {
    Device dev = OpenDevice();
    Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20, .host_threads = 2});
    orch.RegisterHostKernel(1, [](std::span<void* const> b, std::span<const uint64_t> s) {
        auto* x = static_cast<uint32_t*>(b[0]);
        for (size_t i = 0; i < s[0] / 4; ++i) x[i] += 1;
        return 0u;
    });
    auto* x = static_cast<uint32_t*>(orch.Alloc(4096));
    std::memset(x, 0, 4096);
    constexpr int kTasks = 50;  // a chain: INOUT on one buffer
    for (int round = 0; round < 2; ++round) {
        for (int i = 0; i < kTasks; ++i) {
            TaskParam p[] = {{PARAM_INOUT, x, 4096, {}}};
            orch.Submit(1, WORKER_HOST, p);
        }
        Recorder r;
        orch.WaitAll(r.Callback());
        // Counted from the last WaitAll: the second round also ends at 50.
        r.ExpectMonotonicTo(kTasks, "orchestration", "tasks");
    }
    EXPECT_EQ(x[0], uint32_t(2 * kTasks));
    orch.Free(x);
}
