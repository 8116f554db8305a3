// SPDX-License-Identifier: Apache-2.0
#include "residency.hpp"

#include <algorithm>

namespace spyre::host {

void Residency::Wrote(const HostTensor& t, size_t device) {
    const uint64_t b = t.byte_offset(), e = b + t.bytes();
    auto it = map_.find(t.storage_id());
    if (it != map_.end()) {
        std::set<Copy>& copies = it->second.copies;
        const uint64_t from = b > it->second.longest ? b - it->second.longest : 0;
        for (auto c = copies.lower_bound({from, 0, 0}); c != copies.end() && std::get<0>(*c) < e;)
            c = std::get<1>(*c) > b ? copies.erase(c) : std::next(c);
    }
    if (device != kHost) Copied(t, device);
}

void Residency::Copied(const HostTensor& t, size_t device) {
    PerStorage& s = map_[t.storage_id()];
    s.storage = t.storage();
    s.copies.emplace(t.byte_offset(), t.byte_offset() + t.bytes(), device);
    s.longest = std::max<uint64_t>(s.longest, t.bytes());
}

bool Residency::Current(const HostTensor& t, size_t device) const {
    auto it = map_.find(t.storage_id());
    if (it == map_.end()) return false;
    return it->second.copies.count({t.byte_offset(), t.byte_offset() + t.bytes(), device}) != 0;
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
