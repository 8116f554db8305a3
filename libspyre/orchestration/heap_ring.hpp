// SPDX-License-Identifier: Apache-2.0
// HeapRing (seed 004): one device allocation managed as a ring of buffers.
// Allocation bumps the head; blocks are released in any order but the tail
// advances only over released (consumed) blocks, in allocation order, so a
// live block is never handed out twice. The head goes round even when the
// ring empties, so an address is reused as late as it can be. Not
// thread-safe: the task graph calls it under its lock.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace spyre::orchestration {

class HeapRing {
public:
    static constexpr uint64_t kAlignment = 128;  // the device's allocation granule
    // `size` rounded up to kAlignment: 0 when it would overflow.
    static constexpr uint64_t RoundUp(uint64_t size) noexcept { return (size + kAlignment - 1) & ~(kAlignment - 1); }

    struct Block {
        uint64_t offset = 0;  // from the ring's base
        uint64_t seq = 0;     // what Release takes
    };

    // `base` is where the ring's bytes live (a host address of device memory).
    HeapRing(uint8_t* base, uint64_t size) : base_(base), size_(size) {}

    // A block of `size` bytes (rounded up to kAlignment), or nullopt when the
    // ring has no room until the tail advances. `owner` is kept for messages.
    // Inline: it is on every submission with implicit outputs (seed target
    // under 10 cycles; bench/orchestration_bench measures it).
    std::optional<Block> Allocate(uint64_t size, uint64_t owner) {
        const uint64_t need = RoundUp(size);
        if (need == 0 || need > size_) [[unlikely]]
            return std::nullopt;
        // An empty ring goes on from its head, not from its base: a freed
        // block's address comes back only after the ring has gone round, so
        // a stale address is seen for what it is (TaskGraph refuses an
        // address in no live block) for as long as possible.
        uint64_t at = head_ + need <= size_ ? head_ : 0;
        if (next_seq_ != first_seq_) {
            const uint64_t tail = At(first_seq_).offset;
            if (head_ > tail) {  // live bytes are [tail, head): room at the end, then at the start
                if (head_ + need <= size_) at = head_;
                else if (need > tail) return std::nullopt;
            } else {  // wrapped: live bytes are [tail, size) + [0, head)
                if (need > tail - head_) return std::nullopt;
                at = head_;
            }
            if (next_seq_ - first_seq_ == entries_.size()) [[unlikely]]
                Grow();
        }
        head_ = at + need;
        At(next_seq_) = Entry{at, owner, false};
        ++live_;
        return Block{at, next_seq_++};
    }
    // Marks a block consumed; the tail advances over consumed blocks.
    void Release(uint64_t seq);
    // Names the owner of a live block (when it is known only after Allocate).
    void SetOwner(uint64_t seq, uint64_t owner) {
        if (seq >= first_seq_ && seq < next_seq_) At(seq).owner = owner;
    }

    uint8_t* base() const noexcept { return base_; }
    uint64_t size() const noexcept { return size_; }
    uint64_t head() const noexcept { return head_; }
    uint64_t tail() const noexcept { return next_seq_ == first_seq_ ? head_ : At(first_seq_).offset; }
    uint64_t live_blocks() const noexcept { return live_; }
    // Bytes between tail and head (what the live blocks hold, with padding).
    // Inline: depth-0 submissions ask it while another thread holds a block.
    uint64_t used() const noexcept {
        if (first_seq_ == next_seq_) return 0;
        const uint64_t tail = At(first_seq_).offset;
        return head_ > tail ? head_ - tail : size_ - tail + head_;
    }
    // The owner of the oldest unreleased block (what holds the tail).
    std::optional<uint64_t> OldestOwner() const;
    // Whether blocks of `first` bytes and then `second` (0: none) would both
    // be placed now, as Allocate places them (nothing is allocated). With
    // no block live, only `first` counts (the task graph keeps room only
    // behind a live block).
    bool FitsAfter(uint64_t first, uint64_t second) const;

private:
    struct Entry {
        uint64_t offset;
        uint64_t owner;
        bool released;
    };
    // Blocks by seq in a power-of-two circle: [first_seq_, next_seq_) are
    // not yet passed by the tail.
    Entry& At(uint64_t seq) noexcept { return entries_[seq & (entries_.size() - 1)]; }
    const Entry& At(uint64_t seq) const noexcept { return entries_[seq & (entries_.size() - 1)]; }
    void Grow();  // doubles the circle (rare: only when more blocks are live than ever before)

    uint8_t* base_;
    uint64_t size_;
    uint64_t head_ = 0;
    uint64_t first_seq_ = 0;  // the oldest block the tail has not passed
    uint64_t next_seq_ = 0;   // the seq the next block gets
    uint64_t live_ = 0;
    std::vector<Entry> entries_ = std::vector<Entry>(64);
};

}  // namespace spyre::orchestration
