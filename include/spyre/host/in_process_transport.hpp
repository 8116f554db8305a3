// SPDX-License-Identifier: Apache-2.0
// InProcessTransport: the ranks of a run as endpoints of one process, for
// unit tests of everything above Transport. Same rules as MpiTransport:
// messages go through the same frame encoding and checks, heartbeats feed
// the same liveness rule, and a rank can be stopped (it neither sends nor
// beats any more, as a SIGSTOPped or killed process) to test loss detection.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "spyre/host/transport.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::host {

class InProcessFabric;

class InProcessTransport final : public Transport {
public:
    ~InProcessTransport() override;

    int rank() const override;
    int size() const override;
    const PeerInfo& peer(int rank) const override;
    const LivenessOptions& liveness() const override;
    void Send(int destination, Message message) override;
    Message Receive(std::chrono::milliseconds timeout, int source = kAnySource) override;
    std::optional<Error> PeerError(int rank) const override;

private:
    friend class InProcessFabric;
    struct SPYRE_INTERNAL Endpoint;
    InProcessTransport(std::shared_ptr<InProcessFabric> fabric, int rank);
    std::shared_ptr<InProcessFabric> fabric_;
    int rank_;
};

// The shared medium: owns the endpoints and the heartbeat thread.
class InProcessFabric : public std::enable_shared_from_this<InProcessFabric> {
public:
    // `ranks` endpoints, named "inproc-<rank>" unless `host_names` says.
    static std::shared_ptr<InProcessFabric> Create(int ranks, LivenessOptions options = {},
                                                   std::vector<std::string> host_names = {});
    ~InProcessFabric();

    // The endpoint of `rank` (each may be taken once).
    std::unique_ptr<InProcessTransport> Take(int rank);

    // `rank` stops: its sends are dropped and it sends no heartbeats, as a
    // stopped or killed process looks to its peers.
    void Stop(int rank);
    // `rank` speaks again, as a cut cable plugged back in. Peers that found
    // it lost meanwhile keep it lost and drop what it sends.
    void Resume(int rank);
    // Delivers raw bytes as a frame from `from` to `to` (with these payloads),
    // through the receive path's checks: for hostile-input tests.
    void InjectFrame(int from, int to, std::span<const uint8_t> frame, std::vector<std::vector<uint8_t>> payloads);

    struct SPYRE_INTERNAL State;

private:
    InProcessFabric() = default;
    friend class InProcessTransport;
    std::unique_ptr<State> state_;
};

}  // namespace spyre::host
SPYRE_API_END
