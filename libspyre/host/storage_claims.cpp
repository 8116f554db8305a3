// SPDX-License-Identifier: Apache-2.0
#include "storage_claims.hpp"

namespace spyre::host {

bool StorageClaims::TryClaim(const void* owner, uint64_t begin, uint64_t end, bool write) {
    std::lock_guard lock(mu_);
    Footprint* own = nullptr;
    for (Footprint& f : in_flight_) {
        if (f.owner == owner) {
            own = &f;
            continue;
        }
        if (f.write.Overlaps(begin, end) || (write && f.read.Overlaps(begin, end))) return false;
    }
    if (!own) own = &in_flight_.emplace_back(Footprint{owner, 0, {}, {}});
    ++own->accesses;
    (write ? own->write : own->read).Add(begin, end);
    return true;
}

void StorageClaims::Release(const void* owner) {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < in_flight_.size(); ++i) {
        if (in_flight_[i].owner != owner) continue;
        if (--in_flight_[i].accesses == 0) {  // its spans start empty again
            in_flight_[i] = in_flight_.back();
            in_flight_.pop_back();
        }
        return;
    }
}

bool StorageClaims::Written(uint64_t begin, uint64_t end) {
    std::lock_guard lock(mu_);
    return std::any_of(in_flight_.begin(), in_flight_.end(), [&](const Footprint& f) { return f.write.Overlaps(begin, end); });
}

}  // namespace spyre::host
