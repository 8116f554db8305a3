// SPDX-License-Identifier: Apache-2.0
// Program correction on the device (seed 001, Example 2 and Workflow 4): a
// correction program patches the tensor addresses of a resident program, so
// the same binary computes on different tensors; the CORRECT CB does the same
// directly. Tiling along M re-points A and C per tile; tiling along K
// accumulates into C.
#include "execution_support.hpp"
#include "reference.hpp"
#include "spyre/plan/program_image.hpp"

using namespace spyre;
using namespace spyre::driver;
using spyre::test::ExecutionTest;

namespace {

constexpr double kU32 = 0x1p-24;

// A kernel resident on the device with its correction program and input area.
struct Resident {
    BuiltKernel kernel;
    uint64_t program;      // device address of the compute program
    uint64_t correction;   // device address of the correction program
    uint64_t input;        // the correction program's input area

    Resident(test::TestDevice& dev, BuiltKernel k) : kernel(std::move(k)) {
        program = dev.Put(kernel.program);
        input = dev.Alloc(kernel.correction_input_size);
        std::vector<uint8_t> corr = kernel.correction;
        SetCorrectionTarget(corr, program, input);
        correction = dev.Put(corr);
    }
    spyre_cb LaunchCorrection() const { return test::LaunchCb(correction, kernel.correction.size()); }
    spyre_cb Launch() const { return test::LaunchCb(program, kernel.program.size()); }
};

// `times` tiles of a 2-d tensor stacked along dim 0.
KernelTensor Stacked(KernelTensor t, int64_t times) {
    t.shape[0] *= times;
    t.bytes *= uint64_t(times);
    return t;
}

void ExpectMatmul(const std::vector<double>& got, const std::vector<double>& a, const std::vector<double>& b,
                  int64_t m, int64_t k, int64_t n) {
    const test::MatmulRef ref = test::RefMatmul(a, b, m, k, n);
    test::ExpectClose(got, ref.c, [&](size_t i) { return double(k) * kU32 * ref.magnitude[i]; });
}

}  // namespace

TEST_F(ExecutionTest, CorrectionAtTwoAddressesGivesTwoResults) {
    const int64_t m = 16, k = 24, n = 8;
    Resident r(pf(), KernelBuilder().Matmul(m, k, n, DType::FP32));
    std::vector<std::vector<double>> as, bs;
    std::vector<std::vector<uint64_t>> addrs;
    for (uint32_t round = 0; round < 2; ++round) {
        as.push_back(test::RandomValues(size_t(m * k), DType::FP32, 10 + round));
        bs.push_back(test::RandomValues(size_t(k * n), DType::FP32, 20 + round));
        addrs.push_back(pf().Place(r.kernel, {as.back(), bs.back()}));
        // CopyToDevice of the correction input, then Launch(correction), then Launch(matmul).
        const std::vector<uint8_t> input = r.kernel.CorrectionInput(addrs.back());
        std::memcpy(pf().At(r.input, input.size()), input.data(), input.size());
        const auto done = pf().Run(std::array{r.LaunchCorrection(), r.Launch()});
        ASSERT_TRUE(done[0].ok()) << spyre_error_name(done[0].status);
        ASSERT_TRUE(done[1].ok()) << spyre_error_name(done[1].status);
    }
    for (uint32_t round = 0; round < 2; ++round)
        ExpectMatmul(pf().ReadTensor(addrs[round][2], r.kernel.outputs[0]), as[round], bs[round], m, k, n);
    // The resident program now holds the second round's addresses, re-sealed.
    const ProgramImage patched = ProgramImage::Decode(std::span(pf().At(r.program), r.kernel.program.size()));
    for (const spyre_program_reloc& rel : patched.relocs) EXPECT_EQ(patched.operands[rel.operand].addr, addrs[1][rel.slot]);
}

// A program's CORRECT op loads the program it patches; the ops after it are
// still the launched program's (the device caches one decode, and the
// CORRECT op's load replaces it while the launch runs).
TEST_F(ExecutionTest, OpsAfterACorrectOpAreTheLaunchedProgramsOwn) {
    const int64_t m = 8, k = 8, n = 8;
    Resident r(pf(), KernelBuilder().Matmul(m, k, n, DType::FP32));
    const BuiltKernel fill = KernelBuilder(TensorLayout::Dense).Fill({4, 8}, 1.5, DType::FP32);
    const uint64_t out = pf().Alloc(fill.outputs[0].bytes);
    std::vector<uint8_t> corr = r.kernel.correction;
    SetCorrectionTarget(corr, r.program, r.input);
    ProgramImage both = ProgramImage::Decode(corr);
    const ProgramImage tail = ProgramImage::Decode(fill.Bind(std::array{out}));
    ASSERT_EQ(tail.ops.size(), 1u);
    spyre_program_op fill_op = tail.ops[0];
    fill_op.operands[0] = uint16_t(fill_op.operands[0] + both.operands.size());
    both.operands.insert(both.operands.end(), tail.operands.begin(), tail.operands.end());
    both.ops.push_back(fill_op);
    const uint64_t program = pf().Put(both.Encode());
    for (uint32_t round = 0; round < 2; ++round) {
        std::memset(pf().At(out, fill.outputs[0].bytes), 0, fill.outputs[0].bytes);
        const auto a = test::RandomValues(size_t(m * k), DType::FP32, 30 + round);
        const auto b = test::RandomValues(size_t(k * n), DType::FP32, 40 + round);
        const std::vector<uint64_t> addrs = pf().Place(r.kernel, {a, b});
        const std::vector<uint8_t> input = r.kernel.CorrectionInput(addrs);
        std::memcpy(pf().At(r.input, input.size()), input.data(), input.size());
        const auto done = pf().Run(std::array{test::LaunchCb(program, both.Encode().size()), r.Launch()});
        ASSERT_TRUE(done[0].ok()) << spyre_error_name(done[0].status);
        EXPECT_EQ(done[0].result, 2u);  // ops run: CORRECT, then FILL
        ASSERT_TRUE(done[1].ok()) << spyre_error_name(done[1].status);
        test::ExpectClose(pf().ReadTensor(out, fill.outputs[0]), std::vector<double>(32, 1.5), [](size_t) { return 0.0; });
        ExpectMatmul(pf().ReadTensor(addrs[2], r.kernel.outputs[0]), a, b, m, k, n);
    }
}

TEST_F(ExecutionTest, CorrectCbIsTheDirectFormOfTheCorrectionProgram) {
    const int64_t m = 9, k = 13, n = 31;
    Resident r(pf(), KernelBuilder(TensorLayout::Sticks).Matmul(m, k, n, DType::FP16));
    const auto a = test::RandomValues(size_t(m * k), DType::FP16, 1);
    const auto b = test::RandomValues(size_t(k * n), DType::FP16, 2);
    const std::vector<uint64_t> addrs = pf().Place(r.kernel, {a, b});
    const uint64_t table = pf().Put(r.kernel.CorrectionInput(addrs));
    const auto done = pf().Run(std::array{test::CorrectCb(r.program, table, 3), r.Launch()});
    ASSERT_TRUE(done[0].ok()) << spyre_error_name(done[0].status);
    EXPECT_EQ(done[0].result, 3u);  // relocations patched
    ASSERT_TRUE(done[1].ok()) << spyre_error_name(done[1].status);
    const test::MatmulRef ref = test::RefMatmul(a, b, m, k, n);
    test::ExpectClose(pf().ReadTensor(addrs[2], r.kernel.outputs[0]), ref.c,
                      [&](size_t i) { return double(k) * kU32 * ref.magnitude[i] + 0x1p-11 * std::abs(ref.c[i]); });
}

TEST_F(ExecutionTest, TiledLaunchAlongMIsTwelveCbsInOneBatch) {
    // Seed 001 Workflow 4: a kernel compiled for A[32, k] runs over A[128, k]
    // in 4 iterations of copy (offsets) -> correction -> matmul, all queued at once.
    const int64_t tile = 32, tiles = 4, k = 48, n = 40;
    Resident r(pf(), KernelBuilder().Matmul(tile, k, n, DType::FP32));
    const auto a = test::RandomValues(size_t(tile * tiles * k), DType::FP32, 3);
    const auto b = test::RandomValues(size_t(k * n), DType::FP32, 4);
    const KernelTensor whole_a = Stacked(r.kernel.inputs[0], tiles), whole_c = Stacked(r.kernel.outputs[0], tiles);
    const uint64_t a_addr = pf().Alloc(whole_a.bytes), b_addr = pf().Alloc(r.kernel.inputs[1].bytes);
    const uint64_t c_addr = pf().Alloc(whole_c.bytes);
    pf().WriteTensor(a_addr, whole_a, a);
    pf().WriteTensor(b_addr, r.kernel.inputs[1], b);
    std::vector<spyre_cb> cbs;
    for (int64_t i = 0; i < tiles; ++i) {
        const uint64_t offsets[] = {a_addr + uint64_t(i * tile * k * 4), b_addr, c_addr + uint64_t(i * tile * n * 4)};
        const uint64_t staged = pf().Put(r.kernel.CorrectionInput(offsets));  // the host buffer of this iteration
        cbs.push_back(test::CopyCb(staged, r.input, r.kernel.correction_input_size));
        cbs.push_back(r.LaunchCorrection());
        cbs.push_back(r.Launch());
    }
    for (const Completion& c : pf().Run(cbs)) ASSERT_TRUE(c.ok()) << spyre_error_name(c.status) << " at " << c.sq_pos;
    ExpectMatmul(pf().ReadTensor(c_addr, whole_c), a, b, tile * tiles, k, n);
}

TEST_F(ExecutionTest, TilingAlongKAccumulatesIntoC) {
    // C = sum over K tiles of A_t * B_t: the first tile overwrites C, the
    // others accumulate (two resident kernels, each with its correction).
    const int64_t m = 20, kt = 16, tiles = 3, n = 12, k = kt * tiles;
    Resident first(pf(), KernelBuilder().Matmul(m, kt, n, DType::FP32, false));
    Resident rest(pf(), KernelBuilder().Matmul(m, kt, n, DType::FP32, true));
    const auto a = test::RandomValues(size_t(m * k), DType::FP32, 5);
    const auto b = test::RandomValues(size_t(k * n), DType::FP32, 6);
    const uint64_t c_addr = pf().Alloc(first.kernel.outputs[0].bytes);
    std::memset(pf().At(c_addr, first.kernel.outputs[0].bytes), 0xFF, first.kernel.outputs[0].bytes);  // NaN garbage
    std::vector<spyre_cb> cbs;
    for (int64_t t = 0; t < tiles; ++t) {
        // A's K tile t as its own [m, kt] block; B's rows [t*kt, (t+1)*kt) are contiguous already.
        std::vector<double> a_tile, b_tile(b.begin() + t * kt * n, b.begin() + (t + 1) * kt * n);
        for (int64_t i = 0; i < m; ++i) a_tile.insert(a_tile.end(), a.begin() + i * k + t * kt, a.begin() + i * k + (t + 1) * kt);
        const uint64_t at = pf().Alloc(first.kernel.inputs[0].bytes), bt = pf().Alloc(first.kernel.inputs[1].bytes);
        pf().WriteTensor(at, first.kernel.inputs[0], a_tile);
        pf().WriteTensor(bt, first.kernel.inputs[1], b_tile);
        const Resident& r = t == 0 ? first : rest;
        const uint64_t offsets[] = {at, bt, c_addr};
        cbs.push_back(test::CopyCb(pf().Put(r.kernel.CorrectionInput(offsets)), r.input, r.kernel.correction_input_size));
        cbs.push_back(r.LaunchCorrection());
        cbs.push_back(r.Launch());
    }
    for (const Completion& c : pf().Run(cbs)) ASSERT_TRUE(c.ok()) << spyre_error_name(c.status) << " at " << c.sq_pos;
    ExpectMatmul(pf().ReadTensor(c_addr, first.kernel.outputs[0]), a, b, m, k, n);
}

TEST_F(ExecutionTest, CorrectionFaultsNameTheirCauseAndLeaveTheTargetAlone) {
    Resident r(pf(), KernelBuilder().Relu({4}, DType::FP32));
    const uint64_t t1 = pf().Alloc(16), t2 = pf().Alloc(16);
    const uint64_t table = pf().Put(r.kernel.CorrectionInput(std::array{t1, t2}));
    const std::vector<uint8_t> before(pf().At(r.program), pf().At(r.program) + r.kernel.program.size());
    auto expect = [&](const spyre_cb& cb, uint16_t code, uint64_t addr) {
        const Completion c = pf().Run(cb);
        EXPECT_EQ(c.status, code) << spyre_error_name(c.status);
        EXPECT_EQ(pf().fn().Read64(SPYRE_REG_ERR_ADDR), addr);
        pf().fn().Write32(SPYRE_REG_ERR_CLEAR, 1);
        EXPECT_EQ(std::vector<uint8_t>(pf().At(r.program), pf().At(r.program) + before.size()), before);
    };
    expect(test::CorrectCb(r.program, table, 3), SPYRE_ERR_RELOCATION, r.program);  // 2 slots, not 3
    expect(test::CorrectCb(r.program, table + 4, 2), SPYRE_ERR_MISALIGNED, table + 4);
    expect(test::CorrectCb(r.program + 8, table, 2), SPYRE_ERR_PROGRAM_MAGIC, r.program + 8);
    expect(test::CorrectCb(r.program + 4, table, 2), SPYRE_ERR_MISALIGNED, r.program + 4);
    expect(test::CorrectCb(pf().mem_size() - 16, table, 2), SPYRE_ERR_ADDR_RANGE, pf().mem_size() - 16);
    expect(test::CorrectCb(r.program, pf().mem_size() - 8, 2), SPYRE_ERR_ADDR_RANGE, pf().mem_size() - 8);
    const uint64_t misaligned_tensor = pf().Put(r.kernel.CorrectionInput(std::array{t1 + 2, t2}));
    expect(test::CorrectCb(r.program, misaligned_tensor, 2), SPYRE_ERR_MISALIGNED, t1 + 2);
    // The correction program reports the same faults through LAUNCH.
    std::vector<uint8_t> wrong = r.kernel.correction;
    SetCorrectionTarget(wrong, r.program + 8, table);
    expect(test::LaunchCb(pf().Put(wrong), wrong.size()), SPYRE_ERR_PROGRAM_MAGIC, r.program + 8);
    // And a good correction still works afterwards.
    const auto done = pf().Run(std::array{test::CorrectCb(r.program, table, 2), r.Launch()});
    EXPECT_TRUE(done[0].ok() && done[1].ok());
}
