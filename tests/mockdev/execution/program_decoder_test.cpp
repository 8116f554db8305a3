// SPDX-License-Identifier: Apache-2.0
// The device's program decoder without a device: every program the builder
// emits decodes, every class of malformed program gets its own code, and
// random damage never gets past it unnoticed or crashes it. Plus the kernel
// builder's argument checks and artifacts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <set>

#include "malformed_programs.hpp"
#include "mock_fixture.hpp"
#include "execution/program_decoder.hpp"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/plan/program_image.hpp"

using namespace spyre;
using spyre::mockdev::DecodedProgram;
using spyre::mockdev::DecodeProgram;
using spyre::mockdev::ProgramFault;

namespace {

constexpr uint64_t kWindow = 1ull << 30;

std::vector<BuiltKernel> OneOfEach(TensorLayout layout) {
    const KernelBuilder b(layout);
    return {b.Matmul(33, 130, 65, DType::FP16, true),
            b.Matmul(4, 4, 4, DType::FP32),
            b.Elementwise(ElementwiseOp::Div, {3, 1, 5}, {4, 1}, DType::FP32),
            b.Relu({7, 9}, DType::FP16),
            b.Gelu({100}, DType::FP32),
            b.Softmax({2, 3, 257}, DType::FP16),
            b.Reduce(ReduceKind::Max, {6, 35, 9}, 1, DType::FP32),
            b.Transpose({2, 3, 4}, {2, 0, 1}, DType::INT8),
            b.Copy({5}, DType::BF16),
            b.Fill({3, 3}, 7.0, DType::INT32)};
}

ProgramFault Decode(const std::vector<uint8_t>& bytes, uint64_t window = kWindow) {
    DecodedProgram program;
    return DecodeProgram(bytes, window, program);
}

}  // namespace

TEST(ProgramDecoder, EveryBuiltKernelAndItsCorrectionDecode) {
    for (TensorLayout layout : {TensorLayout::Dense, TensorLayout::Sticks})
        for (BuiltKernel& k : OneOfEach(layout)) {
            SCOPED_TRACE(k.name);
            DecodedProgram p;
            const ProgramFault f = DecodeProgram(k.program, kWindow, p);
            EXPECT_FALSE(f) << f.what;
            EXPECT_EQ(p.operands.size(), k.tensor_count());
            EXPECT_EQ(p.relocs.size(), k.tensor_count());
            EXPECT_EQ(p.header.slot_count, k.tensor_count());
            SetCorrectionTarget(k.correction, 4096, 8192);
            EXPECT_FALSE(Decode(k.correction)) << Decode(k.correction).what;
        }
}

TEST(ProgramDecoder, AnEmptyProgramIsValid) {
    EXPECT_FALSE(Decode(ProgramImage{}.Encode()));
}

TEST(ProgramDecoder, EachMalformationGetsItsCode) {
    const uint64_t base = 1 << 20, window = 64 << 20;
    std::set<uint16_t> codes;
    for (const test::Malformed& m : test::MalformedPrograms(base, window)) {
        SCOPED_TRACE(m.name);
        const ProgramFault f = Decode(m.program, window);
        EXPECT_EQ(f.code, m.code) << spyre_error_name(f.code) << ": " << f.what;
        EXPECT_EQ(f.addr, m.bad_addr);
        codes.insert(f.code);
    }
    // Every program fault code of the contract is exercised.
    for (uint16_t code : {SPYRE_ERR_PROGRAM_MAGIC, SPYRE_ERR_PROGRAM_VERSION, SPYRE_ERR_PROGRAM_CHECKSUM,
                          SPYRE_ERR_PROGRAM_FORMAT, SPYRE_ERR_UNKNOWN_OP, SPYRE_ERR_SHAPE, SPYRE_ERR_RELOCATION,
                          SPYRE_ERR_ADDR_RANGE, SPYRE_ERR_MISALIGNED})
        EXPECT_TRUE(codes.count(code)) << spyre_error_name(code);
}

TEST(ProgramDecoder, StickExtentCoversTheLastRowsPadding) {
    // fp16 [3, 70] in sticks: rows of 70 padded to 128 elements, 768 bytes.
    const BuiltKernel k = KernelBuilder(TensorLayout::Sticks).Relu({3, 70}, DType::FP16);
    ASSERT_EQ(k.inputs[0].bytes, 768u);
    const uint64_t addrs[] = {0, 1024};
    const std::vector<uint8_t> bound = k.Bind(addrs);
    DecodedProgram p;
    ASSERT_FALSE(DecodeProgram(bound, 1024 + 768, p));
    EXPECT_EQ(p.operands[0].extent, 768u);
    EXPECT_EQ(p.operands[0].elements, 210u);
    const ProgramFault f = Decode(bound, 1024 + 767);
    EXPECT_EQ(f.code, SPYRE_ERR_ADDR_RANGE);
    EXPECT_EQ(f.addr, 1024u);
}

TEST(ProgramDecoder, CorrectOpChecksItsAddresses) {
    BuiltKernel k = KernelBuilder().Matmul(2, 2, 2, DType::FP32);
    auto check = [&](uint64_t target, uint64_t input, uint16_t code, uint64_t addr) {
        std::vector<uint8_t> c = k.correction;
        SetCorrectionTarget(c, target, input);
        const ProgramFault f = Decode(c, 1 << 20);
        EXPECT_EQ(f.code, code) << target << " " << input << ": " << f.what;
        EXPECT_EQ(f.addr, addr);
    };
    check(4096, 8192, SPYRE_ERR_NONE, 0);
    check(4100, 8192, SPYRE_ERR_MISALIGNED, 4100);
    check(4096, 8196, SPYRE_ERR_MISALIGNED, 8196);
    check((1 << 20) - 32, 8192, SPYRE_ERR_ADDR_RANGE, (1 << 20) - 32);  // no room for a header
    check(4096, (1 << 20) - 16, SPYRE_ERR_ADDR_RANGE, (1 << 20) - 16);  // 3 entries do not fit
}

TEST(ProgramDecoder, RandomDamageIsCaughtAndNeverCrashes) {
    const std::vector<uint8_t> valid = test::ValidRelu(4096);
    std::mt19937 gen(7);
    for (int round = 0; round < 20000; ++round) {
        std::vector<uint8_t> p = valid;
        const int edits = 1 + int(gen() % 4);
        for (int e = 0; e < edits; ++e) p[gen() % p.size()] ^= uint8_t(1 + gen() % 255);
        const bool sealed = round % 2;
        if (sealed) {  // only content checks can catch it now, or the edit is harmless
            const uint32_t sum = uapi::ProgramChecksum(p.data(), p.size());
            std::memcpy(p.data() + offsetof(spyre_program_header, checksum), &sum, sizeof sum);
        }
        const ProgramFault f = Decode(p, 1 << 20);
        if (!sealed && p != valid) {
            EXPECT_TRUE(f) << "round " << round;
        }
    }
}

TEST(ProgramDecoder, TheFuzzSeedCorpusIsValid) {
    // The seeds must stay valid programs, or the fuzzer starts from garbage
    // (regenerate them with `ninja fuzz-corpus`).
    const char* dir = std::getenv("SPYRE_FUZZ_CORPUS");
    if (!dir) GTEST_SKIP() << "SPYRE_FUZZ_CORPUS is not set (run through meson test)";
    size_t seeds = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        std::ifstream in(entry.path(), std::ios::binary);
        const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        const ProgramFault f = Decode(bytes, 1 << 20);
        EXPECT_FALSE(f) << entry.path() << ": " << spyre_error_name(f.code) << " " << f.what;
        ++seeds;
    }
    EXPECT_GE(seeds, 10u);
}

TEST(KernelBuilder, RejectsBadArgumentsNamingWhatIsWrong) {
    const KernelBuilder b;
    EXPECT_SPYRE_ERROR(b.Matmul(0, 2, 3, DType::FP32), InvalidArgument, "matmul dimension m is 0");
    EXPECT_SPYRE_ERROR(b.Matmul(2, 2, 3, DType::INT8), InvalidArgument, "matmul takes fp16 or fp32, not int8");
    EXPECT_SPYRE_ERROR(b.Elementwise(ElementwiseOp::Add, {3, 4}, {5}, DType::FP32), InvalidArgument,
                       "do not broadcast: dimension 1");
    EXPECT_SPYRE_ERROR(b.Reduce(ReduceKind::Sum, {2, 3}, 2, DType::FP32), InvalidArgument, "axis 2 is out of range");
    EXPECT_SPYRE_ERROR(b.Transpose({2, 3}, {0, 0}, DType::FP32), InvalidArgument, "perm entry 1");
    EXPECT_SPYRE_ERROR(b.Relu({2, 0}, DType::FP32), InvalidArgument, "dimension 1 of relu is 0");
    EXPECT_SPYRE_ERROR(b.Gelu({1, 1, 1, 1, 1, 1, 1, 1, 1}, DType::FP32), InvalidArgument, "rank 9");
    // A copy is named a copy (it said "transpose input": found probing from outside).
    EXPECT_SPYRE_ERROR(b.Copy({1, 1, 1, 1, 1, 1, 1, 1, 1}, DType::FP32), InvalidArgument, "copy input has rank 9");
    EXPECT_SPYRE_ERROR(b.Copy({2, 0}, DType::FP32), InvalidArgument, "dimension 1 of copy input is 0");
    EXPECT_SPYRE_ERROR(b.Fill({2}, 300, DType::INT8), InvalidArgument, "not representable as int8");
    EXPECT_SPYRE_ERROR(b.Fill({2}, 1.5, DType::INT32), InvalidArgument, "not representable as int32");
    // A finite value past a float type's range filled infinities.
    EXPECT_SPYRE_ERROR(b.Fill({4}, 1e10, DType::FP16), InvalidArgument,
                       "fill value 1e+10 is not representable as fp16 (it overflows to infinity)");
    EXPECT_SPYRE_ERROR(b.Fill({4}, 1e300, DType::FP16), InvalidArgument, "fill value 1e+300 is not");  // not 300 digits
    EXPECT_SPYRE_ERROR(b.Fill({4}, std::ldexp(1.0, 128) - std::ldexp(1.0, 119), DType::BF16), InvalidArgument,
                       "not representable as bf16");
    EXPECT_SPYRE_ERROR(b.Fill({4}, -1e39, DType::BF16), InvalidArgument, "not representable as bf16");
    EXPECT_SPYRE_ERROR(b.Fill({4}, 1e39, DType::FP32), InvalidArgument, "not representable as fp32");
    EXPECT_NO_THROW(b.Fill({4}, 65504.0, DType::FP16));  // the largest finite fp16
    EXPECT_NO_THROW(b.Fill({4}, -std::numeric_limits<double>::infinity(), DType::FP16));  // asked for
    EXPECT_NO_THROW(b.Fill({4}, std::numeric_limits<double>::quiet_NaN(), DType::BF16));
    EXPECT_SPYRE_ERROR(b.Softmax({4}, DType::BF16), InvalidArgument, "softmax takes fp16 or fp32");
    EXPECT_SPYRE_ERROR(b.Relu({int64_t(1) << 40, int64_t(1) << 40}, DType::FP32), InvalidArgument, "too large");
    const BuiltKernel k = b.Relu({2}, DType::FP32);
    const uint64_t one[] = {0};
    EXPECT_SPYRE_ERROR(k.Bind(one), InvalidArgument, "has 2 tensors, got 1 addresses");
    std::vector<uint8_t> not_correction = k.program;
    EXPECT_SPYRE_ERROR(SetCorrectionTarget(not_correction, 0, 0), InvalidArgument, "not a correction program");
    const std::vector<uint8_t> garbage(100, 0x5A);
    EXPECT_SPYRE_ERROR(ProgramImage::Decode(garbage), InvalidArgument, "bad magic");
}

TEST(KernelBuilder, RecordsTensorsAndTheCorrectionInput) {
    BuiltKernel k = KernelBuilder(TensorLayout::Sticks).Matmul(3, 5, 7, DType::FP16);
    ASSERT_EQ(k.inputs.size(), 2u);
    ASSERT_EQ(k.outputs.size(), 1u);
    EXPECT_EQ(k.inputs[0].shape, (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(k.inputs[1].shape, (std::vector<int64_t>{5, 7}));
    EXPECT_EQ(k.outputs[0].shape, (std::vector<int64_t>{3, 7}));
    EXPECT_EQ(k.inputs[0].strides, (std::vector<int64_t>{64, 1}));  // a row is one fp16 stick
    EXPECT_EQ(k.inputs[0].bytes, 3u * 128);
    EXPECT_EQ(k.correction_input_size, 24u);

    const uint64_t addrs[] = {0x1000, 0x2000, 0x3000};
    const std::vector<uint8_t> input = k.CorrectionInput(addrs);
    ASSERT_EQ(input.size(), 24u);
    EXPECT_EQ(input[8], 0x00);
    EXPECT_EQ(input[9], 0x20);  // little-endian 0x2000

    const ProgramImage bound = ProgramImage::Decode(k.Bind(addrs));
    for (const spyre_program_reloc& r : bound.relocs) EXPECT_EQ(bound.operands[r.operand].addr, addrs[r.slot]);

    SetCorrectionTarget(k.correction, 0x8000, 0x9000);
    const ProgramImage c = ProgramImage::Decode(k.correction);
    ASSERT_EQ(c.ops.size(), 1u);
    EXPECT_EQ(c.ops[0].opcode, SPYRE_PROG_OP_CORRECT);
    EXPECT_EQ(c.ops[0].u.correct.target_addr, 0x8000u);
    EXPECT_EQ(c.ops[0].u.correct.input_addr, 0x9000u);
    EXPECT_EQ(c.ops[0].u.correct.entry_count, 3u);
}

TEST(KernelBuilder, FillValuesAreTheDtypesBits) {
    auto bits = [](double v, DType d) { return ProgramImage::Decode(KernelBuilder().Fill({1}, v, d).program).ops[0].u.fill.value; };
    EXPECT_EQ(bits(1.5, DType::FP32), 0x3FC00000u);
    EXPECT_EQ(bits(1.0 / 3, DType::FP16), 0x3555u);
    EXPECT_EQ(bits(1.0, DType::BF16), 0x3F80u);
    EXPECT_EQ(bits(-3, DType::INT8), 0xFDu);
    EXPECT_EQ(bits(-1, DType::INT32), 0xFFFFFFFFu);
    // bf16 rounds once, from the double: just under the halfway point past
    // its largest finite (2^128 - 2^119) is that largest finite, 0x7f7f; it
    // rounded through float to the halfway point, then was refused as
    // overflowing to infinity.
    const double under_halfway = std::ldexp(1.0, 128) - std::ldexp(1.0, 119) - std::ldexp(1.0, 104);
    EXPECT_EQ(bits(under_halfway, DType::BF16), 0x7F7Fu);
    EXPECT_EQ(bits(-under_halfway, DType::BF16), 0xFF7Fu);
    EXPECT_EQ(bits(65504.0, DType::FP16), 0x7BFFu);
    // Just past a bf16 midpoint, float lands on the midpoint, which rounded
    // to even: the wrong side (probe73).
    EXPECT_EQ(bits(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), DType::BF16), 0x3F81u);
    EXPECT_EQ(bits(-(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), DType::BF16), 0xBF81u);
    EXPECT_EQ(bits(std::ldexp(1.0 + std::ldexp(1.0, -30), -134), DType::BF16), 0x0001u);
    EXPECT_EQ(bits(1.0 + std::ldexp(1.0, -8), DType::BF16), 0x3F80u);  // on the midpoint: to even
    EXPECT_EQ(bits(1.0 + 3 * std::ldexp(1.0, -8), DType::BF16), 0x3F82u);
}

TEST(ProgramImage, EncodeDecodeRoundTrip) {
    const BuiltKernel k = KernelBuilder().Elementwise(ElementwiseOp::Mul, {4, 4}, {4}, DType::FP32);
    const ProgramImage image = ProgramImage::Decode(k.program);
    EXPECT_EQ(image.Encode(), k.program);
    spyre_program_header h;
    std::memcpy(&h, k.program.data(), sizeof h);
    EXPECT_EQ(h.total_size, k.program.size());
    EXPECT_EQ(h.ops_offset, sizeof h);
    EXPECT_EQ(h.checksum, uapi::ProgramChecksum(k.program.data(), k.program.size()));
}

TEST(ProgramChecksum, IsZlibsCrc32) {
    const uint8_t text[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    EXPECT_EQ(uapi::Crc32(0, text, sizeof text), 0xCBF43926u);  // the CRC-32 check value
}
