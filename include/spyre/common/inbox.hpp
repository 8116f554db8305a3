// SPDX-License-Identifier: Apache-2.0
// ParkingInbox: work a thread finished while another held the lock that
// guards the bookkeeping, parked until a lock holder applies it. The
// finishing thread then never waits for the holder: on a small machine the
// lock handoffs and futex sleeps between two threads cost more than the
// bookkeeping they guard. The orchestration task graph parks task completions
// here, the host-level scheduler chip-task and SubWorker completions.
// ParkingNote is the same with nothing to carry: a thread that found the
// lock taken only asks the holder to look again (the device's task port).
//
// Intrusive: what is parked is live, so its own node (`Node::*Next`) links
// it. Many producers push with a CAS; the lock holder takes the whole list
// with one exchange, so there is no ABA.
//
// The protocol, for a lock `mu` and an apply step that runs under it:
//   producer:  inbox.Push(n); if (mu.try_lock()) { apply(); unlock as below }
//   any holder, on unlock: mu.unlock(); ApplyParkedAfterUnlock(mu, inbox, apply)
// A producer that failed to take the lock pushed before the holder's unlock
// (a Dekker handshake through the sequentially consistent push and fence),
// so the holder's look after it unlocks sees the push.
#pragma once

#include <atomic>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

template <typename Node, Node* Node::*Next>
class ParkingInbox {
public:
    void Push(Node& n) noexcept {
        Node* head = head_.load(std::memory_order_relaxed);
        do {
            n.*Next = head;
        } while (!head_.compare_exchange_weak(head, &n, std::memory_order_seq_cst, std::memory_order_relaxed));
    }

    bool Empty() const noexcept { return head_.load(std::memory_order_seq_cst) == nullptr; }

    // Everything parked, oldest first (a list through Next).
    Node* TakeAll() noexcept {
        // A look first: every lock holder calls this, and an exchange on an
        // empty inbox would still take its cache line away from the pushers.
        if (!head_.load(std::memory_order_relaxed)) return nullptr;
        Node* newest = head_.exchange(nullptr, std::memory_order_acquire);
        Node* oldest = nullptr;
        while (newest) {
            Node* next = newest->*Next;
            newest->*Next = oldest;
            oldest = newest;
            newest = next;
        }
        return oldest;
    }

private:
    std::atomic<Node*> head_{nullptr};
};

// A ParkingInbox that carries no work: Leave says "look again", and the
// holder takes the note before each look (Take), so a note left during the
// look makes it look once more.
class ParkingNote {
public:
    void Leave() noexcept { note_.store(true, std::memory_order_seq_cst); }
    void Take() noexcept { note_.store(false, std::memory_order_seq_cst); }
    bool Empty() const noexcept { return !note_.load(std::memory_order_seq_cst); }

private:
    std::atomic<bool> note_{false};
};

// Called right after `mu` is released: applies (under `mu`) what producers
// parked meanwhile, unless another thread holds `mu` again (it looks after
// its own unlock).
template <typename Mutex, typename Inbox, typename Apply>
void ApplyParkedAfterUnlock(Mutex& mu, const Inbox& inbox, Apply&& apply) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    while (!inbox.Empty()) {
        if (!mu.try_lock()) return;
        apply();
        mu.unlock();
        std::atomic_thread_fence(std::memory_order_seq_cst);
    }
}

}  // namespace spyre
SPYRE_API_END
