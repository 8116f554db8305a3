// SPDX-License-Identifier: Apache-2.0
// Internal: DMA dispatch. Copies that do not go in the ring (large
// host->device, every device->host) run on the DMA engine beside the ring,
// one at a time per stream (the stream waits for it: FIFO), and complete
// their stream when their ticket does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "spyre/driver/dma_queue.hpp"
#include "stream/stream_state.hpp"

namespace spyre::detail {

class DmaDispatch {
public:
    DmaDispatch(driver::DmaQueue& queue, std::string device) : queue_(queue), device_(std::move(device)) {}

    bool empty() const { return records_.empty(); }
    // Starts the copy `op` (op #seq of `s`, already taken off its queue).
    // A copy the DMA engine refuses faults the stream and completes at once.
    // Returns true if it is running.
    bool Start(StreamState& s, QueuedOp& op, uint64_t seq);
    // Completes the streams whose copies finished. Returns true if any did.
    bool Poll();
    // The device is gone: waits for each running copy (it reads or writes
    // host memory the caller reclaims once its stream completes), then
    // fails its stream with `lost`.
    void FailAll(const Error& lost);

private:
    struct Record {
        StreamState* stream;
        uint64_t seq;
        driver::DmaQueue::Ticket ticket;
        OpKind kind;
        uint64_t device_addr;
        // The host buffer the runtime made for the copy: the DMA engine
        // uses it until the ticket completes, so it lives as long as the record.
        std::shared_ptr<const void> keep_alive;
        OpTrace trace = {};
        uint64_t bytes = 0;
        uint64_t start_ns = 0;  // while a trace records: when the copy started
    };
    Error Failure(const Record& r, const Error& e) const;
    // The copy's span on the DMA track and its op's on the stream's.
    void Trace(const Record& r);

    driver::DmaQueue& queue_;
    const std::string device_;
    std::vector<Record> records_;
    uint32_t trace_track_ = 0;
    uint64_t trace_recording_ = 0;
};

}  // namespace spyre::detail
