// SPDX-License-Identifier: Apache-2.0
#include "placement.hpp"

#include <algorithm>

namespace spyre::host {

size_t Place(const PlacementInput& in) {
    if (in.pinned) return *in.pinned;
    const size_t n = in.load.size();
    const uint32_t least = *std::min_element(in.load.begin(), in.load.end());
    size_t local = n;
    for (size_t d = 0; d < n; ++d)
        if (in.local_bytes[d] > 0 && (local == n || in.local_bytes[d] > in.local_bytes[local])) local = d;
    if (local != n && in.load[local] <= least + kLocalitySlack) return local;
    for (size_t i = 0; i < n; ++i) {
        const size_t d = (in.rotate + i) % n;
        if (in.load[d] == least) return d;
    }
    return 0;
}

}  // namespace spyre::host
