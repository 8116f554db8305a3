// SPDX-License-Identifier: Apache-2.0
// Internal: DMA dispatch. Copies that do not go in the ring (large
// host->device, every device->host) run on the device's DMAEngine beside
// the ring, one at a time per stream (the stream waits for it: FIFO), and
// complete their stream when their ticket does. The engine counts them and
// traces them on the DMA track; this records the stream's op span.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "spyre/memory/dma_engine.hpp"
#include "stream/stream_state.hpp"

namespace spyre::detail {

class DmaDispatch {
public:
    DmaDispatch(DMAEngine& engine, std::string device) : engine_(engine), device_(std::move(device)) {}

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
        DmaTicket ticket;
        OpKind kind;
        uint64_t device_addr;
        // The host buffer the runtime made for the copy: the DMA engine
        // uses it until the ticket completes, so it lives as long as the record.
        std::shared_ptr<const void> keep_alive;
        OpTrace trace = {};
        bool traced = false;  // a trace recorded when the copy started
    };
    Error Failure(const Record& r, const Error& e) const;
    // The copy's op span on the stream's track.
    void Trace(const Record& r);

    DMAEngine& engine_;
    const std::string device_;
    std::vector<Record> records_;
};

}  // namespace spyre::detail
