// SPDX-License-Identifier: Apache-2.0
// HostTensor: the tensors of host-level (level 3) orchestration. Row-major
// bytes in host memory with a shape and a dtype, shared by every copy, and
// row views of them (Rows): the unit the runtime tracks dependencies on. A
// row range of a row-major tensor is one contiguous byte range, so two views
// overlap exactly when their byte ranges do (as TensorMap regions do).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "spyre/tensor/layout.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

class HostTensor {
public:
    HostTensor() = default;  // empty: no storage
    // Zero-filled. Throws InvalidArgument for an empty shape or a dim < 1.
    static HostTensor Zeros(const std::vector<int64_t>& shape, DType dtype = DType::FP32);
    static HostTensor Full(const std::vector<int64_t>& shape, float value);  // FP32
    // FP32 with `values` (their count must match the shape).
    static HostTensor FromFloats(const std::vector<int64_t>& shape, std::span<const float> values);
    // Over `data` owned elsewhere (no copy): the bytes of `shape` x `dtype`
    // at `data` stay valid while `owner` lives; the tensor and its views hold
    // it (the Python front end wraps numpy arrays this way). InvalidArgument
    // when a live storage spans any of these bytes, a wrapped one or one
    // made by Zeros, Full or FromFloats: wrap memory once, or use that
    // tensor, and take Rows() views (dependencies are found per storage).
    static HostTensor Wrap(void* data, const std::vector<int64_t>& shape, DType dtype,
                           std::shared_ptr<const void> owner);

    explicit operator bool() const noexcept { return storage_ != nullptr; }
    // The view's shape: the whole tensor's with dim 0 cut to the view's rows.
    std::vector<int64_t> shape() const;
    size_t rank() const noexcept { return shape_.size(); }  // its dims
    DType dtype() const noexcept { return dtype_; }
    uint64_t bytes() const noexcept { return bytes_; }
    uint64_t numel() const noexcept;
    // Byte range of the view inside its storage.
    uint64_t byte_offset() const noexcept { return offset_; }
    // Identifies the storage (never reused while the process lives).
    uint64_t storage_id() const noexcept;
    bool SameStorage(const HostTensor& other) const noexcept { return storage_ == other.storage_; }
    // Every byte of `other` is one of this view's.
    bool Contains(const HostTensor& other) const noexcept {
        return SameStorage(other) && offset_ <= other.offset_ && other.offset_ + other.bytes_ <= offset_ + bytes_;
    }
    bool Overlaps(const HostTensor& other) const noexcept {
        return SameStorage(other) && offset_ < other.offset_ + other.bytes_ && other.offset_ < offset_ + bytes_;
    }

    // The bytes, to read and write: between runs freely, through a pointer
    // kept as long as the tensor lives (a Worker checks a device copy it
    // kept against them before reusing it), but not while a task that uses
    // the tensor is in flight (a race: the task may see either bytes). The
    // host orchestration function may write them between its tasks: a task
    // it submits after the write sees it.
    void* data() const noexcept;
    std::span<float> floats() const;  // InvalidArgument unless FP32
    // Whether a task in flight, of any Worker, writes bytes of this view
    // (submitted and not ended; a bound: a Worker's writes in flight on a
    // storage count as one span), so a copy taken now could tear.
    bool WrittenInFlight() const;

    // Rows [begin, end) of dim 0, as a view on the same storage.
    // InvalidArgument for an empty or out-of-range range.
    HostTensor Rows(int64_t begin, int64_t end) const;
    // "[128x128] fp32 rows 0..64 of tensor #3": for messages.
    std::string Describe() const;

    struct SPYRE_INTERNAL Storage;
    // The storage, for the runtime's residency bookkeeping.
    const std::shared_ptr<Storage>& storage() const noexcept { return storage_; }

private:
    std::shared_ptr<Storage> storage_;
    std::vector<int64_t> shape_;  // the whole tensor's
    DType dtype_ = DType::FP32;
    int64_t row_begin_ = 0, row_end_ = 0;
    uint64_t offset_ = 0, bytes_ = 0;
};

}  // namespace spyre
SPYRE_API_END
