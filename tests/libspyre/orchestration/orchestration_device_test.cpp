// SPDX-License-Identifier: Apache-2.0
// The orchestration runtime on a device (private spyre-mockdev): the heap
// ring is an allocation of the function's SpyreAllocator, buffers are
// addresses in the function's mapped memory, so data uploaded with the DMA
// engine is what tasks read and what they write comes back byte-exact; PF
// and VF alike; the C API opens a function by PCI address.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <filesystem>

#include "device/device_internals.hpp"
#include "spyre/compiler/kernel_builder.h"
#include "spyre/compiler/kernel_builder.hpp"
#include "spyre/compiler/plan_writer.hpp"
#include "spyre/device/host.hpp"
#include "spyre/orchestration.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/uapi/spyre_regs.h"
#include "device_programs.hpp"
#include "refused_program.hpp"
#include "example1_check.hpp"
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
        // The heap ring, and the device worker's argument tables (one per
        // task slot of the function's task queues).
        EXPECT_EQ(dev.allocator().Stats().live_allocations, live_before + 2);
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
    Device dev = OpenDevice(1);
    ASSERT_TRUE(DeviceInternals::Function(dev).is_vf());
    RunExample1(dev);
}

// Uploads an elementwise add over 256 floats (operands A, B, C relocated
// from argument slots 0, 1, 2) to `dev` and registers it as KERNEL_ADD.
DeviceBuffer UploadAddKernel(Device& dev, Orchestrator& orch) {
    const std::vector<uint8_t> program = test::AddProgram256();
    DeviceBuffer prog = test::UploadProgram(dev, program);
    orch.RegisterDeviceKernel(KERNEL_ADD, dev.allocator().DeviceAddress(prog.handle(), program.size()));
    return prog;
}

// One KERNEL_ADD task over a new 1 KiB buffer of the runtime's heap.
void SubmitAdd(Orchestrator& orch) {
    auto* a = static_cast<float*>(orch.Alloc(1024));
    TaskParam p[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, nullptr, 1024, {}}};
    orch.Submit(KERNEL_ADD, WORKER_VECTOR, p);
}

// Device kernels run on the card's cores through the task queues (the
// DeviceWorker): an elementwise add from one uploaded program serves many
// tasks with different buffers; a kernel whose program the device refuses
// fails with the device's code, and its consumer is skipped.
TEST_F(StreamTest, OrchestrationDeviceKernelsRunOnTheCardsCores) {
    Device dev = OpenDevice();
    Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20});
    DeviceBuffer prog = UploadAddKernel(dev, orch);

    constexpr int kTasks = 40;
    std::vector<float*> a(kTasks), b(kTasks), c(kTasks);
    {
        auto scope = orch.BeginScope();
        for (int t = 0; t < kTasks; ++t) {
            a[t] = static_cast<float*>(orch.Alloc(1024));
            b[t] = static_cast<float*>(orch.Alloc(1024));
            for (int i = 0; i < 256; ++i) a[t][i] = float(t * 1000 + i), b[t][i] = float(-i) * 0.25f;
            TaskParam p[] = {{PARAM_INPUT, a[t], 1024, {}}, {PARAM_INPUT, b[t], 1024, {}}, {PARAM_OUTPUT, nullptr, 1024, {}}};
            const int32_t id = orch.Submit(KERNEL_ADD, WORKER_VECTOR, p);
            c[t] = static_cast<float*>(orch.TaskOutput(id, 0));
        }
        orch.WaitAll();
        for (int t = 0; t < kTasks; ++t)
            for (int i = 0; i < 256; ++i)
                ASSERT_EQ(c[t][i], a[t][i] + b[t][i]) << "task " << t << " element " << i;
    }
    for (int t = 0; t < kTasks; ++t) orch.Free(a[t]), orch.Free(b[t]);
    // Counted by the device: every task ran on a core, none as a host callback.
    EXPECT_GE(DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_TASKS_DONE), uint64_t(kTasks));

    // A program of an op the device does not know: it refuses it with its code.
    const std::vector<uint8_t> unknown_op = RefusedProgram(1);
    DeviceBuffer junk = test::UploadProgram(dev, unknown_op);
    orch.RegisterDeviceKernel(KERNEL_MUL, dev.allocator().DeviceAddress(junk.handle(), unknown_op.size()));
    int32_t bad = -1;
    {
        auto scope = orch.BeginScope();
        TaskParam p[] = {{PARAM_OUTPUT, nullptr, 1024, {}}};
        bad = orch.Submit(KERNEL_MUL, WORKER_CUBE, p);
        TaskParam q[] = {{PARAM_INPUT, orch.TaskOutput(bad, 0), 1024, {}}, {PARAM_INPUT, orch.TaskOutput(bad, 0), 1024, {}},
                         {PARAM_OUTPUT, nullptr, 1024, {}}};
        orch.Submit(KERNEL_ADD, WORKER_VECTOR, q);
    }
    try {
        orch.WaitAll();
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceError) << e.what();
        EXPECT_NE(e.context().device_code, 0u) << e.what();
        EXPECT_NE(std::string(e.what()).find("task " + std::to_string(bad)), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("skipped"), std::string::npos) << e.what();
    }
}

// The daemon dies: the device tasks in flight and every one submitted
// after fail as DeviceLost, saying the device was lost (they used to fail
// as DeviceError SPYRE_ERR_ABORTED, which reads as a function reset).
TEST_F(StreamTest, OrchestrationTasksOfADeviceThatIsGoneFailAsDeviceLost) {
    Device dev = OpenDevice();
    Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20});
    DeviceBuffer prog = UploadAddKernel(dev, orch);
    auto submit = [&] { SubmitAdd(orch); };
    for (int i = 0; i < 8; ++i) submit();
    orch.WaitAll();  // the device works
    daemon().Signal(SIGKILL);
    ASSERT_TRUE(spyre::test::WaitForExit(daemon().pid())) << "the daemon outlived SIGKILL";
    for (int round = 0; round < 2; ++round) {  // what the loss fails, then what comes after it
        for (int i = 0; i < 4; ++i) submit();
        try {
            orch.WaitAll();
            FAIL() << "no error";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::DeviceLost) << e.what();
            EXPECT_NE(e.message().find("the device was lost (the device model serving this function is gone"), std::string::npos) << e.what();
            EXPECT_EQ(e.message().find("ABORTED"), std::string::npos) << e.what();
        }
    }
    // The C API names the failed task too (task_id was -1 for DeviceLost).
    auto* a = static_cast<float*>(orch.Alloc(1024));
    TaskParam p[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, nullptr, 1024, {}}};
    const int32_t id = pto_submit_task(orch.handle(), KERNEL_ADD, WORKER_VECTOR, p, 3);
    ASSERT_GE(id, 0) << pto_last_error();
    ASSERT_EQ(pto_wait_all(orch.handle()), -ENODEV) << pto_last_error();
    pto_error_info info{};
    ASSERT_EQ(pto_last_error_info(&info), -ENODEV);
    EXPECT_EQ(info.kind, PTO_ERROR_DEVICE_LOST);
    EXPECT_EQ(info.task_id, id) << info.message;
    EXPECT_EQ(info.kernel_id, KERNEL_ADD) << info.message;
    // Device memory of a device that is gone is refused, not handed out
    // (pto_device_malloc returned a buffer).
    EXPECT_EQ(pto_device_malloc(orch.handle(), 4096), nullptr);
    ASSERT_EQ(pto_last_error_info(&info), -ENODEV) << info.message;
    EXPECT_NE(std::string(info.message).find("the device model serving this function is gone"), std::string::npos)
        << info.message;
    EXPECT_SPYRE_ERROR(dev.AllocateBuffer(64), DeviceLost, "the device model serving this function is gone");
}

// A function reset under an open Device (its reset file, SPYRE_IOC_RESET,
// the PF's holder) drops the queues' work and positions: a stream's ring
// copy and the runtime's tasks then fail as DeviceLost saying so. Both
// waited for good (found probing from outside: Synchronize and WaitAll
// hung, and a DeviceBuffer's destructor with them).
TEST_F(StreamTest, AFunctionResetUnderItsDeviceFailsItsWorkAsDeviceLost) {
    Device dev = OpenDevice();
    Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20});
    DeviceBuffer prog = UploadAddKernel(dev, orch);
    FlexStream s = dev.CreateStream();
    DeviceBuffer buf = dev.AllocateBuffer(64);
    std::vector<uint8_t> bytes(64, 0x5a), back(64, 0);
    auto submit = [&] { SubmitAdd(orch); };
    for (int i = 0; i < 8; ++i) submit();
    orch.WaitAll();  // the device works
    s.CopyToDevice(bytes.data(), buf.handle(), 64);
    s.CopyFromDevice(back.data(), buf.handle(), 64);
    s.Synchronize();
    ASSERT_EQ(back, bytes);
    DeviceInternals::Function(dev).Reset();
    // Bounded, so a hang fails the test instead of the suite's timeout.
    auto within = [](auto&& wait) {
        auto done = std::async(std::launch::async, [&]() -> std::optional<Error> {
            try {
                wait();
            } catch (const Error& e) {
                return e;
            }
            return std::nullopt;
        });
        if (done.wait_for(std::chrono::seconds(30)) != std::future_status::ready) std::abort();  // a hang
        return done.get();
    };
    s.CopyToDevice(bytes.data(), buf.handle(), 64);
    const std::optional<Error> copy = within([&] { s.Synchronize(); });
    ASSERT_TRUE(copy.has_value()) << "a copy after the reset completed";
    EXPECT_EQ(copy->kind(), ErrorKind::DeviceLost) << copy->what();
    EXPECT_NE(copy->message().find("was reset while the CB ring was in use"), std::string::npos) << copy->what();
    for (int i = 0; i < 4; ++i) submit();
    const std::optional<Error> tasks = within([&] { orch.WaitAll(); });
    ASSERT_TRUE(tasks.has_value()) << "tasks after the reset completed";
    EXPECT_EQ(tasks->kind(), ErrorKind::DeviceLost) << tasks->what();
    EXPECT_NE(tasks->message().find("was reset while task queue"), std::string::npos) << tasks->what();
}

// A reset while a thread keeps submitting device tasks into a small ring:
// the submitter ends with DeviceLost, whether it was in Submit waiting for
// room or in WaitAll (it slept for good about one time in six, and the
// first wait read DeviceError ABORTED: found probing from outside).
TEST_F(StreamTest, AResetUnderASubmittingThreadEndsItWithDeviceLost) {
    for (int round = 0; round < 12; ++round) {
        Device dev = OpenDevice();
        Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 8, .heap_size = 1 << 20});
        DeviceBuffer prog = UploadAddKernel(dev, orch);
        auto* a = static_cast<float*>(orch.DeviceMalloc(1024));  // outside the heap ring, which the outputs cycle
        std::atomic<int> submitted{0};
        auto outcome = std::async(std::launch::async, [&]() -> std::optional<Error> {
            try {
                for (int i = 0; i < 100000; ++i) {
                    TaskParam p[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, nullptr, 1024, {}}};
                    orch.Submit(KERNEL_ADD, WORKER_VECTOR, p);
                    ++submitted;
                }
                orch.WaitAll();
            } catch (const Error& e) {
                return e;
            }
            return std::nullopt;
        });
        while (submitted < 20 + round * 7) std::this_thread::yield();
        DeviceInternals::Function(dev).Reset();
        if (outcome.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
            ADD_FAILURE() << "round " << round << ": the submitter still waits 30 s after the reset";
            std::abort();  // a hang: the thread cannot be joined
        }
        const std::optional<Error> e = outcome.get();
        ASSERT_TRUE(e.has_value()) << "round " << round << ": 100000 tasks completed across a reset";
        EXPECT_EQ(e->kind(), ErrorKind::DeviceLost) << "round " << round << ": " << e->what();
        EXPECT_NE(e->message().find("was reset while task queue"), std::string::npos) << e->what();
    }
}

// A reset while the task queues are idle: the next device tasks fail as
// DeviceLost too (they ran as if no reset had been, 20/20 with none
// before it: found probing from outside), and so does a small copy on a
// stream (the CB ring).
TEST_F(StreamTest, AResetOfAnIdleDeviceFailsWhatComesNextAsDeviceLost) {
    for (const int before : {0, 1, 8}) {
        Device dev = OpenDevice();
        Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 16, .heap_size = 1 << 20});
        DeviceBuffer prog = UploadAddKernel(dev, orch);
        for (int i = 0; i < before; ++i) SubmitAdd(orch);
        orch.WaitAll();
        FlexStream s = dev.CreateStream();
        DeviceBuffer buf = dev.AllocateBuffer(64);
        std::vector<uint8_t> bytes(64, 0x5a);
        s.CopyToDevice(bytes.data(), buf.handle(), 64);
        s.Synchronize();
        DeviceInternals::Function(dev).Reset();
        SubmitAdd(orch);
        try {
            orch.WaitAll();
            ADD_FAILURE() << before << " tasks before: a task after the reset completed";
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::DeviceLost) << e.what();
            EXPECT_NE(e.message().find("was reset while task queue"), std::string::npos) << e.what();
        }
        s.CopyToDevice(bytes.data(), buf.handle(), 64);
        EXPECT_SPYRE_ERROR(s.Synchronize(), DeviceLost, "was reset while the CB ring");
    }
}

// Two runtimes on one device, each on its own task queue (a card of 16
// cores has two): both run their device tasks exactly, and the cores of
// each runtime's tasks are those of its queue's group. A third runtime on
// a held queue is Busy; a queue the device does not have is InvalidArgument.
// The runtimes take their queues through the Device, as anyone must.
TEST(OrchestrationQueues, TwoRuntimesOnDisjointQueuesOfOneDevice) {
    SPYRE_REQUIRE_FUSE();
    HostOptions o = HostOptions::EmbeddedMock(1, 0, "1G");
    o.embedded_mock.extra_args = {"--cores", "16"};
    Host host = Host::Open(o);
    Device dev = host.Open("0");
    std::vector<Orchestrator> orchs;
    for (uint32_t q = 0; q < 2; ++q)
        orchs.push_back(Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20, .task_queues = {q}}));
    EXPECT_SPYRE_ERROR(Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20, .task_queues = {1}}), Busy,
                       "task queue 1 of " + dev.pci_address() +
                           " is held by another Orchestrator of this process (a level-3 Worker's runtimes on this "
                           "device included): close it first, or give each runtime its own "
                           "OrchestratorOptions::task_queues");
    EXPECT_SPYRE_ERROR(Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20, .task_queues = {2}}),
                       InvalidArgument, "task queue 2 does not exist on");
    ASSERT_EQ(DeviceInternals::TaskTopology(dev).queues(), 2u);
    EXPECT_EQ(DeviceInternals::TaskTopology(dev).cores(), 16u);
    EXPECT_SPYRE_ERROR(DeviceInternals::TakeTaskQueue(dev, 0), Busy, "task queue 0 of " + dev.pci_address() + " is held by another Orchestrator");
    EXPECT_SPYRE_ERROR(DeviceInternals::TakeTaskQueue(dev, 2), InvalidArgument, "task queue 2 does not exist on");
    const std::vector<uint8_t> program = test::AddProgram256();
    DeviceBuffer prog = test::UploadProgram(dev, program);
    for (Orchestrator& orch : orchs) orch.RegisterDeviceKernel(KERNEL_ADD, dev.allocator().DeviceAddress(prog.handle(), program.size()));
    const uint64_t done_before = DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_TASKS_DONE);
    std::vector<std::thread> threads;
    std::vector<std::string> failures(2);
    for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
            Orchestrator& orch = orchs[size_t(r)];
            auto scope = orch.BeginScope();
            std::vector<float*> a(20), c(20);
            for (int t = 0; t < 20; ++t) {
                a[size_t(t)] = static_cast<float*>(orch.Alloc(1024));
                for (int i = 0; i < 256; ++i) a[size_t(t)][i] = float(r * 100000 + t * 1000 + i);
                TaskParam p[] = {{PARAM_INPUT, a[size_t(t)], 1024, {}}, {PARAM_INPUT, a[size_t(t)], 1024, {}},
                                 {PARAM_OUTPUT, nullptr, 1024, {}}};
                c[size_t(t)] = static_cast<float*>(orch.TaskOutput(orch.Submit(KERNEL_ADD, WORKER_VECTOR, p), 0));
            }
            orch.WaitAll();
            for (int t = 0; t < 20; ++t)
                for (int i = 0; i < 256; ++i)
                    if (c[size_t(t)][i] != 2 * a[size_t(t)][i] && failures[size_t(r)].empty())
                        failures[size_t(r)] = "runtime " + std::to_string(r) + " task " + std::to_string(t) + " element " +
                                              std::to_string(i) + " is " + std::to_string(c[size_t(t)][i]);
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(failures[0], "");
    EXPECT_EQ(failures[1], "");
    EXPECT_EQ(DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_TASKS_DONE) - done_before, 40u);
    // Freed with its runtime: the queue can be taken again.
    orchs.pop_back();
    EXPECT_EQ(DeviceInternals::TakeTaskQueue(dev, 1)->group(), 1u);
    EXPECT_NO_THROW(Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20, .task_queues = {1}}));
}

// Threads of this process.
size_t ThreadCount() {
    auto tasks = std::filesystem::directory_iterator("/proc/self/task");
    return size_t(std::distance(begin(tasks), end(tasks)));
}

// Threads of this process with the name `name` (/proc/self/task/*/comm).
int ThreadsNamed(const std::string& name) {
    int n = 0;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
        std::ifstream comm(task.path() / "comm");
        std::string line;
        if (std::getline(comm, line) && line == name) ++n;
    }
    return n;
}

// The runtime has no thread of its own for the device's queues: its callers
// drive them, and the Device's one thread (the scheduler's, which serves the
// streams) steps in only while no caller waits (on a host of few CPUs each
// spinning waiter would take a CPU from the submitter and the device).
// Tasks spread over the groups still all complete, exactly.
TEST(OrchestrationQueues, TheDevicesThreadServesEveryCoreGroup) {
    SPYRE_REQUIRE_FUSE();
    HostOptions o = HostOptions::EmbeddedMock(1, 0, "1G");
    o.embedded_mock.extra_args = {"--cores", "16"};
    Host host = Host::Open(o);
    Device dev = host.Open("0");
    ASSERT_EQ(DeviceInternals::TaskTopology(dev).queues(), 2u);
    const int sched_before = ThreadsNamed("spyre-sched");
    const size_t threads_before = ThreadCount();
    // Two host workers, and no other thread.
    Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20, .host_threads = 2});
    EXPECT_EQ(ThreadCount() - threads_before, 2u);
    EXPECT_EQ(ThreadsNamed("spyre-taskport"), 0);
    EXPECT_EQ(ThreadsNamed("spyre-sched"), sched_before);
    const std::vector<uint8_t> program = test::AddProgram256();
    DeviceBuffer prog = test::UploadProgram(dev, program);
    orch.RegisterDeviceKernel(KERNEL_ADD, dev.allocator().DeviceAddress(prog.handle(), program.size()));
    const uint64_t done_before = DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_TASKS_DONE);
    const SchedulerStats stats_before = dev.scheduler().Stats();
    auto scope = orch.BeginScope();
    std::vector<float*> a(50), c(50);
    for (int t = 0; t < 50; ++t) {
        a[size_t(t)] = static_cast<float*>(orch.Alloc(1024));
        for (int i = 0; i < 256; ++i) a[size_t(t)][i] = float(t * 1000 + i);
        TaskParam p[] = {{PARAM_INPUT, a[size_t(t)], 1024, {}}, {PARAM_INPUT, a[size_t(t)], 1024, {}},
                         {PARAM_OUTPUT, nullptr, 1024, {}}};
        c[size_t(t)] = static_cast<float*>(orch.TaskOutput(orch.Submit(KERNEL_ADD, WORKER_CUBE, p), 0));
    }
    orch.WaitAll();
    for (int t = 0; t < 50; ++t)
        for (int i = 0; i < 256; ++i) ASSERT_EQ(c[size_t(t)][i], 2 * a[size_t(t)][i]) << "task " << t << " element " << i;
    EXPECT_EQ(DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_TASKS_DONE) - done_before, 50u);
    // The Device counts the task queues' work beside the ring's.
    const SchedulerStats stats = dev.scheduler().Stats();
    EXPECT_EQ(stats.tasks_sent - stats_before.tasks_sent, 50u);
    EXPECT_EQ(stats.tasks_reaped - stats_before.tasks_reaped, 50u);
    EXPECT_GE(stats.task_doorbells - stats_before.task_doorbells, 1u);
    EXPECT_LE(stats.task_doorbells - stats_before.task_doorbells, 50u);
}

// A runtime on the PF of a card of its own, with the device's add kernel
// registered as KERNEL_ADD.
struct OneCardRuntime {
    explicit OneCardRuntime(int32_t task_ring_size)
        : host(Host::Open(HostOptions::EmbeddedMock(1, 0, "1G"))),
          dev(host.Open("0")),
          orch(Orchestrator::Create(dev, {.task_ring_size = task_ring_size, .heap_size = 1 << 20})),
          program(test::AddProgram256()),
          prog(test::UploadProgram(dev, program)) {
        orch.RegisterDeviceKernel(KERNEL_ADD, dev.allocator().DeviceAddress(prog.handle(), program.size()));
    }
    // Registers as `kernel` a program of an op the device does not know:
    // it refuses every task of it (UNKNOWN_OP).
    void RegisterRefused(int32_t kernel) {
        const std::vector<uint8_t> unknown_op = RefusedProgram(1);
        refused = test::UploadProgram(dev, unknown_op);
        orch.RegisterDeviceKernel(kernel, dev.allocator().DeviceAddress(refused.handle(), unknown_op.size()));
    }
    Host host;
    Device dev;
    Orchestrator orch;
    std::vector<uint8_t> program;
    DeviceBuffer prog;
    DeviceBuffer refused;
};

// A chain of device tasks runs to its end while the submitting thread does
// something else and never calls the runtime: the task port's thread reaps
// each completion and sends the next task (callers drive only while they
// are in the runtime). The device's task counter shows the progress.
TEST(OrchestrationQueues, AChainRunsOnWhileTheSubmitterIsBusyElsewhere) {
    SPYRE_REQUIRE_FUSE();
    OneCardRuntime rt(256);
    Device& dev = rt.dev;
    Orchestrator& orch = rt.orch;
    const uint64_t done_before = DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_TASKS_DONE);
    constexpr int kLinks = 100;
    auto* x = static_cast<float*>(orch.Alloc(1024));
    for (int i = 0; i < 256; ++i) x[i] = float(i % 5);
    // x = x + x, kLinks times, each link waiting for the one before.
    for (int t = 0; t < kLinks; ++t) {
        TaskParam p[] = {{PARAM_INPUT, x, 1024, {}}, {PARAM_INPUT, x, 1024, {}}, {PARAM_OUTPUT, x, 1024, {}}};
        orch.Submit(KERNEL_ADD, WORKER_VECTOR, p);
    }
    uint64_t done = 0;
    for (int look = 0; look < 20000 && done < kLinks; ++look) {  // at most ~20 s: a bound, not a timing
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        done = DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_TASKS_DONE) - done_before;
    }
    EXPECT_EQ(done, uint64_t(kLinks)) << "the chain stopped while nobody called the runtime";
    orch.WaitAll();
    for (int i = 0; i < 256; ++i) ASSERT_EQ(x[i], float(i % 5) * 0x1p100f) << "element " << i;
}

// The Device's thread serves the task ports also while its streams keep it
// busy: here a stream's host callbacks (1 ms sleeps, each queueing the next
// before it returns, two at a time) run back to back on it, never leaving
// it idle, while a chain of device task -> host task links runs and nobody
// calls the runtime. The chain stood still for as long as the callbacks
// went on (an outside probe: 10 links in 2.95 s, all at the end); they go
// on here until the chain is done, or for 20 s.
TEST(OrchestrationQueues, AChainRunsOnWhileTheDevicesThreadRunsStreamCallbacks) {
    SPYRE_REQUIRE_FUSE();
    OneCardRuntime rt(64);
    Device& dev = rt.dev;
    Orchestrator& orch = rt.orch;
    constexpr int kHost = 40, kLinks = 10;
    std::atomic<int> host_ran{0};
    orch.RegisterHostKernel(kHost, [&](std::span<void* const>, std::span<const uint64_t>) -> uint32_t {
        ++host_ran;
        return 0;
    });
    FlexStream fs = dev.CreateStream();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::atomic<bool> gave_up{false};
    std::function<void()> tick = [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (host_ran.load() >= kLinks) return;
        if (std::chrono::steady_clock::now() > until) {
            gave_up = true;
            return;
        }
        fs.AddCallback(tick);
    };
    fs.AddCallback(tick);
    fs.AddCallback(tick);
    auto* x = static_cast<float*>(orch.Alloc(1024));
    for (int i = 0; i < 256; ++i) x[i] = float(i % 3);
    TaskParam add[] = {{PARAM_INPUT, x, 1024, {}}, {PARAM_INPUT, x, 1024, {}}, {PARAM_OUTPUT, x, 1024, {}}};
    TaskParam host[] = {{PARAM_INPUT, x, 1024, {}}, {PARAM_OUTPUT, x, 1024, {}}};
    for (int k = 0; k < kLinks; ++k) {
        orch.Submit(KERNEL_ADD, WORKER_VECTOR, add);
        orch.Submit(kHost, WORKER_HOST, host);
    }
    fs.Synchronize();  // the callbacks end when the chain is done or after 20 s; the runtime is not called
    EXPECT_FALSE(gave_up.load()) << "the chain stood still while the stream's callbacks ran (" << host_ran.load()
                                 << " of " << kLinks << " links)";
    orch.WaitAll();
    for (int i = 0; i < 256; ++i) ASSERT_EQ(x[i], float(i % 3) * 0x1p10f) << "element " << i;
}

// A chain's links wait for each other on the card (contract 3.1): a link
// the device refuses fails, and the links after it never run (the card
// completes those it holds DEPENDENCY_FAILED): they are skipped with the
// refused task as their root, and the buffer holds what the links before
// it made.
TEST(OrchestrationQueues, ALinkTheDeviceRefusesStopsTheRestOfTheChainOnTheCard) {
    SPYRE_REQUIRE_FUSE();
    OneCardRuntime rt(256);
    Device& dev = rt.dev;
    Orchestrator& orch = rt.orch;
    rt.RegisterRefused(KERNEL_MUL);
    auto* x = static_cast<float*>(orch.Alloc(1024));
    for (int i = 0; i < 256; ++i) x[i] = float(i % 5);
    TaskParam doubling[] = {{PARAM_INPUT, x, 1024, {}}, {PARAM_INPUT, x, 1024, {}}, {PARAM_OUTPUT, x, 1024, {}}};
    for (int t = 0; t < 10; ++t) orch.Submit(KERNEL_ADD, WORKER_VECTOR, doubling);
    TaskParam refused_params[] = {{PARAM_INOUT, x, 1024, {}}};
    const int32_t refused = orch.Submit(KERNEL_MUL, WORKER_CUBE, refused_params);
    for (int t = 0; t < 10; ++t) orch.Submit(KERNEL_ADD, WORKER_VECTOR, doubling);
    try {
        orch.WaitAll();
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceError) << e.what();
        EXPECT_EQ(e.context().op_index, uint64_t(refused)) << e.what();
        EXPECT_NE(e.message().find("10 dependent task(s) skipped"), std::string::npos) << e.what();
    }
    for (int i = 0; i < 256; ++i) ASSERT_EQ(x[i], float(i % 5) * 1024.0f) << "element " << i;
    // The card ran the ten links before the refused one, and no link after
    // it. The links it held back count as its errors (DEPENDENCY_FAILED);
    // one submitted after the refusal was seen is skipped on the host
    // instead, so only the bounds are certain.
    EXPECT_EQ(DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_TASKS_DONE), 10u);
    const uint64_t errors = DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_TASK_ERRORS);
    EXPECT_GE(errors, 1u);
    EXPECT_LE(errors, 11u);
}

// A device task that only follows a refused one (it overwrites all the
// refused task's INOUT, reading other buffers) runs, as it does on the
// host (fan_out.hpp), and so does its reader. Both were handed to the card
// behind the refused task, which held them back DEPENDENCY_FAILED; the
// runtime then sends them again, in order, waiting for nothing.
TEST(OrchestrationQueues, ATaskThatOnlyFollowsARefusedOneRunsOnTheCard) {
    SPYRE_REQUIRE_FUSE();
    OneCardRuntime rt(256);
    Orchestrator& orch = rt.orch;
    rt.RegisterRefused(KERNEL_MUL);
    auto* a = static_cast<float*>(orch.Alloc(1024));
    auto* x = static_cast<float*>(orch.Alloc(1024));
    auto* y = static_cast<float*>(orch.Alloc(1024));
    for (int round = 0; round < 5; ++round) {
        for (int i = 0; i < 256; ++i) a[i] = float(i + round), x[i] = -1.0f, y[i] = -1.0f;
        TaskParam refused_params[] = {{PARAM_INOUT, x, 1024, {}}};
        const int32_t refused = orch.Submit(KERNEL_MUL, WORKER_CUBE, refused_params);
        TaskParam overwrite[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, x, 1024, {}}};
        orch.Submit(KERNEL_ADD, WORKER_VECTOR, overwrite);
        TaskParam read[] = {{PARAM_INPUT, x, 1024, {}}, {PARAM_INPUT, x, 1024, {}}, {PARAM_OUTPUT, y, 1024, {}}};
        orch.Submit(KERNEL_ADD, WORKER_VECTOR, read);
        try {
            orch.WaitAll();
            FAIL() << "no error";
        } catch (const Error& e) {
            EXPECT_EQ(e.context().op_index, uint64_t(refused)) << e.what();
            EXPECT_NE(e.message().find("1 task(s) failed, 0 dependent task(s) skipped"), std::string::npos) << e.what();
        }
        for (int i = 0; i < 256; ++i) {
            ASSERT_EQ(x[i], 2.0f * float(i + round)) << "round " << round << " element " << i;
            ASSERT_EQ(y[i], 4.0f * float(i + round)) << "round " << round << " element " << i;
        }
    }
}

// A reader of bytes that two tasks wrote over after a skipped writer runs,
// also where the regions cross a 64 KiB granule of the runtime's hazard
// map (host addresses). The map cut the skipped writer's entry twice; the
// first cut left a piece filed under the granule above, which the piece no
// longer touched, so the second cut missed it there and this reader met
// it: skipped, its output never written (found probing from outside).
TEST(OrchestrationQueues, AReaderOfBytesWrittenOverAfterASkippedWriterRunsAcrossAGranule) {
    SPYRE_REQUIRE_FUSE();
    OneCardRuntime rt(256);
    Orchestrator& orch = rt.orch;
    rt.RegisterRefused(KERNEL_MUL);
    constexpr uint64_t kGranule = 64 << 10;
    auto* window = static_cast<uint8_t*>(orch.Alloc(3 * kGranule));
    auto* f = static_cast<float*>(orch.Alloc(1024));
    auto* a = static_cast<float*>(orch.Alloc(1024));
    auto* y = static_cast<float*>(orch.Alloc(1024));
    const uintptr_t first = reinterpret_cast<uintptr_t>(window) + 4096;
    uint8_t* const boundary = window + ((first + kGranule - 1) / kGranule * kGranule - reinterpret_cast<uintptr_t>(window));
    auto at = [&](ptrdiff_t offset) { return reinterpret_cast<float*>(boundary + offset); };
    for (int round = 0; round < 5; ++round) {
        // The model: 2048 bytes from boundary - 1024, as the tasks leave them.
        std::vector<float> model(512, -1.0f);
        for (int i = 0; i < 512; ++i) at(-1024)[i] = -1.0f;
        for (int i = 0; i < 256; ++i) a[i] = float(i + round), f[i] = 1.0f, y[i] = -1.0f;
        auto add_a = [&](ptrdiff_t out) {  // out = a + a, as the model sees it
            for (int i = 0; i < 256; ++i) model[size_t((out + 1024) / 4 + i)] = 2.0f * a[i];
        };
        TaskParam refused[] = {{PARAM_INOUT, f, 1024, {}}};
        const int32_t failed = orch.Submit(KERNEL_MUL, WORKER_CUBE, refused);
        TaskParam skipped[] = {{PARAM_INPUT, f, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, at(-600), 1024, {}}};
        orch.Submit(KERNEL_ADD, WORKER_VECTOR, skipped);  // reads what failed: skipped, writes nothing
        TaskParam over1[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, at(-300), 1024, {}}};
        orch.Submit(KERNEL_ADD, WORKER_VECTOR, over1);  // leaves the skipped one [-600, -300)
        add_a(-300);
        TaskParam over2[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, at(-500), 1024, {}}};
        orch.Submit(KERNEL_ADD, WORKER_VECTOR, over2);  // leaves it [-600, -500)
        add_a(-500);
        TaskParam reader[] = {{PARAM_INPUT, at(-400), 1024, {}}, {PARAM_INPUT, at(-400), 1024, {}}, {PARAM_OUTPUT, y, 1024, {}}};
        orch.Submit(KERNEL_ADD, WORKER_VECTOR, reader);
        try {
            orch.WaitAll();
            FAIL() << "no error";
        } catch (const Error& e) {
            EXPECT_EQ(e.context().op_index, uint64_t(failed)) << e.what();
            EXPECT_NE(e.message().find("1 task(s) failed, 1 dependent task(s) skipped"), std::string::npos) << e.what();
        }
        for (int i = 0; i < 512; ++i) ASSERT_EQ(at(-1024)[i], model[size_t(i)]) << "round " << round << " float " << i;
        for (int i = 0; i < 256; ++i)
            ASSERT_EQ(y[i], 2.0f * model[size_t((1024 - 400) / 4 + i)]) << "round " << round << " element " << i;
    }
}

// An n x n x n fp32 matmul program (the kernel builder's) registered as
// KERNEL_MUL, and its operands: a filled with `a_value`, b with `b_value`,
// c with -1. `params` are the task's: a, b in, c out.
struct Matmul {
    float* a = nullptr;
    float* b = nullptr;
    float* c = nullptr;
    TaskParam params[3] = {};
};
Matmul RegisterMatmul(Orchestrator& orch, int64_t n, float a_value, float b_value) {
    const spyre_kernel_spec mm = {.kind = SPYRE_KERNEL_MATMUL, .dtype = SPYRE_DTYPE_FP32, .rank = 3, .shape = {n, n, n}};
    std::vector<uint8_t> image(size_t(spyre_build_kernel(&mm, nullptr, 0)));
    if (spyre_build_kernel(&mm, image.data(), image.size()) <= 0) throw std::runtime_error("matmul kernel not built");
    if (pto_register_program(orch.handle(), KERNEL_MUL, image.data(), image.size()) != 0)
        throw std::runtime_error(pto_last_error());
    const uint64_t bytes = uint64_t(n * n) * 4;
    Matmul m{static_cast<float*>(orch.Alloc(bytes)), static_cast<float*>(orch.Alloc(bytes)),
             static_cast<float*>(orch.Alloc(bytes))};
    for (int64_t i = 0; i < n * n; ++i) m.a[i] = a_value, m.b[i] = b_value, m.c[i] = -1.0f;
    m.params[0] = {PARAM_INPUT, m.a, bytes, {}};
    m.params[1] = {PARAM_INPUT, m.b, bytes, {}};
    m.params[2] = {PARAM_OUTPUT, m.c, bytes, {}};
    return m;
}

// The card names tasks only within one lap of a queue's SQ: a consumer of
// a long task that more than a lap of other tasks went past on the same
// queue waits in the host until it ends (named, the card would refuse it
// with BAD_DEPENDENCY), and reads what it wrote.
TEST(OrchestrationQueues, AConsumerOfATaskALapOfTheQueueWentPastStillRuns) {
    SPYRE_REQUIRE_FUSE();
    Host host = Host::Open(HostOptions::EmbeddedMock(1, 0, "1G"));
    Device dev = host.Open("0");
    // One queue, so that every task goes through the same SQ.
    Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 2048, .heap_size = 128 << 20, .task_queues = {0}});
    const std::vector<uint8_t> add = test::AddProgram256();
    DeviceBuffer add_prog = test::UploadProgram(dev, add);
    orch.RegisterDeviceKernel(KERNEL_ADD, dev.allocator().DeviceAddress(add_prog.handle(), add.size()));
    constexpr int64_t n = 2048;  // a matmul that runs far longer than the short tasks
    Matmul mm = RegisterMatmul(orch, n, 1.0f, 2.0f);
    float* c = mm.c;
    // Once first: the card then knows the queue's tasks run long and gives
    // the next one a core of its own, not its lane (which would serve no
    // other task until it ended).
    orch.Submit(KERNEL_MUL, WORKER_CUBE, mm.params);
    orch.WaitAll();
    orch.Submit(KERNEL_MUL, WORKER_CUBE, mm.params);
    // More short tasks than the SQ has entries, none touching c.
    auto* x = static_cast<float*>(orch.Alloc(1024));
    for (int i = 0; i < 256; ++i) x[i] = 1.0f;
    constexpr int kShort = 1100;
    auto* ys = static_cast<float*>(orch.Alloc(1024 * kShort));
    for (int t = 0; t < kShort; ++t) {
        TaskParam p[] = {{PARAM_INPUT, x, 1024, {}}, {PARAM_INPUT, x, 1024, {}}, {PARAM_OUTPUT, ys + 256 * t, 1024, {}}};
        orch.Submit(KERNEL_ADD, WORKER_VECTOR, p);
    }
    // c + c, waiting for the matmul: 2 * (1 * 2 * n) everywhere.
    auto* d = static_cast<float*>(orch.Alloc(1024));
    TaskParam consumer[] = {{PARAM_INPUT, c, 1024, {}}, {PARAM_INPUT, c, 1024, {}}, {PARAM_OUTPUT, d, 1024, {}}};
    orch.Submit(KERNEL_ADD, WORKER_VECTOR, consumer);
    orch.WaitAll();
    for (int i = 0; i < 256; ++i) ASSERT_EQ(d[i], 4.0f * float(n)) << "element " << i;
}

// A daemon stopped with SIGSTOP is neither gone nor working: its process
// lives and writes no GONE. Waits on it used to wait for ever (a device
// task's wait has no timeout). Its heartbeat (contract 3.3) stands still,
// so the runtime's waits and the stream's fail as DeviceLost within the
// driver's bound, naming the bound; the device stays lost to this process
// after the daemon goes on, and a function opened again works.
TEST_F(StreamTest, WaitsOnAStoppedDaemonFailAsDeviceLostWithinTheHeartbeatBound) {
    test::ScopedEnv bound("SPYRE_HEARTBEAT_TIMEOUT_MS", "1000");
    const spyre::test::ResumeAtScopeEnd go_on(daemon());
    // a + a into a buffer of its own, which it returns.
    auto submit = [](Orchestrator& orch) {
        auto* a = static_cast<float*>(orch.Alloc(1024));
        auto* sum = static_cast<float*>(orch.Alloc(1024));
        for (int i = 0; i < 256; ++i) a[i] = float(i), sum[i] = -1.0f;
        TaskParam p[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, sum, 1024, {}}};
        orch.Submit(KERNEL_ADD, WORKER_VECTOR, p);
        return sum;
    };
    auto expect_not_responding = [](const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceLost) << e.what();
        EXPECT_NE(e.message().find("stopped responding: its heartbeat has not moved for 1000 ms"), std::string::npos)
            << e.what();
    };
    {
        Device dev = OpenDevice();
        Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20});
        DeviceBuffer prog = UploadAddKernel(dev, orch);
        for (int i = 0; i < 8; ++i) submit(orch);
        orch.WaitAll();  // the device works, and keeps working past the bound
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        const float* sum = submit(orch);
        orch.WaitAll();
        for (int i = 0; i < 256; ++i) ASSERT_EQ(sum[i], 2.0f * float(i)) << i;
        std::vector<uint8_t> bytes(4096, 0x5a), back(4096);
        DeviceBuffer buf = dev.AllocateBuffer(bytes.size());

        daemon().Signal(SIGSTOP);
        ASSERT_TRUE(spyre::test::WaitUntilStopped(daemon().pid())) << "the daemon did not stop";
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 4; ++i) submit(orch);
        try {
            orch.WaitAll();
            FAIL() << "no error";
        } catch (const Error& e) {
            expect_not_responding(e);
        }
        // Bounded: the bound and a health period or two, not a wait's 30 s
        // timeout (nor for ever, as before).
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
        try {  // memory of the lost device is not handed out
            dev.AllocateBuffer(bytes.size());
            FAIL() << "no error";
        } catch (const Error& e) {
            expect_not_responding(e);
        }
        try {
            dev.default_stream().CopyToDevice(bytes.data(), buf.handle(), bytes.size());
            dev.default_stream().CopyFromDevice(back.data(), buf.handle(), back.size());
            dev.default_stream().Synchronize();
            FAIL() << "no error";
        } catch (const Error& e) {
            expect_not_responding(e);
        }
        daemon().Signal(SIGCONT);
        try {  // lost for good to this Device
            submit(orch);
            orch.WaitAll();
            FAIL() << "no error";
        } catch (const Error& e) {
            expect_not_responding(e);
        }
    }
    // The function opened again: the device beats, and works. Stopped
    // again, the Device closes while the daemon stays stopped: closing asks
    // the stopped daemon nothing (its release ioctl waited for ever).
    {
        Device dev = OpenDevice();
        Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 64, .heap_size = 1 << 20});
        DeviceBuffer prog = UploadAddKernel(dev, orch);
        const float* sum = submit(orch);
        orch.WaitAll();
        for (int i = 0; i < 256; ++i) ASSERT_EQ(sum[i], 2.0f * float(i)) << i;
        daemon().Signal(SIGSTOP);
        ASSERT_TRUE(spyre::test::WaitUntilStopped(daemon().pid())) << "the daemon did not stop";
        submit(orch);
        try {
            orch.WaitAll();
            FAIL() << "no error";
        } catch (const Error& e) {
            expect_not_responding(e);
        }
    }
    daemon().Signal(SIGCONT);
}

// A busy device is not a stopped one: the card beats while one task keeps
// a core for longer than the bound (the lane and the cores do not beat),
// and the task completes with its result.
TEST(OrchestrationQueues, ATaskLongerThanTheHeartbeatBoundIsNotALostDevice) {
    SPYRE_REQUIRE_FUSE();
    // (A bound well above the heartbeat's period plus the waiter's health
    // period, 200 ms, so a loaded host's scheduling delay is no loss.)
    test::ScopedEnv bound("SPYRE_HEARTBEAT_TIMEOUT_MS", "1000");
    // The card's own watchdog (10 s by default) is not under test: a daemon
    // under ThreadSanitizer on a loaded host runs this task past it.
    HostOptions options = HostOptions::EmbeddedMock(1, 0, "1G");
    options.embedded_mock.extra_args = {"--watchdog-ms", "600000"};
    Host host = Host::Open(options);
    Device dev = host.Open("0");
    Orchestrator orch = Orchestrator::Create(dev, {.heap_size = 384 << 20});
    constexpr int64_t n = 5120;  // 268 GFLOP on one core: 2.5-3 s with AVX-512 kernels on these VMs
    Matmul mm = RegisterMatmul(orch, n, 1.0f, 0.5f);
    const auto t0 = std::chrono::steady_clock::now();
    orch.Submit(KERNEL_MUL, WORKER_CUBE, mm.params);
    orch.WaitAll();
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_GT(took, std::chrono::milliseconds(1200)) << "the task was too short to show anything";
    for (int64_t i = 0; i < n * n; i += 997) ASSERT_EQ(mm.c[i], 0.5f * float(n)) << "element " << i;
}

// WaitAllFor waits in slices: it returns false once its time is up, while a
// host task is held (the waiter sleeps on the graph) and while a long device
// task runs (the waiter drives the device's task queues), and true once
// nothing is in flight. It reports nothing: a failed task's error comes
// from the WaitAll after it, which returns at once.
TEST(OrchestrationQueues, WaitAllForWaitsASliceAndLeavesTheReportToWaitAll) {
    SPYRE_REQUIRE_FUSE();
    Host host = Host::Open(HostOptions::EmbeddedMock(1, 0, "1G"));
    Device dev = host.Open("0");
    Orchestrator orch = Orchestrator::Create(dev, {.heap_size = 64 << 20});
    constexpr int32_t kHeld = 41, kFails = 42;  // (the 2048^3 matmul's 48 MiB fit the heap)
    std::atomic<bool> release{false};
    orch.RegisterHostKernel(kHeld, [&](std::span<void* const>, std::span<const uint64_t>) -> uint32_t {
        while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return 0;
    });
    orch.RegisterHostKernel(kFails, [](std::span<void* const>, std::span<const uint64_t>) -> uint32_t { return 7; });
    auto* x = static_cast<float*>(orch.Alloc(1024));
    const TaskParam p[] = {{PARAM_INOUT, x, 1024, {}}};
    orch.Submit(kHeld, WORKER_HOST, p);
    EXPECT_FALSE(orch.WaitAllFor(std::chrono::milliseconds(20)));  // held: the slice ends
    EXPECT_FALSE(orch.WaitAllFor(std::chrono::nanoseconds(-5)));   // a past deadline looks once
    release = true;
    EXPECT_TRUE(orch.WaitAllFor(std::chrono::seconds(60)));
    orch.WaitAll();
    // A device task of about 170 ms on one core (2048^3 fp32) or more: a
    // slice of 2 ms ends while the waiter drives the task queues, and
    // while another thread's WaitAll drives them (a slice does not wait
    // for that driver's lock).
    constexpr int64_t n = 2048;
    Matmul mm = RegisterMatmul(orch, n, 1.0f, 0.5f);
    orch.Submit(KERNEL_MUL, WORKER_CUBE, mm.params);
    EXPECT_FALSE(orch.WaitAllFor(std::chrono::milliseconds(2)));
    std::thread other([&] { orch.WaitAll(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // (it drives by now, mostly)
    EXPECT_FALSE(orch.WaitAllFor(std::chrono::milliseconds(2)));
    other.join();
    EXPECT_TRUE(orch.WaitAllFor(std::chrono::nanoseconds::max()));  // no overflow: waits for good
    for (int64_t i = 0; i < n * n; i += 997) ASSERT_EQ(mm.c[i], 0.5f * float(n)) << "element " << i;
    orch.WaitAll();
    // A failure: the slice says done, WaitAll reports it.
    const int32_t failed = orch.Submit(kFails, WORKER_HOST, p);
    EXPECT_TRUE(orch.WaitAllFor(std::chrono::seconds(60)));
    try {
        orch.WaitAll();
        ADD_FAILURE() << "WaitAll did not report the failed task";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceError) << e.what();  // a host kernel's own return code
        EXPECT_NE(std::string(e.what()).find("task " + std::to_string(failed)), std::string::npos) << e.what();
    }
    orch.WaitAll();  // reported once
}

// A waiter of the task queues waits as the Device's wait mode says
// (SchedulerOptions::wait_mode), as Synchronize does: in Poll it never
// sleeps on the completion interrupt, in Blocking it never spins or yields
// the CPU first, in Adaptive it yields before it sleeps.
TEST(OrchestrationQueues, WaitersFollowTheDevicesWaitMode) {
    SPYRE_REQUIRE_FUSE();
    Host host = Host::Open(HostOptions::EmbeddedMock(1, 0, "1G"));
    constexpr int64_t n = 384;  // a matmul of some milliseconds on a card's core
    for (const driver::WaitMode mode : {driver::WaitMode::Poll, driver::WaitMode::Blocking, driver::WaitMode::Adaptive}) {
        SCOPED_TRACE(driver::ToString(mode));
        Device dev = host.Open("0", {.scheduler = {.wait_mode = mode}});
        Orchestrator orch = Orchestrator::Create(dev, {.heap_size = 8 << 20});
        Matmul mm = RegisterMatmul(orch, n, 1.0f, 0.5f);
        const SchedulerStats before = dev.scheduler().Stats();
        for (int round = 0; round < 3; ++round) {
            orch.Submit(KERNEL_MUL, WORKER_CUBE, mm.params);
            orch.WaitAll();
        }
        const SchedulerStats after = dev.scheduler().Stats();
        for (int64_t i = 0; i < n * n; i += 97) ASSERT_EQ(mm.c[i], 0.5f * float(n)) << "element " << i;
        const uint64_t sleeps = after.task_sleeps - before.task_sleeps;
        const uint64_t yields = after.task_yields - before.task_yields;
        switch (mode) {
            case driver::WaitMode::Poll:
                EXPECT_EQ(sleeps, 0u);
                EXPECT_EQ(yields, 0u);
                break;
            case driver::WaitMode::Blocking:
                EXPECT_GE(sleeps, 1u);
                EXPECT_EQ(yields, 0u);
                break;
            case driver::WaitMode::Adaptive:
                // (A yield on a host of few CPUs may last until the task
                // ends: the card's cores take the CPU. So it may not sleep.)
                EXPECT_GE(yields, 1u);
                break;
        }
    }
}

// A task's parameters are checked against what its device program does
// with them, at submit: the card only checks that an operand lies in the
// function's memory, so a short region or a written INPUT would let the
// program write past the buffer, or run without the dependency its write
// needs (both once returned 0 and corrupted the next buffer). Both ways of
// registering a program are covered: an uploaded one (RegisterDeviceKernel)
// and an image (pto_register_program).
// pto_copy_in over a program pto_register_program uploaded overwrote it:
// every later task of its kernel failed with PROGRAM_CHECKSUM (found
// probing from outside). Refused; a copy beside it still lands. So is a
// task that writes over a registered program.
TEST(OrchestrationQueues, ACopyInOverARegisteredProgramIsRefused) {
    SPYRE_REQUIRE_FUSE();
    OneCardRuntime rt(64);
    Runtime* h = rt.orch.handle();
    const std::vector<uint8_t> image = test::AddProgram256();
    constexpr int32_t kImageAdd = 79;
    ASSERT_EQ(pto_register_program(h, kImageAdd, image.data(), image.size()), 0) << pto_last_error();
    // Where the image went: the only copy of its bytes in the function's memory
    // besides the test's own upload (rt.prog), which is not the runtime's.
    const uint64_t own = rt.dev.allocator().DeviceAddress(rt.prog.handle(), rt.program.size());
    uint8_t* found = nullptr;
    // Blocks go lowest address first (best fit): the image is near the
    // start of the pool, behind the runtime's heap and the test's upload.
    for (const RegionStats& r : rt.dev.allocator().Stats().regions) {
        const uint64_t start = r.device_base == 0 ? SpyreAllocator::kNullGuard : 0;
        const uint64_t span = std::min<uint64_t>(r.capacity, 16ull << 20);
        auto* base = static_cast<uint8_t*>(pto_host_address(h, r.device_base + start, span));
        ASSERT_NE(base, nullptr) << pto_last_error();
        for (uint64_t off = 0; off + image.size() <= span; off += SpyreAllocator::kAlignment)
            if (r.device_base + start + off != own && std::memcmp(base + off, image.data(), image.size()) == 0)
                found = base + off;
    }
    ASSERT_NE(found, nullptr) << "the registered image is nowhere in the function's memory";
    const std::vector<uint8_t> junk(16, 0xa5);
    EXPECT_EQ(pto_copy_in(h, found + 8, junk.data(), junk.size()), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("overlaps kernel 79's registered device program"), std::string::npos)
        << pto_last_error();
    // A task whose OUTPUT lies over a registered program (the image's, or
    // a program registered by address) is refused at submit: the card
    // would have written it, and every later task of that kernel failed.
    auto* a = static_cast<float*>(rt.orch.Alloc(1024));
    auto* own_bytes = static_cast<uint8_t*>(pto_host_address(h, own, rt.program.size()));
    ASSERT_NE(own_bytes, nullptr) << pto_last_error();
    const struct {
        uint8_t* at;
        int32_t kernel;
    } over[] = {{found, kImageAdd}, {found + image.size() - 4, kImageAdd}, {own_bytes, KERNEL_ADD}};
    for (const auto& o : over) {
        TaskParam q[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, o.at, 1024, {}}};
        EXPECT_SPYRE_ERROR(rt.orch.Submit(kImageAdd, WORKER_VECTOR, q), InvalidArgument,
                           "overlaps kernel " + std::to_string(o.kernel) + "'s registered device program");
        TaskParam inout[] = {{PARAM_INOUT, o.at, 16, {}}};
        EXPECT_SPYRE_ERROR(rt.orch.Submit(KERNEL_ADD, WORKER_VECTOR, inout), InvalidArgument, "(INOUT) writes [device");
    }
    // pto_copy_in over the program registered by address (RegisterDeviceKernel)
    // as well: it was accepted, and the next task of that kernel failed
    // PROGRAM_FORMAT (probe79).
    EXPECT_EQ(pto_copy_in(h, own_bytes + rt.program.size() - 4, junk.data(), 4), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("overlaps kernel " + std::to_string(KERNEL_ADD) + "'s registered"),
              std::string::npos)
        << pto_last_error();
    EXPECT_EQ(std::memcmp(found, image.data(), image.size()), 0);  // untouched
    EXPECT_EQ(std::memcmp(own_bytes, rt.program.data(), rt.program.size()), 0);
    // The kernel still runs, and a copy into a runtime buffer still lands.
    std::vector<float> ones(256, 1.0f);
    ASSERT_EQ(pto_copy_in(h, a, ones.data(), 1024), 0) << pto_last_error();
    TaskParam p[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, nullptr, 1024, {}}};
    const int32_t id = rt.orch.Submit(kImageAdd, WORKER_VECTOR, p);
    const auto* sum = static_cast<const float*>(rt.orch.TaskOutput(id, 0));
    rt.orch.WaitAll();
    for (int i = 0; i < 256; ++i) ASSERT_EQ(sum[i], 2.0f) << i;
}

// A program registered by address in a pto_device_malloc or pto_alloc
// buffer: freeing that buffer was accepted, the next allocation got the
// address zeroed, and every later task of the kernel failed PROGRAM_FORMAT
// (probe80, 5 of 5). A kernel stays registered, so the free is refused;
// the kernel still runs.
TEST(OrchestrationQueues, AFreeOfTheBufferARegisteredProgramLiesInIsRefused) {
    SPYRE_REQUIRE_FUSE();
    OneCardRuntime rt(64);
    Runtime* h = rt.orch.handle();
    const std::vector<uint8_t> image = test::AddProgram256();
    void* in_malloc = pto_device_malloc(h, image.size());
    void* in_alloc = pto_alloc(h, 4096);
    ASSERT_NE(in_malloc, nullptr) << pto_last_error();
    ASSERT_NE(in_alloc, nullptr) << pto_last_error();
    const struct {
        void* buffer;
        int32_t kernel;
        int32_t (*free)(Runtime*, void*);
        const char* call;
    } cases[] = {{in_malloc, 91, pto_device_free, "pto_device_free"},
                 {static_cast<uint8_t*>(in_alloc) + 256, 92, pto_free, "pto_free"}};
    for (const auto& c : cases) {
        SCOPED_TRACE(c.call);
        ASSERT_EQ(pto_copy_in(h, c.buffer, image.data(), image.size()), 0) << pto_last_error();
        uint64_t at = 0;
        ASSERT_EQ(pto_device_address(h, c.buffer, &at), 0) << pto_last_error();
        ASSERT_EQ(pto_register_device_kernel(h, c.kernel, at), 0) << pto_last_error();
        void* whole = c.buffer == in_malloc ? in_malloc : in_alloc;
        EXPECT_EQ(c.free(h, whole), -EINVAL);
        EXPECT_NE(std::string(pto_last_error()).find(std::string(c.call) + ": the buffer [device address"),
                  std::string::npos)
            << pto_last_error();
        EXPECT_NE(std::string(pto_last_error()).find("holds kernel " + std::to_string(c.kernel) +
                                                     "'s registered device program"),
                  std::string::npos)
            << pto_last_error();
        // The kernel still runs.
        auto* a = static_cast<float*>(rt.orch.Alloc(1024));
        std::vector<float> ones(256, 1.5f);
        ASSERT_EQ(pto_copy_in(h, a, ones.data(), 1024), 0) << pto_last_error();
        TaskParam p[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, nullptr, 1024, {}}};
        const int32_t id = rt.orch.Submit(c.kernel, WORKER_VECTOR, p);
        const auto* sum = static_cast<const float*>(rt.orch.TaskOutput(id, 0));
        rt.orch.WaitAll();
        for (int i = 0; i < 256; ++i) ASSERT_EQ(sum[i], 3.0f) << i;
        rt.orch.Free(a);
    }
}

TEST(OrchestrationQueues, ATasksParametersAreCheckedAgainstItsDeviceProgram) {
    SPYRE_REQUIRE_FUSE();
    OneCardRuntime rt(64);
    Orchestrator& orch = rt.orch;
    const std::vector<uint8_t> image = test::AddProgram256();
    constexpr int32_t kImageAdd = 77, kCApiAdd = 78;
    ASSERT_EQ(pto_register_program(orch.handle(), kImageAdd, image.data(), image.size()), 0) << pto_last_error();
    // The C call for a program already in device memory checks the same (it
    // used to check nothing: the card wrote 1024 bytes past a 16-byte region).
    const uint64_t program_address = rt.dev.allocator().DeviceAddress(rt.prog.handle(), rt.program.size());
    ASSERT_EQ(pto_register_device_kernel(orch.handle(), kCApiAdd, program_address), 0) << pto_last_error();
    EXPECT_EQ(pto_register_device_kernel(orch.handle(), kCApiAdd + 1, 1ull << 50), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("outside"), std::string::npos) << pto_last_error();
    // Memory that holds no program is refused when it is registered, as
    // pto_register_program refuses such an image (it was taken, and every
    // task of it failed on the card with PROGRAM_FORMAT); nothing is left
    // registered, so the id takes a program afterwards.
    const std::vector<uint8_t> zeros(256, 0);
    DeviceBuffer blank = test::UploadProgram(rt.dev, zeros);
    const uint64_t blank_address = rt.dev.allocator().DeviceAddress(blank.handle(), zeros.size());
    EXPECT_EQ(pto_register_device_kernel(orch.handle(), kCApiAdd + 2, blank_address), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("kernel " + std::to_string(kCApiAdd + 2) +
                                                 "'s device program at device address"),
              std::string::npos) << pto_last_error();
    EXPECT_NE(std::string(pto_last_error()).find("is not a program image: not a program: bad magic"), std::string::npos)
        << pto_last_error();
    EXPECT_SPYRE_ERROR(orch.RegisterDeviceKernel(kCApiAdd + 2, blank_address), InvalidArgument,
                       "is not a program image");
    EXPECT_EQ(pto_register_device_kernel(orch.handle(), kCApiAdd + 2, program_address), 0) << pto_last_error();
    auto* a = static_cast<float*>(orch.Alloc(4096));
    auto* next = static_cast<float*>(orch.Alloc(1024));  // the buffer a stray write would hit
    for (int i = 0; i < 1024; ++i) a[i] = 1.0f;
    for (int i = 0; i < 256; ++i) next[i] = -3.0f;
    for (const int32_t kernel : {int32_t(KERNEL_ADD), kImageAdd, kCApiAdd}) {
        SCOPED_TRACE("kernel " + std::to_string(kernel));
        const std::string program = "kernel " + std::to_string(kernel) + "'s device program (operand 2, fp32 [256])";
        TaskParam short_output[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a + 256, 1024, {}}, {PARAM_OUTPUT, a + 1023, 4, {}}};
        EXPECT_SPYRE_ERROR(orch.Submit(kernel, WORKER_VECTOR, short_output), InvalidArgument,
                           "parameter 2 (OUTPUT) is 4 bytes, but " + program + " spans 1024 bytes");
        TaskParam short_input[] = {{PARAM_INPUT, a, 16, {}}, {PARAM_INPUT, a + 256, 1024, {}}, {PARAM_OUTPUT, a + 512, 1024, {}}};
        EXPECT_SPYRE_ERROR(orch.Submit(kernel, WORKER_VECTOR, short_input), InvalidArgument,
                           "parameter 0 (INPUT) is 16 bytes, but kernel " + std::to_string(kernel) +
                               "'s device program (operand 0, fp32 [256]) spans 1024 bytes");
        // fp32 operands start on a 4-byte boundary: the card faults MISALIGNED after the wait; refused here now.
        TaskParam misaligned[] = {{PARAM_INPUT, reinterpret_cast<uint8_t*>(a) + 2, 1024, {}}, {PARAM_INPUT, a + 256, 1024, {}},
                                  {PARAM_OUTPUT, a + 512, 1024, {}}};
        EXPECT_SPYRE_ERROR(orch.Submit(kernel, WORKER_VECTOR, misaligned), InvalidArgument,
                           "kernel " + std::to_string(kernel) + "'s device program (operand 0, fp32 [256]) must start on a multiple of 4 bytes");
        TaskParam written_input[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a + 256, 1024, {}}, {PARAM_INPUT, a + 512, 1024, {}}};
        EXPECT_SPYRE_ERROR(orch.Submit(kernel, WORKER_VECTOR, written_input), InvalidArgument,
                           "parameter 2 is an INPUT, but " + program + " writes it: pass it as OUTPUT or INOUT");
        TaskParam one[] = {{PARAM_INPUT, a, 1024, {}}};
        EXPECT_SPYRE_ERROR(orch.Submit(kernel, WORKER_VECTOR, one), InvalidArgument,
                           "kernel " + std::to_string(kernel) + "'s device program takes 3 argument(s), but the task passes 1 parameter(s)");
        // One too many: the card refuses it (RELOCATION) after the wait; refused here now.
        TaskParam four[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a + 256, 1024, {}}, {PARAM_OUTPUT, a + 512, 1024, {}},
                            {PARAM_INPUT, a, 1024, {}}};
        EXPECT_SPYRE_ERROR(orch.Submit(kernel, WORKER_VECTOR, four), InvalidArgument,
                           "takes 3 argument(s), but the task passes 4 parameter(s)");
        orch.WaitAll();
        for (int i = 0; i < 256; ++i) ASSERT_EQ(next[i], -3.0f) << "element " << i << " of the next buffer";
        // A region larger than the operand is fine (the program reads its first 1024 bytes).
        TaskParam ok[] = {{PARAM_INPUT, a, 4096, {}}, {PARAM_INPUT, a + 256, 1024, {}}, {PARAM_INOUT, a + 768, 1024, {}}};
        orch.Submit(kernel, WORKER_VECTOR, ok);
        orch.WaitAll();
        for (int i = 0; i < 256; ++i) ASSERT_EQ(a[768 + i], 2.0f) << "element " << i;
        for (int i = 0; i < 256; ++i) a[768 + i] = 1.0f;
    }
    // An operand whose extent overflows 64 bits spans "0" bytes to
    // spyre_operand_extent: every parameter passed the size check, and only
    // the card refused the task (SHAPE) at the wait. Refused when registered.
    ProgramImage huge = ProgramImage::Decode(image);
    huge.operands[0].rank = 2;
    huge.operands[0].shape[0] = 4;
    huge.operands[0].shape[1] = 64;
    huge.operands[0].strides[0] = uint64_t(INT64_MAX);
    huge.operands[0].strides[1] = 1;
    const std::vector<uint8_t> huge_image = huge.Encode();
    EXPECT_EQ(pto_register_program(orch.handle(), kImageAdd + 10, huge_image.data(), huge_image.size()), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("operand 0 (fp32 [4, 64]) spans no bytes the device can address"),
              std::string::npos)
        << pto_last_error();
    // Relocations dropped but their table's offset kept: the card faults
    // every task of it with PROGRAM_FORMAT (an empty table sits at offset
    // 0), and registration took it (found probing from outside).
    std::vector<uint8_t> unrelocated = image;
    spyre_program_header h;
    std::memcpy(&h, unrelocated.data(), sizeof h);
    ASSERT_NE(h.relocs_offset, 0u);
    h.reloc_count = h.slot_count = 0;
    h.checksum = 0;
    std::memcpy(unrelocated.data(), &h, sizeof h);
    h.checksum = uapi::ProgramChecksum(unrelocated.data(), unrelocated.size());
    std::memcpy(unrelocated.data(), &h, sizeof h);
    EXPECT_EQ(pto_register_program(orch.handle(), kImageAdd + 11, unrelocated.data(), unrelocated.size()), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("program header: table outside the program or misaligned"),
              std::string::npos)
        << pto_last_error();
    // A record the card faults with PROGRAM_FORMAT wherever its operands
    // are: registration took such images, and every task of them failed
    // (probe of 6 Dec: 820 of 1,140 accepted fuzzed images).
    const struct {
        std::function<void(ProgramImage&)> spoil;
        const char* says;
    } spoiled[] = {
        {[](ProgramImage& p) { p.ops[0].reserved0 = 1; }, "op 0: reserved op field"},
        {[](ProgramImage& p) { p.ops[0].flags = 0xffff; }, "op 0: op flag not valid for the op"},
        {[](ProgramImage& p) { p.operands[1].reserved0 = 1; }, "operand 1: reserved operand field"},
        {[](ProgramImage& p) { p.operands[2].shape[7] = 1; }, "operand 2: shape or stride past the rank"},
        {[](ProgramImage& p) { p.relocs[0].reserved = 1; }, "its relocations: reserved relocation field"},
    };
    int32_t spoiled_id = kImageAdd + 20;
    for (const auto& [spoil, says] : spoiled) {
        ProgramImage bad = ProgramImage::Decode(image);
        spoil(bad);
        const std::vector<uint8_t> bytes = bad.Encode();
        EXPECT_EQ(pto_register_program(orch.handle(), spoiled_id++, bytes.data(), bytes.size()), -EINVAL) << says;
        EXPECT_NE(std::string(pto_last_error())
                      .find(std::string(says) + " (the card would fail every task of it with PROGRAM_FORMAT)"),
                  std::string::npos)
            << pto_last_error();
    }
    EXPECT_EQ(pto_submit_task(orch.handle(), kImageAdd, WORKER_VECTOR, nullptr, 0), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("takes 3 argument(s), but the task passes 0 parameter(s)"), std::string::npos)
        << pto_last_error();
    // What a caller can match its arguments against: each slot's operand extent.
    EXPECT_EQ(orch.KernelOperandBytes(kImageAdd), (std::vector<uint64_t>{1024, 1024, 1024}));
    EXPECT_EQ(orch.KernelOperandBytes(KERNEL_ADD), (std::vector<uint64_t>{1024, 1024, 1024}));
    EXPECT_SPYRE_ERROR(orch.KernelOperandBytes(12345), NotFound, "kernel 12345 is not registered");
}

// A caller that polls a device task's state, and never waits, sees it end.
TEST(OrchestrationQueues, PollingATasksStateSeesItEnd) {
    SPYRE_REQUIRE_FUSE();
    OneCardRuntime rt(64);
    Orchestrator& orch = rt.orch;
    auto scope = orch.BeginScope();
    auto* a = static_cast<float*>(orch.Alloc(1024));
    for (int i = 0; i < 256; ++i) a[i] = float(i);
    TaskParam p[] = {{PARAM_INPUT, a, 1024, {}}, {PARAM_INPUT, a, 1024, {}}, {PARAM_OUTPUT, nullptr, 1024, {}}};
    const int32_t id = orch.Submit(KERNEL_ADD, WORKER_VECTOR, p);
    const auto* c = static_cast<const float*>(orch.TaskOutput(id, 0));
    int32_t state = PTO_TASK_PENDING;
    for (int look = 0; look < 2000000 && state != PTO_TASK_COMPLETED && state != PTO_TASK_CONSUMED; ++look)
        state = orch.TaskState(id);
    EXPECT_EQ(state, PTO_TASK_COMPLETED);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(c[i], 2.0f * float(i)) << "element " << i;
}

// Three functions of one card (the PF and two VFs), each driven by its own
// thread and runtime at once: their device tasks share the card's cores,
// every result is exact, and each function's task counter counts its own
// tasks only.
TEST_F(StreamTest, OrchestrationThreadsOfDifferentFunctionsShareOneCard) {
    constexpr int kFunctions = 3, kTasks = 60;
    std::vector<Device> devs;
    devs.push_back(OpenDevice());
    devs.push_back(OpenDevice(1));
    devs.push_back(OpenDevice(2));
    std::vector<uint64_t> done_before(kFunctions);
    for (int f = 0; f < kFunctions; ++f) done_before[f] = DeviceInternals::Function(devs[f]).Read64(SPYRE_REG_CNT_TASKS_DONE);
    std::vector<std::string> failures(kFunctions);
    std::vector<std::thread> threads;
    for (int f = 0; f < kFunctions; ++f)
        threads.emplace_back([&, f] {
            try {
                Device& dev = devs[f];
                Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 32, .heap_size = 1 << 20});
                DeviceBuffer prog = UploadAddKernel(dev, orch);
                std::vector<float*> a(kTasks), c(kTasks);
                for (int t = 0; t < kTasks; ++t) {
                    auto scope = orch.BeginScope();  // a scope per pair: 120 tasks pass through a ring of 32
                    a[t] = static_cast<float*>(orch.Alloc(1024));
                    c[t] = static_cast<float*>(orch.Alloc(1024));
                    for (int i = 0; i < 256; ++i) a[t][i] = float(f * 100000 + t * 1000 + i);
                    // c = a + a, then c = c + a: a chain of two per t, the t's independent.
                    TaskParam p0[] = {{PARAM_INPUT, a[t], 1024, {}}, {PARAM_INPUT, a[t], 1024, {}}, {PARAM_OUTPUT, c[t], 1024, {}}};
                    TaskParam p1[] = {{PARAM_INPUT, c[t], 1024, {}}, {PARAM_INPUT, a[t], 1024, {}}, {PARAM_OUTPUT, c[t], 1024, {}}};
                    orch.Submit(KERNEL_ADD, t % 2 ? WORKER_CUBE : WORKER_VECTOR, p0);
                    orch.Submit(KERNEL_ADD, WORKER_VECTOR, p1);
                }
                orch.WaitAll();
                for (int t = 0; t < kTasks; ++t)
                    for (int i = 0; i < 256; ++i)
                        if (c[t][i] != 3 * a[t][i]) {
                            failures[f] = "function " + std::to_string(f) + " task pair " + std::to_string(t) +
                                          " element " + std::to_string(i) + ": " + std::to_string(c[t][i]);
                            return;
                        }
            } catch (const std::exception& e) {
                failures[f] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (int f = 0; f < kFunctions; ++f) {
        EXPECT_EQ(failures[f], "") << "function " << f;
        EXPECT_EQ(DeviceInternals::Function(devs[f]).Read64(SPYRE_REG_CNT_TASKS_DONE) - done_before[f], uint64_t(2 * kTasks))
            << "function " << f << " counts other functions' tasks, or misses its own";
    }
}

// Seed 004's Example 1 verbatim, 10,000 times at depth 0 on the card's
// cores with the fastest device kernels there are (256-float ADD and MUL),
// and with host kernels. A device task often completes before its
// submitter reads its output: before the depth-0 rule, that output was
// then refused ("task N is not live").
TEST_F(StreamTest, OrchestrationExample1VerbatimTenThousandTimes) {
    Device dev = OpenDevice();
    for (const bool on_device : {true, false}) {
        SCOPED_TRACE(on_device ? "device kernels" : "host kernels");
        Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 16, .heap_size = 1 << 16});
        const std::vector<uint8_t> add = test::ElementwiseProgram256(SPYRE_PROG_OP_ADD);
        const std::vector<uint8_t> mul = test::ElementwiseProgram256(SPYRE_PROG_OP_MUL);
        DeviceBuffer add_prog = test::UploadProgram(dev, add), mul_prog = test::UploadProgram(dev, mul);
        if (on_device) {
            orch.RegisterDeviceKernel(KERNEL_ADD, dev.allocator().DeviceAddress(add_prog.handle(), add.size()));
            orch.RegisterDeviceKernel(KERNEL_MUL, dev.allocator().DeviceAddress(mul_prog.handle(), mul.size()));
        } else {
            orch.RegisterHostKernel(KERNEL_ADD, Add);
            orch.RegisterHostKernel(KERNEL_MUL, Mul);
        }
        // Inputs outside the heap ring: a buffer that lives through every
        // round would pin the ring's tail.
        DeviceBuffer abc = dev.AllocateBuffer(3 * 1024);
        auto* f = static_cast<float*>(orch.HostAddress(dev.allocator().DeviceAddress(abc.handle(), 3 * 1024), 3 * 1024));
        const uint64_t done_before = DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_TASKS_DONE);
        EXPECT_EQ(test::RunExample1Verbatim(orch.handle(), f, f + 256, f + 512, 10'000), "");
        if (on_device) {
            EXPECT_EQ(DeviceInternals::Function(dev).Read64(SPYRE_REG_CNT_TASKS_DONE) - done_before, 20'000u);
        }
    }
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

// A kernel from an ExecutionPlan on disk (pto_register_plan), run as a
// device task on memory from pto_device_malloc; and what bad input to
// those calls and to spyre_build_kernel gets.
TEST_F(StreamTest, OrchestrationCApiRegistersAPlanOnDiskAndRefusesBadInput) {
    Runtime* rt = pto_runtime_create(Pf().pci_address.c_str(), 16, 1 << 16);
    ASSERT_NE(rt, nullptr) << pto_last_error();
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("spyre-pto-plan-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    CompilerOutputFromKernel("add", KernelBuilder().Elementwise(ElementwiseOp::Add, {256}, {256}, DType::FP32))
        .WriteDirectory(dir);
    ASSERT_EQ(pto_register_plan(rt, KERNEL_ADD, dir.c_str(), 0), 0) << pto_last_error();
    EXPECT_EQ(pto_register_plan(rt, 9, dir.c_str(), 5), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("has 1 operation(s); there is no operation 5"), std::string::npos)
        << pto_last_error();
    EXPECT_LT(pto_register_plan(rt, 9, (dir / "missing").c_str(), 0), 0);
    std::filesystem::remove_all(dir);

    auto* f = static_cast<float*>(pto_device_malloc(rt, 3 * 1024));
    ASSERT_NE(f, nullptr) << pto_last_error();
    for (int i = 0; i < 512; ++i) EXPECT_EQ(f[i], 0.0f) << "not zeroed at " << i;
    for (int i = 0; i < 256; ++i) f[i] = float(i), f[256 + i] = 0.5f;
    TaskParam p[] = {{PARAM_INPUT, f, 1024, {}}, {PARAM_INPUT, f + 256, 1024, {}}, {PARAM_OUTPUT, f + 512, 1024, {}}};
    ASSERT_GE(pto_submit_task(rt, KERNEL_ADD, WORKER_VECTOR, p, 3), 0) << pto_last_error();
    ASSERT_EQ(pto_wait_all(rt), 0) << pto_last_error();
    for (int i = 0; i < 256; ++i) ASSERT_EQ(f[512 + i], float(i) + 0.5f) << i;
    EXPECT_EQ(pto_device_free(rt, f), 0);
    EXPECT_EQ(pto_device_malloc(rt, 0), nullptr);
    EXPECT_NE(std::string(pto_last_error()).find("pto_device_malloc of 0 bytes"), std::string::npos);
    EXPECT_EQ(pto_device_malloc(rt, uint64_t(-4)), nullptr);
    EXPECT_EQ(pto_last_error_info(nullptr), -EINVAL) << pto_last_error();  // the allocator's word for it
    EXPECT_NE(std::string(pto_last_error()).find("cannot allocate 18446744073709551612 bytes"), std::string::npos);
    EXPECT_EQ(pto_register_program(rt, 10, nullptr, 64), -EINVAL);
    EXPECT_EQ(pto_register_program(rt, 10, f, 0), -EINVAL);  // empty
    EXPECT_EQ(pto_runtime_destroy(rt), 0);

    spyre_kernel_spec spec = {.kind = SPYRE_KERNEL_ADD, .dtype = 99, .rank = 1, .shape = {8}};
    uint8_t image[4096];
    EXPECT_EQ(spyre_build_kernel(&spec, image, sizeof image), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("unknown dtype 99"), std::string::npos);
    spec.dtype = SPYRE_DTYPE_FP32;
    spec.rank = 0;
    EXPECT_EQ(spyre_build_kernel(&spec, image, sizeof image), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("rank 0 is not 1 to 4"), std::string::npos);
    spec = {.kind = SPYRE_KERNEL_MATMUL, .dtype = SPYRE_DTYPE_FP32, .rank = 2, .shape = {8, 8}};
    EXPECT_EQ(spyre_build_kernel(&spec, image, sizeof image), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("{M, K, N}"), std::string::npos);
    spec = {.kind = SPYRE_KERNEL_COPY, .dtype = SPYRE_DTYPE_FP32, .rank = 2, .shape = {8, 8}, .row_stride = {4}};
    EXPECT_EQ(spyre_build_kernel(&spec, image, sizeof image), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("less than its width 8"), std::string::npos);
    spec.row_stride[0] = 0;
    EXPECT_EQ(spyre_build_kernel(&spec, nullptr, 16), -EINVAL);  // a capacity without a buffer
    // Too small a buffer: nothing written, the size told.
    std::memset(image, 0xab, 8);
    const int64_t size = spyre_build_kernel(&spec, image, 8);
    EXPECT_GT(size, 8);
    EXPECT_EQ(image[0], 0xab);
    EXPECT_EQ(spyre_build_kernel(&spec, image, sizeof image), size);
}

// A failed task's write into a pto_device_malloc buffer stayed poisoned
// after pto_device_free: a reader of the next allocation at that address
// was skipped (0, not 256) and blamed on the old task. pto_free always
// dropped it; pto_device_free does now.
TEST_F(StreamTest, AFreedDeviceBuffersPoisonGoesWithIt) {
    Runtime* rt = pto_runtime_create(Pf().pci_address.c_str(), 16, 1 << 16);
    ASSERT_NE(rt, nullptr) << pto_last_error();
    ASSERT_EQ(pto_register_host_kernel(rt, 1, [](void* const*, const uint64_t*, int32_t, void*) { return 5u; }, nullptr), 0);
    ASSERT_EQ(pto_register_host_kernel(rt, 2,
                                       [](void* const* b, const uint64_t*, int32_t, void*) {
                                           const auto* in = static_cast<const float*>(b[0]);
                                           auto* out = static_cast<float*>(b[1]);
                                           out[0] = 0;
                                           for (int i = 0; i < 256; ++i) out[0] += in[i];
                                           return 0u;
                                       },
                                       nullptr),
              0);
    auto* result = static_cast<float*>(pto_device_malloc(rt, 128));
    auto* old = static_cast<float*>(pto_device_malloc(rt, 1024));
    TaskParam fail[] = {{PARAM_OUTPUT, old, 1024, {}}};
    const int32_t failed = pto_submit_task(rt, 1, WORKER_HOST, fail, 1);
    ASSERT_GE(failed, 0) << pto_last_error();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (pto_task_state(rt, failed) != PTO_TASK_CONSUMED && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(pto_task_state(rt, failed), PTO_TASK_CONSUMED);
    ASSERT_EQ(pto_device_free(rt, old), 0);
    auto* fresh = static_cast<float*>(pto_device_malloc(rt, 1024));
    ASSERT_EQ(fresh, old) << "not the same block: the test shows nothing";
    std::vector<float> ones(256, 1.0f);
    ASSERT_EQ(pto_copy_in(rt, fresh, ones.data(), 1024), 0) << pto_last_error();
    TaskParam read[] = {{PARAM_INPUT, fresh, 1024, {}}, {PARAM_OUTPUT, result, 4, {}}};
    ASSERT_GE(pto_submit_task(rt, 2, WORKER_HOST, read, 2), 0) << pto_last_error();
    // The old failure is still reported once, but it skipped nothing.
    EXPECT_EQ(pto_wait_all(rt), -EIO);
    EXPECT_NE(std::string(pto_last_error()).find("1 task(s) failed, 0 dependent task(s) skipped"), std::string::npos)
        << pto_last_error();
    float got = 0;
    ASSERT_EQ(pto_copy_out(rt, &got, result, 4), 0);
    EXPECT_EQ(got, 256.0f);
    EXPECT_EQ(pto_runtime_destroy(rt), 0);
}

// Host data in and out of the runtime's memory by the device's DMA engine
// (counted there), byte for byte at unaligned sizes and offsets, a range
// outside the memory refused by kind and message; the same calls copy on a
// runtime of host memory.
TEST_F(StreamTest, OrchestrationCopiesHostDataInAndOutByDma) {
    Device dev = OpenDevice();
    Orchestrator orch = Orchestrator::Create(dev, {.task_ring_size = 16, .heap_size = 1 << 20});
    std::vector<uint8_t> host(100003), back(host.size());
    for (size_t i = 0; i < host.size(); ++i) host[i] = uint8_t(i * 2654435761u >> 13);
    auto* buffer = static_cast<uint8_t*>(orch.Alloc(host.size() + 8));
    const DmaStats before = dev.dma().Stats();
    orch.CopyIn(buffer + 3, host.data(), host.size());
    orch.CopyOut(back.data(), buffer + 3, back.size());
    EXPECT_EQ(back, host);
    const DmaStats after = dev.dma().Stats();
    EXPECT_EQ(after.to_device_bytes - before.to_device_bytes, host.size());
    EXPECT_EQ(after.from_device_bytes - before.from_device_bytes, host.size());
    EXPECT_SPYRE_ERROR(orch.CopyIn(host.data(), host.data(), 16), InvalidArgument, "outside the function's memory");
    EXPECT_SPYRE_ERROR(orch.CopyOut(back.data(), buffer, uint64_t(1) << 62), InvalidArgument,
                       "outside the function's memory");

    // The C calls: a task's output read back, bad input refused with -EINVAL.
    Runtime* rt = orch.handle();
    std::vector<float> in(256), out(256);
    for (int i = 0; i < 256; ++i) in[size_t(i)] = float(i) - 7.5f;
    auto* f = static_cast<float*>(orch.Alloc(1024));
    ASSERT_EQ(pto_copy_in(rt, f, in.data(), 1024), 0) << pto_last_error();
    ASSERT_EQ(pto_copy_out(rt, out.data(), f, 1024), 0) << pto_last_error();
    EXPECT_EQ(out, in);
    EXPECT_EQ(pto_copy_in(rt, in.data(), in.data(), 1024), -EINVAL) << "host memory is not the runtime's";
    pto_error_info e;
    ASSERT_EQ(pto_last_error_info(&e), -EINVAL);
    EXPECT_STREQ(e.call, "pto_copy_in");
    EXPECT_NE(std::string(e.message).find("outside the function's memory"), std::string::npos) << e.message;
    EXPECT_EQ(pto_copy_out(nullptr, out.data(), f, 4), -EINVAL);
    // A NULL host address is refused, on a device and on host memory (it crashed in the copy).
    EXPECT_EQ(pto_copy_in(rt, f, nullptr, 16), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("host address is NULL"), std::string::npos) << pto_last_error();
    EXPECT_EQ(pto_copy_out(rt, nullptr, f, 16), -EINVAL);
    EXPECT_NE(std::string(pto_last_error()).find("host address is NULL"), std::string::npos) << pto_last_error();

    Orchestrator on_host = Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 16, .heap_size = 1 << 16});
    auto* h = static_cast<uint8_t*>(on_host.Alloc(4096));
    on_host.CopyIn(h, host.data(), 4096);
    std::vector<uint8_t> h_back(4096);
    on_host.CopyOut(h_back.data(), h, 4096);
    EXPECT_TRUE(std::equal(h_back.begin(), h_back.end(), host.begin()));
    EXPECT_SPYRE_ERROR(on_host.CopyIn(h, nullptr, 16), InvalidArgument, "host address is NULL");
    EXPECT_SPYRE_ERROR(on_host.CopyOut(nullptr, h, 16), InvalidArgument, "host address is NULL");
    // pto_device_malloc from C++ (Python had none): the function's
    // allocator, zeroed; host memory has none.
    EXPECT_SPYRE_ERROR(on_host.DeviceMalloc(64), Unsupported, "a runtime on host memory has no device memory");
}

}  // namespace
