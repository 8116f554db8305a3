// SPDX-License-Identifier: Apache-2.0
// Helpers for the upper-layer integration tests (SpyreStream, LaunchTiled,
// plan loading, Program): host data, CPU references and tolerant comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "spyre/memory/allocator.hpp"
#include "spyre/device/device.hpp"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/tensor/spyre_tensor.hpp"

namespace spyre::test {

inline std::vector<float> RandomFloats(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(gen);
    return v;
}

// A CPU matmul reference, row by row (only `rows` when given), with the sum
// of |a||b| per element, which bounds the error of any fp32 summation order:
// |fp32 - exact| <= K * eps * sum|a||b| (K <= 4096 here: 2.5e-4 relative at
// worst, about sqrt(K) * eps in practice).
struct MatmulRef {
    std::vector<double> value;  // row-major M x N (rows not computed are 0)
    std::vector<double> bound;  // sum |a||b|
};

inline MatmulRef CpuMatmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m, int64_t k, int64_t n,
                           const std::vector<int64_t>& rows = {}) {
    MatmulRef r{std::vector<double>(size_t(m * n), 0.0), std::vector<double>(size_t(m * n), 0.0)};
    auto do_row = [&](int64_t i) {
        double* v = &r.value[size_t(i * n)];
        double* s = &r.bound[size_t(i * n)];
        for (int64_t p = 0; p < k; ++p) {
            const double x = a[size_t(i * k + p)];
            const float* brow = &b[size_t(p * n)];
            for (int64_t j = 0; j < n; ++j) {
                v[j] += x * double(brow[j]);
                s[j] += std::fabs(x * double(brow[j]));
            }
        }
    };
    if (rows.empty())
        for (int64_t i = 0; i < m; ++i) do_row(i);
    else
        for (int64_t i : rows) do_row(i);
    return r;
}

// Compares `got` with the reference: |got - ref| <= rel * sum|a||b| + 1e-6.
// Returns the number of mismatches (reports the first few).
inline int64_t CompareMatmul(const std::vector<float>& got, const MatmulRef& ref, int64_t m, int64_t n,
                             const std::vector<int64_t>& rows = {}, double rel = 1e-4) {
    int64_t bad = 0;
    auto check_row = [&](int64_t i) {
        for (int64_t j = 0; j < n; ++j) {
            const size_t at = size_t(i * n + j);
            const double tol = rel * ref.bound[at] + 1e-6;
            if (!(std::fabs(double(got[at]) - ref.value[at]) <= tol)) {
                if (++bad <= 5)
                    ADD_FAILURE() << "C[" << i << "," << j << "] = " << got[at] << ", CPU says " << ref.value[at]
                                  << " (tolerance " << tol << ")";
            }
        }
    };
    if (rows.empty())
        for (int64_t i = 0; i < m; ++i) check_row(i);
    else
        for (int64_t i : rows) check_row(i);
    return bad;
}

inline std::vector<float> CpuAddBroadcast(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                                          int64_t n, bool b_is_row) {
    std::vector<float> c(size_t(m * n));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[size_t(i * n + j)] = a[size_t(i * n + j)] + b[size_t(b_is_row ? j : i * n + j)];
    return c;
}

// Allocator figures that must return to a baseline when everything is freed.
struct MemoryFigures {
    uint64_t bytes_in_use = 0;
    uint64_t live_allocations = 0;
    bool operator==(const MemoryFigures&) const = default;
};
inline MemoryFigures Memory(Device& dev) {
    const AllocatorStats s = dev.allocator().Stats();
    return {s.bytes_in_use, s.live_allocations};
}
inline std::ostream& operator<<(std::ostream& os, const MemoryFigures& m) {
    return os << m.bytes_in_use << " bytes in " << m.live_allocations << " allocations";
}

}  // namespace spyre::test
