// SPDX-License-Identifier: Apache-2.0
// Reproducible random test data: the same seed gives the same bytes on every
// run, so a failing round trip can be replayed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace spyre::test {

inline std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
    std::vector<uint8_t> v(n);
    std::mt19937_64 rng(seed);
    for (auto& b : v) b = uint8_t(rng());
    return v;
}

}  // namespace spyre::test
