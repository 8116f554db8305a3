// SPDX-License-Identifier: Apache-2.0
// CPU references for the device's kernels, in double precision over dense
// row-major arrays, and a comparison that reports the worst elements.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "spyre/compiler/kernel_builder.hpp"

namespace spyre::test {

inline std::vector<int64_t> DenseStrides(const std::vector<int64_t>& shape) {
    std::vector<int64_t> s(shape.size());
    int64_t step = 1;
    for (size_t d = shape.size(); d-- > 0;) {
        s[d] = step;
        step *= shape[d];
    }
    return s;
}

inline size_t Numel(const std::vector<int64_t>& shape) {
    size_t n = 1;
    for (int64_t s : shape) n *= size_t(s);
    return n;
}

// C = A*B, and sum |a||b| per element (the scale of its rounding error).
struct MatmulRef {
    std::vector<double> c;
    std::vector<double> magnitude;
};

inline MatmulRef RefMatmul(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k, int64_t n) {
    MatmulRef r{std::vector<double>(size_t(m * n)), std::vector<double>(size_t(m * n))};
    for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p) {
            const double x = a[size_t(i * k + p)];
            for (int64_t j = 0; j < n; ++j) {
                r.c[size_t(i * n + j)] += x * b[size_t(p * n + j)];
                r.magnitude[size_t(i * n + j)] += std::abs(x * b[size_t(p * n + j)]);
            }
        }
    return r;
}

// Element of a broadcast input for an index of the output.
inline size_t BroadcastIndex(const std::vector<int64_t>& in, const std::vector<int64_t>& out, size_t linear) {
    const auto in_strides = DenseStrides(in);
    size_t offset = 0;
    for (size_t d = out.size(); d-- > 0;) {
        const int64_t i = int64_t(linear % size_t(out[d]));
        linear /= size_t(out[d]);
        const size_t din = d + in.size() - out.size();  // right-aligned
        if (d + in.size() >= out.size() && in[din] != 1) offset += size_t(i * in_strides[din]);
    }
    return offset;
}

inline std::vector<double> RefElementwise(ElementwiseOp op, const std::vector<double>& a, const std::vector<int64_t>& as,
                                          const std::vector<double>& b, const std::vector<int64_t>& bs,
                                          const std::vector<int64_t>& cs) {
    std::vector<double> c(Numel(cs));
    for (size_t i = 0; i < c.size(); ++i) {
        const double x = a[BroadcastIndex(as, cs, i)], y = b[BroadcastIndex(bs, cs, i)];
        switch (op) {
        case ElementwiseOp::Add: c[i] = x + y; break;
        case ElementwiseOp::Sub: c[i] = x - y; break;
        case ElementwiseOp::Mul: c[i] = x * y; break;
        case ElementwiseOp::Div: c[i] = x / y; break;
        }
    }
    return c;
}

inline double RefGelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// Calls fn(line offset, axis stride) for every line along `axis`.
inline void ForEachLine(const std::vector<int64_t>& shape, int axis, const std::function<void(size_t, size_t)>& fn) {
    const auto strides = DenseStrides(shape);
    const size_t n = Numel(shape);
    const size_t len = size_t(shape[size_t(axis)]);
    const size_t stride = size_t(strides[size_t(axis)]);
    for (size_t i = 0; i < n; ++i)
        if ((i / stride) % len == 0) fn(i, stride);
}

inline std::vector<double> RefSoftmax(const std::vector<double>& x, const std::vector<int64_t>& shape) {
    std::vector<double> y(x.size());
    const int axis = int(shape.size()) - 1;
    const size_t len = size_t(shape.back());
    ForEachLine(shape, axis, [&](size_t at, size_t stride) {
        double max = -INFINITY, sum = 0;
        for (size_t i = 0; i < len; ++i) max = std::max(max, x[at + i * stride]);
        for (size_t i = 0; i < len; ++i) sum += std::exp(x[at + i * stride] - max);
        for (size_t i = 0; i < len; ++i) y[at + i * stride] = std::exp(x[at + i * stride] - max) / sum;
    });
    return y;
}

// Output keeps the axis with size 1 (its elements in row-major order).
inline std::vector<double> RefReduce(ReduceKind kind, const std::vector<double>& x, const std::vector<int64_t>& shape,
                                     int axis) {
    std::vector<double> y;
    const size_t len = size_t(shape[size_t(axis)]);
    ForEachLine(shape, axis, [&](size_t at, size_t stride) {
        double acc = kind == ReduceKind::Sum ? 0.0 : -INFINITY;
        for (size_t i = 0; i < len; ++i) acc = kind == ReduceKind::Sum ? acc + x[at + i * stride] : std::max(acc, x[at + i * stride]);
        y.push_back(acc);
    });
    return y;
}

inline std::vector<double> RefTranspose(const std::vector<double>& x, const std::vector<int64_t>& shape,
                                        const std::vector<int>& perm) {
    std::vector<int64_t> out_shape, in_strides = DenseStrides(shape), walk;
    for (int p : perm) {
        out_shape.push_back(shape[size_t(p)]);
        walk.push_back(in_strides[size_t(p)]);
    }
    std::vector<double> y(x.size());
    std::vector<int64_t> idx(shape.size(), 0);
    for (size_t linear = 0; linear < y.size(); ++linear) {
        int64_t off = 0;
        for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * walk[d];
        y[linear] = x[size_t(off)];
        for (size_t d = idx.size(); d-- > 0;) {
            if (++idx[d] < out_shape[d]) break;
            idx[d] = 0;
        }
    }
    return y;
}

// Expects |got - want| <= tolerance(i) everywhere; reports the first misses.
inline void ExpectClose(const std::vector<double>& got, const std::vector<double>& want,
                        const std::function<double(size_t)>& tolerance) {
    ASSERT_EQ(got.size(), want.size());
    int reported = 0;
    size_t misses = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const bool same = got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]));
        if (same || std::abs(got[i] - want[i]) <= tolerance(i)) continue;
        ++misses;
        if (reported++ < 5)
            ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i] << " (tolerance "
                          << tolerance(i) << ")";
    }
    EXPECT_EQ(misses, 0u) << "of " << got.size() << " elements";
}

// Relative tolerance plus a floor (the dtype's smallest subnormal step).
inline std::function<double(size_t)> Relative(const std::vector<double>& want, double rel, double floor) {
    return [&want, rel, floor](size_t i) { return rel * std::abs(want[i]) + floor; };
}

}  // namespace spyre::test
