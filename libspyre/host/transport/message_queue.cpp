// SPDX-License-Identifier: Apache-2.0
#include "host/transport/message_queue.hpp"

#include <algorithm>

namespace spyre::host::wire {

void MessageQueue::Push(Message message) {
    // A lost peer stays lost: what it sends once its link is back (a reply
    // to a call that already failed) belongs to a run that is over.
    if (liveness_.Lost(message.source)) return;
    {
        std::lock_guard lock(mutex_);
        const int source = message.source;
        entries_.push_back(Entry{source, std::move(message)});
    }
    wake_.Notify();
}

void MessageQueue::PushError(int source, Error error) {
    // The error and the loss in one step under the queue's lock: whoever
    // takes the error finds the sender lost (PeerError), and a receiver that
    // sees the loss first finds the error when it looks again (PopUntil).
    Error lost = PeerLostError(liveness_.peer(source), "it sent a malformed frame (" + error.message() + ")");
    {
        std::lock_guard lock(mutex_);
        entries_.push_back(Entry{source, std::move(error)});
        liveness_.MarkLost(source, std::move(lost));  // the liveness lock nests inside this one, never around it
    }
    wake_.Notify();
}

void MessageQueue::PushLeft(int source) {
    // The leave first: whoever takes the notice finds the peer gone
    // (PeerError), and everything it sent before is queued already.
    liveness_.MarkLeft(source);
    {
        std::lock_guard lock(mutex_);
        entries_.push_back(Entry{source, Message{.type = kPeerLeftMessageType, .source = source}});
    }
    wake_.Notify();
}

void MessageQueue::Wake() { wake_.Notify(); }

void MessageQueue::Close(Error error) {
    {
        std::lock_guard lock(mutex_);
        if (!closed_) closed_ = std::move(error);
    }
    wake_.Notify();
}

Message MessageQueue::Pop(std::chrono::milliseconds timeout, int source) {
    if (auto m = PopUntil(PeerLiveness::Clock::now() + timeout, source)) return std::move(*m);
    throw TimeoutError(timeout, source);
}

Error MessageQueue::TimeoutError(std::chrono::milliseconds timeout, int source) const {
    return Error(ErrorKind::Timeout, "no message " +
                                         (source == kAnySource ? std::string("from any rank")
                                                               : "from " + liveness_.peer(source).Describe()) +
                                         " within " + std::to_string(timeout.count()) + " ms");
}

std::optional<Message> MessageQueue::PopUntil(PeerLiveness::Clock::time_point deadline, int source) {
    if (source != kAnySource) liveness_.peer(source);  // validates the rank
    using Clock = PeerLiveness::Clock;
    // Short enough that a lost peer ends the wait soon after the bound.
    const auto tick = std::max(std::chrono::milliseconds(1), liveness_.options().heartbeat_interval / 2);
    auto matching = [&] {
        return std::find_if(entries_.begin(), entries_.end(),
                            [&](const Entry& e) { return source == kAnySource || e.source == source; });
    };
    std::unique_lock lock(mutex_);
    for (;;) {
        auto it = matching();
        if (it != entries_.end()) {
            // A leave notice ends a wait on its source alone with the leave
            // (and stays for a wait on any source, which gets it as a message).
            const auto* notice = std::get_if<Message>(&it->item);
            if (notice && notice->type == kPeerLeftMessageType && source != kAnySource) {
                lock.unlock();
                throw *liveness_.Lost(source);  // marked before the notice was queued
            }
            Entry entry = std::move(*it);
            entries_.erase(it);
            if (auto* error = std::get_if<Error>(&entry.item)) throw *error;
            return std::get<Message>(std::move(entry.item));
        }
        // Nothing left of the source: now its loss (or the transport's end) is the answer.
        lock.unlock();
        liveness_.Evaluate();
        std::optional<Error> lost = source == kAnySource ? liveness_.AnyLost() : liveness_.Lost(source);
        lock.lock();
        // A malformed frame's error may have been queued (with its sender's
        // loss) while the lock was free: look once more, so the loss does
        // not overtake it.
        if (lost && matching() != entries_.end()) continue;
        if (lost) throw *lost;
        if (closed_) throw *closed_;
        const auto now = Clock::now();
        if (now >= deadline) return std::nullopt;
        // Producers change the queue under the lock and notify after it, so
        // a look under the lock after arming misses nothing; a liveness
        // change (Wake) not seen here is seen within the tick.
        wake_.SleepUnlocked(lock, [&] { return matching() != entries_.end() || closed_.has_value(); },
                            std::min(deadline, now + tick) - now);
    }
}

}  // namespace spyre::host::wire
