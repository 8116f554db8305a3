// SPDX-License-Identifier: Apache-2.0
#include "execution/task_waits.hpp"

#include "execution/cb_fields.hpp"
#include "execution/task_executor.hpp"
#include "spyre/uapi/spyre_errors.h"

namespace spyre::mockdev {

TaskWaits::TaskWaits(uint32_t window) : window_(window), ended_(window), listeners_(window) {}

bool TaskWaits::Admit(QueuedTask& task) {
    const uint64_t before = taken_++;
    const spyre_cb& cb = task.cb;
    // A CB whose fields are wrong waits for nothing: the core that takes it
    // refuses it (ExecuteTaskCb), in the contract's order of checks.
    if (cb.opcode != SPYRE_OP_TASK || cb.u.task.after_count == 0 ||
        ValidateCbHeader(cb, 0, CbQueue::Task) != SPYRE_ERR_NONE || ValidateTaskAfter(cb.u.task) != SPYRE_ERR_NONE)
        return true;
    const spyre_cb_task& t = cb.u.task;
    for (uint32_t i = 0; i < t.after_count; ++i) {
        const uint32_t back = task.sq_pos - t.after[i];
        // Itself, a later task, one more than a lap back, or one before the
        // queue's last reset: no task it could wait for.
        if (back == 0 || back >= window_ || back > before) {
            task.verdict = SPYRE_ERR_BAD_DEPENDENCY;
            return true;
        }
    }
    Waiter w{task, 0, false};
    auto ended = [&](uint32_t producer) {
        const EndRecord& end = ended_[producer % window_];
        return end.valid && end.pos == producer;
    };
    for (uint32_t i = 0; i < t.after_count; ++i) {
        if (ended(t.after[i]))
            w.failed |= ended_[t.after[i] % window_].status != SPYRE_ERR_NONE;
        else
            ++w.left;
    }
    if (w.left == 0) {
        if (w.failed) task.verdict = SPYRE_ERR_DEPENDENCY_FAILED;
        return true;
    }
    uint32_t index = 0;
    if (!free_waiters_.empty()) {
        index = free_waiters_.back();
        free_waiters_.pop_back();
    } else {
        index = uint32_t(waiters_.size());
        waiters_.emplace_back();
    }
    for (uint32_t i = 0; i < t.after_count; ++i)
        if (!ended(t.after[i])) listeners_[t.after[i] % window_].push_back(Listener{t.after[i], index});
    waiters_[index] = w;
    ++waiting_count_;
    return false;
}

size_t TaskWaits::Ended(uint32_t pos, uint16_t status, std::deque<QueuedTask>& ready) {
    ended_[pos % window_] = EndRecord{pos, status, true};
    std::vector<Listener>& listening = listeners_[pos % window_];
    size_t released = 0;
    for (size_t i = 0; i < listening.size();) {
        if (listening[i].producer != pos) {
            ++i;
            continue;
        }
        Waiter& w = waiters_[listening[i].waiter];
        w.failed |= status != SPYRE_ERR_NONE;
        if (--w.left == 0) {
            if (w.failed) w.task.verdict = SPYRE_ERR_DEPENDENCY_FAILED;
            ready.push_back(w.task);
            free_waiters_.push_back(listening[i].waiter);
            --waiting_count_;
            ++released;
        }
        listening[i] = listening.back();
        listening.pop_back();
    }
    return released;
}

void TaskWaits::Clear() {
    taken_ = 0;
    for (EndRecord& e : ended_) e = EndRecord{};
    for (auto& l : listeners_) l.clear();
    waiters_.clear();
    free_waiters_.clear();
    waiting_count_ = 0;
}

}  // namespace spyre::mockdev
