// SPDX-License-Identifier: Apache-2.0
//
// How the example programs compare a device result with the CPU's: the
// relative error of every element, folded into the worst. A NaN or an
// infinity in a result is the worst error there is: std::max(worst, NaN)
// keeps `worst`, and `NaN > tolerance` is false, so a check written either
// way would let a NaN result pass as a match.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

namespace spyre::support {

// |got - want| / max(1, |want|); +infinity when either is NaN or infinite.
inline double RelativeError(double got, double want) {
    if (!std::isfinite(got) || !std::isfinite(want)) return std::numeric_limits<double>::infinity();
    return std::fabs(got - want) / std::max(1.0, std::fabs(want));
}

// The largest RelativeError over the elements (+infinity when the sizes
// differ); 0 for two empty results.
inline double WorstRelativeError(std::span<const float> got, std::span<const float> want) {
    if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, RelativeError(got[i], want[i]));
    return worst;
}

// Elements whose RelativeError is above `tolerance` (NaN and infinity always are).
inline size_t CountOff(std::span<const float> got, std::span<const float> want, double tolerance) {
    const size_t n = std::min(got.size(), want.size());
    size_t off = std::max(got.size(), want.size()) - n;  // an element one side lacks is off
    for (size_t i = 0; i < n; ++i) off += !(RelativeError(got[i], want[i]) <= tolerance);
    return off;
}

}  // namespace spyre::support
