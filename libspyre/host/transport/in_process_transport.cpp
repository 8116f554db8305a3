// SPDX-License-Identifier: Apache-2.0
#include "spyre/host/in_process_transport.hpp"

#include <unistd.h>

#include <atomic>
#include <thread>

#include "host/transport/frame.hpp"
#include "host/transport/message_queue.hpp"
#include "spyre/common/eventcount.hpp"

namespace spyre::host {

struct InProcessTransport::Endpoint {
    Endpoint(int rank, const std::vector<PeerInfo>& peers, LivenessOptions options)
        : liveness(rank, peers, options), messages(liveness) {}
    wire::PeerLiveness liveness;
    wire::MessageQueue messages;
    std::atomic<bool> stopped{false};
    bool taken = false;
};

struct InProcessFabric::State {
    LivenessOptions options;
    std::vector<PeerInfo> peers;
    std::vector<std::unique_ptr<InProcessTransport::Endpoint>> endpoints;
    std::mutex mutex;
    EventCount wake;  // quit was set
    bool quit = false;
    std::thread heartbeats;

    // The receive path of both sends and injections: decode (checks), then
    // payloads must match what the frame announced.
    void Deliver(int from, int to, std::span<const uint8_t> frame, std::vector<std::vector<uint8_t>> payloads) {
        InProcessTransport::Endpoint& dst = *endpoints[to];
        if (endpoints[from]->stopped.load()) return;
        try {
            Message m = wire::DecodeFrame(from, frame);
            if (m.payloads.size() != payloads.size())
                throw Error(ErrorKind::ProtocolError, "malformed frame from rank " + std::to_string(from) + ": it announces " +
                                                          std::to_string(m.payloads.size()) + " payloads, " +
                                                          std::to_string(payloads.size()) + " followed");
            for (size_t i = 0; i < payloads.size(); ++i)
                if (payloads[i].size() != m.payloads[i].size())
                    throw Error(ErrorKind::ProtocolError, "malformed frame from rank " + std::to_string(from) + ": payload " +
                                                              std::to_string(i) + " is " + std::to_string(payloads[i].size()) +
                                                              " bytes, the frame says " + std::to_string(m.payloads[i].size()));
            m.payloads = std::move(payloads);
            dst.liveness.Seen(from);
            if (m.type == wire::kHeartbeatType) return;
            if (m.type == wire::kLeavingType) {
                dst.messages.PushLeft(from);
                return;
            }
            dst.messages.Push(std::move(m));
        } catch (const Error& e) {
            dst.messages.PushError(from, e);
        }
    }

    void BeatLoop() {
        std::unique_lock lock(mutex);
        while (!quit) {
            for (auto& to : endpoints) {
                for (size_t from = 0; from < endpoints.size(); ++from)
                    if (!endpoints[from]->stopped.load()) to->liveness.Seen(static_cast<int>(from));
                if (to->liveness.Evaluate()) to->messages.Wake();
            }
            wake.SleepUnlocked(lock, [&] { return quit; }, options.heartbeat_interval);
        }
    }
};

std::shared_ptr<InProcessFabric> InProcessFabric::Create(int ranks, LivenessOptions options,
                                                         std::vector<std::string> host_names) {
    if (ranks < 1) throw Error(ErrorKind::InvalidArgument, "an in-process fabric needs at least 1 rank, not " + std::to_string(ranks));
    if (!host_names.empty() && host_names.size() != static_cast<size_t>(ranks))
        throw Error(ErrorKind::InvalidArgument, "in-process fabric: " + std::to_string(host_names.size()) +
                                                    " host names for " + std::to_string(ranks) + " ranks");
    std::shared_ptr<InProcessFabric> fabric(new InProcessFabric());
    auto state = std::make_unique<State>();
    state->options = options;
    for (int r = 0; r < ranks; ++r)
        state->peers.push_back(PeerInfo{r, host_names.empty() ? "inproc-" + std::to_string(r) : host_names[r], ::getpid()});
    for (int r = 0; r < ranks; ++r)
        state->endpoints.push_back(std::make_unique<InProcessTransport::Endpoint>(r, state->peers, options));
    state->heartbeats = std::thread([s = state.get()] { s->BeatLoop(); });
    fabric->state_ = std::move(state);
    return fabric;
}

InProcessFabric::~InProcessFabric() {
    if (!state_) return;  // Create failed before the fabric was whole
    {
        std::lock_guard lock(state_->mutex);
        state_->quit = true;
    }
    state_->wake.Notify();
    state_->heartbeats.join();
}

std::unique_ptr<InProcessTransport> InProcessFabric::Take(int rank) {
    if (rank < 0 || rank >= static_cast<int>(state_->endpoints.size()))
        throw Error(ErrorKind::InvalidArgument, "in-process fabric has no rank " + std::to_string(rank));
    std::lock_guard lock(state_->mutex);
    if (state_->endpoints[rank]->taken) throw Error(ErrorKind::Busy, "rank " + std::to_string(rank) + " was already taken");
    state_->endpoints[rank]->taken = true;
    return std::unique_ptr<InProcessTransport>(new InProcessTransport(shared_from_this(), rank));
}

void InProcessFabric::Stop(int rank) {
    if (rank < 0 || rank >= static_cast<int>(state_->endpoints.size()))
        throw Error(ErrorKind::InvalidArgument, "in-process fabric has no rank " + std::to_string(rank));
    state_->endpoints[rank]->stopped.store(true);
}

void InProcessFabric::Resume(int rank) {
    if (rank < 0 || rank >= static_cast<int>(state_->endpoints.size()))
        throw Error(ErrorKind::InvalidArgument, "in-process fabric has no rank " + std::to_string(rank));
    state_->endpoints[rank]->stopped.store(false);
}

void InProcessFabric::InjectFrame(int from, int to, std::span<const uint8_t> frame,
                                  std::vector<std::vector<uint8_t>> payloads) {
    const int n = static_cast<int>(state_->endpoints.size());
    if (from < 0 || from >= n || to < 0 || to >= n)
        throw Error(ErrorKind::InvalidArgument, "in-process fabric has no rank " + std::to_string(from < 0 || from >= n ? from : to));
    state_->Deliver(from, to, frame, std::move(payloads));
}

InProcessTransport::InProcessTransport(std::shared_ptr<InProcessFabric> fabric, int rank)
    : fabric_(std::move(fabric)), rank_(rank) {}

InProcessTransport::~InProcessTransport() {
    // As MpiTransport does at shutdown: nothing more comes from this rank.
    const std::vector<uint8_t> leaving = wire::EncodeFrame(Message{.type = wire::kLeavingType});
    for (int r = 0; r < size(); ++r)
        if (r != rank_) fabric_->state_->Deliver(rank_, r, leaving, {});
}

int InProcessTransport::rank() const { return rank_; }
int InProcessTransport::size() const { return static_cast<int>(fabric_->state_->endpoints.size()); }
const PeerInfo& InProcessTransport::peer(int rank) const { return fabric_->state_->endpoints[rank_]->liveness.peer(rank); }
const LivenessOptions& InProcessTransport::liveness() const { return fabric_->state_->options; }

void InProcessTransport::Send(int destination, Message message) {
    Endpoint& self = *fabric_->state_->endpoints[rank_];
    self.liveness.peer(destination);  // validates the rank
    if (auto lost = self.liveness.Lost(destination)) throw *lost;
    const std::vector<uint8_t> frame = wire::EncodeUserFrame(message);
    fabric_->state_->Deliver(rank_, destination, frame, std::move(message.payloads));
}

Message InProcessTransport::Receive(std::chrono::milliseconds timeout, int source) {
    return fabric_->state_->endpoints[rank_]->messages.Pop(timeout, source);
}

std::optional<Error> InProcessTransport::PeerError(int rank) const {
    const Endpoint& self = *fabric_->state_->endpoints[rank_];
    self.liveness.peer(rank);
    return self.liveness.Lost(rank);
}

}  // namespace spyre::host
