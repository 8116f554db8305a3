// SPDX-License-Identifier: Apache-2.0
// BufferTracker (seed 004): the buffers pto_alloc handed out, with their
// writers and the deferred free. pto_free only sets free_requested; the
// buffer goes back to the heap ring once it is requested free and no task
// that referenced it is still live (the seed counts writers; readers are
// counted too, so a buffer never changes hands under a late reader).
// Not thread-safe: the task graph calls it under its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <thread>
#include <vector>

namespace spyre::orchestration {

struct BufferInfo {
    uint8_t* base_ptr = nullptr;
    uint64_t size = 0;
    uint64_t heap_seq = 0;              // its block in the heap ring
    int32_t writer_count = 0;           // tasks that wrote it
    std::vector<int32_t> writer_task_ids;
    int32_t live_refs = 0;              // tasks referencing it, not yet CONSUMED
    bool free_requested = false;        // pto_free was called
    std::thread::id thread;             // the thread that took it (pto_alloc)
};

class BufferTracker {
public:
    BufferInfo& Register(uint8_t* base, uint64_t size, uint64_t heap_seq);
    // The buffer holding [p, p + size), or nullptr if p lies in none; sets
    // `*partial` when p is inside a buffer but the range leaves it.
    BufferInfo* Find(const uint8_t* p, uint64_t size = 1, bool* partial = nullptr);
    // The buffer that starts exactly at p.
    BufferInfo* FindBase(const uint8_t* p);
    void AddWriter(BufferInfo& b, int32_t task) {
        b.writer_task_ids.push_back(task);
        ++b.writer_count;
    }
    // True when `b` can go back to the heap ring now.
    static bool Reclaimable(const BufferInfo& b) { return b.free_requested && b.live_refs == 0; }
    void Erase(const uint8_t* base) { buffers_.erase(reinterpret_cast<uintptr_t>(base)); }
    size_t size() const noexcept { return buffers_.size(); }

private:
    std::map<uintptr_t, BufferInfo> buffers_;
};

}  // namespace spyre::orchestration
