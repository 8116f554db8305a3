// SPDX-License-Identifier: Apache-2.0
// CompletionInbox: completions an executor reported while another thread
// held the engine's lock, parked until a lock holder applies them. An
// executor thread then never waits for the submitter (nor the submitter for
// it): on a small machine the lock handoffs and futex sleeps between the two
// cost more than the bookkeeping they guard.
//
// Intrusive: a completing task is live, so its own descriptor (a stable
// task-ring slot) is the node. Many producers push with a CAS; the lock
// holder takes the whole list with one exchange, so there is no ABA.
#pragma once

#include <atomic>
#include <cstdint>

#include "orchestration/task_ring.hpp"

namespace spyre::orchestration {

class CompletionInbox {
public:
    // Sequentially consistent: a producer that pushes and then fails to
    // take the lock relies on the holder seeing this push once it unlocks
    // (Engine::ApplyInboxAfterUnlock).
    void Push(TaskDescriptor& t, uint32_t status) noexcept {
        t.inbox_status = status;
        TaskDescriptor* head = head_.load(std::memory_order_relaxed);
        do {
            t.inbox_next = head;
        } while (!head_.compare_exchange_weak(head, &t, std::memory_order_seq_cst, std::memory_order_relaxed));
    }

    bool Empty() const noexcept { return head_.load(std::memory_order_seq_cst) == nullptr; }

    // Everything parked, oldest first (a list through inbox_next).
    TaskDescriptor* TakeAll() noexcept {
        TaskDescriptor* newest = head_.exchange(nullptr, std::memory_order_acquire);
        TaskDescriptor* oldest = nullptr;
        while (newest) {
            TaskDescriptor* next = newest->inbox_next;
            newest->inbox_next = oldest;
            oldest = newest;
            newest = next;
        }
        return oldest;
    }

private:
    std::atomic<TaskDescriptor*> head_{nullptr};
};

}  // namespace spyre::orchestration
