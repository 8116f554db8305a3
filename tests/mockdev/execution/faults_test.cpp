// SPDX-License-Identifier: Apache-2.0
// Malformed programs and launches get error completions naming the fault and
// latch the error registers; the device keeps running good programs. A VF
// can reach nothing outside its own memory window; the PF can.
#include "execution_support.hpp"
#include "malformed_programs.hpp"
#include "reference.hpp"
#include "spyre/plan/program_image.hpp"

using namespace spyre;
using namespace spyre::driver;
using spyre::test::ExecutionTest;
using spyre::test::TestDevice;

namespace {

// Expects `c` to have failed with `code`, latched with ERR_ADDR `addr`; clears the latch.
void ExpectFault(TestDevice& dev, const Completion& c, uint16_t code, uint64_t addr) {
    EXPECT_EQ(c.status, code) << spyre_error_name(c.status);
    EXPECT_EQ(dev.fn().Read32(SPYRE_REG_ERR_CODE), code);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_ERR_ADDR), addr);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_ERR_USER_DATA), c.user_data);
    dev.fn().Write32(SPYRE_REG_ERR_CLEAR, 1);
}

// A relu the device runs correctly: the device still works.
void ExpectDeviceWorks(TestDevice& dev) {
    const BuiltKernel k = KernelBuilder().Relu({3, 5}, DType::FP32);
    const std::vector<double> x = {-1, 2, -3, 4, -5, 6, -7, 8, -9, 10, -11, 12, -13, 14, -15};
    const std::vector<double> got = dev.RunKernel(k, {x});
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], x[i] < 0 ? 0 : x[i]);
}

}  // namespace

TEST_F(ExecutionTest, MalformedProgramsAreRejectedWithTheirCode) {
    const uint64_t base = pf().Alloc(4096);  // where the valid program's tensors sit
    const uint64_t window = pf().mem_size();
    for (const test::Malformed& m : test::MalformedPrograms(base, window)) {
        SCOPED_TRACE(m.name);
        const uint64_t at = pf().Put(m.program);
        const Completion c = pf().Run(test::LaunchCb(at, m.program.size()));
        ExpectFault(pf(), c, m.code, m.bad_addr ? m.bad_addr : at);
        ExpectDeviceWorks(pf());
    }
    EXPECT_EQ(pf().fn().Read64(SPYRE_REG_CNT_CB_ERRORS), test::MalformedPrograms(base, window).size());
}

TEST_F(ExecutionTest, LaunchCbsAreValidated) {
    const std::vector<uint8_t> good = test::ValidRelu(pf().Alloc(4096));
    const uint64_t at = pf().Put(good);
    const uint64_t end = pf().mem_size();
    ExpectFault(pf(), pf().Run(test::LaunchCb(at + 4, good.size())), SPYRE_ERR_MISALIGNED, at + 4);
    ExpectFault(pf(), pf().Run(test::LaunchCb(end - 64, good.size())), SPYRE_ERR_ADDR_RANGE, end - 64);
    ExpectFault(pf(), pf().Run(test::LaunchCb(UINT64_MAX - 7, good.size())), SPYRE_ERR_ADDR_RANGE, UINT64_MAX - 7);
    ExpectFault(pf(), pf().Run(test::LaunchCb(at, 32)), SPYRE_ERR_PROGRAM_FORMAT, at);
    ExpectFault(pf(), pf().Run(test::LaunchCb(at, SPYRE_PROGRAM_MAX_SIZE + 8)), SPYRE_ERR_PROGRAM_FORMAT, at);
    ExpectFault(pf(), pf().Run(test::LaunchCb(at, good.size() + 8)), SPYRE_ERR_PROGRAM_FORMAT, at);  // size != total_size
    spyre_cb reserved = test::LaunchCb(at, good.size());
    reserved.u.launch.reserved[3] = 1;
    ExpectFault(pf(), pf().Run(reserved), SPYRE_ERR_RESERVED_NONZERO, 0);
    const Completion ok = pf().Run(test::LaunchCb(at, good.size()));
    EXPECT_TRUE(ok.ok());
    EXPECT_EQ(ok.result, 1u);  // ops run
    EXPECT_EQ(pf().fn().Read64(SPYRE_REG_CNT_LAUNCHES), 1u);
    ExpectDeviceWorks(pf());
}

TEST_F(ExecutionTest, AnEmptyProgramLaunches) {
    const Completion c = pf().LaunchProgram(ProgramImage{}.Encode());
    EXPECT_TRUE(c.ok());
    EXPECT_EQ(c.result, 0u);
}

TEST_F(ExecutionTest, AVfReachesNothingOutsideItsWindowWhileThePfCan) {
    TestDevice vf1(Vf(1));
    TestDevice vf2(Vf(2));
    const uint64_t vf_size = vf1.mem_size();
    ASSERT_EQ(vf1.fn().Read64(SPYRE_REG_MEM_SIZE), vf_size);
    const uint64_t vf2_base = vf2.fn().Read64(SPYRE_REG_MEM_BASE);
    ASSERT_GT(vf2_base, 0u);

    // The PF writes into VF2's slice (its address there is vf2_base + x); VF2 sees it at x.
    const BuiltKernel fill = KernelBuilder().Fill({4, 32}, 2.5, DType::FP32);
    const uint64_t x = vf2.Alloc(fill.outputs[0].bytes);
    const uint64_t pf_view[] = {vf2_base + x};
    ASSERT_TRUE(pf().LaunchProgram(fill.Bind(pf_view)).ok());
    EXPECT_EQ(vf2.ReadTensor(x, fill.outputs[0]), std::vector<double>(128, 2.5));

    // VF1 cannot: past its window, straddling its end, or at the PF's view of VF2.
    for (uint64_t bad : {vf_size, vf_size - 64, vf2_base + x, vf_size * 2}) {
        SCOPED_TRACE(bad);
        const uint64_t addr[] = {bad};
        ExpectFault(vf1, vf1.LaunchProgram(fill.Bind(addr)), SPYRE_ERR_ADDR_RANGE, bad);
    }
    // Nor with copies and semaphores.
    ExpectFault(vf1, vf1.Run(test::CopyCb(0x100000, vf_size - 8, 16)), SPYRE_ERR_ADDR_RANGE, vf_size - 8);
    ExpectFault(vf1, vf1.Run(test::CopyCb(vf_size, 0x100000, 1)), SPYRE_ERR_ADDR_RANGE, vf_size);
    ExpectFault(vf1, vf1.Run(test::SemWriteCb(vf_size, 1)), SPYRE_ERR_ADDR_RANGE, vf_size);
    ExpectFault(vf1, vf1.Run(test::SemWaitCb(vf_size + 8, 1, 1000)), SPYRE_ERR_ADDR_RANGE, vf_size + 8);
    // Nor by correcting a program to point outside (the program stays as it was).
    const BuiltKernel relu = KernelBuilder().Relu({2, 2}, DType::FP32);
    const uint64_t target = vf1.Put(relu.Bind(std::array<uint64_t, 2>{0x100000, 0x100100}));
    const std::vector<uint8_t> before(vf1.At(target), vf1.At(target) + relu.program.size());
    const uint64_t table = vf1.Put(relu.CorrectionInput(std::array<uint64_t, 2>{0x100000, vf_size + 0x100}));
    ExpectFault(vf1, vf1.Run(test::CorrectCb(target, table, 2)), SPYRE_ERR_ADDR_RANGE, vf_size + 0x100);
    EXPECT_EQ(std::vector<uint8_t>(vf1.At(target), vf1.At(target) + relu.program.size()), before);
    ExpectDeviceWorks(vf1);
}

// The device reuses the decode of a program launched again byte for byte
// (program_executor.hpp): every change to the bytes in memory must still be
// seen, a corrupted copy refused, another valid program run, the first
// one run again once restored.
TEST_F(ExecutionTest, ARelaunchSeesEveryChangeToTheProgramsBytes) {
    const BuiltKernel one = KernelBuilder(TensorLayout::Dense).Fill({4, 8}, 1.5, DType::FP32);
    const BuiltKernel two = KernelBuilder(TensorLayout::Dense).Fill({4, 8}, 2.5, DType::FP32);
    const KernelTensor& y = one.outputs[0];
    const uint64_t out = pf().Alloc(y.bytes);
    const std::vector<uint8_t> first = one.Bind(std::array{out}), second = two.Bind(std::array{out});
    ASSERT_EQ(first.size(), second.size());
    ASSERT_NE(first, second);
    const uint64_t at = pf().Put(first);
    auto launch = [&] { return pf().Run(LaunchCb(at, first.size())); };
    auto expect_output = [&](double value) {
        test::ExpectClose(pf().ReadTensor(out, y), std::vector<double>(32, value), [](size_t) { return 0.0; });
    };
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(launch().ok());
    expect_output(1.5);
    pf().At(at + first.size() - 1)[0] ^= 0x01;  // one bit of the last op: the checksum no longer holds
    EXPECT_EQ(launch().status, SPYRE_ERR_PROGRAM_CHECKSUM);
    std::memcpy(pf().At(at, second.size()), second.data(), second.size());
    ASSERT_TRUE(launch().ok());
    expect_output(2.5);
    std::memcpy(pf().At(at, first.size()), first.data(), first.size());
    ASSERT_TRUE(launch().ok());
    expect_output(1.5);
}
