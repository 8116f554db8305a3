// SPDX-License-Identifier: Apache-2.0
#include "spyre/tensor/spyre_tensor.hpp"

#include <cstring>

#include "device/device_internals.hpp"
#include "stream/control_blocks.hpp"
#include "spyre/device/device.hpp"
#include "spyre/error.hpp"
#include "spyre/stream/flex_stream.hpp"

namespace spyre {

namespace {

// Row-major rows of `row_bytes`, each placed at a `padded_bytes` pitch.
void CopyRows(const uint8_t* src, size_t src_pitch, uint8_t* dst, size_t dst_pitch, size_t rows, size_t row_bytes) {
    for (size_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_pitch, src + r * src_pitch, row_bytes);
}

}  // namespace

SpyreTensor::SpyreTensor(DeviceHandle handle, std::vector<int64_t> shape, std::vector<int64_t> stride, DType dtype,
                         uint64_t size_bytes, TensorLayout layout)
    : handle_(handle),
      shape_(std::move(shape)),
      stride_(std::move(stride)),
      dtype_(dtype),
      size_bytes_(size_bytes),
      layout_(layout) {
    CheckDType(dtype_, "tensor");
    CheckTensorLayout(layout_, "tensor");
    if (shape_.empty() || shape_.size() != stride_.size())
        throw Error(ErrorKind::InvalidArgument, "tensor " + ShapeText(shape_) + " has " +
                                                    std::to_string(stride_.size()) + " strides for " +
                                                    std::to_string(shape_.size()) + " dims");
    for (size_t d = 0; d < shape_.size(); ++d) {
        if (shape_[d] < 1)
            throw Error(ErrorKind::InvalidArgument,
                        "tensor " + ShapeText(shape_) + ": dim " + std::to_string(d) + " must be >= 1");
        if (stride_[d] < 0)
            throw Error(ErrorKind::InvalidArgument, "tensor " + ShapeText(shape_) + ": stride " +
                                                        std::to_string(stride_[d]) + " of dim " + std::to_string(d) +
                                                        " is negative");
        if (stride_[d] % int64_t(ElementSize(dtype_)) != 0)
            throw Error(ErrorKind::InvalidArgument, "tensor " + ShapeText(shape_) + ": stride " +
                                                        std::to_string(stride_[d]) + " of dim " + std::to_string(d) +
                                                        " is not a whole number of " + spyre::ToString(dtype_) + " elements");
    }
    // The bytes the strides reach must be inside size_bytes: every copy of
    // the tensor moves size_bytes at most and reads its elements there.
    unsigned __int128 reach = ElementSize(dtype_);
    for (size_t d = 0; d < shape_.size(); ++d) reach += (unsigned __int128)(shape_[d] - 1) * uint64_t(stride_[d]);
    if (reach > size_bytes_)
        throw Error(ErrorKind::InvalidArgument,
                    "tensor " + ShapeText(shape_) + " stride(bytes)" + ShapeText(stride_) + " reaches " +
                        (reach >> 64 ? std::string("past 2^64") : std::to_string(uint64_t(reach))) +
                        " bytes, more than its size_bytes " + std::to_string(size_bytes_));
}

SpyreTensor SpyreTensor::Empty(Device& device, std::vector<int64_t> shape, DType dtype, TensorLayout layout) {
    const TensorFootprint t = FootprintOf(shape, dtype, layout);
    std::vector<int64_t> stride(t.strides.size());
    for (size_t d = 0; d < stride.size(); ++d) stride[d] = t.strides[d] * int64_t(ElementSize(dtype));
    auto storage = std::make_shared<const DeviceBuffer>(device.AllocateBuffer(t.bytes));
    SpyreTensor tensor(storage->handle(), std::move(shape), std::move(stride), dtype, t.bytes, layout);
    tensor.storage_ = std::move(storage);
    return tensor;
}

SpyreTensor SpyreTensor::FromHost(Device& device, FlexStream& stream, const void* host, std::vector<int64_t> shape,
                                  DType dtype, TensorLayout layout) {
    if (!host) throw Error(ErrorKind::InvalidArgument, "SpyreTensor::FromHost with a null host address");
    CheckSameDevice(DeviceInternals::Core(stream)->id(), device.id(), "SpyreTensor::FromHost: stream", "device");
    SpyreTensor t = Empty(device, std::move(shape), dtype, layout);
    DeviceCore& core = *DeviceInternals::Core(device);
    const size_t row = size_t(t.shape_.back()) * ElementSize(dtype);
    // The host holds numel * element size bytes, never more: a Sticks tensor
    // has padding after each row (rank 1 included), which is zero-filled here.
    const size_t host_bytes = size_t(t.numel()) * ElementSize(dtype);
    const size_t pitch = t.shape_.size() > 1 ? size_t(t.stride_[t.shape_.size() - 2]) : size_t(t.size_bytes_);
    std::vector<ControlBlock> group;
    if (host_bytes == t.size_bytes_) {
        group.push_back(detail::CopyToDevice(core, host, t.handle_, t.size_bytes_));
    } else {
        // Sticks: pad each innermost row to its stick pitch on the host.
        std::vector<uint8_t> staged(t.size_bytes_, 0);
        CopyRows(static_cast<const uint8_t*>(host), row, staged.data(), pitch, size_t(t.numel() / t.shape_.back()), row);
        group.push_back(detail::OwnedCopyToDevice(core, t.handle_, std::move(staged)));
    }
    stream.EnqueueGroup(group);
    return t;
}

void SpyreTensor::CopyToHost(FlexStream& stream, void* host) const {
    if (!host) throw Error(ErrorKind::InvalidArgument, "SpyreTensor::CopyToHost to a null host address");
    DeviceCore& core = *DeviceInternals::Core(stream);
    CheckSameDevice(device(), core.id(), "SpyreTensor::CopyToHost: tensor", "stream");
    // The innermost dim is the row, whatever its size; outer dims of size 1
    // are left out: their stride moves to no element (a torch permute gives
    // them any; such a row-major tensor was refused naming the wrong dim,
    // and leaving out an innermost 1 refused a Sticks [N, 1]: both found
    // probing from outside).
    const size_t last = shape_.empty() ? 0 : shape_.size() - 1;
    std::vector<size_t> outer;
    for (size_t d = 0; d < last; ++d)
        if (shape_[d] != 1) outer.push_back(d);
    const int64_t elem = int64_t(ElementSize(dtype_));
    const int64_t last_size = shape_.empty() ? 1 : shape_[last];
    const size_t row = size_t(last_size * elem);
    const size_t pitch = outer.empty() ? row : size_t(stride_[outer.back()]);
    // Only row-major tensors (dense or row-padded) convert here: elements
    // next to each other in a row, rows apart by at least a row.
    if (last_size > 1 && stride_[last] != elem)
        throw Error(ErrorKind::Unsupported, "CopyToHost of tensor " + ToString() + ": not row-major (dim " +
                                                std::to_string(last) + "'s stride " + std::to_string(stride_[last]) +
                                                " is not the element size)");
    if (pitch < row && numel() > last_size)
        throw Error(ErrorKind::Unsupported, "CopyToHost of tensor " + ToString() + ": not row-major (rows " +
                                                std::to_string(pitch) + " bytes apart overlap rows of " +
                                                std::to_string(row) + ")");
    int64_t expect = int64_t(pitch);
    for (size_t i = outer.size(); i-- > 0;) {
        if (stride_[outer[i]] != expect)
            throw Error(ErrorKind::Unsupported, "CopyToHost of tensor " + ToString() + ": not row-major (dim " +
                                                    std::to_string(outer[i]) + ")");
        expect *= shape_[outer[i]];
    }
    if (numel() == 0) return;  // no bytes, and no row to count rows by
    std::vector<ControlBlock> group;
    if (pitch == row) {
        group.push_back(detail::CopyFromDevice(core, host, handle_, uint64_t(numel()) * ElementSize(dtype_)));
    } else {
        // The range first: a wrapped tensor claiming more bytes than its
        // allocation took (and zero-filled) that much host memory before the
        // copy refused it, or threw std::bad_alloc (found probing from outside).
        core.buffer_allocator().DeviceAddress(handle_, size_bytes_);
        auto staged = std::make_shared<std::vector<uint8_t>>(size_bytes_);
        group.push_back(detail::CopyFromDevice(core, staged->data(), handle_, size_bytes_));
        group.back().keep_alive = staged;  // the DMA engine writes it until the copy completes
        const size_t rows = size_t(numel() / last_size);
        group.push_back(detail::Callback([staged, host, rows, row, pitch] {
            CopyRows(staged->data(), pitch, static_cast<uint8_t*>(host), row, rows, row);
        }));
    }
    stream.EnqueueGroup(group);
}

std::vector<int64_t> SpyreTensor::element_strides() const {
    std::vector<int64_t> s(stride_.size());
    for (size_t d = 0; d < s.size(); ++d) s[d] = stride_[d] / int64_t(ElementSize(dtype_));
    return s;
}

int64_t SpyreTensor::numel() const noexcept {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
}

std::string SpyreTensor::ToString() const {
    return std::string(spyre::ToString(dtype_)) + ShapeText(shape_) + " stride(bytes)" + ShapeText(stride_) + " at " +
           handle_.ToString();
}

}  // namespace spyre
