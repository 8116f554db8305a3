// SPDX-License-Identifier: Apache-2.0
#include "orchestration/buffer_tracker.hpp"

namespace spyre::orchestration {

BufferInfo& BufferTracker::Register(uint8_t* base, uint64_t size, uint64_t heap_seq) {
    BufferInfo& b = buffers_[reinterpret_cast<uintptr_t>(base)];
    b = BufferInfo{};
    b.base_ptr = base;
    b.size = size;
    b.heap_seq = heap_seq;
    return b;
}

BufferInfo* BufferTracker::Find(const uint8_t* p, uint64_t size, bool* partial) {
    if (partial) *partial = false;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = buffers_.upper_bound(a);
    if (it == buffers_.begin()) return nullptr;
    --it;
    BufferInfo& b = it->second;
    if (a >= it->first + b.size) return nullptr;
    if (a + size > it->first + b.size) {
        if (partial) *partial = true;
        return nullptr;
    }
    return &b;
}

BufferInfo* BufferTracker::FindBase(const uint8_t* p) {
    auto it = buffers_.find(reinterpret_cast<uintptr_t>(p));
    return it == buffers_.end() ? nullptr : &it->second;
}

}  // namespace spyre::orchestration
