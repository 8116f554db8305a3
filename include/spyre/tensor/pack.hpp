// SPDX-License-Identifier: Apache-2.0
// Converting tensors between their host layout (any strides) and their
// device layout (sticks, padded with zeros), on the host; and copies that do
// the conversion on the way to and from device memory, so data always lands
// on the device in its device layout.
#pragma once

#include <cstdint>

#include "spyre/memory/device_handle.hpp"
#include "spyre/memory/dma_engine.hpp"
#include "spyre/tensor/layout.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// Writes device.device_bytes() bytes at `device_image`: the host tensor in
// its device layout, padding zeroed. `host` points at the element of index
// 0. Large tensors are converted on several threads. Throws InvalidArgument
// when the layouts do not describe the same tensor, or a pointer is NULL
// (every function here).
void Pack(const void* host, const HostLayout& host_layout, const DeviceLayout& device, void* device_image);

// The reverse: scatters the device image into the host tensor (padding is
// dropped; host elements not in the tensor are left alone).
void Unpack(const void* device_image, const DeviceLayout& device, const HostLayout& host_layout, void* host);

// Packs and copies a host tensor to `dst` (device.device_bytes() long) and
// waits until it is in place.
void CopyTensorToDevice(DMAEngine& dma, const void* host, const HostLayout& host_layout, const DeviceLayout& device,
                        const DeviceHandle& dst);
// Copies a device tensor back and unpacks it into the host tensor.
void CopyTensorFromDevice(DMAEngine& dma, const DeviceHandle& src, const DeviceLayout& device,
                          const HostLayout& host_layout, void* host);

}  // namespace spyre
SPYRE_API_END
