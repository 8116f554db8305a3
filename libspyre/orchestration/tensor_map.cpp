// SPDX-License-Identifier: Apache-2.0
#include "orchestration/tensor_map.hpp"

#include <bit>

namespace spyre::orchestration {

TensorMap::TensorMap(int32_t expected_tasks) {
    // About four buckets per task slot keeps chains short when every task
    // touches a couple of granules.
    const uint64_t n = std::bit_ceil(uint64_t(expected_tasks < 1 ? 1 : expected_tasks) * 4);
    buckets_.resize(n);
    mask_ = n - 1;
}

void TensorMap::DropInside(std::vector<Entry>& bucket, uint64_t start, uint64_t end, int32_t task) {
    for (size_t i = 0; i < bucket.size();) {
        const Entry& e = bucket[i];
        if (e.start >= start && e.end <= end && e.task != task) {
            bucket[i] = bucket.back();
            bucket.pop_back();
        } else {
            ++i;
        }
    }
}

void TensorMap::Insert(uint64_t start, uint64_t size, bool write, int32_t task) {
    const uint64_t end = start + size;
    const uint64_t g_first = start >> kGranuleShift, g_last = (end - 1) >> kGranuleShift;
    // Entries inside a written range are reached through this writer from
    // now on (it waits for them): drop them. (A wide write leaves the
    // granules' entries: they cost a lookup a needless edge, no more.)
    if (write && !wide_.empty()) DropInside(wide_, start, end, task);
    if (g_last - g_first >= kWideGranules) {
        wide_.push_back({start, end, task, write});
        return;
    }
    for (uint64_t g = g_first; g <= g_last; ++g) {
        std::vector<Entry>& bucket = Bucket(g);
        if (write) DropInside(bucket, start, end, task);
        bucket.push_back({start, end, task, write});
    }
}

size_t TensorMap::entries() const noexcept {
    size_t n = wide_.size();
    for (const auto& b : buckets_) n += b.size();
    return n;
}

}  // namespace spyre::orchestration
