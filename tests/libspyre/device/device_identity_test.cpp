// SPDX-License-Identifier: Apache-2.0
// Objects know the device (card, function) they belong to, and every API
// that mixes objects refuses a mix of devices with ErrorKind::WrongDevice,
// naming both functions: two VFs of one mock card, opened in one process.
// Each refusal must leave the other VF's memory and streams untouched.
#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>

#include "spyre/plan/execution_plan.hpp"
#include "spyre/launch/program.hpp"
#include "spyre/launch/spyre_stream.hpp"
#include "spyre/compiler/plan_writer.hpp"
#include "stream_fixture.hpp"
#include "upper_layer_util.hpp"

using namespace spyre;
using namespace spyre::test;

namespace {

constexpr const char* kVf1 = "0000:01:00.1";
constexpr const char* kVf2 = "0000:01:00.2";

// `statement` throws WrongDevice whose message names `first` then `second`
// as in "<thing> belongs to <first>, <other thing> to <second>".
void ExpectWrongDevice(const std::function<void()>& statement, const std::string& first, const std::string& second,
                       const std::string& what) {
    SCOPED_TRACE(what);
    try {
        statement();
        ADD_FAILURE() << what << ": a mix of " << first << " and " << second << " was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::WrongDevice) << e.what();
        const std::string m = e.what();
        const size_t a = m.find("belongs to " + first);
        EXPECT_NE(a, std::string::npos) << m;
        EXPECT_NE(m.find(second, a == std::string::npos ? 0 : a), std::string::npos) << m;
    }
}

class DeviceIdentityTest : public StreamTest {
protected:
    void SetUp() override {
        StreamTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        vf1_.emplace(OpenDevice(1));
        vf2_.emplace(OpenDevice(2));
        ASSERT_EQ(vf1_->pci_address(), kVf1);
        ASSERT_EQ(vf2_->pci_address(), kVf2);
    }
    void TearDown() override {
        vf2_.reset();
        vf1_.reset();
        StreamTest::TearDown();
    }
    Device& vf1() { return *vf1_; }
    Device& vf2() { return *vf2_; }

    // Bytes of `block` on `dev`, read back through its own default stream.
    std::vector<uint8_t> Read(Device& dev, const DeviceAllocation& block) {
        std::vector<uint8_t> out(block.size);
        dev.default_stream().CopyFromDevice(out.data(), block.handle, block.size);
        dev.default_stream().Synchronize();
        return out;
    }

private:
    std::optional<Device> vf1_, vf2_;
};

}  // namespace

TEST_F(DeviceIdentityTest, ObjectsKnowTheirDevice) {
    const DeviceId id1 = vf1().id();
    EXPECT_EQ(id1.card, 0);
    EXPECT_EQ(id1.function, 1);
    EXPECT_EQ(id1.ToString(), kVf1);
    EXPECT_EQ(vf2().id().ToString(), kVf2);

    DeviceAllocation a = vf1().allocator().Allocate(4096);
    ASSERT_TRUE(a.handle.device().has_value());
    EXPECT_EQ(*a.handle.device(), id1);
    EXPECT_EQ(a.handle.Offset(128, 128, a).device(), a.handle.device());  // tiles keep it
    EXPECT_FALSE(DeviceHandle(VFDeviceHandle{0, 0}).device().has_value());  // built by hand: unknown

    FlexStream s = vf1().CreateStream();
    std::vector<float> host(64, 1.0f);
    SpyreTensor t = SpyreTensor::FromHost(vf1(), s, host.data(), {8, 8}, DType::FP32);
    EXPECT_EQ(t.device(), std::optional<DeviceId>(id1));
    Event e(vf1());
    EXPECT_EQ(e.device(), id1);
    SpyreStream ss(vf1());
    auto plan = LoadExecutionPlan(ss, CompilerOutputFromKernel("mm", KernelBuilder().Matmul(8, 8, 8, DType::FP32)));
    EXPECT_EQ(plan->device(), std::optional<DeviceId>(id1));
    for (const DeviceHandle& h : plan->operations[0].device_handles()) EXPECT_EQ(h.device(), std::optional<DeviceId>(id1));
    s.Synchronize();
    vf1().allocator().Free(a.handle);
}

// Raw handles: FlexStream copies and launches, the DMA engine and the
// allocator of VF 2 refuse a handle of VF 1, even where VF 2 has a live
// allocation at the very same region and offset (which is what a mix
// silently used before).
TEST_F(DeviceIdentityTest, RawHandleOfAnotherVfIsRefusedEverywhere) {
    DeviceAllocation a1 = vf1().allocator().Allocate(1 << 20);
    DeviceAllocation a2 = vf2().allocator().Allocate(1 << 20);
    ASSERT_EQ(a1.handle.vf(), a2.handle.vf()) << "the test wants the same location on both VFs";
    std::vector<uint8_t> pattern(1 << 20);
    std::iota(pattern.begin(), pattern.end(), uint8_t(3));
    vf2().default_stream().CopyToDevice(pattern.data(), a2.handle, pattern.size());
    vf2().default_stream().Synchronize();

    FlexStream s2 = vf2().CreateStream();
    std::vector<uint8_t> junk(1 << 20, 0xEE);
    ExpectWrongDevice([&] { s2.CopyToDevice(junk.data(), a1.handle, 4096); }, kVf1, kVf2, "inline CopyToDevice");
    ExpectWrongDevice([&] { s2.CopyToDevice(junk.data(), a1.handle, junk.size()); }, kVf1, kVf2, "DMA CopyToDevice");
    ExpectWrongDevice([&] { s2.CopyFromDevice(junk.data(), a1.handle, 64); }, kVf1, kVf2, "CopyFromDevice");
    ExpectWrongDevice([&] { s2.Launch(a1.handle); }, kVf1, kVf2, "Launch");
    ExpectWrongDevice([&] { s2.Launch(a1.handle, 4096); }, kVf1, kVf2, "Launch with size");
    ExpectWrongDevice([&] { vf2().dma().CopyToDevice(junk.data(), a1.handle, 64); }, kVf1, kVf2, "DMAEngine to");
    ExpectWrongDevice([&] { vf2().dma().CopyFromDevice(junk.data(), a1.handle, 64); }, kVf1, kVf2, "DMAEngine from");
    ExpectWrongDevice([&] { vf2().dma().CopyOnDevice(a2.handle, a1.handle, 64); }, kVf1, kVf2, "DMAEngine on device");
    ExpectWrongDevice([&] { vf2().allocator().Free(a1.handle); }, kVf1, kVf2, "SpyreAllocator::Free");
    ExpectWrongDevice([&] { (void)vf2().allocator().Lookup(a1.handle, 64); }, kVf1, kVf2, "SpyreAllocator::Lookup");
    EXPECT_EQ(s2.enqueued(), 0u);
    EXPECT_EQ(s2.Query(), StreamStatus::Idle);
    EXPECT_TRUE(Read(vf2(), a2) == pattern) << "VF 2's memory changed";
    // Both allocations are still live on their own devices.
    vf1().allocator().Free(a1.handle);
    vf2().allocator().Free(a2.handle);
}

TEST_F(DeviceIdentityTest, TensorOfAnotherVfIsRefused) {
    FlexStream s1 = vf1().CreateStream();
    FlexStream s2 = vf2().CreateStream();
    std::vector<float> host(32 * 40);
    std::iota(host.begin(), host.end(), 1.0f);
    SpyreTensor t1 = SpyreTensor::FromHost(vf1(), s1, host.data(), {32, 40}, DType::FP32, TensorLayout::Sticks);
    s1.Synchronize();
    std::vector<float> out(host.size(), -1.0f);
    ExpectWrongDevice([&] { t1.CopyToHost(s2, out.data()); }, kVf1, kVf2, "CopyToHost");
    ExpectWrongDevice([&] { (void)SpyreTensor::FromHost(vf1(), s2, host.data(), {32, 40}, DType::FP32); }, kVf2, kVf1,
                      "FromHost on a stream of another device");
    EXPECT_EQ(s2.enqueued(), 0u);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == -1.0f; })) << "bytes were copied";
    // On its own device's stream the same call works.
    t1.CopyToHost(s1, out.data());
    s1.Synchronize();
    EXPECT_EQ(out, host);
}

TEST_F(DeviceIdentityTest, EventOfAnotherVfIsRefused) {
    FlexStream s2 = vf2().CreateStream();
    Event e1(vf1());
    ExpectWrongDevice([&] { e1.Record(s2); }, kVf1, kVf2, "Event::Record");
    FlexStream s1 = vf1().CreateStream();
    e1.Record(s1);
    ExpectWrongDevice([&] { s2.Wait(e1); }, kVf1, kVf2, "FlexStream::Wait");
    EXPECT_EQ(s2.enqueued(), 0u);
    e1.Synchronize();
}

// A plan loaded on VF 1 launched on VF 2 with VF 2's tensors: every launch
// path refuses it before anything is enqueued, and VF 2's output tensor keeps
// its bytes. A plan's tensors from another VF are refused the same way.
TEST_F(DeviceIdentityTest, PlanOfAnotherVfIsRefused) {
    constexpr int64_t m = 16, k = 8, n = 16;
    SpyreStream ss1(vf1());
    SpyreStream ss2(vf2());
    auto plan1 = LoadExecutionPlan(ss1, CompilerOutputFromKernel("mm", KernelBuilder().Matmul(m, k, n, DType::FP32)));
    std::vector<float> a = RandomFloats(m * k, 1), b = RandomFloats(k * n, 2), c(m * n, 7.0f);
    FlexStream& f2 = ss2.flex_stream();
    std::vector<SpyreTensor> t2 = {SpyreTensor::FromHost(vf2(), f2, a.data(), {m, k}, DType::FP32),
                                   SpyreTensor::FromHost(vf2(), f2, b.data(), {k, n}, DType::FP32),
                                   SpyreTensor::FromHost(vf2(), f2, c.data(), {m, n}, DType::FP32)};
    std::vector<SpyreTensor> big2 = {SpyreTensor::FromHost(vf2(), f2, a.data(), {m, k}, DType::FP32),
                                     SpyreTensor::FromHost(vf2(), f2, b.data(), {k, n}, DType::FP32),
                                     SpyreTensor::Empty(vf2(), {m * 2, n}, DType::FP32)};
    ss2.Synchronize();
    const uint64_t before = f2.enqueued();
    const Operation& op = plan1->operations[0];
    ExpectWrongDevice([&] { ss2.Launch(op, t2); }, kVf1, kVf2, "SpyreStream::Launch");
    std::vector<DeviceHandle> handles2;
    for (const SpyreTensor& t : t2) handles2.push_back(t.device_handle());
    ExpectWrongDevice([&] { ss2.Launch(op, std::span<const DeviceHandle>(handles2)); }, kVf1, kVf2,
                      "SpyreStream::Launch(handles)");
    ExpectWrongDevice([&] { ss2.LaunchTiled(op, t2); }, kVf1, kVf2, "SpyreStream::LaunchTiled");
    ExpectWrongDevice([&] { ss2.LaunchTiled(op, big2); }, kVf1, kVf2, "SpyreStream::LaunchTiled (tiles)");
    ExpectWrongDevice([&] { LaunchKernel(ss2, *plan1, t2); }, kVf1, kVf2, "LaunchKernel");
    ExpectWrongDevice([&] { Program p(vf2(), plan1); }, kVf1, kVf2, "Program from a plan");
    Program p2(vf2());
    ExpectWrongDevice([&] { p2.AddInstruction(Instruction(op)); }, kVf1, kVf2, "Program::AddInstruction");
    EXPECT_EQ(f2.enqueued(), before);
    EXPECT_EQ(f2.Query(), StreamStatus::Idle);

    // The other way round: VF 1's plan on VF 1's stream with VF 2's tensors.
    ExpectWrongDevice([&] { ss1.Launch(op, t2); }, kVf2, kVf1, "Launch with tensors of another device");
    ExpectWrongDevice([&] { LaunchKernel(ss1, *plan1, t2); }, kVf2, kVf1, "LaunchKernel with tensors of another device");
    Program p1(vf1(), plan1);
    ExpectWrongDevice([&] { p1.Launch(t2); }, kVf2, kVf1, "Program::Launch with tensors of another device");
    ExpectWrongDevice([&] { p1.LaunchTiled(big2); }, kVf2, kVf1, "Program::LaunchTiled with tensors of another device");

    std::vector<float> c_back(c.size(), 0.0f);
    t2[2].CopyToHost(f2, c_back.data());
    ss2.Synchronize();
    EXPECT_EQ(c_back, c) << "VF 2's output tensor was written";

    // The same plan, compiled again and loaded on VF 2, runs there.
    auto plan2 = LoadExecutionPlan(ss2, CompilerOutputFromKernel("mm", KernelBuilder().Matmul(m, k, n, DType::FP32)));
    EXPECT_EQ(plan2->device(), std::optional<DeviceId>(vf2().id()));
    LaunchKernel(ss2, *plan2, t2);
    t2[2].CopyToHost(f2, c_back.data());
    ss2.Synchronize();
    EXPECT_EQ(CompareMatmul(c_back, CpuMatmul(a, b, m, k, n), m, n), 0);
}
