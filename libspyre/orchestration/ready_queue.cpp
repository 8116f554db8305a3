// SPDX-License-Identifier: Apache-2.0
#include "orchestration/ready_queue.hpp"

#include "trace/recorder.hpp"

namespace spyre::orchestration {

void ReadyQueue::TraceDepth() {
    if (trace_recording_ != trace::detail::Recording()) {
        trace_recording_ = trace::detail::Recording();
        trace_track_ = trace::detail::NamedTrack(name_);
    }
    trace::detail::Counter(trace_track_, "ready tasks", trace::detail::NowNs(), int64_t(q_.size()));
}

void ReadyQueue::Push(ReadyTask t) {
    {
        std::lock_guard lock(mu_);
        q_.push_back(t);
        if (trace::Enabled()) [[unlikely]]
            TraceDepth();
    }
    cv_.notify_one();
}

bool ReadyQueue::PopBatch(std::vector<ReadyTask>& out, size_t max) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return closed_ || !q_.empty(); });
    if (q_.empty()) return false;
    while (!q_.empty() && out.size() < max) {
        out.push_back(q_.front());
        q_.pop_front();
    }
    if (trace::Enabled()) [[unlikely]]
        TraceDepth();
    return true;
}

size_t ReadyQueue::TryPopBatch(std::vector<ReadyTask>& out, size_t max) {
    std::lock_guard lock(mu_);
    size_t n = 0;
    while (!q_.empty() && n < max) {
        out.push_back(q_.front());
        q_.pop_front();
        ++n;
    }
    if (n && trace::Enabled()) [[unlikely]]
        TraceDepth();
    return n;
}

void ReadyQueue::Close() {
    {
        std::lock_guard lock(mu_);
        closed_ = true;
    }
    cv_.notify_all();
}

size_t ReadyQueue::size() const {
    std::lock_guard lock(mu_);
    return q_.size();
}

}  // namespace spyre::orchestration
