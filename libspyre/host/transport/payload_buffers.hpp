// SPDX-License-Identifier: Apache-2.0
// Large payload buffers a transport sent, kept to receive the next ones
// into. A fresh vector per large message cost a page fault per 4 KiB each
// time glibc gave the freed pages back to the system (it trims its heap
// once two such buffers are free at its top): a 1 MiB remote call took 5-6
// ms instead of 0.3 (docs/multihost.md, "Benchmark"). A serving rank's
// reply buffer becomes its next request's; a caller's request buffer, the
// reply's. Not thread-safe: the transport uses it under its MPI lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace spyre::host::wire {

class PayloadBuffers {
public:
    // Smaller buffers come and go through malloc's own bins without faults.
    static constexpr size_t kMinBytes = size_t(64) << 10;
    // Bounds on what an idle transport holds.
    static constexpr size_t kMaxBuffers = 8;
    static constexpr size_t kMaxBytes = size_t(64) << 20;

    // Keeps `buffer` (its bytes no longer needed) if it is large enough and
    // the bounds allow; otherwise it is freed.
    void Keep(std::vector<uint8_t>&& buffer) {
        const size_t bytes = buffer.capacity();
        if (bytes < kMinBytes || bytes > kMaxBytes || spares_.size() >= kMaxBuffers) return;
        while (held_ + bytes > kMaxBytes && !spares_.empty()) Drop(0);  // the oldest go first
        held_ += bytes;
        spares_.push_back(std::move(buffer));
    }
    // A buffer of `size` zeroed bytes: the smallest kept one that holds them,
    // or a new one.
    std::vector<uint8_t> Take(size_t size) {
        size_t best = spares_.size();
        if (size >= kMinBytes)
            for (size_t i = 0; i < spares_.size(); ++i)
                if (spares_[i].capacity() >= size && (best == spares_.size() || spares_[i].capacity() < spares_[best].capacity()))
                    best = i;
        if (best == spares_.size()) return std::vector<uint8_t>(size);
        std::vector<uint8_t> buffer = std::move(spares_[best]);
        held_ -= buffer.capacity();
        spares_.erase(spares_.begin() + static_cast<std::ptrdiff_t>(best));
        buffer.assign(size, 0);  // within its capacity: no allocation
        return buffer;
    }
    size_t held_bytes() const noexcept { return held_; }
    size_t count() const noexcept { return spares_.size(); }

private:
    void Drop(size_t i) {
        held_ -= spares_[i].capacity();
        spares_.erase(spares_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    std::vector<std::vector<uint8_t>> spares_;
    size_t held_ = 0;
};

}  // namespace spyre::host::wire
