// SPDX-License-Identifier: Apache-2.0
#include "spyre/host/host_tensor.hpp"

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "host_memory.hpp"
#include "spyre/error.hpp"
#include "storage_claims.hpp"

namespace spyre {

namespace {

// The memory live storages span now, by first byte: [first, end) and the
// storage's id, wrapped ones and those made here (Zeros, Full) alike. A
// second storage over the same bytes would be unordered with the first,
// since the Worker finds dependencies by storage and byte range (an In of
// one and an Out of the other raced, and a device copy kept for one was
// reused after a write through the other), so Wrap refuses one. Python
// remembers its wrapped arrays and hands out one storage per memory; a
// C++ caller wraps once and takes Rows() views.
struct WrappedSpan {
    uintptr_t end;
    uint64_t id;
};
struct WrappedSpans {
    std::mutex mu;
    std::map<uintptr_t, WrappedSpan> spans;  // disjoint
};
// Never destroyed: a storage may die on a thread that outlives the exit.
WrappedSpans& Wrapped() {
    static auto* wrapped = new WrappedSpans;
    return *wrapped;
}

}  // namespace

struct HostTensor::Storage {
    uint64_t id;
    std::vector<std::byte> bytes;
    std::byte* external = nullptr;        // Wrap: memory owned by `owner`
    std::shared_ptr<const void> owner;
    host::StorageClaims claims;  // the Workers with tasks in flight on it
    std::byte* base() noexcept { return external ? external : bytes.data(); }
    // Made in place (make_shared with the fields): a temporary would leave
    // its span as it goes.
    ~Storage() {
        WrappedSpans& w = Wrapped();
        std::lock_guard lock(w.mu);
        auto it = w.spans.find(reinterpret_cast<uintptr_t>(base()));
        if (it != w.spans.end() && it->second.id == id) w.spans.erase(it);
    }
};

namespace {

std::atomic<uint64_t> g_next_storage{1};

std::string ShapeString(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
    return s + "]";
}

// At most 2^60 elements: their bytes (8 at most each) then fit in 2^63.
constexpr uint64_t kMaxElements = uint64_t(1) << 60;

// Elements of `shape`; InvalidArgument for an empty shape, a dim < 1, or a
// count over kMaxElements.
uint64_t Elements(const std::vector<int64_t>& shape) {
    if (shape.empty()) throw Error(ErrorKind::InvalidArgument, "host tensor: empty shape");
    uint64_t n = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] < 1)
            throw Error(ErrorKind::InvalidArgument, "host tensor: dim " + std::to_string(i) + " of shape " +
                                                        ShapeString(shape) + " is " + std::to_string(shape[i]) +
                                                        " (must be >= 1)");
        if (__builtin_mul_overflow(n, uint64_t(shape[i]), &n) || n > kMaxElements)
            throw Error(ErrorKind::InvalidArgument, "host tensor: shape " + ShapeString(shape) +
                                                        " has more elements than a tensor can hold (2^60)");
    }
    return n;
}

// A zeroed buffer of `bytes`, or OutOfMemory saying so (never std::bad_alloc).
// More than the host's RAM and swap is refused before it is asked for: the
// allocation itself may succeed (overcommit), and zeroing it would then
// bring the OOM killer instead of an error.
std::vector<std::byte> ZeroedBytes(uint64_t bytes, const std::vector<int64_t>& shape) {
    if (const uint64_t memory = detail::HostMemoryBytes(); bytes > memory)
        throw Error(ErrorKind::OutOfMemory, "host tensor: cannot allocate " + std::to_string(bytes) + " bytes for shape " +
                                                ShapeString(shape) + ": more than this host's " + std::to_string(memory) +
                                                " bytes of RAM and swap");
    try {
        return std::vector<std::byte>(bytes);
    } catch (const std::exception&) {  // bad_alloc, or length_error past the allocator's size
        throw Error(ErrorKind::OutOfMemory, "host tensor: cannot allocate " + std::to_string(bytes) + " bytes for shape " +
                                                ShapeString(shape));
    }
}

}  // namespace

HostTensor HostTensor::Zeros(const std::vector<int64_t>& shape, DType dtype) {
    CheckDType(dtype, "host tensor");
    const uint64_t n = Elements(shape);
    HostTensor t;
    t.storage_ = std::make_shared<Storage>(g_next_storage.fetch_add(1), ZeroedBytes(n * ElementSize(dtype), shape));
    {
        // Its memory is new: no span can overlap it (a storage's span goes before its bytes are freed).
        WrappedSpans& w = Wrapped();
        const auto first = reinterpret_cast<uintptr_t>(t.storage_->bytes.data());
        std::lock_guard lock(w.mu);
        w.spans.insert_or_assign(first, WrappedSpan{first + t.storage_->bytes.size(), t.storage_->id});
    }
    t.shape_ = shape;
    t.dtype_ = dtype;
    t.row_end_ = shape[0];
    t.bytes_ = t.storage_->bytes.size();
    return t;
}

HostTensor HostTensor::Wrap(void* data, const std::vector<int64_t>& shape, DType dtype,
                            std::shared_ptr<const void> owner) {
    if (!data) throw Error(ErrorKind::InvalidArgument, "host tensor: Wrap of a null pointer");
    CheckDType(dtype, "host tensor");
    const uint64_t n = Elements(shape);
    const auto first = reinterpret_cast<uintptr_t>(data);
    const uint64_t bytes = n * ElementSize(dtype);
    if (bytes > UINTPTR_MAX - first)
        throw Error(ErrorKind::InvalidArgument, "host tensor: Wrap of " + std::to_string(bytes) +
                                                    " bytes runs past the end of the address space");
    HostTensor t;
    t.dtype_ = dtype;
    WrappedSpans& w = Wrapped();
    std::lock_guard lock(w.mu);
    // The spans are disjoint, so their ends rise with their starts: the
    // one that starts last below first + bytes is the only one to check.
    auto after = w.spans.lower_bound(first + bytes);
    if (after != w.spans.begin() && std::prev(after)->second.end > first) {
        const auto& [at, span] = *std::prev(after);
        throw Error(ErrorKind::InvalidArgument,
                    "host tensor: Wrap of " + std::to_string(bytes) + " bytes at " + std::to_string(first) +
                        " shares memory with storage #" + std::to_string(span.id) + " ([" + std::to_string(at) + ", " +
                        std::to_string(span.end) + "), still held), and two storages over the same bytes would "
                        "not be ordered: wrap the memory once and take Rows() views of that tensor");
    }
    const uint64_t id = g_next_storage.fetch_add(1);
    t.storage_ = std::make_shared<Storage>(id, std::vector<std::byte>{}, static_cast<std::byte*>(data), std::move(owner));
    w.spans.emplace(first, WrappedSpan{first + bytes, id});
    t.shape_ = shape;
    t.row_end_ = shape[0];
    t.bytes_ = bytes;
    return t;
}

HostTensor HostTensor::Full(const std::vector<int64_t>& shape, float value) {
    HostTensor t = Zeros(shape, DType::FP32);
    for (float& x : t.floats()) x = value;
    return t;
}

HostTensor HostTensor::FromFloats(const std::vector<int64_t>& shape, std::span<const float> values) {
    HostTensor t = Zeros(shape, DType::FP32);
    if (values.size() != t.numel())
        throw Error(ErrorKind::InvalidArgument, "host tensor: " + std::to_string(values.size()) + " values for shape " +
                                                    ShapeString(shape) + " (" + std::to_string(t.numel()) + " elements)");
    std::memcpy(t.data(), values.data(), t.bytes_);
    return t;
}

std::vector<int64_t> HostTensor::shape() const {
    std::vector<int64_t> s = shape_;
    if (!s.empty()) s[0] = row_end_ - row_begin_;
    return s;
}

uint64_t HostTensor::numel() const noexcept { return storage_ ? bytes_ / ElementSize(dtype_) : 0; }
uint64_t HostTensor::storage_id() const noexcept { return storage_ ? storage_->id : 0; }
void* HostTensor::data() const noexcept { return storage_ ? storage_->base() + offset_ : nullptr; }

std::span<float> HostTensor::floats() const {
    if (!storage_ || dtype_ != DType::FP32)
        throw Error(ErrorKind::InvalidArgument, "host tensor: floats() of " + Describe() + " (needs a fp32 tensor)");
    return {static_cast<float*>(data()), numel()};
}

HostTensor HostTensor::Rows(int64_t begin, int64_t end) const {
    const int64_t rows = row_end_ - row_begin_;
    if (!storage_ || begin < 0 || end > rows || begin >= end)
        throw Error(ErrorKind::InvalidArgument, "host tensor: rows " + std::to_string(begin) + ".." + std::to_string(end) +
                                                    " of " + Describe() + " (a non-empty range inside 0.." +
                                                    std::to_string(rows) + ")");
    HostTensor v = *this;
    const uint64_t row_bytes = bytes_ / uint64_t(rows);
    v.row_begin_ = row_begin_ + begin;
    v.row_end_ = row_begin_ + end;
    v.offset_ = offset_ + uint64_t(begin) * row_bytes;
    v.bytes_ = uint64_t(end - begin) * row_bytes;
    return v;
}

bool HostTensor::WrittenInFlight() const {
    return storage_ && bytes_ != 0 && storage_->claims.Written(offset_, offset_ + bytes_);
}

std::string HostTensor::Describe() const {
    if (!storage_) return "empty tensor";
    std::string s = ShapeString(shape()) + " " + ToString(dtype_);
    if (row_begin_ != 0 || row_end_ != shape_[0])
        s += " rows " + std::to_string(row_begin_) + ".." + std::to_string(row_end_) + " of " + ShapeString(shape_);
    return s + " (tensor #" + std::to_string(storage_->id) + ")";
}

}  // namespace spyre

namespace spyre::host {

StorageClaims& ClaimsOf(const HostTensor& tensor) { return tensor.storage()->claims; }

}  // namespace spyre::host
