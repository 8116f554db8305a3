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

std::optional<uint64_t> HeapRing::OldestOwner() const {
    for (uint64_t seq = first_seq_; seq < next_seq_; ++seq)
        if (!At(seq).released) return At(seq).owner;
    return std::nullopt;
}

bool HeapRing::FitsAfter(uint64_t first, uint64_t second) const {
    if (next_seq_ == first_seq_) return RoundUp(first) != 0 && RoundUp(first) <= size_;
    const uint64_t tail = At(first_seq_).offset;
    uint64_t head = head_;
    // Where Allocate would put a block of `size` after `head`, if anywhere.
    auto place = [&](uint64_t size) -> std::optional<uint64_t> {
        const uint64_t need = RoundUp(size);
        if (need == 0 || need > size_) return std::nullopt;
        if (head > tail) {
            if (head + need <= size_) return head;
            return need > tail ? std::nullopt : std::optional<uint64_t>(0);
        }
        return need > tail - head ? std::nullopt : std::optional<uint64_t>(head);
    };
    const std::optional<uint64_t> a = place(first);
    if (!a) return false;
    if (second == 0) return true;
    head = *a + RoundUp(first);
    return place(second).has_value();
}

}  // namespace spyre::orchestration
