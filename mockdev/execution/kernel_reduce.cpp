// SPDX-License-Identifier: Apache-2.0
// Kernels along one axis: softmax and reductions. Each visits "lines": the
// index space with the axis collapsed to 1, and walks the axis per line.
// Sums accumulate in double so long lines keep fp32 accuracy.
#include <cmath>
#include <limits>

#include "execution/kernels.hpp"

namespace spyre::mockdev {

namespace {

// The shape with `axis` collapsed to 1: one point per line.
std::array<uint64_t, SPYRE_PROGRAM_MAX_RANK> Lines(const Tensor& x, uint32_t axis) {
    std::array<uint64_t, SPYRE_PROGRAM_MAX_RANK> s{};
    std::copy(x.shape(), x.shape() + x.rank(), s.begin());
    s[axis] = 1;
    return s;
}

// Calls line(x_offset, y_offset) for every line, chunked across the cores.
template <typename Line>
uint16_t ForEachLine(const KernelContext& ctx, const Tensor& x, const Tensor& y, uint32_t axis, Line&& line) {
    const auto lines = Lines(x, axis);
    const StridedWalk<2> walk(lines.data(), x.rank(), {x.strides(), y.strides()});
    const uint64_t count = x.operand.elements / x.shape()[axis];
    const uint64_t grain = std::max<uint64_t>(1, kElementGrain / x.shape()[axis]);
    return ForChunks(ctx, count, grain, [&](uint64_t begin, uint64_t end) {
        walk.ForEachRun(begin, end, [&](const std::array<uint64_t, 2>& off, uint64_t n) {
            for (uint64_t j = 0; j < n; ++j) line(off[0] + j * walk.inner_stride(0), off[1] + j * walk.inner_stride(1));
        });
    });
}

}  // namespace

uint16_t RunSoftmax(const KernelContext& ctx, uint32_t axis, const Tensor& x, const Tensor& y) {
    const uint64_t n = x.shape()[axis];
    const uint64_t sx = x.strides()[axis];
    const uint64_t sy = y.strides()[axis];
    return WithFloatType(y.desc().dtype, [&]<typename T>() {
        return ForEachLine(ctx, x, y, axis, [&](uint64_t ox, uint64_t oy) {
            float max = -std::numeric_limits<float>::infinity();
            for (uint64_t i = 0; i < n; ++i) max = std::max(max, LoadElement<T>(x.data, ox + i * sx));
            double sum = 0;
            for (uint64_t i = 0; i < n; ++i) sum += std::exp(double(LoadElement<T>(x.data, ox + i * sx)) - max);
            // Every x is read before its y is written: in place (X = Y) works.
            for (uint64_t i = 0; i < n; ++i)
                StoreElement<T>(y.data, oy + i * sy, float(std::exp(double(LoadElement<T>(x.data, ox + i * sx)) - max) / sum));
        });
    });
}

uint16_t RunReduce(const KernelContext& ctx, uint16_t opcode, uint32_t axis, const Tensor& x, const Tensor& y) {
    const uint64_t n = x.shape()[axis];
    const uint64_t sx = x.strides()[axis];
    const bool sum = opcode == SPYRE_PROG_OP_REDUCE_SUM;
    return WithFloatType(y.desc().dtype, [&]<typename T>() {
        return ForEachLine(ctx, x, y, axis, [&](uint64_t ox, uint64_t oy) {
            double acc = sum ? 0.0 : -std::numeric_limits<double>::infinity();
            for (uint64_t i = 0; i < n; ++i) {
                const double v = LoadElement<T>(x.data, ox + i * sx);
                // A NaN wins a max, as it does a sum (std::max would drop it).
                acc = sum ? acc + v : (v > acc || std::isnan(v) ? v : acc);
            }
            StoreElement<T>(y.data, oy, float(acc));
        });
    });
}

}  // namespace spyre::mockdev
