// SPDX-License-Identifier: Apache-2.0
// Every kernel the builder emits, run on a mock device and checked against a
// CPU reference in double precision, at several shapes (non-square, odd,
// padded to sticks) in fp32 and fp16.
//
// Tolerances (u32 = 2^-24, u16 = 2^-11, the unit roundoffs):
//   +, -, *, /, relu, copy, fill, reduce_max   exact: the device rounds once
//       (fp16 goes through fp32, and double rounding is innocuous there);
//   matmul   |c - ref| <= K u32 sum|a||b|, plus u16 |ref| for fp16 outputs
//            (fp32 accumulation in any order, then one rounding to fp16);
//   gelu, softmax   fp32 relative 1e-5; fp16 relative 2 u16 (one ulp);
//   reduce_sum      fp32 relative 2 u32; fp16 relative 2 u16 (one ulp: the
//                   device sums in double and rounds once).
#include <cmath>
#include <limits>

#include "execution_support.hpp"
#include "reference.hpp"
#include "spyre/plan/program_image.hpp"

using namespace spyre;
using spyre::test::ExecutionTest;

namespace {

constexpr double kU32 = 0x1p-24;
constexpr double kU16 = 0x1p-11;

constexpr DType kFloatTypes[] = {DType::FP32, DType::FP16};
constexpr TensorLayout kLayouts[] = {TensorLayout::Dense, TensorLayout::Sticks};

const char* Name(TensorLayout l) { return l == TensorLayout::Dense ? "dense" : "sticks"; }

std::vector<double> Rounded(DType dtype, std::vector<double> v) {
    for (double& x : v) x = test::RoundTo(dtype, x);
    return v;
}

// One ulp of the dtype's precision, relative, and the smallest step near 0.
double Ulp(DType dtype) { return dtype == DType::FP16 ? 2 * kU16 : 2 * kU32; }
double Floor(DType dtype) { return dtype == DType::FP16 ? 0x1p-24 : 0x1p-149; }

struct MatmulCase {
    int64_t m, k, n;
};

}  // namespace

TEST_F(ExecutionTest, MatmulMatchesReference) {
    const MatmulCase cases[] = {{1, 1, 1}, {7, 5, 3}, {64, 64, 64}, {33, 130, 65}, {128, 256, 96}, {300, 70, 257}};
    uint32_t seed = 1;
    for (TensorLayout layout : kLayouts)
        for (DType dtype : kFloatTypes)
            for (const MatmulCase& c : cases) {
                const BuiltKernel k = KernelBuilder(layout).Matmul(c.m, c.k, c.n, dtype);
                SCOPED_TRACE(k.name + " " + Name(layout));
                const auto a = test::RandomValues(size_t(c.m * c.k), dtype, ++seed);
                const auto b = test::RandomValues(size_t(c.k * c.n), dtype, ++seed);
                const auto got = pf().RunKernel(k, {a, b});
                const test::MatmulRef ref = test::RefMatmul(a, b, c.m, c.k, c.n);
                test::ExpectClose(got, ref.c, [&](size_t i) {
                    return double(c.k) * kU32 * ref.magnitude[i] + (dtype == DType::FP16 ? kU16 * std::abs(ref.c[i]) : 0);
                });
            }
}

TEST_F(ExecutionTest, MatmulSplitsLargeProblemsIntoChunksAndBlocks) {
    // Several chunks of rows; fp16 operands over 64 MiB as fp32 (A in the
    // first case, C in the second) are converted block by block in the chunks.
    const MatmulCase cases[] = {{600, 1100, 530}, {4100, 4100, 8}, {4100, 8, 4100}};
    for (const MatmulCase& c : cases)
        for (DType dtype : kFloatTypes) {
            const BuiltKernel kernel = KernelBuilder(TensorLayout::Sticks).Matmul(c.m, c.k, c.n, dtype);
            SCOPED_TRACE(kernel.name);
            const auto a = test::RandomValues(size_t(c.m * c.k), dtype, 11);
            const auto b = test::RandomValues(size_t(c.k * c.n), dtype, 12);
            const auto got = pf().RunKernel(kernel, {a, b});
            const test::MatmulRef ref = test::RefMatmul(a, b, c.m, c.k, c.n);
            test::ExpectClose(got, ref.c, [&](size_t i) {
                return double(c.k) * kU32 * ref.magnitude[i] + (dtype == DType::FP16 ? kU16 * std::abs(ref.c[i]) : 0);
            });
        }
}

TEST_F(ExecutionTest, MatmulTakesAnyStrides) {
    // A stored column-major (A^T in memory): not for the BLAS in place, so
    // the device gathers it element by element.
    const int64_t m = 37, k = 29, n = 41;
    for (DType dtype : kFloatTypes) {
        const BuiltKernel kernel = KernelBuilder().Matmul(m, k, n, dtype);
        SCOPED_TRACE(kernel.name);
        KernelTensor a_t = kernel.inputs[0];
        a_t.strides = {1, m};
        const auto a = test::RandomValues(size_t(m * k), dtype, 31);
        const auto b = test::RandomValues(size_t(k * n), dtype, 32);
        std::vector<uint64_t> addrs = pf().Place(kernel, {a, b});
        pf().WriteTensor(addrs[0], a_t, a);
        ProgramImage image = ProgramImage::Decode(kernel.Bind(addrs));
        image.operands[0].strides[0] = 1;
        image.operands[0].strides[1] = uint64_t(m);
        ASSERT_TRUE(pf().LaunchProgram(image.Encode()).ok());
        const test::MatmulRef ref = test::RefMatmul(a, b, m, k, n);
        test::ExpectClose(pf().ReadTensor(addrs[2], kernel.outputs[0]), ref.c, [&](size_t i) {
            return double(k) * kU32 * ref.magnitude[i] + (dtype == DType::FP16 ? kU16 * std::abs(ref.c[i]) : 0);
        });
    }
}

TEST_F(ExecutionTest, MatmulAccumulateAddsToC) {
    const int64_t m = 45, k = 70, n = 33;
    for (TensorLayout layout : kLayouts)
        for (DType dtype : kFloatTypes) {
            const BuiltKernel kernel = KernelBuilder(layout).Matmul(m, k, n, dtype, true);
            SCOPED_TRACE(kernel.name + " " + Name(layout));
            const auto a = test::RandomValues(size_t(m * k), dtype, 21);
            const auto b = test::RandomValues(size_t(k * n), dtype, 22);
            const auto c0 = test::RandomValues(size_t(m * n), dtype, 23);
            std::vector<uint64_t> addrs = pf().Place(kernel, {a, b});
            pf().WriteTensor(addrs[2], kernel.outputs[0], c0);
            ASSERT_TRUE(pf().LaunchProgram(kernel.Bind(addrs)).ok());
            const auto got = pf().ReadTensor(addrs[2], kernel.outputs[0]);
            test::MatmulRef ref = test::RefMatmul(a, b, m, k, n);
            for (size_t i = 0; i < ref.c.size(); ++i) {
                ref.c[i] += c0[i];
                ref.magnitude[i] += std::abs(c0[i]);
            }
            test::ExpectClose(got, ref.c, [&](size_t i) {
                return double(k + 1) * kU32 * ref.magnitude[i] + (dtype == DType::FP16 ? kU16 * std::abs(ref.c[i]) : 0);
            });
        }
}

TEST_F(ExecutionTest, ElementwiseWithBroadcastingMatchesReference) {
    const std::pair<std::vector<int64_t>, std::vector<int64_t>> shapes[] = {
        {{5, 7}, {5, 7}}, {{5, 7}, {7}}, {{3, 1, 5}, {4, 1}}, {{130}, {1}}, {{2, 3, 65}, {2, 1, 65}}, {{300, 500}, {500}}};
    const ElementwiseOp ops[] = {ElementwiseOp::Add, ElementwiseOp::Sub, ElementwiseOp::Mul, ElementwiseOp::Div};
    uint32_t seed = 100;
    for (TensorLayout layout : kLayouts)
        for (DType dtype : kFloatTypes)
            for (ElementwiseOp op : ops)
                for (const auto& [as, bs] : shapes) {
                    const BuiltKernel k = KernelBuilder(layout).Elementwise(op, as, bs, dtype);
                    SCOPED_TRACE(k.name + " " + Name(layout));
                    const auto a = test::RandomValues(test::Numel(as), dtype, ++seed);
                    // Divisors away from zero; signs from a second draw.
                    auto b = test::RandomValues(test::Numel(bs), dtype, ++seed, 0.5, 2.0);
                    const auto sign = test::RandomValues(b.size(), dtype, ++seed);
                    for (size_t i = 0; i < b.size(); ++i) b[i] = sign[i] < 0 ? -b[i] : b[i];
                    const auto got = pf().RunKernel(k, {a, b});
                    const auto want = Rounded(dtype, test::RefElementwise(op, a, as, b, bs, k.outputs[0].shape));
                    test::ExpectClose(got, want, [](size_t) { return 0.0; });
                }
}

TEST_F(ExecutionTest, ActivationsMatchReference) {
    const std::vector<int64_t> shapes[] = {{1}, {17}, {4, 129}, {2, 3, 70}};
    uint32_t seed = 200;
    for (TensorLayout layout : kLayouts)
        for (DType dtype : kFloatTypes)
            for (const auto& shape : shapes) {
                const auto x = test::RandomValues(test::Numel(shape), dtype, ++seed, -6.0, 6.0);
                const KernelBuilder builder(layout);
                {
                    const BuiltKernel k = builder.Relu(shape, dtype);
                    SCOPED_TRACE(k.name + " " + Name(layout));
                    std::vector<double> want(x.size());
                    std::transform(x.begin(), x.end(), want.begin(), [](double v) { return v < 0 ? 0.0 : v; });
                    test::ExpectClose(pf().RunKernel(k, {x}), want, [](size_t) { return 0.0; });
                }
                {
                    const BuiltKernel k = builder.Gelu(shape, dtype);
                    SCOPED_TRACE(k.name + " " + Name(layout));
                    std::vector<double> want(x.size());
                    std::transform(x.begin(), x.end(), want.begin(), test::RefGelu);
                    const double rel = dtype == DType::FP16 ? Ulp(dtype) : 1e-5;
                    test::ExpectClose(pf().RunKernel(k, {x}), want, test::Relative(want, rel, Floor(dtype)));
                }
            }
}

TEST_F(ExecutionTest, SoftmaxAlongTheLastDimMatchesReference) {
    const std::vector<int64_t> shapes[] = {{1, 1}, {4, 100}, {3, 5, 257}, {2, 64}};
    uint32_t seed = 300;
    for (TensorLayout layout : kLayouts)
        for (DType dtype : kFloatTypes)
            for (const auto& shape : shapes) {
                const BuiltKernel k = KernelBuilder(layout).Softmax(shape, dtype);
                SCOPED_TRACE(k.name + " " + Name(layout));
                const auto x = test::RandomValues(test::Numel(shape), dtype, ++seed, -8.0, 8.0);
                const auto want = test::RefSoftmax(x, shape);
                const double rel = dtype == DType::FP16 ? Ulp(dtype) : 1e-5;
                test::ExpectClose(pf().RunKernel(k, {x}), want, test::Relative(want, rel, Floor(dtype)));
            }
}

TEST_F(ExecutionTest, ReductionsMatchReference) {
    const std::pair<std::vector<int64_t>, int> cases[] = {{{6, 35, 9}, 0}, {{6, 35, 9}, 1}, {{6, 35, 9}, 2},
                                                          {{6, 35, 9}, -1}, {{1000}, 0}, {{3, 70000}, 1}};
    uint32_t seed = 400;
    for (TensorLayout layout : kLayouts)
        for (DType dtype : kFloatTypes)
            for (ReduceKind kind : {ReduceKind::Sum, ReduceKind::Max})
                for (const auto& [shape, axis] : cases) {
                    const BuiltKernel k = KernelBuilder(layout).Reduce(kind, shape, axis, dtype);
                    SCOPED_TRACE(k.name + " " + Name(layout));
                    const auto x = test::RandomValues(test::Numel(shape), dtype, ++seed);
                    const int a = axis < 0 ? axis + int(shape.size()) : axis;
                    const auto want = Rounded(dtype, test::RefReduce(kind, x, shape, a));
                    const double rel = kind == ReduceKind::Max ? 0.0 : Ulp(dtype);
                    test::ExpectClose(pf().RunKernel(k, {x}), want, test::Relative(want, rel, 0.0));
                }
}

// A NaN anywhere in a line makes its max NaN, as numpy's does; the device
// used to skip it (and an all-NaN line read -inf).
TEST_F(ExecutionTest, ReduceMaxKeepsNaN) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (DType dtype : kFloatTypes) {
        const BuiltKernel k = KernelBuilder(TensorLayout::Dense).Reduce(ReduceKind::Max, {5, 3}, 1, dtype);
        SCOPED_TRACE(k.name);
        const std::vector<double> x = {nan, 1, 3, 1, nan, 3, 1, 3, nan, nan, nan, nan, 1, 3, 2};
        const std::vector<double> got = pf().RunKernel(k, {x});
        ASSERT_EQ(got.size(), 5u);
        for (int row = 0; row < 4; ++row) EXPECT_TRUE(std::isnan(got[size_t(row)])) << "row " << row << ": " << got[size_t(row)];
        EXPECT_EQ(got[4], 3.0);
    }
}

// Contract 3.2: an output that overlaps an input the op reads other
// elements of (matmul, reductions, a transpose), or an input that is not
// the output itself, is refused OVERLAP before anything runs; the output
// given as its own input works for element-wise ops. A matmul C = A @ I
// with C over A used to come back wrong, with no error.
TEST_F(ExecutionTest, AnOutputOverlappingAnInputItReadsWholeIsRefused) {
    const KernelBuilder kb;
    auto launch = [&](const BuiltKernel& k, std::vector<uint64_t> addrs) {
        return pf().LaunchProgram(k.Bind(addrs)).status;
    };
    const BuiltKernel mm = kb.Matmul(8, 8, 8, DType::FP32);
    const uint64_t a = pf().Alloc(mm.inputs[0].bytes), b = pf().Alloc(mm.inputs[1].bytes);
    EXPECT_EQ(launch(mm, {a, b, a}), SPYRE_ERR_OVERLAP);       // C is A
    EXPECT_EQ(launch(mm, {a, b, b + 64}), SPYRE_ERR_OVERLAP);  // C overlaps B
    EXPECT_EQ(launch(mm, {a, b, pf().Alloc(mm.outputs[0].bytes)}), SPYRE_ERR_NONE);
    const BuiltKernel tr = kb.Transpose({8, 8}, {1, 0}, DType::FP32);
    EXPECT_EQ(launch(tr, {a, a}), SPYRE_ERR_OVERLAP);
    const BuiltKernel red = kb.Reduce(ReduceKind::Sum, {8, 8}, 0, DType::FP32);
    EXPECT_EQ(launch(red, {a, a}), SPYRE_ERR_OVERLAP);
    // Element-wise: in place works; an input shifted against the output, or
    // a broadcast operand under the output, is refused.
    const BuiltKernel add = kb.Elementwise(ElementwiseOp::Add, {8, 8}, {8, 8}, DType::FP32);
    const std::vector<double> x = test::RandomValues(64, DType::FP32, 7), y = test::RandomValues(64, DType::FP32, 8);
    pf().WriteTensor(a, add.inputs[0], x);
    pf().WriteTensor(b, add.inputs[1], y);
    ASSERT_EQ(launch(add, {a, b, a}), SPYRE_ERR_NONE);
    const std::vector<double> sum = pf().ReadTensor(a, add.outputs[0]);
    for (size_t i = 0; i < 64; ++i) ASSERT_EQ(sum[i], double(float(x[i] + y[i]))) << "element " << i;
    EXPECT_EQ(launch(add, {a, b, a + 16}), SPYRE_ERR_OVERLAP);
    const BuiltKernel bias = kb.Elementwise(ElementwiseOp::Add, {8, 8}, {1, 8}, DType::FP32);
    EXPECT_EQ(launch(bias, {a, b, b}), SPYRE_ERR_OVERLAP);
    EXPECT_EQ(launch(kb.Softmax({8, 8}, DType::FP32), {a, a}), SPYRE_ERR_NONE);
    EXPECT_EQ(launch(kb.Copy({8, 8}, DType::FP32), {a, a}), SPYRE_ERR_NONE);
}

TEST_F(ExecutionTest, TransposeAndCopyMoveEveryDtypeExactly) {
    const std::pair<std::vector<int64_t>, std::vector<int>> cases[] = {
        {{5, 130}, {1, 0}}, {{2, 3, 4, 5}, {3, 1, 0, 2}}, {{7}, {0}}, {{65, 3}, {0, 1}}};
    uint32_t seed = 500;
    for (TensorLayout layout : kLayouts)
        for (DType dtype : {DType::FP32, DType::FP16, DType::BF16, DType::INT8, DType::INT32})
            for (const auto& [shape, perm] : cases) {
                const BuiltKernel k = KernelBuilder(layout).Transpose(shape, perm, dtype);
                SCOPED_TRACE(k.name + " " + Name(layout));
                const auto x = test::RandomValues(test::Numel(shape), dtype, ++seed, -100.0, 100.0);
                test::ExpectClose(pf().RunKernel(k, {x}), test::RefTranspose(x, shape, perm), [](size_t) { return 0.0; });
            }
    const BuiltKernel copy = KernelBuilder().Copy({3, 9}, DType::FP16);
    const auto x = test::RandomValues(27, DType::FP16, 9);
    test::ExpectClose(pf().RunKernel(copy, {x}), x, [](size_t) { return 0.0; });
}

TEST_F(ExecutionTest, FillWritesTheValueAndLeavesStickPaddingAlone) {
    const std::pair<DType, double> cases[] = {{DType::FP32, 1.5},   {DType::FP16, -0.333}, {DType::BF16, 3.14159},
                                              {DType::INT8, -3.0}, {DType::INT32, 123456.0}};
    for (TensorLayout layout : kLayouts)
        for (auto [dtype, value] : cases) {
            const BuiltKernel k = KernelBuilder(layout).Fill({9, 70}, value, dtype);
            SCOPED_TRACE(k.name + " " + Name(layout));
            const KernelTensor& y = k.outputs[0];
            const uint64_t addr = pf().Alloc(y.bytes);
            std::memset(pf().At(addr, y.bytes), 0xA5, y.bytes);  // a sentinel in the padding too
            ASSERT_TRUE(pf().LaunchProgram(k.Bind(std::array{addr})).ok());
            test::ExpectClose(pf().ReadTensor(addr, y), std::vector<double>(630, test::RoundTo(dtype, value)),
                              [](size_t) { return 0.0; });
            // Padding past each row's 70 elements keeps the sentinel.
            const size_t size = ElementSize(dtype);
            for (int64_t r = 0; r < 9; ++r)
                for (int64_t c = 70; c < y.strides[0]; ++c)
                    for (size_t byte = 0; byte < size; ++byte)
                        ASSERT_EQ(pf().At(addr)[size_t(r * y.strides[0] + c) * size + byte], 0xA5) << "row " << r;
        }
}
