// SPDX-License-Identifier: Apache-2.0
// Internal: the scheduler thread. It pulls each stream's incoming control
// blocks, issues them in FIFO order per stream (ring work chained under one
// doorbell, copies on the DMA engine, callbacks on this thread), reaps
// completions and turns failures into sticky stream errors.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "device/device_core.hpp"
#include "spyre/driver/command_ring.hpp"

namespace spyre {

class Scheduler::Impl {
public:
    Impl(DeviceCore& core, const SchedulerOptions& options);
    ~Impl();

    void Start();
    void Stop();

    StreamState* CreateStream(int priority);
    // Shared: a caller may still hold a stream the scheduler has let go.
    std::shared_ptr<StreamState> Find(int stream_index);
    void Retire(StreamState* state);
    std::vector<std::shared_ptr<StreamState>> Streams();

    // Producer side: makes `cb` visible to the scheduler thread.
    void Push(StreamState& s, ControlBlock cb);
    void PushGroup(StreamState& s, std::span<ControlBlock> group);
    void Wake();
    // A DMA copy finished (called from the DMA engine's threads).
    void DmaDone() {
        dma_done_.fetch_add(1, std::memory_order_seq_cst);
        if (sleeping_.load(std::memory_order_seq_cst) && sleeping_.exchange(0, std::memory_order_seq_cst)) Wake();
    }
    bool OnSchedulerThread() const { return std::this_thread::get_id() == thread_.get_id(); }
    bool lost() const { return lost_.load(std::memory_order_acquire); }
    const Error& lost_error() const { return *lost_error_; }
    SchedulerStats Stats() const;

private:
    struct RingRecord {
        StreamState* stream;
        uint64_t seq;
        uint64_t user_data;
        ControlBlock::Kind kind;
        uint64_t value;  // EventRecord: the sequence it writes
        std::shared_ptr<EventState> event;
    };
    struct DmaRecord {
        StreamState* stream;
        uint64_t seq;
        driver::DmaQueue::Ticket ticket;
        ControlBlock::Kind kind;
        uint64_t device_addr;
        // The host buffer the runtime made for the copy (a packed staging
        // image, a program): the DMA engine reads or writes it until the
        // ticket completes, so it lives exactly as long as the record.
        std::shared_ptr<const void> keep_alive;
    };

    void Run();
    bool RefreshStreams();
    bool PullIncoming();
    bool ReapRing();
    bool PollDma();
    bool IssueHostWork();
    bool SubmitRing();
    void IdleWait();

    bool IsRingOp(const ControlBlock& cb) const;
    bool RingReady(const StreamState& s) const;
    size_t SlotsFor(const ControlBlock& cb) const;
    size_t ChainSlots(const StreamState& s, size_t* cbs) const;
    void AppendRingOp(StreamState& s);
    std::vector<StreamState*> TurnOrder();

    void Complete(StreamState& s, uint64_t seq);
    void Fault(StreamState& s, uint64_t seq, Error error);
    bool DropFaulted(StreamState& s);
    void FaultAll(const Error& error);
    void CompleteEvent(EventState& ev, uint64_t seq, uint64_t timestamp_ns, const std::optional<Error>& error);
    Error DeviceFailure(const StreamState& s, uint64_t seq, const RingRecord& rec, uint16_t status, uint64_t result) const;

    DeviceCore& core_;
    const SchedulerOptions options_;
    std::optional<driver::CommandRing> ring_;
    size_t inline_max_ = 0;

    std::mutex streams_mu_;
    std::vector<std::shared_ptr<StreamState>> streams_;  // registered, by creation
    std::atomic<uint64_t> streams_version_{0};
    int next_index_ = 0;

    // Scheduler thread only.
    std::vector<StreamState*> active_;
    uint64_t active_version_ = ~0ull;
    std::deque<RingRecord> ring_records_;
    std::vector<DmaRecord> dma_records_;
    std::vector<spyre_cb> batch_;
    std::vector<driver::Completion> completions_;
    size_t rr_cursor_ = 0;
    StreamState* drain_current_ = nullptr;
    uint64_t next_user_data_ = 1;
    uint64_t dma_seen_ = 0;

    std::atomic<uint32_t> wake_seq_{0};
    std::atomic<uint32_t> sleeping_{0};
    std::atomic<uint64_t> dma_done_{0};
    std::atomic<bool> stopping_{false};
    std::atomic<bool> lost_{false};
    std::optional<Error> lost_error_;

    mutable std::mutex stats_mu_;
    SchedulerStats stats_;

    std::thread thread_;
};

}  // namespace spyre
