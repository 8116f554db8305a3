// SPDX-License-Identifier: Apache-2.0
#include "stream/turn_policy.hpp"

#include <algorithm>

namespace spyre::detail {

const std::vector<StreamState*>& TurnPolicy::Order(std::span<StreamState* const> active) {
    order_.clear();
    const size_t n = active.size();
    if (n == 0) return order_;
    switch (policy_) {
    case SchedulerPolicy::RoundRobin:
    case SchedulerPolicy::Priority:
        cursor_ %= n;
        for (size_t i = 0; i < n; ++i) order_.push_back(active[(cursor_ + i) % n]);
        cursor_ = (cursor_ + 1) % n;
        if (policy_ == SchedulerPolicy::Priority)
            std::stable_sort(order_.begin(), order_.end(), [&](const StreamState* a, const StreamState* b) {
                return EffectivePriority(*a) < EffectivePriority(*b);
            });
        break;
    case SchedulerPolicy::DrainOneFirst:
        if (!drain_current_ || !drain_current_->HasWork()) {
            drain_current_ = nullptr;
            for (StreamState* s : active)
                if (s->HasWork()) {
                    drain_current_ = s;
                    break;
                }
        }
        if (drain_current_) order_.push_back(drain_current_);
        for (StreamState* s : active)
            if (s != drain_current_) order_.push_back(s);
        break;
    }
    return order_;
}

size_t TurnPolicy::Quantum(const StreamState* s) const {
    return policy_ == SchedulerPolicy::DrainOneFirst && s == drain_current_ ? SIZE_MAX : quantum_;
}

}  // namespace spyre::detail
