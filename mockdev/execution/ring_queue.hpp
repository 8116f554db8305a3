// SPDX-License-Identifier: Apache-2.0
//
// The CB ring of a function as its queue server serves it (spyre_cb.h): CBs
// framed, copied out of the ring with their inline payload and run in ring
// order through the CbExecutor, one CQE each, with the LINK and ring-stream
// cancellations carried from one CB to the next, also across doorbells.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>

#include "execution/cb_executor.hpp"
#include "execution/host_link.hpp"
#include "execution/queue_geometry.hpp"
#include "execution/queue_lane.hpp"
#include "execution/queue_pair.hpp"
#include "pci/register_file.hpp"
#include "pci/shm_object.hpp"
#include "spyre/uapi/spyre_cb.h"
#include "spyre/uapi/spyre_regs.h"

namespace spyre::mockdev {

class RingQueue final : public QueueKind {
public:
    // `lane` serves this ring: its aborting() stops a running CB (ABORTED).
    RingQueue(RegisterFile& regs, ShmObject& bar4, const RingGeometry& geometry, CbExecutor& executor,
              HostLink& host_link, const QueueLane& lane);

    spyre_doorbell_page* doorbell() const { return db_; }
    void SetEnabled(bool enabled);
    bool enabled() const { return enabled_.load(std::memory_order_acquire); }
    bool halted() const { return pair_.halted(); }

    bool Submitted() const override { return enabled() && pair_.Submitted(); }
    Turn Serve(std::unique_lock<std::mutex>& exec, CycleClock& clock, Clock::time_point& now) override;
    // Ring disabled, not halted, positions zero, SQ and CQ zero, no
    // cancellation pending. irq_waiters and device_sleeping are left alone:
    // they count live waiters and the lane's own sleep.
    void Clear() override;

private:
    bool LeaveBatch() const { return lane_.aborting() || !enabled(); }
    void Halt();
    // Runs the CB at `head`, framed in the `published` slots from there.
    CbOutcome Run(const spyre_cb& cb, uint32_t head, uint32_t published, Clock::time_point started, bool& cancelled);

    RegisterFile& regs_;
    CbExecutor& executor_;
    HostLink& host_link_;
    const QueueLane& lane_;
    const std::function<bool()> aborted_;  // the executor's view of lane_.aborting()
    spyre_doorbell_page* const db_;
    QueuePair pair_;
    std::atomic<bool> enabled_{false};
    // Guarded by the lane's exec lock: the last CB carried LINK and failed,
    // so the next one is cancelled (spyre_cb.h, "Linked CBs").
    bool cancel_next_ = false;
    // Guarded by the lane's exec lock: bit n, ring stream n failed (spyre_cb.h,
    // "Ring streams"); mirrored in RING_STREAMS_FAILED.
    uint64_t streams_failed_ = 0;
    std::array<uint8_t, SPYRE_CB_INLINE_MAX_BYTES> payload_{};  // inline payload of the CB being served
};

}  // namespace spyre::mockdev
