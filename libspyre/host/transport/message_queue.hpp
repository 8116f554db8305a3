// SPDX-License-Identifier: Apache-2.0
// MessageQueue: the messages that reached one rank, in arrival order per source,
// and the wait for one of them that ends in a message, the source's error
// (lost, malformed), or Timeout. Waiters sleep on an EventCount and re-check
// liveness every tick, so a silent peer ends a wait within the bound plus
// one tick.
#pragma once

#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <variant>

#include "host/transport/peer_liveness.hpp"
#include "spyre/common/eventcount.hpp"

namespace spyre::host::wire {

class MessageQueue {
public:
    explicit MessageQueue(PeerLiveness& liveness) : liveness_(liveness) {}

    // Queues `message`, unless its source is already lost (then dropped).
    void Push(Message message);
    // A malformed frame from `source`: its receiver gets `error` once, in
    // order; the source is cut off (lost) from then on.
    void PushError(int source, Error error);
    // `source` is leaving (kPeerLeftMessageType): after what it sent, a
    // wait on any source gets that message once, and a wait on `source`
    // alone its DeviceLost ("left the run").
    void PushLeft(int source);
    // Wakes waiters to look at liveness again.
    void Wake();
    // Every later Pop throws `error` once nothing is left (the transport stopped).
    void Close(Error error);

    // The oldest message of `source` (any rank: kAnySource); throws its
    // error, the source's loss or the queue's end, or Timeout.
    Message Pop(std::chrono::milliseconds timeout, int source);
    // The same, waiting until `deadline` at most (a past one: only a look);
    // nullopt instead of Timeout.
    std::optional<Message> PopUntil(PeerLiveness::Clock::time_point deadline, int source);
    // The Timeout error of a wait of `timeout` for `source`.
    Error TimeoutError(std::chrono::milliseconds timeout, int source) const;

private:
    struct Entry {
        int source;
        std::variant<Message, Error> item;
    };
    PeerLiveness& liveness_;
    std::mutex mutex_;
    EventCount wake_;  // an entry came, the queue closed, or liveness moved
    std::deque<Entry> entries_;
    std::optional<Error> closed_;
};

}  // namespace spyre::host::wire
