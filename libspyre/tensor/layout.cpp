// SPDX-License-Identifier: Apache-2.0
#include "spyre/tensor/layout.hpp"

#include "spyre/uapi/spyre_program.h"

#include <sstream>

#include "spyre/error.hpp"

namespace spyre {

namespace {

template <typename T>
std::string Join(const std::vector<T>& v) {
    std::ostringstream out;
    out << '[';
    for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
    out << ']';
    return out.str();
}

[[noreturn]] void Invalid(const std::string& what) { throw Error(ErrorKind::InvalidArgument, what); }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Every size a layout computes (elements, extent, strides, bytes) stays at
// most this, so none of them overflows int64 (sizes near 2^63 wrapped to 0
// and sized buffers that Pack then overran).
constexpr int64_t kMaxLayoutBytes = int64_t(1) << 62;

// a * b for sizes (both >= 0); InvalidArgument naming what `name()`
// returns (built only then) past the bound.
template <typename Name>
int64_t SizeProduct(int64_t a, int64_t b, const Name& name) {
    int64_t out = 0;
    if (__builtin_mul_overflow(a, b, &out) || out > kMaxLayoutBytes)
        Invalid(name() + " is too large: more than 2^62 elements or bytes");
    return out;
}

}  // namespace

size_t ElementSize(DType dtype) noexcept {
    switch (dtype) {
    case DType::FP16: case DType::BF16: return 2;
    case DType::FP32: case DType::INT32: return 4;
    case DType::INT8: return 1;
    }
    return 1;
}

uint8_t ProgramDType(DType dtype) noexcept {
    switch (dtype) {
    case DType::FP16: return SPYRE_DTYPE_FP16;
    case DType::BF16: return SPYRE_DTYPE_BF16;
    case DType::FP32: return SPYRE_DTYPE_FP32;
    case DType::INT8: return SPYRE_DTYPE_INT8;
    case DType::INT32: return SPYRE_DTYPE_INT32;
    }
    return 0;
}

bool IsKnownDType(DType dtype) noexcept {
    switch (dtype) {
    case DType::FP16: case DType::BF16: case DType::FP32: case DType::INT8: case DType::INT32: return true;
    }
    return false;
}

void CheckDType(DType dtype, const std::string& what) {
    if (!IsKnownDType(dtype))
        Invalid(what + ": dtype " + std::to_string(unsigned(dtype)) + " is none of fp16, bf16, fp32, int8, int32");
}

void CheckTensorLayout(TensorLayout layout, const std::string& what) {
    if (layout != TensorLayout::Dense && layout != TensorLayout::Sticks)
        Invalid(what + ": layout " + std::to_string(int(layout)) + " is neither Dense nor Sticks");
}

const char* ToString(DType dtype) noexcept {
    switch (dtype) {
    case DType::FP16: return "fp16";
    case DType::BF16: return "bf16";
    case DType::FP32: return "fp32";
    case DType::INT8: return "int8";
    case DType::INT32: return "int32";
    }
    return "?";
}

// ---- HostLayout ---------------------------------------------------------------

HostLayout::HostLayout(std::vector<int64_t> size, std::vector<int64_t> stride, DType dtype)
    : size_(std::move(size)), stride_(std::move(stride)), dtype_(dtype) {
    CheckDType(dtype_, "host layout");
    if (size_.empty()) Invalid("a host layout needs at least one dimension");
    if (size_.size() != stride_.size())
        Invalid("host layout has " + std::to_string(size_.size()) + " sizes but " + std::to_string(stride_.size()) +
                " strides");
    for (size_t d = 0; d < size_.size(); ++d) {
        if (size_[d] < 1) Invalid("host dimension " + std::to_string(d) + " has size " + std::to_string(size_[d]));
        if (stride_[d] < 0) Invalid("host dimension " + std::to_string(d) + " has negative stride " + std::to_string(stride_[d]));
    }
    // numel(), extent() and their bytes stay in range.
    const auto what = [this] { return "host layout " + ToString(); };
    const int64_t element = int64_t(ElementSize(dtype_));
    int64_t bytes = element, last = 0;  // numel() x element, and extent() - 1
    for (size_t d = 0; d < size_.size(); ++d) {
        bytes = SizeProduct(bytes, size_[d], what);
        const int64_t step = SizeProduct(size_[d] - 1, stride_[d], what);
        if (__builtin_add_overflow(last, step, &last) || last > kMaxLayoutBytes)
            Invalid(what() + " is too large: more than 2^62 elements or bytes");
    }
    SizeProduct(last + 1, element, what);
}

HostLayout HostLayout::Contiguous(std::vector<int64_t> size, DType dtype) {
    std::vector<int64_t> stride(size.size());
    int64_t s = 1;
    for (size_t d = size.size(); d-- > 0;) {
        stride[d] = s;
        s = SizeProduct(s, std::max<int64_t>(size[d], 1), [&] { return "contiguous host layout " + Join(size); });
    }
    return HostLayout(std::move(size), std::move(stride), dtype);
}

int64_t HostLayout::numel() const noexcept {
    int64_t n = 1;
    for (int64_t s : size_) n *= s;
    return n;
}

int64_t HostLayout::extent() const noexcept {
    int64_t last = 0;
    for (size_t d = 0; d < size_.size(); ++d) last += (size_[d] - 1) * stride_[d];
    return last + 1;
}

bool HostLayout::IsContiguous() const noexcept {
    int64_t expect = 1;
    for (size_t d = size_.size(); d-- > 0;) {
        if (size_[d] != 1 && stride_[d] != expect) return false;
        expect *= size_[d];
    }
    return true;
}

HostLayout HostLayout::Canonical() const {
    std::vector<int64_t> size, stride;
    for (size_t d = 0; d < size_.size(); ++d)
        if (size_[d] != 1) {
            size.push_back(size_[d]);
            stride.push_back(stride_[d]);
        }
    if (size.empty()) return HostLayout({1}, {1}, dtype_);
    return HostLayout(std::move(size), std::move(stride), dtype_);
}

int64_t HostLayout::Offset(std::span<const int64_t> index) const {
    if (index.size() != size_.size())
        Invalid("index of rank " + std::to_string(index.size()) + " for a host tensor of rank " + std::to_string(rank()));
    int64_t off = 0;
    for (size_t d = 0; d < size_.size(); ++d) {
        if (index[d] < 0 || index[d] >= size_[d])
            Invalid("index " + std::to_string(index[d]) + " out of range for host dimension " + std::to_string(d) +
                    " of size " + std::to_string(size_[d]));
        off += index[d] * stride_[d];
    }
    return off;
}

std::string HostLayout::ToString() const {
    return std::string(spyre::ToString(dtype_)) + " size " + Join(size_) + " stride " + Join(stride_);
}

// ---- DeviceLayout ---------------------------------------------------------------

DeviceLayout::DeviceLayout(const std::vector<int64_t>& host_size, std::vector<int64_t> device_size,
                           std::vector<int> dim_map, DType dtype)
    : host_size_(host_size), device_size_(std::move(device_size)), dim_map_(std::move(dim_map)), dtype_(dtype) {
    CheckDType(dtype_, "device layout");
    const int n = int(device_size_.size());
    const int host_rank = int(host_size_.size());
    auto where = [&](int j) { return "device dimension " + std::to_string(j) + " of " + ToString(); };
    if (n < 1) Invalid("a device layout needs at least the stick dimension");
    if (dim_map_.size() != device_size_.size())
        Invalid("device layout has " + std::to_string(n) + " sizes but " + std::to_string(dim_map_.size()) +
                " dim_map entries");
    for (int j = 0; j < n; ++j) {
        if (device_size_[j] < 1) Invalid(where(j) + " has size " + std::to_string(device_size_[j]));
        if (dim_map_[j] < kSynthetic || dim_map_[j] >= host_rank)
            Invalid(where(j) + " maps to host dimension " + std::to_string(dim_map_[j]) + ", host rank is " +
                    std::to_string(host_rank));
        if (dim_map_[j] == kSynthetic && device_size_[j] != 1)
            Invalid(where(j) + " is synthetic (-1) and must have size 1");
    }
    if (dim_map_.back() == kSynthetic) Invalid(where(n - 1) + " (the stick) must map to a host dimension");
    // device_elements(), device_bytes() and every tile weight stay in range.
    int64_t bytes = int64_t(ElementSize(dtype_));
    for (int j = 0; j < n; ++j) bytes = SizeProduct(bytes, device_size_[j], [this] { return ToString(); });
    if (device_size_.back() != int64_t(StickElements(dtype_)))
        Invalid(where(n - 1) + " (the stick) must hold " + std::to_string(StickElements(dtype_)) + " " +
                spyre::ToString(dtype_) + " elements, not " + std::to_string(device_size_.back()));
    for (int h = 0; h < host_rank; ++h) {
        const auto dims = DeviceDimsOf(h);
        if (dims.empty()) Invalid("host dimension " + std::to_string(h) + " is not in the dim_map of " + ToString());
        // The tiles must cover the host size with less than one outer step of padding.
        const int64_t covered = device_size_[dims.front()] * Weight(dims.front());
        const int64_t inner = Weight(dims.front());
        if (covered < host_size_[h] || covered - host_size_[h] >= inner)
            Invalid(where(dims.front()) + " tiles host dimension " + std::to_string(h) + " of size " +
                    std::to_string(host_size_[h]) + " into " + std::to_string(covered) + " elements");
    }
}

DeviceLayout DeviceLayout::Default(const HostLayout& host) {
    const HostLayout c = host.Canonical();
    const auto& s = c.size();
    const int r = c.rank();
    const int64_t stick = int64_t(StickElements(c.dtype()));
    const int64_t tiles = CeilDiv(s[r - 1], stick);
    std::vector<int64_t> size;
    std::vector<int> map;
    for (int h = 1; h < r - 1; ++h) {
        size.push_back(s[h]);
        map.push_back(h);
    }
    size.push_back(tiles);
    map.push_back(r - 1);
    if (r > 1) {
        size.push_back(s[0]);
        map.push_back(0);
    }
    size.push_back(stick);
    map.push_back(r - 1);
    return DeviceLayout(s, std::move(size), std::move(map), c.dtype());
}

int64_t DeviceLayout::device_elements() const noexcept {
    int64_t n = 1;
    for (int64_t s : device_size_) n *= s;
    return n;
}

std::vector<int> DeviceLayout::DeviceDimsOf(int host_dim) const {
    std::vector<int> dims;
    for (int j = 0; j < int(dim_map_.size()); ++j)
        if (dim_map_[j] == host_dim) dims.push_back(j);
    return dims;
}

int64_t DeviceLayout::Weight(int device_dim) const {
    if (device_dim < 0 || device_dim >= device_rank())
        Invalid("DeviceLayout::Weight: device_dim " + std::to_string(device_dim) + " is out of range: the layout has " +
                std::to_string(device_rank()) + " device dimensions (0.." + std::to_string(device_rank() - 1) + ")");
    int64_t w = 1;
    for (int j = device_dim + 1; j < int(dim_map_.size()); ++j)
        if (dim_map_[j] == dim_map_[device_dim]) w *= device_size_[j];
    return w;
}

int64_t DeviceLayout::DeviceOffset(std::span<const int64_t> host_index) const {
    if (host_index.size() != host_size_.size())
        Invalid("index of rank " + std::to_string(host_index.size()) + " for a host tensor of rank " +
                std::to_string(host_size_.size()));
    for (size_t h = 0; h < host_size_.size(); ++h)
        if (host_index[h] < 0 || host_index[h] >= host_size_[h])
            Invalid("index " + std::to_string(host_index[h]) + " out of range for host dimension " + std::to_string(h) +
                    " of size " + std::to_string(host_size_[h]));
    int64_t off = 0;
    for (int j = 0; j < device_rank(); ++j) {
        const int64_t coord = dim_map_[j] == kSynthetic ? 0 : (host_index[dim_map_[j]] / Weight(j)) % device_size_[j];
        off = off * device_size_[j] + coord;
    }
    return off;
}

std::optional<std::vector<int64_t>> DeviceLayout::HostIndex(int64_t device_offset) const {
    if (device_offset < 0 || device_offset >= device_elements())
        Invalid("device offset " + std::to_string(device_offset) + " outside " + ToString());
    std::vector<int64_t> index(host_size_.size(), 0);
    for (int j = device_rank() - 1; j >= 0; --j) {
        const int64_t coord = device_offset % device_size_[j];
        device_offset /= device_size_[j];
        if (dim_map_[j] != kSynthetic) index[dim_map_[j]] += coord * Weight(j);
    }
    for (size_t h = 0; h < host_size_.size(); ++h)
        if (index[h] >= host_size_[h]) return std::nullopt;  // padding
    return index;
}

std::string DeviceLayout::ToString() const {
    return std::string("device layout ") + spyre::ToString(dtype_) + " size " + Join(device_size_) + " dim_map " +
           Join(dim_map_) + " for host " + Join(host_size_);
}

std::string ShapeText(std::span<const int64_t> shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
    return s + "]";
}

TensorFootprint FootprintOf(std::span<const int64_t> shape, DType dtype, TensorLayout layout) {
    CheckDType(dtype, "tensor");
    CheckTensorLayout(layout, "tensor");
    if (shape.empty()) throw Error(ErrorKind::InvalidArgument, "tensor shape has no dims");
    for (size_t d = 0; d < shape.size(); ++d)
        if (shape[d] < 1)
            throw Error(ErrorKind::InvalidArgument,
                        "tensor " + ShapeText(shape) + ": dim " + std::to_string(d) + " must be >= 1");
    TensorFootprint f{std::vector<int64_t>(shape.size()), 0};
    const int64_t per_stick = int64_t(StickElements(dtype));
    // Sticks: each innermost row is padded to whole sticks.
    int64_t span = layout == TensorLayout::Sticks ? (shape.back() + per_stick - 1) / per_stick * per_stick : shape.back();
    f.strides.back() = 1;
    for (size_t d = shape.size() - 1; d-- > 0;) {
        f.strides[d] = span;
        if (__builtin_mul_overflow(span, shape[d], &span))
            throw Error(ErrorKind::InvalidArgument, "tensor " + ShapeText(shape) + " is too large");
    }
    if (__builtin_mul_overflow(uint64_t(span), ElementSize(dtype), &f.bytes))
        throw Error(ErrorKind::InvalidArgument, "tensor " + ShapeText(shape) + " is too large");
    return f;
}

}  // namespace spyre
