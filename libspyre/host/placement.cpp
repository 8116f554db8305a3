// SPDX-License-Identifier: Apache-2.0
#include "placement.hpp"

#include <algorithm>

namespace spyre::host {

size_t Place(const PlacementInput& in) {
    if (in.pinned) return *in.pinned;
    const size_t n = in.load.size();
    auto backlog = [&](size_t d) { return double(in.load[d]) / double(in.room[d]); };
    auto remote = [&](size_t d) { return !in.remote.empty() && in.remote[d]; };
    double least = backlog(0);
    for (size_t d = 1; d < n; ++d) least = std::min(least, backlog(d));
    size_t local = n;
    for (size_t d = 0; d < n; ++d)
        if (in.local_bytes[d] > 0 && (local == n || in.local_bytes[d] > in.local_bytes[local])) local = d;
    if (local != n && backlog(local) <= least + kLocalitySlack) return local;
    // The least backlogged device of each kind, ties round-robin.
    size_t best[2] = {n, n};
    for (size_t i = 0; i < n; ++i) {
        const size_t d = (in.rotate + i) % n;
        size_t& b = best[remote(d)];
        if (b == n || backlog(d) < backlog(b)) b = d;
    }
    if (best[0] == n) return best[1];
    if (best[1] != n && backlog(best[1]) + kRemoteSlack < backlog(best[0])) return best[1];
    return best[0];
}

}  // namespace spyre::host
