// SPDX-License-Identifier: Apache-2.0
#include "residency.hpp"

#include <algorithm>

namespace spyre::host {

void Residency::Wrote(const HostTensor& t, size_t device) {
    const uint64_t b = t.byte_offset(), e = b + t.bytes();
    auto it = map_.find(t.storage_id());
    if (it != map_.end())
        std::erase_if(it->second.copies, [&](const Copy& c) { return c.begin < e && b < c.end; });
    if (device != kHost) Copied(t, device);
}

void Residency::Copied(const HostTensor& t, size_t device) {
    if (Current(t, device)) return;
    PerStorage& s = map_[t.storage_id()];
    s.storage = t.storage();
    s.copies.push_back({t.byte_offset(), t.byte_offset() + t.bytes(), device});
}

bool Residency::Current(const HostTensor& t, size_t device) const {
    auto it = map_.find(t.storage_id());
    if (it == map_.end()) return false;
    const uint64_t b = t.byte_offset(), e = b + t.bytes();
    return std::any_of(it->second.copies.begin(), it->second.copies.end(),
                       [&](const Copy& c) { return c.device == device && c.begin == b && c.end == e; });
}

void Residency::CountWrite(const HostTensor& t) {
    PerStorage& s = map_[t.storage_id()];
    s.storage = t.storage();
    ++s.writes;
}

uint64_t Residency::Writes(const HostTensor& t) const {
    auto it = map_.find(t.storage_id());
    return it == map_.end() ? 0 : it->second.writes;
}

void Residency::Sweep() {
    std::erase_if(map_, [](const auto& kv) { return kv.second.storage.expired(); });
    after_sweep_ = map_.size();
}

void Residency::SweepIfGrown() {
    if (map_.size() >= 2 * after_sweep_ + 64) Sweep();
}

}  // namespace spyre::host
