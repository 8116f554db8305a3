// SPDX-License-Identifier: Apache-2.0
#include "orchestration/heap_ring.hpp"

namespace spyre::orchestration {

std::optional<HeapRing::Block> HeapRing::Allocate(uint64_t size, uint64_t owner) {
    const uint64_t need = (size + kAlignment - 1) / kAlignment * kAlignment;
    if (need == 0 || need > size_) return std::nullopt;
    uint64_t at;
    if (blocks_.empty()) {
        at = 0;  // an empty ring starts over at its base
    } else {
        const uint64_t tail = blocks_.front().offset;
        if (head_ > tail) {  // live bytes are [tail, head): room at the end, then at the start
            if (head_ + need <= size_) at = head_;
            else if (need <= tail) at = 0;
            else return std::nullopt;
        } else {  // wrapped: live bytes are [tail, size) + [0, head)
            if (need <= tail - head_) at = head_;
            else return std::nullopt;
        }
    }
    head_ = at + need;
    blocks_.push_back({at, need, owner, false});
    ++live_;
    return Block{at, first_seq_ + blocks_.size() - 1};
}

void HeapRing::Release(uint64_t seq) {
    if (seq < first_seq_ || seq - first_seq_ >= blocks_.size()) return;
    Entry& e = blocks_[seq - first_seq_];
    if (e.released) return;
    e.released = true;
    --live_;
    while (!blocks_.empty() && blocks_.front().released) {
        blocks_.pop_front();
        ++first_seq_;
    }
    if (blocks_.empty()) head_ = 0;
}

uint64_t HeapRing::used() const noexcept {
    if (blocks_.empty()) return 0;
    const uint64_t tail = blocks_.front().offset;
    return head_ > tail ? head_ - tail : size_ - tail + head_;
}

std::optional<uint64_t> HeapRing::OldestOwner() const {
    for (const Entry& e : blocks_)
        if (!e.released) return e.owner;
    return std::nullopt;
}

}  // namespace spyre::orchestration
