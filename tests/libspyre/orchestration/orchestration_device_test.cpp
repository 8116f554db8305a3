// SPDX-License-Identifier: Apache-2.0
// The orchestration runtime on a device (private spyre-mockdev): the heap
// ring is an allocation of the function's SpyreAllocator, buffers are
// addresses in the function's mapped memory, so data uploaded with the DMA
// engine is what tasks read and what they write comes back byte-exact; PF
// and VF alike; the C API opens a function by PCI address.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "spyre/orchestration.hpp"
#include "stream_fixture.hpp"

using spyre::test::StreamTest;
using namespace spyre;

namespace {

enum : int32_t { KERNEL_ADD = 1, KERNEL_MUL = 2 };

uint32_t Add(std::span<void* const> b, std::span<const uint64_t> s) {
    for (size_t i = 0; i < s[2] / 4; ++i)
        static_cast<float*>(b[2])[i] = static_cast<const float*>(b[0])[i] + static_cast<const float*>(b[1])[i];
    return 0;
}
uint32_t Mul(std::span<void* const> b, std::span<const uint64_t> s) {
    for (size_t i = 0; i < s[2] / 4; ++i)
        static_cast<float*>(b[2])[i] = static_cast<const float*>(b[0])[i] * static_cast<const float*>(b[1])[i];
    return 0;
}

// Example 1 of the seed on `dev`: D = (A + B) * C over 256 floats.
void RunExample1(Device& dev) {
    const uint64_t live_before = dev.allocator().Stats().live_allocations;
    {
        Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 16, .heap_size = 1 << 20, .host_threads = 2});
        EXPECT_EQ(dev.allocator().Stats().live_allocations, live_before + 1);  // the heap ring
        orch.RegisterHostKernel(KERNEL_ADD, Add);
        orch.RegisterHostKernel(KERNEL_MUL, Mul);
        std::vector<float> a(256), b(256), c(256), d(256), want(256);
        for (int i = 0; i < 256; ++i) a[i] = float(i) * 0.5f, b[i] = float(3 - i), c[i] = float(i % 7), want[i] = (a[i] + b[i]) * c[i];
        DeviceBuffer A = dev.AllocateBuffer(1024), B = dev.AllocateBuffer(1024), C = dev.AllocateBuffer(1024),
                     D = dev.AllocateBuffer(1024);
        dev.dma().Wait(dev.dma().CopyToDevice(a.data(), A.handle(), 1024));
        dev.dma().Wait(dev.dma().CopyToDevice(b.data(), B.handle(), 1024));
        dev.dma().Wait(dev.dma().CopyToDevice(c.data(), C.handle(), 1024));
        auto at = [&](const DeviceBuffer& x) { return orch.HostAddress(dev.allocator().DeviceAddress(x.handle(), 1024), 1024); };
        {
            auto scope = orch.BeginScope();
            TaskParam p0[] = {{PARAM_INPUT, at(A), 1024, {}}, {PARAM_INPUT, at(B), 1024, {}}, {PARAM_OUTPUT, nullptr, 1024, {}}};
            const int32_t t0 = orch.Submit(KERNEL_ADD, WORKER_VECTOR, p0);
            void* t0_out = orch.TaskOutput(t0);
            // The implicit output lies in the heap ring, inside the function's memory.
            EXPECT_LT(orch.DeviceAddress(t0_out), orch.memory_size());
            TaskParam p1[] = {{PARAM_INPUT, t0_out, 1024, {}}, {PARAM_INPUT, at(C), 1024, {}}, {PARAM_OUTPUT, at(D), 1024, {}}};
            orch.Submit(KERNEL_MUL, WORKER_VECTOR, p1);
        }
        orch.WaitAll();
        dev.dma().Wait(dev.dma().CopyFromDevice(d.data(), D.handle(), 1024));
        EXPECT_EQ(0, std::memcmp(d.data(), want.data(), 1024));

        // Memory outside the function (here: host memory) is refused.
        TaskParam bad[] = {{PARAM_INPUT, a.data(), 1024, {}}, {PARAM_INPUT, at(B), 1024, {}}, {PARAM_OUTPUT, nullptr, 1024, {}}};
        EXPECT_SPYRE_ERROR(orch.Submit(KERNEL_ADD, WORKER_VECTOR, bad), InvalidArgument, "outside the function's memory");
    }
    EXPECT_EQ(dev.allocator().Stats().live_allocations, live_before);  // the heap went back
}

TEST_F(StreamTest, OrchestrationExample1OnThePf) {
    Device dev = OpenDevice();
    RunExample1(dev);
}

TEST_F(StreamTest, OrchestrationExample1OnAVf) {
    Device dev = OpenDevice(0);
    RunExample1(dev);
}

TEST_F(StreamTest, OrchestrationCApiOpensAFunctionByAddress) {
    Runtime* rt = pto_runtime_create(Pf().pci_address.c_str(), 8, 1 << 16);
    ASSERT_NE(rt, nullptr) << pto_last_error();
    void* p = pto_alloc(rt, 4096);
    ASSERT_NE(p, nullptr) << pto_last_error();
    uint64_t device_address = 0;
    EXPECT_EQ(pto_device_address(rt, p, &device_address), 0);
    EXPECT_EQ(pto_host_address(rt, device_address, 4096), p);
    EXPECT_EQ(pto_free(rt, p), 0);
    EXPECT_EQ(pto_wait_all(rt), 0);
    pto_runtime_destroy(rt);
    EXPECT_EQ(pto_runtime_create("no-such-function", 8, 1 << 16), nullptr);
    EXPECT_STRNE(pto_last_error(), "");
}

}  // namespace
