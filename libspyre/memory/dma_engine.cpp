// SPDX-License-Identifier: Apache-2.0
#include "spyre/memory/dma_engine.hpp"

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "spyre/driver/dma_queue.hpp"
#include "spyre/error.hpp"
#include "trace/recorder.hpp"

namespace spyre {

static_assert(std::is_same_v<DmaTicket, driver::DmaQueue::Ticket>);

namespace {

const char* SpanName(uint8_t direction) noexcept {
    static constexpr const char* kNames[] = {"CopyToDevice", "CopyFromDevice", "CopyOnDevice"};
    return kNames[direction];
}

}  // namespace

void DMAEngine::Count(Direction direction, uint64_t size) noexcept {
    Counter& c = direction == Direction::ToDevice ? to_device_ : direction == Direction::FromDevice ? from_device_ : on_device_;
    c.copies.fetch_add(1, std::memory_order_relaxed);
    c.bytes.fetch_add(size, std::memory_order_relaxed);
}

DmaTicket DMAEngine::Started(DmaTicket ticket, Direction direction, uint64_t size) {
    Count(direction, size);
    if (trace::Enabled()) [[unlikely]] {
        std::lock_guard lock(traced_mu_);
        traced_.emplace(ticket, Traced{direction, size, trace::detail::NowNs()});
        any_traced_.store(true, std::memory_order_relaxed);
    }
    return ticket;
}

void DMAEngine::Finished(DmaTicket ticket, bool failed, const driver::DmaCompletion* done) noexcept {
    if (failed) failed_.fetch_add(1, std::memory_order_relaxed);
    if (!any_traced_.load(std::memory_order_relaxed)) [[likely]]
        return;
    std::lock_guard lock(traced_mu_);
    auto it = traced_.find(ticket);
    if (it == traced_.end()) return;
    const Traced t = it->second;
    traced_.erase(it);
    if (traced_.empty()) any_traced_.store(false, std::memory_order_relaxed);
    // Where the queue moved the bytes: a stream hands a run of copies over
    // at once, and each one from its submission to the poll that saw it
    // end drew them in parallel, on a lane each (found probing from outside).
    if (done && done->start_ns != 0 && done->end_ns >= done->start_ns)
        TraceSpan(t.direction, t.bytes, done->start_ns, done->end_ns);
    else
        TraceSpan(t.direction, t.bytes, t.start_ns);
}

void DMAEngine::TraceSpan(Direction direction, uint64_t bytes, uint64_t start_ns, uint64_t end_ns) noexcept {
    if (!trace::Enabled()) return;
    const uint64_t recording = trace::detail::Recording();
    if (lanes_recording_ != recording) {
        lanes_.clear();
        lanes_recording_ = recording;
    }
    if (end_ns == 0) end_ns = trace::detail::NowNs();
    // The first lane free since the copy started: "<pci> DMA", then "<pci> DMA 2", ...
    auto lane = std::find_if(lanes_.begin(), lanes_.end(), [&](const Lane& l) { return l.last_end_ns <= start_ns; });
    if (lane == lanes_.end()) {
        const std::string name = device_ + " DMA" + (lanes_.empty() ? "" : " " + std::to_string(lanes_.size() + 1));
        lanes_.push_back({trace::detail::NamedTrack(name), 0});
        lane = lanes_.end() - 1;
    }
    lane->last_end_ns = end_ns;
    trace::detail::Span(lane->track, "dma", SpanName(uint8_t(direction)), start_ns, end_ns, int64_t(bytes));
}

void DMAEngine::CountRingCopy(uint64_t size, bool failed, uint64_t start_ns, uint64_t end_ns) noexcept {
    Count(Direction::ToDevice, size);
    if (failed) failed_.fetch_add(1, std::memory_order_relaxed);
    if (start_ns == 0) [[likely]]
        return;
    std::lock_guard lock(traced_mu_);
    TraceSpan(Direction::ToDevice, size, start_ns, std::max(end_ns, start_ns));
}

DmaTicket DMAEngine::CopyToDevice(const void* host, const DeviceHandle& device, uint64_t size) {
    allocator_.CheckSameProcess("DMAEngine::CopyToDevice", "DMA engine");  // the memory is the parent's
    return CopyToDeviceAt(host, allocator_.DeviceAddressToWrite(device, size), size);
}

DmaTicket DMAEngine::CopyFromDevice(void* host, const DeviceHandle& device, uint64_t size) {
    allocator_.CheckSameProcess("DMAEngine::CopyFromDevice", "DMA engine");  // the memory is the parent's
    return CopyFromDeviceAt(host, allocator_.DeviceAddress(device, size), size);
}

DmaTicket DMAEngine::CopyToDeviceAt(const void* host, uint64_t device_address, uint64_t size) {
    allocator_.CheckSameProcess("DMAEngine::CopyToDeviceAt", "DMA engine");  // the memory is the parent's
    return Started(queue_.HostToDevice(host, device_address, size), Direction::ToDevice, size);
}

DmaTicket DMAEngine::CopyFromDeviceAt(void* host, uint64_t device_address, uint64_t size) {
    allocator_.CheckSameProcess("DMAEngine::CopyFromDeviceAt", "DMA engine");  // the memory is the parent's
    return Started(queue_.DeviceToHost(host, device_address, size), Direction::FromDevice, size);
}

DmaTicket DMAEngine::CopyOnDevice(const DeviceHandle& src, const DeviceHandle& dst, uint64_t size) {
    allocator_.CheckSameProcess("DMAEngine::CopyOnDevice", "DMA engine");  // the memory is the parent's
    const uint64_t from = allocator_.DeviceAddress(src, size), to = allocator_.DeviceAddressToWrite(dst, size);
    return Started(queue_.DeviceToDevice(from, to, size), Direction::OnDevice, size);
}

uint64_t DMAEngine::Wait(DmaTicket ticket, std::chrono::milliseconds timeout) {
    allocator_.CheckSameProcess("DMAEngine::Wait", "DMA engine");  // the memory is the parent's
    try {
        const driver::DmaCompletion done = queue_.Wait(ticket, timeout);
        Finished(ticket, false, &done);
        return done.bytes;
    } catch (const Error& e) {
        if (e.kind() != ErrorKind::Timeout) Finished(ticket, true);  // a timed-out copy is still in flight
        throw;
    }
}

std::optional<uint64_t> DMAEngine::Poll(DmaTicket ticket) {
    allocator_.CheckSameProcess("DMAEngine::Poll", "DMA engine");  // the memory is the parent's
    try {
        const std::optional<driver::DmaCompletion> done = queue_.Poll(ticket);
        if (!done) return std::nullopt;
        Finished(ticket, false, &*done);
        return done->bytes;
    } catch (const Error&) {
        Finished(ticket, true);
        throw;
    }
}

driver::DmaBackend DMAEngine::backend() const noexcept { return queue_.backend(); }

DmaStats DMAEngine::Stats() const noexcept {
    auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    return DmaStats{get(to_device_.copies),   get(to_device_.bytes), get(from_device_.copies),
                    get(from_device_.bytes),  get(on_device_.copies), get(on_device_.bytes),
                    get(failed_)};
}

template <typename Submit>
uint64_t DMAEngine::Chunked(const char* what, uint64_t size, const ProgressCallback& progress, uint64_t chunk,
                            Submit submit) {
    if (chunk == 0) throw Error(ErrorKind::InvalidArgument, std::string(what) + ": a chunk of 0 bytes");
    std::vector<std::pair<DmaTicket, uint64_t>> tickets;  // ticket, bytes done when it completes
    // On a failure, the chunks still queued touch the caller's memory: let them end first.
    auto drain = [&](size_t from) {
        for (size_t j = from; j < tickets.size(); ++j) {
            try {
                Wait(tickets[j].first);
            } catch (const Error&) {
            }
        }
    };
    try {
        for (uint64_t off = 0; off < size; off += chunk) {
            const uint64_t n = std::min(chunk, size - off);
            tickets.emplace_back(submit(off, n), off + n);
        }
    } catch (...) {
        drain(0);
        throw;
    }
    uint64_t moved = 0;
    for (size_t i = 0; i < tickets.size(); ++i) {
        try {
            moved += Wait(tickets[i].first);
            // A callback that throws ends the copy too: the chunks after
            // this one must not write the caller's buffer once it unwinds.
            if (progress) progress({what, tickets[i].second, size, "bytes"});
        } catch (...) {
            drain(i + 1);
            throw;
        }
    }
    if (size == 0 && progress) progress({what, 0, 0, "bytes"});
    return moved;
}

uint64_t DMAEngine::CopyToDevice(const void* host, const DeviceHandle& device, uint64_t size,
                                 const ProgressCallback& progress, uint64_t chunk) {
    allocator_.CheckSameProcess("DMAEngine::CopyToDevice", "DMA engine");  // the memory is the parent's
    const uint64_t base = allocator_.DeviceAddressToWrite(device, size);  // the whole range is checked first
    const auto* src = static_cast<const uint8_t*>(host);
    return Chunked("copy to device", size, progress, chunk,
                   [&](uint64_t off, uint64_t n) { return CopyToDeviceAt(src + off, base + off, n); });
}

uint64_t DMAEngine::CopyFromDevice(void* host, const DeviceHandle& device, uint64_t size,
                                   const ProgressCallback& progress, uint64_t chunk) {
    allocator_.CheckSameProcess("DMAEngine::CopyFromDevice", "DMA engine");  // the memory is the parent's
    const uint64_t base = allocator_.DeviceAddress(device, size);
    auto* dst = static_cast<uint8_t*>(host);
    return Chunked("copy from device", size, progress, chunk,
                   [&](uint64_t off, uint64_t n) { return CopyFromDeviceAt(dst + off, base + off, n); });
}

}  // namespace spyre
