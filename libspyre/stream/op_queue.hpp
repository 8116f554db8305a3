// SPDX-License-Identifier: Apache-2.0
// Internal: a stream's incoming operations, from many host threads (any
// thread may enqueue on a stream) to one consumer (whoever drives the
// scheduler, under its drive lock).
//
// The way in takes no lock: a producer reserves its run of slots with one
// compare-and-swap on the tail and publishes each slot with a release store,
// so an enqueue never waits for the consumer, and the consumer never waits
// for a producer. The reservation is a locked instruction and so a full
// fence: a producer that loads the scheduler's sleep flags after Push is
// ordered after its reservation, and a sleeper that looks at Pending()
// after announcing its sleep sees the reservation (the two form a Dekker
// pair; published or not, a reserved slot counts as pending).
//
// A full ring spills into a locked overflow list. Once it has spilled,
// every producer spills until the consumer has emptied the ring up to the
// tail and then the overflow, so each producer's own order always holds.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <new>
#include <mutex>
#include <span>
#include <vector>

#include "stream/queued_op.hpp"

namespace spyre::detail {

class OpQueue {
public:
    // Covers what a thread enqueues while the scheduler thread wakes up
    // (about 100 us, 60 ns an op); beyond it ops spill (docs/streams.md).
    static constexpr size_t kDefaultCapacity = 2048;

    // `capacity`: slots in the ring, a power of two.
    explicit OpQueue(size_t capacity = kDefaultCapacity);
    ~OpQueue();
    OpQueue(const OpQueue&) = delete;
    OpQueue& operator=(const OpQueue&) = delete;

    // Producers. Appends `ops` (moved from) as one run: no other producer's
    // op lands between them.
    void Push(std::span<QueuedOp> ops);

    // Consumer. Moves every published op of a whole group (up to and
    // including an op without `link`), in order, to the end of `out`;
    // returns how many. A group still being published stays for later.
    size_t Drain(std::deque<QueuedOp>& out);
    // Consumer. Something was pushed that Drain has not moved yet (or is
    // being pushed right now: reserved, not yet published).
    bool Pending() const;

    size_t capacity() const { return mask_ + 1; }

private:
    // One op's place. `seq` (Vyukov's sequence, less the slot's index, so
    // that zeroed memory is a ring of free slots): lap * capacity: free for
    // the producer of that lap; + 1: published; the consumer frees it for
    // the next lap. The op lives in `storage` only while published.
    struct alignas(64) Slot {
        std::atomic<uint64_t> seq;
        alignas(QueuedOp) std::byte storage[sizeof(QueuedOp)];
        QueuedOp* op() { return std::launder(reinterpret_cast<QueuedOp*>(storage)); }
    };
    uint64_t LapOf(uint64_t position) const { return position & ~mask_; }

    bool TryReserve(std::span<QueuedOp> ops);
    void Spill(std::span<QueuedOp> ops);

    const uint64_t mask_;
    // Anonymous memory: pages are zero and cost nothing until a lap reaches them.
    Slot* slots_;
    alignas(64) std::atomic<uint64_t> tail_{0};  // next position to reserve
    alignas(64) uint64_t head_ = 0;              // next position to drain (consumer only)
    std::atomic<bool> spilled_{false};           // overflow_ is in use
    std::mutex overflow_mu_;
    std::vector<QueuedOp> overflow_;
};

}  // namespace spyre::detail
