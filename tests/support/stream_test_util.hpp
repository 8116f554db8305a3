// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the stream tests: device programs that write known values,
// a gate that holds a stream (or the scheduler thread) at a host callback, and
// bounded waits so a broken scheduler fails a test instead of hanging it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "spyre/device/device.hpp"
#include "spyre/stream/flex_stream.hpp"
#include "spyre/compiler/kernel_builder.hpp"

namespace spyre::test {

// Several programs in one device allocation (each 128-aligned), uploaded once.
struct ProgramTable {
    DeviceAllocation block{PFDeviceHandle{}, 0};
    std::vector<DeviceHandle> handles;
    std::vector<uint64_t> sizes;

    static ProgramTable Upload(Device& dev, const std::vector<std::vector<uint8_t>>& programs) {
        ProgramTable t;
        std::vector<uint64_t> offsets;
        uint64_t total = 0;
        for (const auto& p : programs) {
            offsets.push_back(total);
            total += (p.size() + 127) / 128 * 128;
        }
        std::vector<uint8_t> image(total, 0);
        for (size_t i = 0; i < programs.size(); ++i) std::memcpy(image.data() + offsets[i], programs[i].data(), programs[i].size());
        t.block = dev.allocator().Allocate(total);
        dev.dma().Wait(dev.dma().CopyToDevice(image.data(), t.block.handle, total));
        for (size_t i = 0; i < programs.size(); ++i) {
            t.handles.push_back(t.block.handle.Offset(offsets[i], programs[i].size(), t.block));
            t.sizes.push_back(programs[i].size());
        }
        return t;
    }
};

inline uint64_t Addr(Device& dev, const DeviceHandle& h, uint64_t size) { return dev.allocator().DeviceAddress(h, size); }

// A program that copies 8 bytes from `src` to `dst` (device addresses).
inline std::vector<uint8_t> Copy8Program(uint64_t src, uint64_t dst) {
    const BuiltKernel k = KernelBuilder().Copy({2}, DType::INT32);
    const std::vector<uint64_t> addrs = {src, dst};
    return k.Bind(addrs);
}

// A program that fills 8 bytes at `dst` with two int32 copies of `v`.
inline std::vector<uint8_t> Fill8Program(uint64_t dst, int32_t v) {
    const BuiltKernel k = KernelBuilder().Fill({2}, double(v), DType::INT32);
    const std::vector<uint64_t> addrs = {dst};
    return k.Bind(addrs);
}
// What Fill8Program leaves in the 8 bytes, read as a u64.
inline uint64_t Fill8Value(int32_t v) { return (uint64_t(uint32_t(v)) << 32) | uint32_t(v); }

// Holds whoever calls Wait() until Open(); Entered() tells when someone waits.
class Gate {
public:
    void Wait() {
        std::unique_lock lock(mu_);
        ++entered_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return open_; });
    }
    void Open() {
        std::lock_guard lock(mu_);
        open_ = true;
        cv_.notify_all();
    }
    // Waits (bounded) until Wait() has been called `n` times.
    bool WaitEntered(int n = 1, std::chrono::seconds limit = std::chrono::seconds(20)) {
        std::unique_lock lock(mu_);
        return cv_.wait_for(lock, limit, [&] { return entered_ >= n; });
    }
    // A host callback that holds its stream (and the scheduler thread) here.
    std::function<void()> Callback() {
        return [this] { Wait(); };
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool open_ = false;
    int entered_ = 0;
};

// Polls `done` until it holds or `limit` passes; true if it held.
inline bool Eventually(const std::function<bool()>& done, std::chrono::seconds limit = std::chrono::seconds(20)) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() > until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// Synchronize with a hang guard: fails the test (instead of hanging) if the
// stream does not go idle or faulted within `limit`.
inline ::testing::AssertionResult SettlesWithin(const FlexStream& s, std::chrono::seconds limit = std::chrono::seconds(30)) {
    if (Eventually([&] { return s.Query() != StreamStatus::Busy && s.completed() >= s.enqueued(); }, limit))
        return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "stream " << s.stream_index() << " still busy after " << limit.count()
                                         << " s: " << s.completed() << " of " << s.enqueued() << " ops done";
}

}  // namespace spyre::test
