// SPDX-License-Identifier: Apache-2.0
// The ChipExecutor of a device another rank serves (level 4): a chip call
// becomes a remote chip call (docs/multihost.md), the In and InOut
// arguments' bytes going with it and the Out and InOut ones coming back.
// The serving rank runs it on its own level-3 Worker, so it loads its own
// kernels and chip functions: every rank registers the same (SPMD).
#pragma once

#include <memory>
#include <string>

#include "spyre/host/chip_executor.hpp"
#include "spyre/host/remote_chip_client.hpp"

namespace spyre::host {

// A chip task's argument access on the wire (RemoteCall::access) and back.
inline uint8_t WireAccess(Access a) noexcept {
    return a == Access::In ? RemoteCall::kIn : a == Access::Out ? RemoteCall::kOut : RemoteCall::kInOut;
}
inline Access AccessOf(uint8_t wire) noexcept {
    return wire == RemoteCall::kIn                                    ? Access::In
           : wire == RemoteCall::kOut || wire == RemoteCall::kOutInPlace ? Access::Out
                                                                       : Access::InOut;
}

// One serving rank as the executors of its devices share it: one client
// (replies are matched per client; calls to its devices are in flight at
// once, and the rank's service runs them at once).
struct RemoteRank {
    RemoteRank(Transport& transport, int rank, std::chrono::milliseconds reply_timeout)
        : rank(rank), client(transport, reply_timeout) {}
    const int rank;
    RemoteChipClient client;
};

class RemoteChipExecutor final : public ChipExecutor {
public:
    // `device`: the index of the device among the serving rank's Worker's;
    // `description`: how errors and DescribeDevice name it; `room`: chip
    // tasks it runs at once there (RankDescription::chip_tasks_at_once), so
    // as many calls to it are kept in flight.
    RemoteChipExecutor(std::shared_ptr<RemoteRank> rank, size_t device, std::string description, unsigned room = 1);

    std::string Describe() const override { return description_; }
    int rank() const noexcept { return rank_->rank; }  // the serving rank
    bool Remote() const override { return true; }
    unsigned Concurrency() const override { return room_; }
    // The serving rank registers its own (SPMD): nothing to ship.
    void LoadKernel(int32_t, const std::vector<uint8_t>&) override {}
    void LoadPlan(const std::string&, const CompilerOutput&) override {}
    ChipCallStats Run(const ChipCall& call) override;
    // The same, filling `stats` as it goes: a call that fails still tells
    // what it sent (a failed remote task's stats said 0 bytes: found probing).
    void Run(const ChipCall& call, ChipCallStats& stats);
    // Work this device holds that no queued task shows: each call to it
    // that timed out and still runs there, as one more reply bound.
    double OutlivingWorkNs() const;

private:
    std::shared_ptr<RemoteRank> rank_;
    size_t device_;
    std::string device_selector_;  // device_ as the wire names it
    std::string description_;
    unsigned room_;
};

}  // namespace spyre::host
