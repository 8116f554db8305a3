// SPDX-License-Identifier: Apache-2.0
// PeerLiveness: when each peer was last heard from, and which peers are lost
// (silent past the bound, or cut off by the transport). Shared by both
// transports: the same rule decides in unit tests and under MPI.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "spyre/host/transport.hpp"

namespace spyre::host::wire {

class PeerLiveness {
public:
    using Clock = std::chrono::steady_clock;

    PeerLiveness(int self, std::vector<PeerInfo> peers, LivenessOptions options);
    // InvalidArgument naming what is wrong with `options` (the constructor's
    // check, for a transport that must refuse them before it starts).
    static void CheckOptions(const LivenessOptions& options);

    // `rank` was heard from (any message or heartbeat). Lock-free.
    void Seen(int rank, Clock::time_point now = Clock::now());
    // Marks peers silent past the bound as lost. Returns true when a peer
    // became lost by this call. A gap since the last call longer than half
    // the bound is this process's own stall: every peer's clock restarts.
    bool Evaluate(Clock::time_point now = Clock::now());
    // Cuts `rank` off with `error` (a malformed frame, an MPI failure). The
    // first reason stays.
    void MarkLost(int rank, Error error);
    // `rank` said it is leaving (its transport shut down): nothing more
    // comes from it. Not a loss: AnyLost does not name it (the final
    // barrier still waits for it), and its silence is not held against it.
    void MarkLeft(int rank);
    // Its loss, or that it left; nullopt while it is alive.
    std::optional<Error> Lost(int rank) const;
    // The first lost peer's error (lowest rank), if any.
    std::optional<Error> AnyLost() const;

    const PeerInfo& peer(int rank) const;
    const LivenessOptions& options() const { return options_; }
    int size() const { return static_cast<int>(peers_.size()); }

private:
    int self_;
    std::vector<PeerInfo> peers_;
    LivenessOptions options_;
    std::unique_ptr<std::atomic<int64_t>[]> last_seen_ns_;  // steady clock, per rank
    std::atomic<int64_t> last_evaluate_ns_;
    mutable std::mutex mutex_;
    std::vector<std::optional<Error>> lost_;
    std::vector<std::optional<Error>> left_;
};

// "rank 1 (host b, pid 42) is lost: <why>": the DeviceLost error of a peer.
Error PeerLostError(const PeerInfo& peer, const std::string& why);

}  // namespace spyre::host::wire
