// SPDX-License-Identifier: Apache-2.0
#include "stream/turn_policy.hpp"

#include <algorithm>

namespace spyre::detail {

std::span<StreamState* const> TurnPolicy::Order(std::span<StreamState* const> active) {
    const size_t n = active.size();
    // One stream (the usual case): no rotation to keep, nothing to sort.
    if (n <= 1 && policy_ != SchedulerPolicy::DrainOneFirst) return active;
    order_.clear();
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
        // The next current is the next stream with work after the last one
        // (rotation): taking the first with work in registry order let two
        // streams that run dry in turn pass the drain between them for good,
        // and a third waited as long as they kept submitting (found probing
        // from outside, with a budget one group fills).
        cursor_ %= n;
        if (!drain_current_ || !drain_current_->HasWork()) {
            drain_current_ = nullptr;
            for (size_t i = 0; i < n; ++i)
                if (StreamState* s = active[(cursor_ + i) % n]; s->HasWork()) {
                    drain_current_ = s;
                    cursor_ = (cursor_ + i + 1) % n;
                    break;
                }
        }
        if (drain_current_) order_.push_back(drain_current_);
        for (size_t i = 0; i < n; ++i)
            if (StreamState* s = active[(cursor_ + i) % n]; s != drain_current_) order_.push_back(s);
        break;
    }
    return order_;
}

size_t TurnPolicy::Quantum(const StreamState* s) const {
    return policy_ == SchedulerPolicy::DrainOneFirst && s == drain_current_ ? SIZE_MAX : quantum_;
}

}  // namespace spyre::detail
