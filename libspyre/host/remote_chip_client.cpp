// SPDX-License-Identifier: Apache-2.0
#include "spyre/host/remote_chip_client.hpp"

#include "host/remote_protocol.hpp"

namespace spyre::host {

RemoteChipClient::RemoteChipClient(Transport& transport, std::chrono::milliseconds reply_timeout)
    : transport_(transport), reply_timeout_(reply_timeout) {}

// One waiting thread receives (the others sleep); every reply it gets is
// filed under its call id and the sleepers are woken to look for theirs.
// The receiver notifies with mu_ held: sleepers look under mu_ after
// arming, so they see the filed reply once it lets go.
Message RemoteChipClient::AwaitReply(std::unique_lock<std::mutex>& lock, int rank, uint64_t id) {
    const auto deadline = std::chrono::steady_clock::now() + reply_timeout_;
    // The one message of a call's timeout, whichever wait ran out: the
    // transport's own names only what was left of the bound.
    auto no_reply = [&] {
        return Error(ErrorKind::Timeout, "rank " + std::to_string(rank) + " sent no reply to call " + std::to_string(id) +
                                             " within " + std::to_string(reply_timeout_.count()) + " ms");
    };
    for (;;) {
        if (auto early = early_.find(id); early != early_.end()) {
            Message m = std::move(early->second);
            early_.erase(early);
            return m;
        }
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) throw no_reply();
        if (receiving_) {
            handed_over_.SleepUnlocked(lock, [&] { return !receiving_ || early_.count(id) != 0; }, deadline - now);
            continue;
        }
        receiving_ = true;
        lock.unlock();
        Message m;
        auto let_go = [&] {  // another waiter receives next (and sees the same loss)
            lock.lock();
            receiving_ = false;
            handed_over_.Notify();
        };
        try {
            // Throws DeviceLost when `rank` is lost, Timeout past the reply bound.
            m = transport_.Receive(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now), rank);
        } catch (const Error& e) {
            let_go();
            if (e.kind() == ErrorKind::Timeout) throw no_reply();
            throw;
        } catch (...) {
            let_go();
            throw;
        }
        let_go();
        if (m.type != remote::kDescribeReply && m.type != remote::kCallReply && m.type != remote::kCallError)
            throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(rank) + " sent message type " +
                                                      std::to_string(m.type) + " where a reply was due");
        const uint64_t got = remote::ReplyId(m);
        if (got == id) return m;
        if (!FileReply(got, rank, m))
            throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(rank) + " replied to call " + std::to_string(got) +
                                                      ", which it was never sent");
    }
}

bool RemoteChipClient::FileReply(uint64_t id, int rank, Message& m) {
    if (auto gone = abandoned_.find(id); gone != abandoned_.end() && gone->second.first == rank) {
        Forget(gone);  // a late reply: its caller gave up on it
        return true;
    }
    if (!pending_.count(id) || pending_.at(id).rank != rank) return false;
    early_.emplace(id, std::move(m));
    return true;
}

uint64_t RemoteChipClient::Register(int rank, RemoteCall call, bool describe) {
    std::lock_guard lock(mu_);
    const uint64_t id = next_id_++;
    pending_.emplace(id, Pending{rank, std::move(call), describe});
    return id;
}

RankDescription RemoteChipClient::Describe(int rank) {
    const uint64_t id = Register(rank, RemoteCall{.task = "describe"}, true);
    transport_.Send(rank, remote::EncodeDescribe(id));
    Message m;
    try {
        m = TakeReply(id).second;
    } catch (const Error& e) {
        // Said as what it is: the request a MultiHostWorker makes of each
        // serving rank when it is made, not a chip call (found probing
        // from outside: "call 1", "chip call 'describe' (function '')").
        if (e.kind() != ErrorKind::Timeout) throw;
        throw Error(ErrorKind::Timeout, "rank " + std::to_string(rank) + " did not describe its devices within " +
                                            std::to_string(reply_timeout_.count()) +
                                            " ms (is it serving? every rank builds its MultiHostWorker, and the "
                                            "serving ranks call Serve)",
                    e.context());
    }
    if (m.type != remote::kDescribeReply)
        throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(rank) + " answered a describe request with type " +
                                                  std::to_string(m.type));
    return remote::DecodeDescribeReply(m);
}

uint64_t RemoteChipClient::Submit(int rank, RemoteCall call) {
    RemoteCall kept{.task = call.task, .function = call.function, .device = call.device, .outputs = call.outputs};
    // Registered before it is sent: its reply may come before Send returns.
    const uint64_t id = Register(rank, std::move(kept));
    try {
        transport_.Send(rank, remote::EncodeCall(id, call));  // moves the inputs' bytes into payloads
    } catch (...) {
        std::lock_guard lock(mu_);
        pending_.erase(id);
        throw;
    }
    return id;
}

std::pair<RemoteChipClient::Pending, Message> RemoteChipClient::TakeReply(uint64_t call_id) {
    std::unique_lock lock(mu_);
    auto it = pending_.find(call_id);
    if (it == pending_.end())
        throw Error(ErrorKind::InvalidArgument, "chip call " + std::to_string(call_id) + " was not submitted (or was waited for)");
    Pending p = it->second;
    Message m;
    try {
        m = AwaitReply(lock, p.rank, call_id);
    } catch (const Error& e) {
        Abandon(call_id, p, e.kind() == ErrorKind::Timeout);
        // The rank's loss names the call it took with it (the transport only knows the rank).
        if (e.kind() == ErrorKind::DeviceLost)
            throw Error(ErrorKind::DeviceLost,
                        (p.describe ? "the request that rank " + std::to_string(p.rank) + " describe its devices"
                                    : "chip call '" + p.call.task + "' (function '" + p.call.function + "')") +
                            " was in flight on a lost rank: " + e.message(),
                        e.context());
        throw;
    } catch (...) {
        Abandon(call_id, p, false);
        throw;
    }
    pending_.erase(call_id);
    return {std::move(p), std::move(m)};
}

void RemoteChipClient::Abandon(uint64_t call_id, const Pending& call, bool timed_out) {
    pending_.erase(call_id);
    early_.erase(call_id);
    // A describe request or a call whose wait failed otherwise holds no device.
    const bool outlives = timed_out && !call.describe;
    abandoned_.emplace(call_id, std::pair{call.rank, outlives ? call.call.device : std::string()});
    if (outlives) {
        ++outliving_[{call.rank, call.call.device}];
        outliving_total_.fetch_add(1, std::memory_order_relaxed);
    }
    if (abandoned_.size() > kAbandonedKept) Forget(abandoned_.begin());  // ids rise: the oldest
}

void RemoteChipClient::Forget(std::map<uint64_t, std::pair<int, std::string>>::iterator abandoned) {
    if (auto it = outliving_.find(abandoned->second); it != outliving_.end()) {
        outliving_total_.fetch_sub(1, std::memory_order_relaxed);
        if (--it->second == 0) outliving_.erase(it);
    }
    abandoned_.erase(abandoned);
}

uint32_t RemoteChipClient::CallsOutlivingTheirBound(int rank, const std::string& device) {
    if (outliving_total_.load(std::memory_order_relaxed) == 0) return 0;
    std::unique_lock lock(mu_);
    if (!outliving_.count({rank, device})) return 0;
    // Their late replies are read only by a wait on this rank: with none
    // (placement avoided the rank for them), the device stayed counted
    // busy for good after they came (found probing). Read what came.
    if (!receiving_) TakeWhatCame(lock, rank);
    const auto it = outliving_.find({rank, device});
    return it == outliving_.end() ? 0 : it->second;
}

void RemoteChipClient::TakeWhatCame(std::unique_lock<std::mutex>& lock, int rank) {
    receiving_ = true;
    for (int taken = 0; taken < 64; ++taken) {
        lock.unlock();
        Message m;
        try {
            m = transport_.Receive(std::chrono::milliseconds(0), rank);
        } catch (...) {  // nothing came, or the rank is lost: its waiters learn that themselves
            lock.lock();
            break;
        }
        lock.lock();
        if (m.type != remote::kDescribeReply && m.type != remote::kCallReply && m.type != remote::kCallError) continue;
        uint64_t id = 0;
        try {
            id = remote::ReplyId(m);
        } catch (const Error&) {
            continue;
        }
        (void)FileReply(id, rank, m);  // one never sent is its waiters' to see: dropped here
    }
    receiving_ = false;
    handed_over_.Notify();  // a waiter may find its reply filed
}

std::vector<WireTensor> RemoteChipClient::Wait(uint64_t call_id) {
    auto [p, m] = TakeReply(call_id);
    if (m.type == remote::kCallError) throw RemoteChipError(remote::DecodeCallError(m));
    if (m.type != remote::kCallReply)
        throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(p.rank) + " answered chip call '" + p.call.task +
                                                  "' with message type " + std::to_string(m.type));
    if (m.payloads.size() != p.call.outputs.size())
        throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(p.rank) + " returned " + std::to_string(m.payloads.size()) +
                                                  " outputs for chip call '" + p.call.task + "', which has " +
                                                  std::to_string(p.call.outputs.size()));
    std::vector<WireTensor> outputs;
    for (size_t i = 0; i < m.payloads.size(); ++i) {
        if (m.payloads[i].size() != p.call.outputs[i].bytes())
            throw Error(ErrorKind::ProtocolError, "rank " + std::to_string(p.rank) + " returned output " + std::to_string(i) +
                                                      " of chip call '" + p.call.task + "' with " +
                                                      std::to_string(m.payloads[i].size()) + " bytes, not " +
                                                      std::to_string(p.call.outputs[i].bytes()));
        outputs.push_back(WireTensor{p.call.outputs[i], std::move(m.payloads[i])});
    }
    return outputs;
}

void RemoteChipClient::Shutdown(int rank) { transport_.Send(rank, remote::EncodeShutdown()); }

}  // namespace spyre::host
