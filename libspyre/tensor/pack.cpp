// SPDX-License-Identifier: Apache-2.0
#include "spyre/tensor/pack.hpp"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "spyre/error.hpp"

namespace spyre {

namespace {

// Below this many bytes one thread is faster than starting others.
constexpr int64_t kParallelBytes = 4 << 20;

// Walks the device image stick by stick (row-major over every device
// dimension but the stick) and tells, for each stick, where its first
// element lives on the host and how many of its elements are host data.
class StickWalk {
public:
    StickWalk(const HostLayout& host, const DeviceLayout& device) : host_(host.Canonical()), device_(device) {
        if (device.dtype() != host.dtype())
            throw Error(ErrorKind::InvalidArgument, std::string("host tensor is ") + ToString(host.dtype()) + ", " +
                                                        device.ToString() + " is not");
        if (device.host_size() != host_.size())
            throw Error(ErrorKind::InvalidArgument, device.ToString() + " does not describe host tensor " + host.ToString());
        const int n = device.device_rank();
        stick_ = device.device_size().back();
        stick_dim_ = device.dim_map().back();
        stick_stride_ = host_.stride()[stick_dim_];
        for (int j = 0; j + 1 < n; ++j) {
            const int h = device.dim_map()[j];
            dims_.push_back(Dim{device.device_size()[j], h, h < 0 ? 0 : device.Weight(j),
                                h < 0 ? 0 : device.Weight(j) * host_.stride()[h]});
        }
        outer_ = 1;
        for (const Dim& d : dims_) outer_ *= d.size;
    }

    int64_t sticks() const noexcept { return outer_; }
    int64_t stick() const noexcept { return stick_; }
    int64_t stick_stride() const noexcept { return stick_stride_; }

    // Calls fn(first_stick, host_offset, valid_elements, count, host_step)
    // for sticks [begin, end), grouped into runs along the innermost outer
    // dimension: stick first_stick + i starts at host_offset + i * host_step
    // and holds `valid` host elements (the rest of it is padding).
    template <typename Fn>
    void ForEachRun(int64_t begin, int64_t end, Fn&& fn) const {
        const size_t k = dims_.size();
        if (k == 0) {  // a rank-1 tensor of one stick
            if (begin < end) fn(int64_t(0), int64_t(0), Valid(std::vector<int64_t>(host_.rank(), 0)), int64_t(1), int64_t(0));
            return;
        }
        std::vector<int64_t> index(k), coord(host_.rank(), 0);
        int64_t offset = 0;
        for (size_t j = k, rest = size_t(begin); j-- > 0;) {  // start position by division, once
            index[j] = int64_t(rest % size_t(dims_[j].size));
            rest /= size_t(dims_[j].size);
            Move(j, index[j], coord, offset);
        }
        const Dim& last = dims_[k - 1];
        for (int64_t s = begin; s < end;) {
            int64_t count = std::min(last.size - index[k - 1], end - s);
            int64_t valid = Valid(coord);
            if (last.host == stick_dim_) {
                count = 1;  // the stick's own coordinate moves: valid changes every step
            } else if (last.host >= 0 && valid > 0) {
                // Stop the run where this dimension runs into its padding.
                const int64_t room = (host_.size()[last.host] - coord[last.host] + last.weight - 1) / last.weight;
                count = std::min(count, std::max<int64_t>(room, 1));
            }
            fn(s, offset, valid, count, last.step);
            s += count;
            // Odometer: the innermost outer dimension moves by `count`.
            Move(k - 1, count, coord, offset);
            index[k - 1] += count;
            for (size_t j = k - 1; index[j] == dims_[j].size && j > 0; --j) {
                Move(j, -dims_[j].size, coord, offset);
                index[j] = 0;
                Move(j - 1, 1, coord, offset);
                ++index[j - 1];
            }
        }
    }

private:
    struct Dim {
        int64_t size;
        int host;         // -1: synthetic
        int64_t weight;   // host coordinate per step
        int64_t step;     // host elements per step
    };
    // Host elements in the stick whose coordinates are `coord`.
    int64_t Valid(const std::vector<int64_t>& coord) const {
        for (int h = 0; h < host_.rank(); ++h)
            if (h != stick_dim_ && coord[h] >= host_.size()[h]) return 0;
        return std::clamp<int64_t>(host_.size()[stick_dim_] - coord[stick_dim_], 0, stick_);
    }
    void Move(size_t j, int64_t by, std::vector<int64_t>& coord, int64_t& offset) const {
        if (dims_[j].host < 0) return;
        coord[dims_[j].host] += by * dims_[j].weight;
        offset += by * dims_[j].step;
    }

    HostLayout host_;
    const DeviceLayout& device_;
    std::vector<Dim> dims_;
    int64_t outer_ = 1;
    int64_t stick_ = 0;
    int stick_dim_ = 0;
    int64_t stick_stride_ = 0;
};

// Splits [0, n) over the machine's cores when the work is large.
template <typename Fn>
void Parallel(int64_t n, int64_t bytes, Fn&& fn) {
    const int64_t threads = bytes < kParallelBytes ? 1 : std::max(1u, std::thread::hardware_concurrency());
    if (threads == 1 || n < threads) return fn(int64_t(0), n);
    std::vector<std::thread> pool;
    const int64_t per = (n + threads - 1) / threads;
    for (int64_t t = 1; t < threads; ++t)
        pool.emplace_back([&fn, t, per, n] { fn(std::min(n, t * per), std::min(n, (t + 1) * per)); });
    fn(int64_t(0), std::min(n, per));
    for (auto& th : pool) th.join();
}

// Element copy with a stride on one side; the element size is a template
// parameter so the loop compiles to plain loads and stores.
template <size_t E>
void Gather(uint8_t* dst, const uint8_t* src, int64_t count, int64_t src_stride) {
    for (int64_t i = 0; i < count; ++i) std::memcpy(dst + i * E, src + i * src_stride * E, E);
}
template <size_t E>
void Scatter(uint8_t* dst, const uint8_t* src, int64_t count, int64_t dst_stride) {
    for (int64_t i = 0; i < count; ++i) std::memcpy(dst + i * dst_stride * E, src + i * E, E);
}
void GatherAny(size_t e, uint8_t* dst, const uint8_t* src, int64_t n, int64_t stride) {
    e == 1 ? Gather<1>(dst, src, n, stride) : e == 2 ? Gather<2>(dst, src, n, stride) : Gather<4>(dst, src, n, stride);
}
void ScatterAny(size_t e, uint8_t* dst, const uint8_t* src, int64_t n, int64_t stride) {
    e == 1 ? Scatter<1>(dst, src, n, stride) : e == 2 ? Scatter<2>(dst, src, n, stride) : Scatter<4>(dst, src, n, stride);
}

}  // namespace

namespace {
// A NULL buffer was dereferenced by the conversion threads (SIGSEGV).
void CheckPointer(const void* p, const char* call, const char* argument) {
    if (!p) throw Error(ErrorKind::InvalidArgument, std::string(call) + ": " + argument + " is NULL");
}
}  // namespace

void Pack(const void* host, const HostLayout& host_layout, const DeviceLayout& device, void* device_image) {
    CheckPointer(host, "Pack", "host");
    CheckPointer(device_image, "Pack", "device_image");
    const StickWalk walk(host_layout, device);
    const size_t e = ElementSize(device.dtype());
    const auto* src = static_cast<const uint8_t*>(host);
    auto* dst = static_cast<uint8_t*>(device_image);
    const int64_t stick_bytes = walk.stick() * int64_t(e);
    Parallel(walk.sticks(), device.device_bytes(), [&](int64_t begin, int64_t end) {
        walk.ForEachRun(begin, end, [&](int64_t s, int64_t offset, int64_t valid, int64_t count, int64_t step) {
            for (int64_t i = 0; i < count; ++i) {
                uint8_t* out = dst + (s + i) * stick_bytes;
                const uint8_t* in = src + (offset + i * step) * int64_t(e);
                if (walk.stick_stride() == 1 && valid == walk.stick()) {
                    std::memcpy(out, in, kStickBytes);  // the common case: one whole stick, fixed size
                    continue;
                }
                if (walk.stick_stride() == 1)
                    std::memcpy(out, in, size_t(valid) * e);
                else
                    GatherAny(e, out, in, valid, walk.stick_stride());
                std::memset(out + valid * int64_t(e), 0, size_t(stick_bytes - valid * int64_t(e)));  // padding
            }
        });
    });
}

void Unpack(const void* device_image, const DeviceLayout& device, const HostLayout& host_layout, void* host) {
    CheckPointer(device_image, "Unpack", "device_image");
    CheckPointer(host, "Unpack", "host");
    const StickWalk walk(host_layout, device);
    const size_t e = ElementSize(device.dtype());
    const auto* src = static_cast<const uint8_t*>(device_image);
    auto* dst = static_cast<uint8_t*>(host);
    const int64_t stick_bytes = walk.stick() * int64_t(e);
    Parallel(walk.sticks(), device.device_bytes(), [&](int64_t begin, int64_t end) {
        walk.ForEachRun(begin, end, [&](int64_t s, int64_t offset, int64_t valid, int64_t count, int64_t step) {
            if (valid == 0) return;
            for (int64_t i = 0; i < count; ++i) {
                const uint8_t* in = src + (s + i) * stick_bytes;
                uint8_t* out = dst + (offset + i * step) * int64_t(e);
                if (walk.stick_stride() == 1 && valid == walk.stick())
                    std::memcpy(out, in, kStickBytes);
                else if (walk.stick_stride() == 1)
                    std::memcpy(out, in, size_t(valid) * e);
                else
                    ScatterAny(e, out, in, valid, walk.stick_stride());
            }
        });
    });
}

void CopyTensorToDevice(DMAEngine& dma, const void* host, const HostLayout& host_layout, const DeviceLayout& device,
                        const DeviceHandle& dst) {
    CheckPointer(host, "CopyTensorToDevice", "host");
    std::vector<uint8_t> image(size_t(device.device_bytes()));
    Pack(host, host_layout, device, image.data());
    dma.Wait(dma.CopyToDevice(image.data(), dst, image.size()));
}

void CopyTensorFromDevice(DMAEngine& dma, const DeviceHandle& src, const DeviceLayout& device,
                          const HostLayout& host_layout, void* host) {
    CheckPointer(host, "CopyTensorFromDevice", "host");
    std::vector<uint8_t> image(size_t(device.device_bytes()));
    dma.Wait(dma.CopyFromDevice(image.data(), src, image.size()));
    Unpack(image.data(), device, host_layout, host);
}

}  // namespace spyre
