// SPDX-License-Identifier: Apache-2.0
// Level 4: one host DAG over the devices of several ranks (hosts). Every
// rank constructs a MultiHostWorker on the same Transport with the same
// config and makes the same registrations on worker() (SPMD, as MPI programs
// are). Rank 0 runs host programs on worker(), whose devices are its own
// followed by every other rank's (config.device_ids of each rank's Host); the
// other ranks Serve(): each chip task placed on one of their devices comes
// to them as a remote chip call with its tensors' bytes, runs on their own
// level-3 Worker, and sends the outputs back. A rank that dies or falls
// silent fails the chip tasks placed on it with DeviceLost naming it within
// the transport's liveness bound, and the run with them (docs/multihost.md).
//
//   host::MpiTransport t;
//   spyre::Host host = spyre::Host::Open();
//   spyre::MultiHostWorker w(t, host, {.device_ids = {0}, .num_sub_workers = 1});
//   RegisterEverything(w.worker());
//   if (w.rank() == 0) w.worker().Run(program, {a, b, f});  // then ~MultiHostWorker releases the others
//   else w.Serve();
#pragma once

#include <chrono>
#include <memory>

#include "spyre/device/host.hpp"
#include "spyre/host/transport.hpp"
#include "spyre/host/worker.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

class MultiHostWorker {
public:
    // Opens config.device_ids of `host`; rank 0 also asks every other rank
    // for its devices (a collective: every rank constructs one). A chip call
    // that gets no reply within `reply_timeout` fails with Timeout.
    MultiHostWorker(host::Transport& transport, Host& host, DistributedConfig config,
                    std::chrono::milliseconds reply_timeout = std::chrono::minutes(10));
    // Rank 0: waits for the runs in flight (as ~Worker does), then ends the
    // other ranks' Serve (a lost rank is skipped).
    ~MultiHostWorker();
    MultiHostWorker(const MultiHostWorker&) = delete;
    MultiHostWorker& operator=(const MultiHostWorker&) = delete;

    int rank() const;
    int ranks() const;
    // Registrations (every rank), and on rank 0 runs.
    Worker& worker();

    // Ranks other than 0: answers chip calls until rank 0's MultiHostWorker
    // goes. Throws DeviceLost naming rank 0 when it is lost; on rank 0,
    // InvalidArgument.
    void Serve();

    struct SPYRE_INTERNAL Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace spyre
SPYRE_API_END
