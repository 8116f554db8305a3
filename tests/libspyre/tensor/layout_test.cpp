// SPDX-License-Identifier: Apache-2.0
// Host and device layouts: every example of seed 002, validation, memory
// planning and index <-> offset mapping.
#include <gtest/gtest.h>

#include <climits>
#include <memory>
#include <string>
#include <random>

#include "spyre/error.hpp"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/host/host_tensor.hpp"
#include "spyre/tensor/layout.hpp"
#include "spyre/tensor/spyre_tensor.hpp"

using namespace spyre;

namespace {

#define EXPECT_INVALID(statement, text)                                                        \
    do {                                                                                       \
        try {                                                                                  \
            statement;                                                                         \
            ADD_FAILURE() << "expected InvalidArgument from " #statement;                      \
        } catch (const Error& e_) {                                                            \
            EXPECT_EQ(e_.kind(), ErrorKind::InvalidArgument);                                  \
            EXPECT_NE(std::string(e_.what()).find(text), std::string::npos) << e_.what();      \
        }                                                                                      \
    } while (0)

}  // namespace

TEST(DType, SizesAndSticks) {
    EXPECT_EQ(ElementSize(DType::FP16), 2u);
    EXPECT_EQ(ElementSize(DType::BF16), 2u);
    EXPECT_EQ(ElementSize(DType::FP32), 4u);
    EXPECT_EQ(ElementSize(DType::INT8), 1u);
    EXPECT_EQ(ElementSize(DType::INT32), 4u);
    EXPECT_EQ(StickElements(DType::FP16), 64u);
    EXPECT_EQ(StickElements(DType::FP32), 32u);
    EXPECT_EQ(StickElements(DType::INT8), 128u);
}

// An integer cast to DType (or TensorLayout) that names none of its values was taken: a
// tensor of "dtype 9" got element size 1 and the name "?", and a kernel
// carried program dtype 0 to the device.
TEST(DType, AValueOutsideTheEnumIsRefusedWhereverADTypeIsTaken) {
    const DType bad = static_cast<DType>(9);
    EXPECT_FALSE(IsKnownDType(bad));
    EXPECT_TRUE(IsKnownDType(DType::INT32));
    const std::string none = "dtype 9 is none of fp16, bf16, fp32, int8, int32";
    EXPECT_INVALID(HostLayout({4}, {1}, bad), "host layout: " + none);
    EXPECT_INVALID(HostLayout::Contiguous({4, 4}, bad), "host layout: " + none);
    EXPECT_INVALID(DeviceLayout({4}, {4}, {0}, bad), "device layout: " + none);
    EXPECT_INVALID(FootprintOf(std::vector<int64_t>{4, 4}, bad, TensorLayout::Dense), "tensor: " + none);
    EXPECT_INVALID(SpyreTensor(DeviceHandle(PFDeviceHandle{}), {4}, {4}, bad, 16), "tensor: " + none);
    EXPECT_INVALID(HostTensor::Zeros({4}, bad), "host tensor: " + none);
    auto data = std::make_shared<float[]>(4);
    EXPECT_INVALID(HostTensor::Wrap(data.get(), {4}, bad, data), "host tensor: " + none);
    EXPECT_INVALID(KernelBuilder().Relu({4, 32}, bad), "relu: " + none);
    EXPECT_INVALID(KernelBuilder().Copy({4, 32}, bad), "tensor: " + none);
    // The same for a TensorLayout: one that is neither was taken as Dense.
    const auto odd = static_cast<TensorLayout>(7);
    const std::string neither = "tensor: layout 7 is neither Dense nor Sticks";
    EXPECT_INVALID(FootprintOf(std::vector<int64_t>{4, 4}, DType::FP32, odd), neither);
    EXPECT_INVALID(SpyreTensor(DeviceHandle(PFDeviceHandle{}), {4}, {4}, DType::FP32, 16, odd), neither);
    EXPECT_INVALID(KernelBuilder(odd).Copy({4, 32}, DType::FP32), neither);
}

// Other enums past their named values: an ElementwiseOp read past the op
// table (a garbage opcode, or std::logic_error, which is no spyre::Error),
// and a ReduceKind built a reduce_max. Each is InvalidArgument naming it,
// and the builder works afterwards.
TEST(KernelBuilder, EnumValuesOutsideTheirNamesAreRefused) {
    const KernelBuilder kb;
    EXPECT_INVALID(kb.Elementwise(static_cast<ElementwiseOp>(9), {4}, {4}, DType::FP32),
                   "elementwise op 9 is none of Add, Sub, Mul, Div");
    EXPECT_INVALID(kb.Elementwise(static_cast<ElementwiseOp>(-1), {4}, {4}, DType::FP32),
                   "elementwise op -1 is none of Add, Sub, Mul, Div");
    EXPECT_INVALID(kb.Reduce(static_cast<ReduceKind>(7), {4, 32}, 1, DType::FP32), "reduce kind 7 is none of Sum, Max");
    EXPECT_EQ(kb.Elementwise(ElementwiseOp::Div, {4}, {4}, DType::FP32).name.rfind("div", 0), 0u);
    EXPECT_NE(kb.Reduce(ReduceKind::Max, {4, 32}, 1, DType::FP32).name.find("reduce_max"), std::string::npos);
}

TEST(HostLayout, SeedExamples) {
    auto a = HostLayout::Contiguous({1024, 256}, DType::FP16);
    EXPECT_EQ(a.stride(), (std::vector<int64_t>{256, 1}));
    auto b = HostLayout::Contiguous({128, 256, 512}, DType::FP16);
    EXPECT_EQ(b.stride(), (std::vector<int64_t>{131072, 512, 1}));
    EXPECT_EQ(b.rank(), 3);
    EXPECT_EQ(b.numel(), 128 * 256 * 512);
    EXPECT_TRUE(b.IsContiguous());
}

TEST(HostLayout, CanonicalRemovesSizeOneDimensions) {
    auto t = HostLayout({16, 1, 32, 1}, {32, 32, 1, 1}, DType::FP32);
    auto c = t.Canonical();
    EXPECT_EQ(c.size(), (std::vector<int64_t>{16, 32}));
    EXPECT_EQ(c.stride(), (std::vector<int64_t>{32, 1}));
    EXPECT_EQ(HostLayout({1, 1}, {1, 1}, DType::FP32).Canonical().size(), (std::vector<int64_t>{1}));
}

TEST(HostLayout, ContiguityOfViews) {
    EXPECT_FALSE(HostLayout({4, 8}, {1, 4}, DType::FP16).IsContiguous());    // transposed view
    EXPECT_FALSE(HostLayout({4, 8}, {16, 1}, DType::FP16).IsContiguous());   // row slice
    EXPECT_TRUE(HostLayout({4, 1, 8}, {8, 99, 1}, DType::FP16).IsContiguous());  // size-1 stride is free
}

TEST(HostLayout, RejectsBadLayoutsNamingTheDimension) {
    EXPECT_INVALID(HostLayout({4, 0}, {1, 1}, DType::FP16), "host dimension 1 has size 0");
    EXPECT_INVALID(HostLayout({4, 4}, {4, -1}, DType::FP16), "host dimension 1 has negative stride");
    EXPECT_INVALID(HostLayout({4, 4}, {4}, DType::FP16), "2 sizes but 1 strides");
    EXPECT_INVALID(HostLayout::Contiguous({4, 4}, DType::FP16).Offset(std::vector<int64_t>{1, 4}), "host dimension 1");
}

// Sizes whose element count, extent or bytes pass 2^62: they wrapped
// (numel() 0, device_bytes() 0) and Pack then overran the buffer sized
// by them (found by probing from outside).
TEST(HostLayout, SizesPastTwoToThe62AreRefused) {
    EXPECT_INVALID(HostLayout::Contiguous({int64_t(1) << 59, 32}, DType::FP32), "is too large");
    EXPECT_INVALID(HostLayout({int64_t(1) << 62, 4}, {4, 1}, DType::FP32), "is too large");
    EXPECT_INVALID(HostLayout({2, 2}, {int64_t(1) << 62, int64_t(1) << 62}, DType::FP32), "is too large");
    EXPECT_INVALID(HostLayout({INT64_MAX}, {1}, DType::INT8), "is too large");
    EXPECT_INVALID(DeviceLayout({int64_t(1) << 40, int64_t(1) << 40}, {int64_t(1) << 35, int64_t(1) << 40, 32}, {1, 0, 1},
                                DType::FP32),
                   "is too large");
    // The message names the layout once (it read "device layout device
    // layout fp32 ...", found probing from outside).
    try {
        DeviceLayout({int64_t(1) << 40, int64_t(1) << 40}, {int64_t(1) << 35, int64_t(1) << 40, 32}, {1, 0, 1},
                     DType::FP32);
        ADD_FAILURE() << "expected InvalidArgument";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).find("device layout fp32 size"), std::string(e.what()).find("device layout"))
            << e.what();
        EXPECT_EQ(std::string(e.what()).find("device layout device layout"), std::string::npos) << e.what();
    }
    // The largest that fit still work, and their sizes are right.
    const HostLayout big = HostLayout::Contiguous({int64_t(1) << 30, 64}, DType::FP32);
    EXPECT_EQ(big.numel(), int64_t(1) << 36);
    EXPECT_EQ(DeviceLayout::Default(big).device_bytes(), int64_t(1) << 38);
}

TEST(DeviceLayout, Seed2dExample) {
    auto d = DeviceLayout::Default(HostLayout::Contiguous({1024, 256}, DType::FP16));
    EXPECT_EQ(d.device_size(), (std::vector<int64_t>{4, 1024, 64}));
    EXPECT_EQ(d.dim_map(), (std::vector<int>{1, 0, 1}));
    EXPECT_EQ(d.device_bytes(), 1024 * 256 * 2);
}

TEST(DeviceLayout, Seed3dPaddedExample) {
    auto d = DeviceLayout::Default(HostLayout::Contiguous({128, 256, 200}, DType::FP16));
    EXPECT_EQ(d.device_size(), (std::vector<int64_t>{256, 4, 128, 64}));
    EXPECT_EQ(d.dim_map(), (std::vector<int>{1, 2, 0, 2}));
    EXPECT_EQ(d.device_bytes(), 128 * 256 * 256 * 2);  // 200 padded to 256
    // The last 56 elements of the 4th tile are padding.
    EXPECT_FALSE(d.HostIndex(3 * 128 * 64 + 0 * 64 + 8).has_value());
    EXPECT_EQ(*d.HostIndex(3 * 128 * 64 + 0 * 64 + 7), (std::vector<int64_t>{0, 0, 199}));
}

TEST(DeviceLayout, Seed3dTilingExample) {
    auto d = DeviceLayout::Default(HostLayout::Contiguous({128, 256, 512}, DType::FP16));
    EXPECT_EQ(d.device_size(), (std::vector<int64_t>{256, 8, 128, 64}));
    EXPECT_EQ(d.dim_map(), (std::vector<int>{1, 2, 0, 2}));
}

TEST(DeviceLayout, SeedMatmulExample) {
    auto a = DeviceLayout::Default(HostLayout::Contiguous({1024, 512}, DType::FP16));
    auto b = DeviceLayout::Default(HostLayout::Contiguous({512, 256}, DType::FP16));
    auto c = DeviceLayout::Default(HostLayout::Contiguous({1024, 256}, DType::FP16));
    EXPECT_EQ(a.device_size(), (std::vector<int64_t>{8, 1024, 64}));
    EXPECT_EQ(b.device_size(), (std::vector<int64_t>{4, 512, 64}));
    EXPECT_EQ(c.device_size(), (std::vector<int64_t>{4, 1024, 64}));
    for (const auto* d : {&a, &b, &c}) EXPECT_EQ(d->dim_map(), (std::vector<int>{1, 0, 1}));
}

TEST(DeviceLayout, OtherRanksAndDtypes) {
    auto one = DeviceLayout::Default(HostLayout::Contiguous({100}, DType::FP32));
    EXPECT_EQ(one.device_size(), (std::vector<int64_t>{4, 32}));
    EXPECT_EQ(one.dim_map(), (std::vector<int>{0, 0}));
    auto four = DeviceLayout::Default(HostLayout::Contiguous({2, 3, 5, 300}, DType::INT8));
    EXPECT_EQ(four.device_size(), (std::vector<int64_t>{3, 5, 3, 2, 128}));
    EXPECT_EQ(four.dim_map(), (std::vector<int>{1, 2, 3, 0, 3}));
    // Size-1 dimensions are canonicalised away first.
    auto squeezed = DeviceLayout::Default(HostLayout::Contiguous({1, 1024, 1, 256}, DType::FP16));
    EXPECT_EQ(squeezed.device_size(), (std::vector<int64_t>{4, 1024, 64}));
}

// Weight of a device dimension outside the layout read past its vectors:
// garbage for -1 and 99, SIGSEGV for INT32_MIN.
TEST(DeviceLayout, WeightOfADimensionOutsideTheLayoutIsRefused) {
    const DeviceLayout dl = DeviceLayout::Default(HostLayout::Contiguous({4, 64}, DType::FP32));  // [tiles, 4, stick]
    ASSERT_EQ(dl.device_rank(), 3);
    for (int bad : {-1, 3, 99, INT32_MIN, INT32_MAX})
        EXPECT_INVALID(dl.Weight(bad), "DeviceLayout::Weight: device_dim " + std::to_string(bad) +
                                           " is out of range: the layout has 3 device dimensions (0..2)");
    EXPECT_EQ(dl.Weight(0), 32);  // the tiles of the last host dim, over one stick
    EXPECT_EQ(dl.Weight(1), 1);
    EXPECT_EQ(dl.Weight(2), 1);
}

TEST(DeviceLayout, ExplicitLayoutsAreValidated) {
    const std::vector<int64_t> host{1024, 256};
    // Any valid arrangement is accepted: here rows outermost.
    DeviceLayout rows(host, {1024, 4, 64}, {0, 1, 1}, DType::FP16);
    EXPECT_EQ(rows.DeviceOffset(std::vector<int64_t>{1, 65}), 1 * 256 + 1 * 64 + 1);
    DeviceLayout synthetic(host, {1, 4, 1024, 64}, {-1, 1, 0, 1}, DType::FP16);
    EXPECT_EQ(synthetic.device_bytes(), 1024 * 256 * 2);
    EXPECT_INVALID(DeviceLayout(host, {4, 1024, 32}, {1, 0, 1}, DType::FP16), "device dimension 2");
    EXPECT_INVALID(DeviceLayout(host, {4, 1024, 64}, {1, 0, -1}, DType::FP16), "synthetic (-1) and must have size 1");
    EXPECT_INVALID(DeviceLayout(host, {4, 1024, 64}, {1, 2, 1}, DType::FP16), "device dimension 1");
    EXPECT_INVALID(DeviceLayout(host, {4, 64}, {1, 1}, DType::FP16), "host dimension 0 is not in the dim_map");
    EXPECT_INVALID(DeviceLayout(host, {3, 1024, 64}, {1, 0, 1}, DType::FP16), "device dimension 0");  // 192 < 256
    EXPECT_INVALID(DeviceLayout(host, {5, 1024, 64}, {1, 0, 1}, DType::FP16), "device dimension 0");  // a whole tile of padding
    EXPECT_INVALID(DeviceLayout(host, {4, 0, 64}, {1, 0, 1}, DType::FP16), "device dimension 1");
    EXPECT_INVALID(DeviceLayout(host, {4, 1024, 64}, {1, 0}, DType::FP16), "3 sizes but 2 dim_map entries");
}

TEST(DeviceLayout, OffsetsAndHostIndicesAreInverse) {
    std::mt19937 rng(5);
    for (auto shape : {std::vector<int64_t>{37, 100}, {3, 7, 65}, {2, 3, 4, 130}, {300}}) {
        auto d = DeviceLayout::Default(HostLayout::Contiguous(shape, DType::FP16));
        for (int i = 0; i < 500; ++i) {
            std::vector<int64_t> idx;
            for (int64_t s : shape) idx.push_back(int64_t(rng() % s));
            const int64_t off = d.DeviceOffset(idx);
            ASSERT_LT(off, d.device_elements());
            ASSERT_EQ(*d.HostIndex(off), idx);
        }
        int64_t data = 0;
        for (int64_t off = 0; off < d.device_elements(); ++off) data += d.HostIndex(off).has_value();
        EXPECT_EQ(data, HostLayout::Contiguous(shape, DType::FP16).numel());  // the rest is padding
    }
}
