// SPDX-License-Identifier: Apache-2.0
// Transport: how the ranks of a multi-host run (seed 003's level 4) talk.
// A message is a type, a small header and any number of byte payloads
// (tensor bytes travel as payloads, never copied into the header). Every
// rank watches its peers with heartbeats: a peer silent longer than the
// liveness bound is lost, and every later Send to it or Receive from it
// fails with DeviceLost naming its rank and host, never a hang.
//
// Two implementations: MpiTransport (Open MPI, one thread owns every MPI
// call; spyre/host/mpi_transport.hpp) and InProcessTransport (N ranks as
// endpoints in one process, for unit tests). docs/multihost.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spyre/error.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::host {

// Receive from whichever rank has a message.
inline constexpr int kAnySource = -1;
// Types below this are the transport's own (heartbeats); protocols use the rest.
inline constexpr uint16_t kFirstUserMessageType = 16;
// A peer's transport shut down (it finished, or failed and unwound): it
// sends nothing more. Receive(kAnySource) returns one message of this type
// from it (source set, no header, no payloads), after everything it sent;
// a Receive from it alone, and a Send to it, fail with DeviceLost ("left
// the run") from then on. Not a loss: the transport's final barrier still
// waits for it, and a wait on any source goes on.
inline constexpr uint16_t kPeerLeftMessageType = 2;

struct Message {
    uint16_t type = 0;
    int source = -1;                              // filled in on receipt
    std::vector<uint8_t> header;                  // the protocol's fields
    std::vector<std::vector<uint8_t>> payloads;   // bulk bytes (tensors)
};

// What every rank learns of every other one when the transport starts.
struct PeerInfo {
    int rank = -1;
    std::string host_name;  // MPI processor name (or the in-process name)
    int pid = 0;
    // "rank 1 (host node-b, pid 4242)": how errors name a rank.
    std::string Describe() const;
};

struct LivenessOptions {
    // How often each rank tells every peer it is alive.
    std::chrono::milliseconds heartbeat_interval{250};
    // A peer that sent nothing (message or heartbeat) for this long is lost.
    // A stall of this process itself (SIGSTOP, a starved machine) longer than
    // half the bound is not blamed on peers: their clocks restart.
    std::chrono::milliseconds silence_bound{5000};
};

// Limits of one message (a frame outside them is a ProtocolError).
inline constexpr size_t kMaxHeaderBytes = 16u << 20;
inline constexpr size_t kMaxPayloads = 4096;
inline constexpr uint64_t kMaxPayloadBytes = 1ull << 30;
inline constexpr uint64_t kMaxMessagePayloadBytes = 2ull << 30;  // all payloads of one message

class Transport {
public:
    virtual ~Transport() = default;

    virtual int rank() const = 0;
    virtual int size() const = 0;
    // What this transport learnt of `rank` at start (InvalidArgument when out of range).
    virtual const PeerInfo& peer(int rank) const = 0;
    virtual const LivenessOptions& liveness() const = 0;

    // Queues `message` for `destination` (this rank included) and returns;
    // messages from one rank to another arrive in the order sent. Throws
    // InvalidArgument (bad rank, a message over the limits, a type below
    // kFirstUserMessageType) or the destination's DeviceLost error.
    virtual void Send(int destination, Message message) = 0;

    // The oldest message from `source` (or from any rank), waiting at most
    // `timeout`. Throws Timeout when none came; DeviceLost naming the rank
    // when `source` (or, for kAnySource, any peer) is lost and nothing of
    // it is left to read; ProtocolError naming the rank that sent a
    // malformed frame (that rank is lost from then on: its stream cannot be
    // trusted).
    virtual Message Receive(std::chrono::milliseconds timeout, int source = kAnySource) = 0;

    // Why `rank` is lost (or that it left the run), or nullopt while it is
    // alive.
    virtual std::optional<Error> PeerError(int rank) const = 0;
};

}  // namespace spyre::host
SPYRE_API_END
