// SPDX-License-Identifier: Apache-2.0
// RemoteChipClient: the calling side. Submit ships a chip call to a rank and
// returns at once; Wait returns its outputs or throws: RemoteChipError (the
// call failed there), the transport's DeviceLost (the rank is lost: within
// the liveness bound, never a hang), ProtocolError (a reply that does not
// match the call), Timeout (no reply within the reply bound; a reply that
// still comes is dropped, later calls get their own). Threads may
// share a client: calls of several threads are in flight at once, one of
// the waiting threads receives at a time and hands each reply to its
// caller.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "spyre/common/eventcount.hpp"
#include "spyre/host/remote_chip.hpp"
#include "spyre/host/transport.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::host {

class RemoteChipClient {
public:
    explicit RemoteChipClient(Transport& transport, std::chrono::milliseconds reply_timeout = std::chrono::minutes(5));

    RankDescription Describe(int rank);
    uint64_t Submit(int rank, RemoteCall call);
    std::vector<WireTensor> Wait(uint64_t call_id);
    std::vector<WireTensor> Call(int rank, RemoteCall call) { return Wait(Submit(rank, std::move(call))); }
    // Ends `rank`'s Serve loop.
    void Shutdown(int rank);
    // Calls to `device` of `rank` that timed out and whose late reply has
    // not come: as far as this client knows they still run there, each
    // for longer than the reply bound already (placement weighs them).
    uint32_t CallsOutlivingTheirBound(int rank, const std::string& device);
    std::chrono::milliseconds reply_timeout() const noexcept { return reply_timeout_; }

private:
    struct Pending {
        int rank;
        RemoteCall call;  // inputs moved out; the rest kept for errors and checks
        bool describe = false;  // a Describe request, not a chip call
    };
    // Under mu_ (released while receiving).
    Message AwaitReply(std::unique_lock<std::mutex>& lock, int rank, uint64_t id);
    uint64_t Register(int rank, RemoteCall call, bool describe = false);
    // The reply to `call_id` and what was kept of its call, which is forgotten.
    std::pair<Pending, Message> TakeReply(uint64_t call_id);
    // Under mu_: forgets `call_id` without its reply (see abandoned_);
    // `timed_out`: it may still run on its device (see outliving_).
    void Abandon(uint64_t call_id, const Pending& call, bool timed_out);
    // Under mu_: files reply `m` to call `id` from `rank` for its waiter, or
    // drops it when that call was given up on; false for a call never sent.
    bool FileReply(uint64_t id, int rank, Message& m);
    // Under mu_, with no thread receiving: files the replies from `rank`
    // that came, without waiting (late ones dropped, early ones kept).
    void TakeWhatCame(std::unique_lock<std::mutex>& lock, int rank);
    // Under mu_: a call given up on is forgotten, its late reply come or
    // no longer looked for.
    void Forget(std::map<uint64_t, std::pair<int, std::string>>::iterator abandoned);

    Transport& transport_;
    std::chrono::milliseconds reply_timeout_;
    std::mutex mu_;
    EventCount handed_over_;  // a reply was filed, or the receiver left (waiters look under mu_)
    bool receiving_ = false;               // a waiting thread is in Transport::Receive
    uint64_t next_id_ = 1;
    std::map<uint64_t, Pending> pending_;
    std::map<uint64_t, Message> early_;  // replies that came while waiting for another
    // Calls given up without their reply (timed out, or the wait failed),
    // by id, with their rank and (timed out) device: a reply that still
    // comes is dropped, not taken as another call's. The oldest are
    // forgotten past kAbandonedKept.
    static constexpr size_t kAbandonedKept = 4096;
    std::map<uint64_t, std::pair<int, std::string>> abandoned_;
    // Timed-out calls not yet answered, by rank and device, and in all
    // (read without mu_: placement asks on every task, and almost always
    // there are none).
    std::map<std::pair<int, std::string>, uint32_t> outliving_;
    std::atomic<uint32_t> outliving_total_{0};
};

}  // namespace spyre::host
SPYRE_API_END
