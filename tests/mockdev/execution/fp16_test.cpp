// SPDX-License-Identifier: Apache-2.0
// The device's fp16 block conversion: exact widening of every half, rounding
// to nearest even, subnormals, infinities and NaNs, and the vector path
// agreeing with the scalar one (lengths that are and are not multiples of 8).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "execution/fp16.hpp"

using spyre::mockdev::FloatToHalf;
using spyre::mockdev::HalfToFloat;

namespace {

uint16_t ScalarHalf(float f) {
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &h, sizeof bits);
    return bits;
}

bool IsNanHalf(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0; }

uint16_t Convert(float f, size_t lane) {
    // The value at position `lane` of a block of 11: vector lanes and the tail both get a turn.
    std::vector<float> in(11, 0.0f);
    in[lane] = f;
    std::vector<uint16_t> out(11);
    FloatToHalf(in.data(), out.data(), in.size());
    return out[lane];
}

}  // namespace

TEST(Fp16, EveryHalfWidensExactlyAndNarrowsBack) {
    std::vector<uint16_t> halves(65536);
    for (size_t i = 0; i < halves.size(); ++i) halves[i] = uint16_t(i);
    std::vector<float> floats(halves.size());
    HalfToFloat(halves.data(), floats.data(), halves.size());
    std::vector<uint16_t> back(halves.size());
    FloatToHalf(floats.data(), back.data(), floats.size());
    for (size_t i = 0; i < halves.size(); ++i) {
        _Float16 h;
        std::memcpy(&h, &halves[i], sizeof h);
        if (IsNanHalf(halves[i])) {
            EXPECT_TRUE(std::isnan(floats[i])) << std::hex << i;
            EXPECT_TRUE(IsNanHalf(back[i])) << std::hex << i;
            continue;
        }
        EXPECT_EQ(floats[i], float(h)) << std::hex << i;
        EXPECT_EQ(back[i], halves[i]) << std::hex << i;
    }
}

TEST(Fp16, RoundsToNearestEvenWithSubnormalsAndInfinities) {
    const struct {
        float in;
        uint16_t out;
    } cases[] = {
        {1.0f, 0x3C00},
        {1.0f + 0x1p-11f, 0x3C00},       // tie: to even (down)
        {1.0f + 3 * 0x1p-11f, 0x3C02},   // tie: to even (up)
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3C01},
        {65504.0f, 0x7BFF},              // largest half
        {65519.0f, 0x7BFF},
        {65520.0f, 0x7C00},              // rounds to infinity
        {1e10f, 0x7C00},
        {-1e10f, 0xFC00},
        {INFINITY, 0x7C00},
        {0x1p-14f, 0x0400},              // smallest normal
        {0x1p-24f, 0x0001},              // smallest subnormal
        {0x1p-25f, 0x0000},              // tie with 0: to even
        {3 * 0x1p-26f, 0x0001},
        {-0.0f, 0x8000},
        {1.0f / 3, 0x3555},
    };
    for (const auto& c : cases)
        for (size_t lane : {0u, 7u, 9u}) EXPECT_EQ(Convert(c.in, lane), c.out) << c.in << " lane " << lane;
    EXPECT_TRUE(IsNanHalf(Convert(NAN, 3)));
    EXPECT_TRUE(IsNanHalf(Convert(NAN, 10)));
}

TEST(Fp16, BlockConversionAgreesWithTheCompilersHalf) {
    std::mt19937 gen(3);
    std::vector<float> in(1 << 20);
    for (float& f : in) {
        const uint32_t bits = gen();
        std::memcpy(&f, &bits, sizeof f);
    }
    std::vector<uint16_t> out(in.size() - 3);  // not a multiple of 8: the tail runs too
    FloatToHalf(in.data(), out.data(), out.size());
    for (size_t i = 0; i < out.size(); ++i) {
        if (std::isnan(in[i]))
            ASSERT_TRUE(IsNanHalf(out[i])) << i;
        else
            ASSERT_EQ(out[i], ScalarHalf(in[i])) << in[i];
    }
}
