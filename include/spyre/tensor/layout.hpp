// SPDX-License-Identifier: Apache-2.0
// Tensor layouts (seed 002): the host layout (sizes and strides, as PyTorch
// has them) and the device layout (tiled into 128-byte sticks, row-major,
// with a dim_map back to the host dimensions).
#pragma once

#include <cstdint>
#include <optional>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// How a tensor sits in device memory.
enum class TensorLayout {
    Dense,   // row-major, no padding
    Sticks,  // row-major, each innermost row padded to whole 128-byte sticks, 128-aligned address
};

enum class DType : uint8_t { FP16, BF16, FP32, INT8, INT32 };

size_t ElementSize(DType dtype) noexcept;
const char* ToString(DType dtype) noexcept;
// Whether `dtype` is one of the enum's values (an integer cast to DType may
// not be). CheckDType: InvalidArgument naming `what` when it is not; every
// call that takes a DType makes this check first.
bool IsKnownDType(DType dtype) noexcept;
void CheckDType(DType dtype, const std::string& what);
// The same for a TensorLayout (FootprintOf and SpyreTensor check it).
void CheckTensorLayout(TensorLayout layout, const std::string& what);
// The program format's code for the dtype (SPYRE_DTYPE_*, uapi/spyre_program.h).
uint8_t ProgramDType(DType dtype) noexcept;

// The device's unit of memory access.
inline constexpr size_t kStickBytes = 128;
// Elements per stick: 64 for fp16/bf16, 32 for fp32/int32, 128 for int8.
inline size_t StickElements(DType dtype) noexcept { return kStickBytes / ElementSize(dtype); }

// "[2x3x4]": how messages and logs print a shape.
std::string ShapeText(std::span<const int64_t> shape);
inline std::string ShapeText(std::initializer_list<int64_t> shape) { return ShapeText({shape.begin(), shape.size()}); }

// How a row-major tensor of `shape` sits in device memory in `layout`:
// strides in elements and the bytes from its address to its end, padding
// included. InvalidArgument for an empty shape, a dim < 1 or a size that
// overflows.
struct TensorFootprint {
    std::vector<int64_t> strides;
    uint64_t bytes = 0;
};
TensorFootprint FootprintOf(std::span<const int64_t> shape, DType dtype, TensorLayout layout);

// A host tensor: sizes and strides in elements.
class HostLayout {
public:
    // Validates: equal ranks, sizes >= 1, strides >= 0 (InvalidArgument
    // naming the dimension otherwise).
    HostLayout(std::vector<int64_t> size, std::vector<int64_t> stride, DType dtype);
    // Row-major (PyTorch's default) strides.
    static HostLayout Contiguous(std::vector<int64_t> size, DType dtype);

    const std::vector<int64_t>& size() const noexcept { return size_; }
    const std::vector<int64_t>& stride() const noexcept { return stride_; }
    DType dtype() const noexcept { return dtype_; }
    int rank() const noexcept { return int(size_.size()); }
    int64_t numel() const noexcept;
    // Elements from the first to one past the last reachable element.
    int64_t extent() const noexcept;

    bool IsContiguous() const noexcept;
    // The same tensor with every size-1 dimension removed (seed 002's
    // canonical form); a tensor of only size-1 dimensions keeps one.
    HostLayout Canonical() const;
    // Element offset of a host index (checked: InvalidArgument naming the dimension).
    int64_t Offset(std::span<const int64_t> index) const;

    std::string ToString() const;
    friend bool operator==(const HostLayout&, const HostLayout&) = default;

private:
    std::vector<int64_t> size_;
    std::vector<int64_t> stride_;
    DType dtype_;
};

// A device tensor: row-major over device_size, no strides. The last device
// dimension is the stick. dim_map[j] is the host dimension that device
// dimension j tiles, or -1 for a synthetic dimension (size 1).
class DeviceLayout {
public:
    static constexpr int kSynthetic = -1;

    // Checks that this device layout stores `host`: sizes positive, the last
    // dimension is one stick of host data, every host dimension covered with
    // less than one tile of padding. Throws InvalidArgument naming the device
    // dimension that is wrong.
    DeviceLayout(const std::vector<int64_t>& host_size, std::vector<int64_t> device_size, std::vector<int> dim_map,
                 DType dtype);

    // The default layout for a host tensor: its last dimension is cut into
    // sticks and padded to a whole stick; the tiles of that dimension go
    // between the middle dimensions and host dimension 0, which moves just
    // outside the stick. Rank 1 [C]: [tiles, stick]; rank 2 [R, C]:
    // [tiles, R, stick]; rank n: [h1 .. h(n-2), tiles, h0, stick]. The host
    // layout is canonicalised first. Reproduces every example of seed 002.
    static DeviceLayout Default(const HostLayout& host);

    const std::vector<int64_t>& device_size() const noexcept { return device_size_; }
    const std::vector<int>& dim_map() const noexcept { return dim_map_; }
    const std::vector<int64_t>& host_size() const noexcept { return host_size_; }
    DType dtype() const noexcept { return dtype_; }
    int device_rank() const noexcept { return int(device_size_.size()); }

    // Elements and bytes the device holds, padding included (memory planning).
    int64_t device_elements() const noexcept;
    int64_t device_bytes() const noexcept { return device_elements() * int64_t(ElementSize(dtype_)); }

    // Element offset in device memory of a host index, and back (nullopt for
    // padding). Throws InvalidArgument for an index outside the host tensor.
    int64_t DeviceOffset(std::span<const int64_t> host_index) const;
    std::optional<std::vector<int64_t>> HostIndex(int64_t device_offset) const;

    // The device dimensions that tile host dimension h, outer first.
    std::vector<int> DeviceDimsOf(int host_dim) const;
    // Weight of device dimension j in its host coordinate: the product of the
    // sizes of later device dimensions tiling the same host dimension.
    // InvalidArgument for a j outside 0..device_rank()-1.
    int64_t Weight(int device_dim) const;

    std::string ToString() const;
    friend bool operator==(const DeviceLayout&, const DeviceLayout&) = default;

private:
    std::vector<int64_t> host_size_;
    std::vector<int64_t> device_size_;
    std::vector<int> dim_map_;
    DType dtype_;
};

}  // namespace spyre
SPYRE_API_END
