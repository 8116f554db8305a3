// SPDX-License-Identifier: Apache-2.0
// MpiTransport: Transport over Open MPI. A progress thread initialises MPI
// (MPI_THREAD_SERIALIZED) and finalises it; between the two every MPI call
// is made under one lock, by whoever polls: a thread waiting in Receive
// polls for its own message, a Send posts its own Isends when nobody
// polls, and the progress thread polls while neither does (heartbeats,
// jobs, transfers nobody waits for). So a message crosses no thread on
// either side. It posts nonblocking Isend/Improbe/Imrecv on its own
// communicator (MPI_ERRORS_RETURN, so an MPI failure is a typed error, not
// an abort), sends heartbeats, and declares a silent peer lost after the
// liveness bound (docs/multihost.md says what Open MPI itself does when a
// rank is killed or stopped).
//
// Built into libspyre-mpi only where Open MPI is installed.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>

#include "spyre/host/transport.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::host {

struct MpiTransportOptions {
    LivenessOptions liveness;
    // How long a Receive polls MPI itself for its message (pausing between
    // polls, never yielding: on a loaded host a yield hands the core to
    // whatever else runs for a whole slice) before it sleeps on the
    // message queue, polling again every millisecond. 0: it only sleeps.
    // 0 to 1 s (each option out of its range is InvalidArgument, before MPI
    // starts).
    std::chrono::microseconds idle_spin{200};
    // How long that polling Receive sleeps between polls; 0 (the default):
    // it pauses. Also how long the progress thread sleeps between polls of
    // a transfer nobody waits for (0: it yields). 0 to 1 s: a Receive
    // may overrun its timeout by one sleep.
    std::chrono::microseconds busy_poll{0};
    // The progress thread's sleep between polls for the first 10 ms after
    // a Receive went to sleep for its message (past idle_spin): a bound on
    // that message's latency. Otherwise it polls every millisecond (or
    // idle_sleep, if longer): heartbeats and messages nobody waits for yet
    // need no more, and a Receive polls MPI itself when it starts. At least 0.
    std::chrono::microseconds idle_sleep{100};
    // At shutdown, how long to wait for live ranks (still beating, but slow
    // to finish: a mock card being torn down) to reach the final barrier. A
    // lost rank ends the wait at once. 0 to a day.
    std::chrono::milliseconds finalize_timeout{60000};
};

class MpiTransport final : public Transport {
public:
    // Initialises MPI on the progress thread and learns every rank's host
    // name and pid (a collective: every rank must construct one). MPI must
    // not be initialised yet (InvalidArgument): no other thread may own it.
    explicit MpiTransport(MpiTransportOptions options = {});
    // Flushes queued sends, waits for every rank to arrive at a nonblocking
    // barrier (while they are alive, at most finalize_timeout), then
    // finalises MPI. When a peer is
    // lost MPI_Finalize would hang on it (measured: a SIGSTOPped rank): it is
    // skipped, and the process should exit non-zero so that mpirun ends the job.
    ~MpiTransport() override;

    int rank() const override;
    int size() const override;
    const PeerInfo& peer(int rank) const override;
    const LivenessOptions& liveness() const override;
    void Send(int destination, Message message) override;
    Message Receive(std::chrono::milliseconds timeout, int source = kAnySource) override;
    std::optional<Error> PeerError(int rank) const override;

    // Runs `work` on the progress thread with a communicator of its own
    // (a duplicate of the transport's), between two polls, and returns its
    // result or rethrows its spyre::Error. For baselines (a raw MPI
    // ping-pong) that must respect the one-call-at-a-time rule: it holds
    // the transport's MPI lock, so `work` must not call Send or Receive,
    // and nothing polls while it runs: keep it well under the liveness bound.
    void RunOnMpiThread(const std::function<void(MPI_Comm)>& work);

private:
    struct SPYRE_INTERNAL State;
    std::unique_ptr<State> state_;
};

}  // namespace spyre::host
SPYRE_API_END
