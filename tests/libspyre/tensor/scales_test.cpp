// SPDX-License-Identifier: Apache-2.0
// Operation dimensions and scales: the seed 002 examples, the operation ->
// host -> device chain, and compatibility checks.
#include <gtest/gtest.h>

#include "spyre/error.hpp"
#include "spyre/tensor/scales.hpp"

using namespace spyre;

namespace {
HostLayout T(std::vector<int64_t> size) { return HostLayout::Contiguous(std::move(size), DType::FP16); }
using V = std::vector<int>;
}  // namespace

TEST(Scales, Matmul) {
    auto op = MatmulScales(T({1024, 512}), T({512, 256}));
    EXPECT_EQ(op.dim_names, (std::vector<std::string>{"M", "K", "N"}));
    EXPECT_EQ(op.dim_sizes, (std::vector<int64_t>{1024, 512, 256}));
    EXPECT_EQ(op.scales[0], (V{0, 1, -1}));
    EXPECT_EQ(op.scales[1], (V{-1, 0, 1}));
    EXPECT_EQ(op.scales[2], (V{0, -1, 1}));
    EXPECT_EQ(op.output_size, (std::vector<int64_t>{1024, 256}));
}

TEST(Scales, BatchedMatmul) {
    auto op = BatchedMatmulScales(T({8, 64, 32}), T({8, 32, 16}));
    EXPECT_EQ(op.scales[0], (V{0, 1, 2, -1}));
    EXPECT_EQ(op.scales[1], (V{0, -1, 1, 2}));
    EXPECT_EQ(op.scales[2], (V{0, 1, -1, 2}));
}

TEST(Scales, ElementwiseBroadcasting) {
    auto op = ElementwiseScales({T({128, 1, 512}), T({128, 256, 512})});
    EXPECT_EQ(op.scales[0], (V{0, -1, 2}));
    EXPECT_EQ(op.scales[1], (V{0, 1, 2}));
    EXPECT_EQ(op.scales[2], (V{0, 1, 2}));
    auto lower_rank = ElementwiseScales({T({512}), T({128, 512})});
    EXPECT_EQ(lower_rank.scales[0], (V{-1, 0}));
    auto elided = ElementwiseScales({T({128, 1, 512}), T({128, 1, 512})});
    EXPECT_EQ(elided.scales[0], (V{0, -3, 2}));  // size-1 operation dimension
}

TEST(Scales, Reduction) {
    auto op = ReductionScales(T({32, 64, 128}), 1, false);
    EXPECT_EQ(op.scales[0], (V{0, 1, 2}));
    EXPECT_EQ(op.scales[1], (V{0, -1, 1}));
    EXPECT_EQ(op.output_size, (std::vector<int64_t>{32, 128}));
    auto kept = ReductionScales(T({32, 64, 128}), -1, true);
    EXPECT_EQ(kept.scales[1], (V{0, 1, -1}));
    EXPECT_EQ(kept.output_size, (std::vector<int64_t>{32, 64, 1}));
}

TEST(Scales, MismatchesAreNamed) {
    try {
        MatmulScales(T({4, 5}), T({6, 7}));
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("K of A (dimension 1) and of B (dimension 0) differ: 5 vs 6"),
                  std::string::npos) << e.what();
    }
    EXPECT_THROW(ElementwiseScales({T({3, 4}), T({5, 4})}), Error);
    EXPECT_THROW(ReductionScales(T({3, 4}), 2, false), Error);
}

TEST(Scales, MatmulMappingChainToDeviceDimensions) {
    // seed 002: [1024, 512] @ [512, 256] -> [1024, 256], fp16.
    auto a = T({1024, 512}), b = T({512, 256}), c = T({1024, 256});
    auto op = MatmulScales(a, b);
    auto da = DeviceLayout::Default(a), db = DeviceLayout::Default(b), dc = DeviceLayout::Default(c);
    using VV = std::vector<std::vector<int>>;
    EXPECT_EQ(OperationToDeviceDims(op.scales[0], a, da), (VV{{1}, {0, 2}, {}}));   // M -> 1, K -> 0 and stick
    EXPECT_EQ(OperationToDeviceDims(op.scales[1], b, db), (VV{{}, {1}, {0, 2}}));   // K -> 1, N -> 0 and stick
    EXPECT_EQ(OperationToDeviceDims(op.scales[2], c, dc), (VV{{1}, {}, {0, 2}}));   // M -> 1 in every tensor
    EXPECT_NO_THROW(CheckCompatible(op, {a, b, c}, {da, db, dc}));
}

TEST(Scales, BroadcastChainUsesTheCanonicalHost) {
    auto x = T({128, 1, 512}), y = T({128, 256, 512});
    auto op = ElementwiseScales({x, y});
    auto dx = DeviceLayout::Default(x);  // canonical [128, 512] -> [8, 128, 64]
    using VV = std::vector<std::vector<int>>;
    EXPECT_EQ(OperationToDeviceDims(op.scales[0], x, dx), (VV{{1}, {}, {0, 2}}));
    EXPECT_NO_THROW(CheckCompatible(op, {x, y, y}, {dx, DeviceLayout::Default(y), DeviceLayout::Default(y)}));
}

TEST(Scales, IncompatibleLayoutsAreRejected) {
    auto a = T({64, 128}), b = T({128, 256}), c = T({64, 256});
    auto op = MatmulScales(a, b);
    auto da = DeviceLayout::Default(a), db = DeviceLayout::Default(b), dc = DeviceLayout::Default(c);
    EXPECT_THROW(CheckCompatible(op, {a, b, T({64, 255})}, {da, db, dc}), Error);  // output size off
    // N in B's stick as 4 x 64, but C rows-outer with N as 4 x 64 too: fine.
    DeviceLayout c_rows({64, 256}, {64, 4, 64}, {0, 1, 1}, DType::FP16);
    EXPECT_NO_THROW(CheckCompatible(op, {a, b, c}, {da, db, c_rows}));
    try {
        CheckCompatible(op, {a, b, c}, {da, db, DeviceLayout::Default(a)});
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does not describe host"), std::string::npos) << e.what();
    }
}

// A host dimension or scale out of the layout's rank is refused, naming it
// (it was read past the sizes: garbage, or a crash far out; found probing
// from outside).
TEST(Scales, DimensionsOutOfRangeAreRefused) {
    auto h = T({4, 5});
    auto expect_invalid = [](auto&& call, const std::string& words) {
        try {
            call();
            ADD_FAILURE() << "no error; expected: " << words;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
        }
    };
    EXPECT_EQ(CanonicalDim(h, 1), 1);
    expect_invalid([&] { CanonicalDim(h, 2); }, "host dimension 2 out of range for rank 2");
    expect_invalid([&] { CanonicalDim(h, 1000000); }, "host dimension 1000000 out of range for rank 2");
    expect_invalid([&] { CanonicalDim(h, -1); }, "host dimension -1 out of range for rank 2");
    const auto d = DeviceLayout::Default(h);
    expect_invalid([&] { OperationToDeviceDims({100000, 0}, h, d); }, "scale 100000 names no host dimension of rank 2");
    expect_invalid([&] { OperationToDeviceDims({7, 9, 11}, h, d); }, "scale 7 names no host dimension");
    expect_invalid([&] { OperationToDeviceDims({-2}, h, d); }, "scale -2 names no host dimension");
    using VV = std::vector<std::vector<int>>;
    EXPECT_EQ(OperationToDeviceDims({kScaleAbsent, kScaleElided}, h, d), (VV{{}, {}}));
    expect_invalid([&] { OperationToDeviceDims({0, 1}, h, DeviceLayout::Default(T({8, 8}))); }, "does not describe host");
    expect_invalid([&] { ReductionScales(h, -3, true); }, "axis -3 out of range for rank 2");
    EXPECT_NO_THROW(ReductionScales(h, -1, true));
}

// A hand-made operation whose lists disagree in length, or whose scales are
// no host dimension, is refused before anything indexes them (CheckCompatible
// read past them: a crash, or a message made of garbage; found probing from
// outside); so is a device layout of another dtype than its host.
TEST(Scales, MalformedOperationsAreRefused) {
    auto a = T({64, 128}), b = T({128, 256}), c = T({64, 256});
    const auto da = DeviceLayout::Default(a), db = DeviceLayout::Default(b), dc = DeviceLayout::Default(c);
    const OperationScales good = MatmulScales(a, b);
    auto refused = [&](const OperationScales& op, const std::string& words) {
        try {
            CheckCompatible(op, {a, b, c}, {da, db, dc});
            ADD_FAILURE() << "no error; expected: " << words;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
        }
    };
    OperationScales op = good;
    op.dim_names.clear();
    refused(op, "operation has 3 dimension sizes but 0 dimension names");
    op = good;
    op.scales[1].resize(1);
    refused(op, "tensor 1 has 1 scales for an operation of 3 dimensions");
    op = good;
    op.dim_sizes.push_back(6);
    op.dim_names.push_back("X");
    refused(op, "tensor 0 has 3 scales for an operation of 4 dimensions");
    op = good;
    op.scales[0][0] = -7;
    refused(op, "tensor 0: scale -7 of operation dimension M names no host dimension");
    op = good;
    op.scales[2][2] = kScaleElided;
    refused(op, "tensor 2: operation dimension N of size 256 is marked elided");
    EXPECT_NO_THROW(CheckCompatible(good, {a, b, c}, {da, db, dc}));

    const HostLayout a32 = HostLayout::Contiguous({64, 128}, DType::FP32);
    try {
        CheckCompatible(good, {a32, b, c}, {da, db, dc});
        ADD_FAILURE() << "an fp16 device layout of an fp32 host was taken";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tensor 0: host"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("is not"), std::string::npos) << e.what();
    }
    EXPECT_THROW(OperationToDeviceDims(good.scales[0], a32, da), Error);
}
