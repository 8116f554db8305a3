// SPDX-License-Identifier: Apache-2.0
// HeapRing (seed 004): one device allocation managed as a ring of buffers.
// Allocation bumps the head; blocks are released in any order but the tail
// advances only over released (consumed) blocks, in allocation order, so a
// live block is never handed out twice. Not thread-safe: the engine calls it
// under its lock.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

namespace spyre::orchestration {

class HeapRing {
public:
    static constexpr uint64_t kAlignment = 128;  // the device's allocation granule

    struct Block {
        uint64_t offset = 0;  // from the ring's base
        uint64_t seq = 0;     // what Release takes
    };

    // `base` is where the ring's bytes live (a host address of device memory).
    HeapRing(uint8_t* base, uint64_t size) : base_(base), size_(size) {}

    // A block of `size` bytes (rounded up to kAlignment), or nullopt when the
    // ring has no room until the tail advances. `owner` is kept for messages.
    std::optional<Block> Allocate(uint64_t size, uint64_t owner);
    // Marks a block consumed; the tail advances over consumed blocks.
    void Release(uint64_t seq);
    // Names the owner of a live block (when it is known only after Allocate).
    void SetOwner(uint64_t seq, uint64_t owner) {
        if (seq >= first_seq_ && seq - first_seq_ < blocks_.size()) blocks_[seq - first_seq_].owner = owner;
    }

    uint8_t* base() const noexcept { return base_; }
    uint64_t size() const noexcept { return size_; }
    uint64_t head() const noexcept { return head_; }
    uint64_t tail() const noexcept { return blocks_.empty() ? head_ : blocks_.front().offset; }
    uint64_t live_blocks() const noexcept { return live_; }
    // Bytes between tail and head (what the live blocks hold, with padding).
    uint64_t used() const noexcept;
    // The owner of the oldest unreleased block (what holds the tail).
    std::optional<uint64_t> OldestOwner() const;

private:
    struct Entry {
        uint64_t offset;
        uint64_t size;
        uint64_t owner;
        bool released;
    };
    uint8_t* base_;
    uint64_t size_;
    uint64_t head_ = 0;
    uint64_t first_seq_ = 0;  // seq of blocks_.front()
    uint64_t live_ = 0;
    std::deque<Entry> blocks_;
};

}  // namespace spyre::orchestration
