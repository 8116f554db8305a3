// SPDX-License-Identifier: Apache-2.0
// A core's ProgramExecutor running tasks without a daemon: a core that
// alternates between a few kernels decodes each once (not at every switch),
// a program rewritten in place is decoded again, and a task's relocated
// operands are refused exactly as a decode of the relocated bytes refuses
// them (same code, same ERR_ADDR, the first bad operand in index order).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "execution/card_cores.hpp"
#include "execution/program_decoder.hpp"
#include "execution/program_executor.hpp"
#include "spyre/compiler/kernel_builder.hpp"

using namespace spyre;
using namespace spyre::mockdev;

namespace {

constexpr uint64_t kWindow = 4ull << 20;
constexpr int64_t kN = 8;  // 8x8 fp32 operands

class ProgramExecutorTest : public ::testing::Test {
protected:
    ProgramExecutorTest()
        : memory_(kWindow), cores_(1, std::chrono::microseconds(0)), exec_(DeviceMemory(memory_.data(), kWindow), cores_) {}

    // Copies `bytes` to a fresh 4 KiB-aligned device address.
    uint64_t Put(const void* bytes, size_t size) {
        const uint64_t at = next_;
        next_ += (size + 4095) / 4096 * 4096;
        std::memcpy(memory_.data() + at, bytes, size);
        return at;
    }
    uint64_t Put(const std::vector<uint8_t>& bytes) { return Put(bytes.data(), bytes.size()); }
    uint64_t PutFloats(const std::vector<float>& v) { return Put(v.data(), v.size() * sizeof(float)); }
    uint64_t PutTable(const std::vector<uint64_t>& addresses) {
        return Put(addresses.data(), addresses.size() * sizeof(uint64_t));
    }
    float* Floats(uint64_t at) { return reinterpret_cast<float*>(memory_.data() + at); }

    CbOutcome Run(uint64_t program, uint64_t size, uint64_t table, uint64_t entries) {
        const Budget budget(Budget::Clock::now(), std::chrono::seconds(10));
        return exec_.RunTask(program, size, table, entries, budget);
    }

    std::vector<uint8_t> memory_;
    CardCores cores_;
    ProgramExecutor exec_;
    uint64_t next_ = 4096;  // address 0 stays unused
};

std::vector<float> Values(float first) {
    std::vector<float> v(size_t(kN * kN));
    for (size_t i = 0; i < v.size(); ++i) v[i] = first + float(i % 5) - 2.0f;  // small integers: exact sums
    return v;
}

// C (+)= A * B, 8x8 row-major.
void Reference(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& c, bool accumulate) {
    for (int64_t i = 0; i < kN; ++i)
        for (int64_t j = 0; j < kN; ++j) {
            float sum = accumulate ? c[size_t(i * kN + j)] : 0.0f;
            for (int64_t k = 0; k < kN; ++k) sum += a[size_t(i * kN + k)] * b[size_t(k * kN + j)];
            c[size_t(i * kN + j)] = sum;
        }
}

}  // namespace

TEST_F(ProgramExecutorTest, ACoreAlternatingBetweenKernelsDecodesEachOnce) {
    const KernelBuilder builder;
    const BuiltKernel gemm = builder.Matmul(kN, kN, kN, DType::FP32);
    const BuiltKernel gemm_acc = builder.Matmul(kN, kN, kN, DType::FP32, true);
    const BuiltKernel copy = builder.Copy({kN, kN}, DType::FP32);
    const uint64_t programs[] = {Put(gemm.program), Put(gemm_acc.program), Put(copy.program)};
    const std::vector<float> a = Values(1.0f), b = Values(-1.0f);
    const uint64_t a_at = PutFloats(a), b_at = PutFloats(b);
    const uint64_t c_at = PutFloats(std::vector<float>(size_t(kN * kN), 0.0f));
    const uint64_t out_at = PutFloats(std::vector<float>(size_t(kN * kN), 0.0f));
    const uint64_t gemm_table = PutTable({a_at, b_at, c_at});
    const uint64_t copy_table = PutTable({c_at, out_at});

    // Example 2's pattern on one core: GEMM, GEMM_ACC, GEMM_ACC, COPY, again and again.
    std::vector<float> want(size_t(kN * kN));
    for (int round = 0; round < 10; ++round) {
        for (int k = 0; k < 3; ++k) {
            const CbOutcome out = Run(programs[k == 0 ? 0 : 1], 0, gemm_table, 3);
            ASSERT_EQ(out.status, SPYRE_ERR_NONE) << spyre_error_name(out.status);
            Reference(a, b, want, k != 0);
        }
        ASSERT_EQ(Run(programs[2], 0, copy_table, 2).status, SPYRE_ERR_NONE);
        ASSERT_EQ(std::memcmp(Floats(out_at), want.data(), want.size() * sizeof(float)), 0) << "round " << round;
    }
    EXPECT_EQ(exec_.decodes(), 3u);

    // Another program written over the GEMM's bytes: the core runs (and decodes) the new one.
    ASSERT_LE(gemm_acc.program.size(), 4096u);
    std::memcpy(memory_.data() + programs[0], gemm_acc.program.data(), gemm_acc.program.size());
    ASSERT_EQ(Run(programs[0], 0, gemm_table, 3).status, SPYRE_ERR_NONE);
    Reference(a, b, want, true);
    EXPECT_EQ(std::memcmp(Floats(c_at), want.data(), want.size() * sizeof(float)), 0);
    const BuiltKernel small = builder.Matmul(kN / 2, kN, kN / 2, DType::FP32);
    std::memcpy(memory_.data() + programs[0], small.program.data(), small.program.size());
    ASSERT_EQ(Run(programs[0], 0, gemm_table, 3).status, SPYRE_ERR_NONE);
    EXPECT_EQ(exec_.decodes(), 4u) << "the GEMM_ACC's bytes were cached already; the small GEMM's were not";
}

TEST_F(ProgramExecutorTest, ACoreKeepsAsManyProgramsAsItsCacheHolds) {
    const KernelBuilder builder;
    std::vector<uint64_t> programs;
    for (size_t i = 0; i <= ProgramExecutor::kCachedPrograms; ++i)
        programs.push_back(Put(builder.Fill({int64_t(i + 1)}, double(i), DType::FP32).program));
    const uint64_t table = PutTable({PutFloats(std::vector<float>(64, 0.0f))});
    // kCachedPrograms programs in turn: each decoded once.
    for (int round = 0; round < 3; ++round)
        for (size_t i = 0; i < ProgramExecutor::kCachedPrograms; ++i)
            ASSERT_EQ(Run(programs[i], 0, table, 1).status, SPYRE_ERR_NONE);
    EXPECT_EQ(exec_.decodes(), ProgramExecutor::kCachedPrograms);
    // One more evicts the least recently used (the first), which then decodes again.
    ASSERT_EQ(Run(programs.back(), 0, table, 1).status, SPYRE_ERR_NONE);
    ASSERT_EQ(Run(programs[1], 0, table, 1).status, SPYRE_ERR_NONE);
    EXPECT_EQ(exec_.decodes(), ProgramExecutor::kCachedPrograms + 1);
    ASSERT_EQ(Run(programs[0], 0, table, 1).status, SPYRE_ERR_NONE);
    EXPECT_EQ(exec_.decodes(), ProgramExecutor::kCachedPrograms + 2);
}

TEST_F(ProgramExecutorTest, RelocatedOperandsAreRefusedAsADecodeOfTheRelocatedBytesRefusesThem) {
    const BuiltKernel dense = KernelBuilder().Matmul(kN, kN, kN, DType::FP32);
    const BuiltKernel sticks = KernelBuilder(TensorLayout::Sticks).Matmul(kN, kN, kN, DType::FP16);
    const uint64_t a = PutFloats(Values(0.0f)), b = PutFloats(Values(0.0f)), c = PutFloats(Values(0.0f));
    struct Case {
        const char* what;
        const BuiltKernel& kernel;
        std::vector<uint64_t> addresses;
    };
    const Case cases[] = {
        {"misaligned B", dense, {a, b + 2, c}},
        {"C past the window", dense, {a, b, kWindow - 16}},
        {"A at the window's end", dense, {kWindow, b, c}},
        {"C wrapping past 2^64", dense, {a, b, ~0ull - 3}},
        {"two bad: the first in index order", dense, {a, kWindow + 4096, c + 1}},
        {"stick operand off its 128 bytes", sticks, {a + 64, b, c}},
        {"all good", dense, {a, b, c}},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE(k.what);
        const uint64_t program = Put(k.kernel.program);
        const CbOutcome got = Run(program, 0, PutTable(k.addresses), k.addresses.size());
        // The reference: the program with the addresses in its bytes, decoded whole.
        DecodedProgram decoded;
        const ProgramFault want = DecodeProgram(k.kernel.Bind(k.addresses), kWindow, decoded);
        EXPECT_EQ(got.status, want.code) << spyre_error_name(got.status) << " against " << spyre_error_name(want.code);
        if (want.code == SPYRE_ERR_NONE) continue;
        const bool names_address = want.code == SPYRE_ERR_ADDR_RANGE || want.code == SPYRE_ERR_MISALIGNED;
        EXPECT_EQ(got.fault_addr, names_address ? want.addr : program);
    }
}
