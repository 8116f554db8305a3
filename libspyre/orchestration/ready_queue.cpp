// SPDX-License-Identifier: Apache-2.0
#include "orchestration/ready_queue.hpp"

#include <bit>
#include <chrono>

#include "spyre/common/spin.hpp"
#include "spyre/error.hpp"
#include "trace/recorder.hpp"

namespace spyre::orchestration {

namespace {
// How long an idle popper polls before it sleeps: a few hundred ns, about
// one task's submission, so a steady stream of tasks never pays a futex.
constexpr SpinLimits kPopSpin{.pause = std::chrono::nanoseconds(300)};
// A sleeper re-checks now and then even without a wake (Close, belt and braces).
constexpr auto kSleepBound = std::chrono::milliseconds(100);
}  // namespace

std::unique_ptr<ReadyQueue> MakeReadyQueue(ReadyQueueKind kind, size_t capacity, std::string name) {
    if (kind == ReadyQueueKind::LockFree) return std::make_unique<LockFreeReadyQueue>(capacity, std::move(name));
    return std::make_unique<LockedReadyQueue>(std::move(name));
}

void ReadyQueue::TraceDepth(size_t depth) {
    std::lock_guard lock(trace_mu_);
    if (trace_recording_ != trace::detail::Recording()) {
        trace_recording_ = trace::detail::Recording();
        trace_track_ = trace::detail::NamedTrack(name_);
    }
    trace::detail::Counter(trace_track_, "ready tasks", trace::detail::NowNs(), int64_t(depth));
}

// ------------------------------------------------------------------ locked

void LockedReadyQueue::Push(ReadyTask t) {
    {
        std::lock_guard lock(mu_);
        q_.push_back(t);
        if (trace::Enabled()) [[unlikely]]
            TraceDepth(q_.size());
    }
    wake_.Notify();
}

bool LockedReadyQueue::PopBatch(std::vector<ReadyTask>& out, size_t max) {
    for (;;) {
        {
            std::lock_guard lock(mu_);
            if (!q_.empty()) {
                while (!q_.empty() && out.size() < max) {
                    out.push_back(q_.front());
                    q_.pop_front();
                }
                if (trace::Enabled()) [[unlikely]]
                    TraceDepth(q_.size());
                return true;
            }
            if (closed_) return false;
        }
        wake_.SleepUnless(
            [&] {
                std::lock_guard lock(mu_);
                return closed_ || !q_.empty();
            },
            kSleepBound);
    }
}

size_t LockedReadyQueue::TryPopBatch(std::vector<ReadyTask>& out, size_t max) {
    std::lock_guard lock(mu_);
    size_t n = 0;
    while (!q_.empty() && n < max) {
        out.push_back(q_.front());
        q_.pop_front();
        ++n;
    }
    if (n && trace::Enabled()) [[unlikely]]
        TraceDepth(q_.size());
    return n;
}

void LockedReadyQueue::Close() {
    {
        std::lock_guard lock(mu_);
        closed_ = true;
    }
    wake_.NotifyAll();
}

size_t LockedReadyQueue::size() const {
    std::lock_guard lock(mu_);
    return q_.size();
}

// --------------------------------------------------------------- lock-free

LockFreeReadyQueue::LockFreeReadyQueue(size_t capacity, std::string name)
    : ReadyQueue(std::move(name)),
      cells_(new Cell[std::bit_ceil(std::max<size_t>(capacity, 2))]),
      mask_(std::bit_ceil(std::max<size_t>(capacity, 2)) - 1) {
    for (uint64_t i = 0; i <= mask_; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
}

void LockFreeReadyQueue::Push(ReadyTask t) {
    uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
        Cell& cell = cells_[pos & mask_];
        const int64_t dif = int64_t(cell.seq.load(std::memory_order_acquire) - pos);
        if (dif == 0) {
            if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
                cell.task = t;
                cell.seq.store(pos + 1, std::memory_order_release);
                break;
            }
        } else if (dif < 0) {
            // Ready tasks are live tasks, and the ring holds no more than its size.
            throw Error(ErrorKind::Internal, "ready queue of " + std::to_string(mask_ + 1) + " tasks is full");
        } else {
            pos = tail_.load(std::memory_order_relaxed);
        }
    }
    if (trace::Enabled()) [[unlikely]]
        TraceDepth(size());
    // Either the popper's last look after it armed sees this task, or this
    // sees it armed and wakes it. One wake per sleep: a push that finds the
    // sleepers already woken (and not yet back) makes no second futex call.
    // On this VM each costs a microsecond or more, and every push that came
    // while a woken worker was being scheduled paid it.
    wake_.Notify();
}

bool LockFreeReadyQueue::TryPop(ReadyTask& out) {
    uint64_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
        Cell& cell = cells_[pos & mask_];
        const int64_t dif = int64_t(cell.seq.load(std::memory_order_acquire) - (pos + 1));
        if (dif == 0) {
            if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
                out = cell.task;
                cell.seq.store(pos + mask_ + 1, std::memory_order_release);
                return true;
            }
        } else if (dif < 0) {
            return false;  // empty
        } else {
            pos = head_.load(std::memory_order_relaxed);
        }
    }
}

size_t LockFreeReadyQueue::TryPopBatch(std::vector<ReadyTask>& out, size_t max) {
    size_t n = 0;
    ReadyTask t;
    while (n < max && TryPop(t)) {
        out.push_back(t);
        ++n;
    }
    if (n && trace::Enabled()) [[unlikely]]
        TraceDepth(size());
    return n;
}

bool LockFreeReadyQueue::PopBatch(std::vector<ReadyTask>& out, size_t max) {
    for (;;) {
        if (SpinFor([&] { return TryPopBatch(out, max) != 0; }, kPopSpin).ready) return true;
        const EventCount::Key key = wake_.Arm();
        if (TryPopBatch(out, max) != 0) {
            wake_.Disarm();
            return true;
        }
        if (closed_.load(std::memory_order_acquire)) {
            wake_.Disarm();
            return TryPopBatch(out, max) != 0;
        }
        wake_.Wait(key, kSleepBound);
    }
}

void LockFreeReadyQueue::Close() {
    closed_.store(true, std::memory_order_release);
    wake_.NotifyAll();
}

size_t LockFreeReadyQueue::size() const {
    const uint64_t tail = tail_.load(std::memory_order_acquire), head = head_.load(std::memory_order_acquire);
    return tail > head ? size_t(tail - head) : 0;
}

}  // namespace spyre::orchestration
