// SPDX-License-Identifier: Apache-2.0
// Pack and unpack: byte-exact round trips for random shapes, strides
// (including non-contiguous views) and dtypes; zero padding; agreement with
// DeviceLayout's offsets.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <numeric>
#include <random>

#include "spyre/error.hpp"
#include "spyre/tensor/pack.hpp"
#include "random_data.hpp"

using namespace spyre;

namespace {

// A random view: shape, a permutation of a contiguous buffer, with gaps.
HostLayout RandomView(std::mt19937& rng, DType dtype) {
    const int rank = 1 + int(rng() % 4);
    std::vector<int64_t> size(rank);
    int64_t numel;
    do {  // keep each case under ~100k elements so the exhaustive checks stay quick
        numel = 1;
        for (auto& s : size) numel *= (s = 1 + int64_t(rng() % (rng() % 3 == 0 ? 150 : 12)));
    } while (numel > 100000);
    std::vector<int> order(rank);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> stride(rank);
    int64_t s = 1 + int64_t(rng() % 2);  // sometimes every other element
    for (int d : order) {
        stride[d] = s;
        s *= size[d] + int64_t(rng() % 3);  // sometimes gaps between rows
    }
    return HostLayout(size, stride, dtype);
}

}  // namespace

TEST(Pack, RoundTripsAreByteExactForRandomViewsAndDtypes) {
    std::mt19937 rng(2024);
    for (int trial = 0; trial < 300; ++trial) {
        const DType dtype = std::array{DType::FP16, DType::BF16, DType::FP32, DType::INT8, DType::INT32}[trial % 5];
        const HostLayout host = RandomView(rng, dtype);
        const DeviceLayout device = DeviceLayout::Default(host);
        const size_t e = ElementSize(dtype);
        const auto src = test::RandomBytes(size_t(host.extent()) * e, trial);
        std::vector<uint8_t> image(size_t(device.device_bytes()), 0xAB);
        Pack(src.data(), host, device, image.data());
        std::vector<uint8_t> back(src.size(), 0xCD);
        Unpack(image.data(), device, host, back.data());
        // Every element of the tensor came back; bytes outside it were not touched.
        const HostLayout c = host.Canonical();
        std::vector<int64_t> idx(c.rank(), 0);
        std::vector<bool> in_tensor(size_t(host.extent()), false);
        for (int64_t n = 0; n < c.numel(); ++n) {
            const int64_t off = c.Offset(idx);
            in_tensor[size_t(off)] = true;
            ASSERT_EQ(std::memcmp(back.data() + off * e, src.data() + off * e, e), 0)
                << host.ToString() << " element " << n;
            // ...and sits in the image exactly where DeviceOffset says.
            ASSERT_EQ(std::memcmp(image.data() + device.DeviceOffset(idx) * e, src.data() + off * e, e), 0);
            for (int d = c.rank() - 1; d >= 0 && ++idx[d] == c.size()[d]; --d) idx[d] = 0;
        }
        for (size_t off = 0; off < in_tensor.size(); ++off) {
            if (!in_tensor[off]) {
                ASSERT_EQ(back[off * e], 0xCD) << "gap byte overwritten";
            }
        }
        // Padding is zero.
        for (int64_t off = 0; off < device.device_elements(); ++off) {
            if (device.HostIndex(off)) continue;
            for (size_t b = 0; b < e; ++b) ASSERT_EQ(image[off * e + b], 0) << device.ToString();
        }
    }
}

TEST(Pack, LargeTensorsUseThreadsAndStayExact) {
    const HostLayout host = HostLayout::Contiguous({1000, 3000}, DType::FP16);  // padded: 3000 -> 3008
    const DeviceLayout device = DeviceLayout::Default(host);
    const auto src = test::RandomBytes(size_t(host.numel()) * 2, 1);
    std::vector<uint8_t> image(size_t(device.device_bytes()));
    Pack(src.data(), host, device, image.data());
    std::vector<uint8_t> back(src.size());
    Unpack(image.data(), device, host, back.data());
    EXPECT_EQ(back, src);
}

TEST(Pack, TransposedViewLandsInTheDeviceLayoutOfItsShape) {
    // A [4, 64] view of a [64, 4] row-major buffer (a transpose).
    std::vector<uint16_t> buf(256);
    std::iota(buf.begin(), buf.end(), 0);
    const HostLayout view({4, 64}, {1, 4}, DType::FP16);
    const DeviceLayout device = DeviceLayout::Default(view);  // [1, 4, 64]
    std::vector<uint16_t> image(256);
    Pack(buf.data(), view, device, image.data());
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 64; ++c) ASSERT_EQ(image[r * 64 + c], buf[c * 4 + r]);
}

// A NULL host or image pointer was dereferenced by the conversion threads
// (SIGSEGV): each is InvalidArgument naming the argument.
TEST(Pack, NullPointersAreRefusedNamingTheArgument) {
    const HostLayout host = HostLayout::Contiguous({4, 64}, DType::FP32);
    const DeviceLayout device = DeviceLayout::Default(host);
    std::vector<float> data(256, 1.5f);
    std::vector<uint8_t> image(size_t(device.device_bytes()));
    const auto expect = [](const std::function<void()>& call, const std::string& text) {
        try {
            call();
            ADD_FAILURE() << text << ": returned";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
            EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
        }
    };
    expect([&] { Pack(nullptr, host, device, image.data()); }, "Pack: host is NULL");
    expect([&] { Pack(data.data(), host, device, nullptr); }, "Pack: device_image is NULL");
    expect([&] { Unpack(nullptr, device, host, data.data()); }, "Unpack: device_image is NULL");
    expect([&] { Unpack(image.data(), device, host, nullptr); }, "Unpack: host is NULL");
    Pack(data.data(), host, device, image.data());
    std::vector<float> back(256, 0.0f);
    Unpack(image.data(), device, host, back.data());
    EXPECT_EQ(back, data);
}

TEST(Pack, MismatchedLayoutsAreRejected) {
    const HostLayout host = HostLayout::Contiguous({8, 64}, DType::FP16);
    const DeviceLayout other = DeviceLayout::Default(HostLayout::Contiguous({8, 128}, DType::FP16));
    std::vector<uint8_t> buf(4096);
    EXPECT_THROW(Pack(buf.data(), host, other, buf.data()), Error);
    const DeviceLayout fp32 = DeviceLayout::Default(HostLayout::Contiguous({8, 64}, DType::FP32));
    EXPECT_THROW(Unpack(buf.data(), fp32, host, buf.data()), Error);
}
