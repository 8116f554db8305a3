// SPDX-License-Identifier: Apache-2.0
// SpyreTensor (seed 001): a tensor resident on device — shape, strides,
// data type, device handle, byte size and its device layout. Created from
// host data by allocating and enqueuing a layout-converting copy (Workflow 1);
// copied back the same way. The device memory is freed when the last copy
// of the tensor goes; like cudaFree, that first waits for the work already
// enqueued on the device's streams, so nothing queued touches reused memory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "spyre/memory/device_buffer.hpp"
#include "spyre/memory/device_handle.hpp"
#include "spyre/stream/flex_stream.hpp"  // FlexStream, and DeviceCore declared once (hidden)
#include "spyre/tensor/layout.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

class Device;

class SpyreTensor {
public:
    // Allocates an uninitialised tensor in `layout` (Dense: row-major;
    // Sticks: each innermost row padded to whole 128-byte sticks).
    static SpyreTensor Empty(Device& device, std::vector<int64_t> shape, DType dtype,
                             TensorLayout layout = TensorLayout::Dense);
    // Allocates and enqueues the copy of contiguous row-major host data on
    // `stream` (Workflow 1). Dense tensors copy straight from `host`, which
    // must stay valid until the copy completes; Sticks tensors are packed
    // into a staging buffer first.
    static SpyreTensor FromHost(Device& device, FlexStream& stream, const void* host, std::vector<int64_t> shape,
                                DType dtype, TensorLayout layout = TensorLayout::Dense);
    // Wraps memory the caller owns (not freed by the tensor). `stride` in
    // bytes, as seed 001 defines it.
    SpyreTensor(DeviceHandle handle, std::vector<int64_t> shape, std::vector<int64_t> stride, DType dtype,
                uint64_t size_bytes, TensorLayout layout = TensorLayout::Dense);

    // Enqueues the copy back into contiguous row-major `host` (numel *
    // element size bytes) on `stream`; done when the stream says so.
    void CopyToHost(FlexStream& stream, void* host) const;

    const std::vector<int64_t>& shape() const noexcept { return shape_; }
    const std::vector<int64_t>& stride() const noexcept { return stride_; }  // bytes per step along each dim
    DType data_type() const noexcept { return dtype_; }
    const DeviceHandle& device_handle() const noexcept { return handle_; }
    // The device the tensor's memory belongs to (unknown for a tensor
    // wrapping a handle built by hand).
    const std::optional<DeviceId>& device() const noexcept { return handle_.device(); }
    uint64_t size_bytes() const noexcept { return size_bytes_; }
    TensorLayout layout() const noexcept { return layout_; }
    // Strides in elements (what programs use).
    std::vector<int64_t> element_strides() const;
    int64_t numel() const noexcept;
    // The tensor as a kernel would describe it (for comparisons in messages).
    std::string ToString() const;

private:
    DeviceHandle handle_;
    std::vector<int64_t> shape_;
    std::vector<int64_t> stride_;
    DType dtype_;
    uint64_t size_bytes_;
    TensorLayout layout_;
    // Set when the tensor owns its memory; shared by the tensor's copies.
    std::shared_ptr<const DeviceBuffer> storage_;
};

}  // namespace spyre
SPYRE_API_END
