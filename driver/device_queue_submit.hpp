// SPDX-License-Identifier: Apache-2.0
//
// DeviceQueue::Submit, defined here rather than in device_queue.cpp so that
// it inlines into CommandRing::Submit and TaskQueue::Submit: it is on every
// round trip, and a call of its own cost about a fifth of the CB ring's
// submit path (callgrind: 19 of ~95 instructions in prologue and epilogue).
// Only the driver includes it (the futex wake is the driver's to make).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <span>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "completion_wait.hpp"
#include "spyre/common/futex.hpp"
#include "spyre/driver/device_queue.hpp"

namespace spyre::driver {

namespace detail {

// Copies `entries` into the submission ring `ring` of `size` (a power of
// two) entries from position `tail` on, wrapping at the ring's end, and
// advances `tail` past them. The caller has checked that they fit.
template <typename T>
void CopyToRing(T* ring, uint32_t size, uint32_t& tail, std::span<const T> entries) {
    for (size_t done = 0; done < entries.size();) {
        const uint32_t at = spyre_ring_slot(tail, size);
        const size_t n = std::min<size_t>(entries.size() - done, size - at);  // up to the ring's end
        std::memcpy(static_cast<void*>(&ring[at]), entries.data() + done, n * sizeof(T));
        done += n;
        tail += uint32_t(n);
    }
}

// Whether this CPU has PREFETCHW (CPUID 0x80000001 ECX bit 8); without
// it GCC's write prefetch (built without -mprfchw) is a read prefetch.
#if defined(__x86_64__) || defined(__i386__)
inline const bool kHasPrefetchW = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(0x80000001, &a, &b, &c, &d) != 0 && (c & bit_PRFCHW) != 0;
}();
#endif

// Asks for the cache line at `line` in a state this core may write without
// another transfer. No architectural effect.
[[gnu::always_inline]] inline void PrefetchForWrite(const void* line) {
#if defined(__x86_64__) || defined(__i386__)
    if (kHasPrefetchW) {
        __asm__ volatile("prefetchw %0" ::"m"(*static_cast<const char*>(line)));
        return;
    }
#endif
    __builtin_prefetch(line, 1, 3);
}

}  // namespace detail

// always_inline: at -O2 GCC keeps it a call of its own otherwise.
[[gnu::always_inline]] inline void DeviceQueue::Submit(std::span<const spyre_cb> slots, uint32_t cbs) {
    if (fn_.lost() || detail::Word(*device_state_).load(std::memory_order_relaxed) != SPYRE_DEVSTATE_ALIVE)
        fn_.CheckAlive();
    // A reset since Attach emptied the rings and renumbered their positions:
    // said before anything goes into them. After a reset of an idle queue
    // the next work ran as if none had happened (found probing from
    // outside). One load of a register that rarely changes.
    if (__atomic_load_n(reinterpret_cast<const uint64_t*>(fn_.bar0() + SPYRE_REG_CNT_RESETS), __ATOMIC_RELAXED) !=
        resets_) [[unlikely]]
        CheckNotReset();
    ProbeNowAndThen();
    if (slots.empty()) return;
    // The device posts a completion only into room it can see: with the
    // consumed completions it has not been told of, every CB in flight must
    // still fit in the completion ring.
    if (InFlight() + cbs + (cq_head_ - cq_published_) > cq_entries_) PublishHead();
    detail::CopyToRing(sq_, sq_entries_, sq_tail_, slots);
    cq_end_ += cbs;
    detail::Word(*sq_tail_word_).store(sq_tail_, std::memory_order_release);
    // Pairs with the device's fence between setting device_sleeping and
    // re-reading sq_tail: one of the two sides always sees the other.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // A device that still shows asleep but has not taken every CB published
    // with the last wake has that wake on its way, and will see these CBs
    // too (docs/hardware.md "Submission"). A wake per submission meanwhile
    // cost each pto_submit_task a system call while the device's thread
    // waited for a CPU: 3-4 us a task instead of 0.36 on the loaded 2-CPU VM.
    if (detail::Word(*device_sleeping_).load(std::memory_order_acquire) &&  // then sq_head as of its sleep
        int32_t(woken_to_ - detail::Word(*sq_head_word_).load(std::memory_order_relaxed)) <= 0) {
        woken_to_ = sq_tail_;
        if (wake_word_ != sq_tail_word_) detail::Word(*wake_word_).fetch_add(1, std::memory_order_release);
        FutexWake(wake_word_, 1);
    }
    // The next submission's slot: the device read it a lap ago, so the copy
    // into it would wait for the line to come back to this core; asked for
    // now, it comes while the caller prepares the next CBs. On the 2-core VM
    // that took 16% off a task submitted through pto_submit_task (median of
    // six alternating pairs, docs/performance.md, 3 Dec 15:53-16:45).
    detail::PrefetchForWrite(&sq_[spyre_ring_slot(sq_tail_, sq_entries_)]);
}

}  // namespace spyre::driver
