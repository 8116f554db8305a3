// SPDX-License-Identifier: Apache-2.0
// DmaDispatch against a private mock: a copy keeps its stream busy until
// its ticket completes, then completes the stream's op; bytes round-trip;
// a copy the DMA engine refuses faults the stream with the op named.
#include <chrono>
#include <numeric>
#include <thread>

#include "device/device_core.hpp"
#include "device/device_internals.hpp"
#include "stream/dma_dispatch.hpp"
#include "stream_fixture.hpp"
#include "stream_test_util.hpp"

using namespace spyre;
using namespace spyre::detail;
using namespace spyre::test;

namespace {

QueuedOp CopyOp(OpKind kind, uint64_t addr, uint64_t size, const void* src, void* dst) {
    QueuedOp op;
    op.kind = kind;
    op.device_addr = addr;
    op.size = size;
    op.src = src;
    op.dst = dst;
    return op;
}

// Polls until the stream's op `seq` completed (bounded: a hang fails the test).
bool PollUntil(DmaDispatch& dma, StreamState& s, uint64_t seq) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (s.completed.load() <= seq) {
        dma.Poll();
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::yield();
    }
    return true;
}

}  // namespace

TEST_F(StreamTest, DmaDispatchRoundTripsAndKeepsTheStreamBusy) {
    Device dev = OpenDevice();
    DeviceCore& core = *DeviceInternals::Core(dev);
    // A dispatcher of its own on the device's DMA queue (the scheduler's is busy elsewhere).
    DmaDispatch dma(*core.dma, core.function->pci_address());
    const size_t n = 1 << 20;
    DeviceAllocation a = dev.allocator().Allocate(n);
    std::vector<uint8_t> out(n), back(n, 0);
    std::iota(out.begin(), out.end(), uint8_t(3));
    StreamState s(0, 0);
    EXPECT_TRUE(dma.empty());

    auto keep = std::make_shared<int>(1);
    QueuedOp in = CopyOp(OpKind::CopyToDevice, Addr(dev, a.handle, n), n, out.data(), nullptr);
    in.keep_alive = keep;
    ASSERT_TRUE(dma.Start(s, in, 0));
    EXPECT_TRUE(s.host_busy) << "the stream waits for its copy";
    EXPECT_FALSE(dma.empty());
    ASSERT_TRUE(PollUntil(dma, s, 0));
    EXPECT_FALSE(s.host_busy);
    EXPECT_EQ(keep.use_count(), 1) << "the staging buffer is let go once the copy is done";

    QueuedOp outop = CopyOp(OpKind::CopyFromDevice, Addr(dev, a.handle, n), n, nullptr, back.data());
    ASSERT_TRUE(dma.Start(s, outop, 1));
    ASSERT_TRUE(PollUntil(dma, s, 1));
    EXPECT_EQ(back, out);
    EXPECT_FALSE(s.faulted.load());
    EXPECT_TRUE(dma.empty());
    dev.allocator().Free(a.handle);
}

TEST_F(StreamTest, DmaDispatchFaultsTheStreamOnARefusedCopy) {
    Device dev = OpenDevice();
    DeviceCore& core = *DeviceInternals::Core(dev);
    DmaDispatch dma(*core.dma, core.function->pci_address());
    StreamState s(5, 0);
    uint64_t word = 7;
    QueuedOp wild = CopyOp(OpKind::CopyToDevice, ~0ull - 64, 8, &word, nullptr);
    // Refused at once or failed on completion: either way op #2 of stream 5 fails.
    if (dma.Start(s, wild, 2)) {
        ASSERT_TRUE(PollUntil(dma, s, 2));
    }
    EXPECT_EQ(s.completed.load(), 3u);
    EXPECT_FALSE(s.host_busy);
    ASSERT_TRUE(s.fault.has_value());
    EXPECT_NE(std::string(s.fault->what()).find("stream 5 op #2: CopyToDevice failed"), std::string::npos)
        << s.fault->what();
    EXPECT_EQ(s.fault->context().stream, 5);
    EXPECT_EQ(s.fault->context().op_index, 2u);
    EXPECT_EQ(s.fault->context().address, ~0ull - 64);
}

// The host memory a copy holds is let go before its op completes: a caller
// woken by the completion (Synchronize) may count on it being free (Python
// checks that a synchronized stream holds none of its arrays). Before, it
// went just after, on the scheduler thread, racing the woken caller.
TEST_F(StreamTest, DmaDispatchLetsGoOfTheHostMemoryBeforeTheOpCompletes) {
    Device dev = OpenDevice();
    DeviceCore& core = *DeviceInternals::Core(dev);
    DmaDispatch dma(*core.dma, core.function->pci_address());
    const size_t n = 1 << 16;
    DeviceAllocation a = dev.allocator().Allocate(n);
    std::vector<uint8_t> bytes(n, 5);
    StreamState s(0, 0);
    // The stream's completed count when the holder went.
    uint64_t completed_at_release = ~0ull;
    auto holder = [&] {
        return std::shared_ptr<const void>(new int(0), [&](const int* p) {
            completed_at_release = s.completed.load();
            delete p;
        });
    };
    QueuedOp copy = CopyOp(OpKind::CopyToDevice, Addr(dev, a.handle, n), n, bytes.data(), nullptr);
    copy.keep_alive = holder();
    ASSERT_TRUE(dma.Start(s, copy, 0));
    ASSERT_TRUE(PollUntil(dma, s, 0));
    EXPECT_EQ(completed_at_release, 0u) << "let go only after op #0 completed";

    QueuedOp wild = CopyOp(OpKind::CopyToDevice, ~0ull - 64, 8, bytes.data(), nullptr);
    wild.keep_alive = holder();
    if (dma.Start(s, wild, 1)) {
        ASSERT_TRUE(PollUntil(dma, s, 1));
    }
    EXPECT_EQ(completed_at_release, 1u) << "a refused copy let go only after its op completed";
    dev.allocator().Free(a.handle);
}
