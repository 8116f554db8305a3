// SPDX-License-Identifier: Apache-2.0
// Layout-converting copies: a host tensor (any strides) lands on the device
// in its device layout, and comes back byte for byte.
#include <algorithm>
#include <numeric>

#include "mock_fixture.hpp"

using namespace spyre;
using namespace spyre::driver;
using spyre::test::MockDeviceTest;

TEST_F(MockDeviceTest, TensorsLandInTheirDeviceLayoutAndComeBack) {
    Function fn = Function::Open(Vf(1));
    SpyreAllocator alloc(fn, {.mode = AllocatorMode::VF, .vf_regions = 1, .vf_region_sizes = {256ull << 20}});
    DmaQueue queue(fn);
    DMAEngine dma(alloc, queue);

    // [128, 256, 200] fp16, seed 002's padded example.
    const HostLayout host = HostLayout::Contiguous({128, 256, 200}, DType::FP16);
    const DeviceLayout device = DeviceLayout::Default(host);
    std::vector<uint16_t> data(size_t(host.numel()));
    std::iota(data.begin(), data.end(), uint16_t(1));
    auto block = alloc.Allocate(uint64_t(device.device_bytes()));
    CopyTensorToDevice(dma, data.data(), host, device, block.handle);

    // On the device, element (i, j, k) sits where the layout says; padding is 0.
    std::vector<uint16_t> image(size_t(device.device_elements()));
    dma.Wait(dma.CopyFromDevice(image.data(), block.handle, uint64_t(device.device_bytes())));
    for (std::vector<int64_t> idx : {std::vector<int64_t>{0, 0, 0}, {5, 17, 63}, {5, 17, 64}, {127, 255, 199}}) {
        const uint16_t expect = data[size_t(host.Offset(idx))];
        EXPECT_EQ(image[size_t(device.DeviceOffset(idx))], expect);
    }
    EXPECT_EQ(image[size_t(3 * 128 * 64 + 8)], 0);  // tile 3, row 0, element 200: padding

    std::vector<uint16_t> back(data.size(), 0);
    CopyTensorFromDevice(dma, block.handle, device, host, back.data());
    EXPECT_EQ(back, data);

    // A non-contiguous view (every other column of a [64, 512] fp32 buffer).
    std::vector<float> wide(64 * 512);
    std::iota(wide.begin(), wide.end(), 0.5f);
    const HostLayout view({64, 256}, {512, 2}, DType::FP32);
    const DeviceLayout vdev = DeviceLayout::Default(view);
    auto vblock = alloc.Allocate(uint64_t(vdev.device_bytes()));
    CopyTensorToDevice(dma, wide.data(), view, vdev, vblock.handle);
    std::vector<float> vback(wide.size(), -1.0f);
    CopyTensorFromDevice(dma, vblock.handle, vdev, view, vback.data());
    for (size_t i = 0; i < wide.size(); ++i) ASSERT_EQ(vback[i], i % 2 == 0 ? wide[i] : -1.0f) << i;

    // A device allocation too small for the layout is refused before any copy.
    auto small = alloc.Allocate(1024);
    EXPECT_SPYRE_ERROR(CopyTensorToDevice(dma, data.data(), host, device, small.handle), InvalidArgument,
                       "runs past the end of its allocation of 1024 bytes at");

    // A NULL host tensor is refused before anything moves (it was
    // dereferenced: SIGSEGV); the copies work afterwards.
    EXPECT_SPYRE_ERROR(CopyTensorToDevice(dma, nullptr, host, device, block.handle), InvalidArgument,
                       "CopyTensorToDevice: host is NULL");
    EXPECT_SPYRE_ERROR(CopyTensorFromDevice(dma, block.handle, device, host, nullptr), InvalidArgument,
                       "CopyTensorFromDevice: host is NULL");
    std::fill(back.begin(), back.end(), uint16_t(0));
    CopyTensorFromDevice(dma, block.handle, device, host, back.data());
    EXPECT_EQ(back, data);
}
