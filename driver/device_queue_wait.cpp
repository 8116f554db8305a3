// SPDX-License-Identifier: Apache-2.0
// DeviceQueue::SleepOnInterruptOr and WaitCompletionOr: one sleep on several
// futex words: a queue's completion interrupt (shared memory) and words of
// the caller's process.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "spyre/driver/device_queue.hpp"

namespace spyre::driver {

namespace {

#ifndef FUTEX_32
#define FUTEX_32 2
#endif

// struct futex_waitv of <linux/futex.h> (5.16+), spelled out so the build
// does not depend on the headers' vintage.
struct WaitV {
    uint64_t val;
    uint64_t uaddr;
    uint32_t flags;
    uint32_t reserved;
};

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

// Returns false when the kernel has no futex_waitv.
bool FutexWaitV(WaitV* waiters, unsigned count, std::chrono::nanoseconds timeout) {
    timespec deadline{};
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    const auto ns = timeout.count() + deadline.tv_nsec;
    deadline.tv_sec += time_t(ns / 1000000000);
    deadline.tv_nsec = long(ns % 1000000000);
    if (::syscall(SYS_futex_waitv, waiters, count, 0, &deadline, CLOCK_MONOTONIC) == -1 && errno == ENOSYS)
        return false;
    return true;
}

}  // namespace

void DeviceQueue::SleepOnInterruptOr(Interrupt irq, const std::function<bool()>& ready,
                                     std::span<const FutexWord> words, std::chrono::nanoseconds timeout) {
    constexpr size_t kMaxWords = 4;
    if (words.size() > kMaxWords) throw Error(ErrorKind::InvalidArgument, "a sleep on more than 4 futex words");
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::atomic_ref<uint32_t> waiters(irq.waiters);
    waiters.fetch_add(1, std::memory_order_seq_cst);
    struct Disarm {
        std::atomic_ref<uint32_t>& w;
        ~Disarm() { w.fetch_sub(1, std::memory_order_seq_cst); }
    } disarm{waiters};
    const uint32_t seq = std::atomic_ref<uint32_t>(irq.seq).load(std::memory_order_seq_cst);
    if (ready()) return;
    for (const FutexWord& w : words)
        if (w.word->load(std::memory_order_seq_cst) != w.expected) return;
    const auto left = std::max<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now(), {});
    WaitV waitv[1 + kMaxWords];
    waitv[0] = {seq, reinterpret_cast<uint64_t>(&irq.seq), FUTEX_32, 0};  // shared: the device wakes it
    for (size_t i = 0; i < words.size(); ++i)
        waitv[1 + i] = {words[i].expected, reinterpret_cast<uint64_t>(words[i].word), FUTEX_32 | FUTEX_PRIVATE_FLAG, 0};
    if (!FutexWaitV(waitv, unsigned(1 + words.size()), left)) {
        // No futex_waitv: nap briefly instead; the caller looks at every condition again.
        std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(left, std::chrono::microseconds(50)));
    }
}

void DeviceQueue::WaitCompletionOr(const std::atomic<uint32_t>& word, uint32_t expected,
                                   std::chrono::nanoseconds timeout) const {
    const FutexWord words[] = {{&word, expected}};
    SleepOnInterruptOr(interrupt(), [this] { return CompletionsReady(); }, words, timeout);
    if (!CompletionsReady()) CheckHealth();
}

}  // namespace spyre::driver
