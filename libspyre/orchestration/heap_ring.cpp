// SPDX-License-Identifier: Apache-2.0
#include "orchestration/heap_ring.hpp"

namespace spyre::orchestration {

void HeapRing::Grow() {
    std::vector<Entry> bigger(entries_.size() * 2);
    for (uint64_t seq = first_seq_; seq < next_seq_; ++seq) bigger[seq & (bigger.size() - 1)] = At(seq);
    entries_.swap(bigger);
}

void HeapRing::Release(uint64_t seq) {
    if (seq < first_seq_ || seq >= next_seq_) return;
    Entry& e = At(seq);
    if (e.released) return;
    e.released = true;
    --live_;
    while (first_seq_ != next_seq_ && At(first_seq_).released) ++first_seq_;
}

uint64_t HeapRing::used() const noexcept {
    if (first_seq_ == next_seq_) return 0;
    const uint64_t tail = At(first_seq_).offset;
    return head_ > tail ? head_ - tail : size_ - tail + head_;
}

std::optional<uint64_t> HeapRing::OldestOwner() const {
    for (uint64_t seq = first_seq_; seq < next_seq_; ++seq)
        if (!At(seq).released) return At(seq).owner;
    return std::nullopt;
}

}  // namespace spyre::orchestration
