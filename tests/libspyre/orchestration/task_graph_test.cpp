// SPDX-License-Identifier: Apache-2.0
// The runtime end to end on host memory (no device): seed 004's testing
// strategy (chains, fan-out, nested scopes, multi-writer, mixed implicit and
// explicit allocation, deferred free) plus WAR, back-pressure at ring sizes 2
// and 3, the deadlock errors, failure poisoning and a randomized DAG checked
// against a sequential run of the same tasks. EXTERNAL tasks (completed by
// the test) make "runs concurrently" and "waits" observable without timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <optional>
#include <vector>

#include "device_programs.hpp"
#include "example1_check.hpp"
#include "orchestration/handle_table.hpp"
#include "orchestration/runtime_handle.hpp"
#include "mock_fixture.hpp"
#include "spyre/orchestration.hpp"

namespace spyre {
namespace {

enum : int32_t { K_FILL = 1, K_INC, K_ADD, K_FAIL, K_EXT, K_MIX, K_THROW, K_ALL_ONES, K_GATED_COPY, K_COPY_IN_ITSELF };

class OrchTest : public ::testing::Test {
protected:
    void Make(int32_t ring = 64, uint64_t heap = 1 << 20, uint64_t memory = 4 << 20, unsigned threads = 2,
              bool run_here = true, uint32_t cheap_ns = 1000) {
        orch_.emplace(Orchestrator::CreateOnHostMemory(memory, {.task_ring_size = ring,
                                                                .heap_size = heap,
                                                                .host_threads = threads,
                                                                .ready_queues = QueueKind(),
                                                                .run_cheap_host_tasks_here = run_here,
                                                                .cheap_host_task_ns = cheap_ns}));
        // K_FILL: out[i] = 7; K_INC: x[i] += 1 (a read-modify-write: lost
        // updates would show if two ran at once); K_ADD: c = a + b.
        orch_->RegisterHostKernel(K_FILL, [](std::span<void* const> b, std::span<const uint64_t> s) {
            auto* out = static_cast<uint32_t*>(b.back());
            for (size_t i = 0; i < s.back() / 4; ++i) out[i] = 7;
            return 0u;
        });
        orch_->RegisterHostKernel(K_INC, [](std::span<void* const> b, std::span<const uint64_t> s) {
            auto* x = static_cast<volatile uint32_t*>(b[0]);
            for (size_t i = 0; i < s[0] / 4; ++i) x[i] = x[i] + 1;
            return 0u;
        });
        orch_->RegisterHostKernel(K_ADD, [](std::span<void* const> b, std::span<const uint64_t> s) {
            auto* a = static_cast<const uint32_t*>(b[0]);
            auto* c = static_cast<const uint32_t*>(b[1]);
            auto* out = static_cast<uint32_t*>(b[2]);
            for (size_t i = 0; i < s[2] / 4; ++i) out[i] = a[i] + c[i];
            return 0u;
        });
        orch_->RegisterHostKernel(K_FAIL, [](std::span<void* const>, std::span<const uint64_t>) { return 42u; });
        orch_->RegisterHostKernel(K_EXT, [](std::span<void* const>, std::span<const uint64_t>) { return 0u; });
    }
    virtual ReadyQueueKind QueueKind() const { return ReadyQueueKind::Locked; }
    // Until task t has completed, without a wait (a wait lets go of the
    // thread's depth-0 outputs).
    void WaitForTask(int32_t t) {
        while (o().TaskState(t) < PTO_TASK_COMPLETED) std::this_thread::yield();
    }
    // Submits 8 writes of a scratch region (at 8192), enough to wrap a ring
    // of 4 past task t's slot, and waits until t was consumed; false (with a
    // test failure) if it never was.
    bool WrapPast(int32_t t) {
        TaskParam scratch[] = {{PARAM_OUTPUT, Data(8192, 64), 64, {}}};
        for (int i = 0; i < 8; ++i) o().Submit(K_FILL, WORKER_VECTOR, scratch);
        for (int spins = 0; o().TaskState(t) != PTO_TASK_CONSUMED; ++spins) {
            if (spins >= 20000) {
                ADD_FAILURE() << "task " << t << " was never consumed";
                return false;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return true;
    }
    // kTwoOutputs: every output i (params 1..) is filled with tag + i (tag:
    // param 0's first word); kCopyFirstWord: out[0] = in[0].
    static constexpr int32_t kTwoOutputs = 100, kCopyFirstWord = 101;
    static constexpr int32_t kGatedCopyFirstWord = 102;  // kCopyFirstWord once `open` (bounded)
    void RegisterOutputKernels(std::atomic<bool>* open = nullptr) {
        if (open)
            o().RegisterHostKernel(kGatedCopyFirstWord, [open](std::span<void* const> b, std::span<const uint64_t>) {
                for (int i = 0; i < 10000 && !open->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                *static_cast<uint32_t*>(b[1]) = *static_cast<const uint32_t*>(b[0]);
                return 0u;
            });
        o().RegisterHostKernel(kTwoOutputs, [](std::span<void* const> b, std::span<const uint64_t> s) {
            const uint32_t tag = *static_cast<const uint32_t*>(b[0]);
            for (size_t out = 1; out < b.size(); ++out)
                for (size_t i = 0; i < s[out] / 4; ++i) static_cast<uint32_t*>(b[out])[i] = tag + uint32_t(out);
            return 0u;
        });
        o().RegisterHostKernel(kCopyFirstWord, [](std::span<void* const> b, std::span<const uint64_t>) {
            *static_cast<uint32_t*>(b[1]) = *static_cast<const uint32_t*>(b[0]);
            return 0u;
        });
    }
    // Newer depth-0 outputs, handed out and read (into `scratch`), until
    // the heap ring cannot go round past a held task (OutOfMemory; an
    // unheld task's block they take).
    void GoRoundTheHeap(uint32_t* tag, uint32_t* scratch) {
        for (int i = 0; i < 8; ++i) {
            TaskParam newer[] = {{PARAM_INPUT, tag, 4, {}}, {PARAM_OUTPUT, nullptr, 128, {}}};
            int32_t n = -1;
            try {
                n = o().Submit(kTwoOutputs, WORKER_VECTOR, newer);
            } catch (const Error& e) {
                EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
                return;
            }
            TaskParam read_newer[] = {{PARAM_INPUT, o().TaskOutput(n, 0), 4, {}}, {PARAM_OUTPUT, scratch, 4, {}}};
            WaitForTask(o().Submit(kCopyFirstWord, WORKER_VECTOR, read_newer));
        }
    }
    // A runtime of a 512-byte heap whose tasks never run on the submitting
    // thread, with the output kernels (kGatedCopyFirstWord waits for
    // `open`); the tag (10) and a result area.
    struct Gated {
        uint32_t* tag;
        uint32_t* result;
    };
    Gated MakeGated(std::atomic<bool>& open) {
        Make(16, 512, 4 << 20, 2, false);
        RegisterOutputKernels(&open);
        Gated g{Data(0, 64), Data(4096, 64)};
        *g.tag = 10;
        return g;
    }
    // Opens the gated first reader and waits for it, goes round the heap
    // with newer outputs (tag 100), then reads `address` into result[1]
    // and waits for everything: what a later reader of a kept address gets.
    void ReadAfterTheHeapWentRound(std::atomic<bool>& open, int32_t first_reader, void* address, uint32_t* tag,
                                   uint32_t* result) {
        open = true;
        WaitForTask(first_reader);
        *tag = 100;
        GoRoundTheHeap(tag, result + 2);
        TaskParam later_reader[] = {{PARAM_INPUT, address, 64, {}}, {PARAM_OUTPUT, result + 1, 4, {}}};
        o().Submit(kCopyFirstWord, WORKER_VECTOR, later_reader);
        o().WaitAll();
    }
    Orchestrator& o() { return *orch_; }
    uint32_t* Data(uint64_t offset, uint64_t bytes) { return static_cast<uint32_t*>(o().HostAddress(offset, bytes)); }
    std::optional<Orchestrator> orch_;
};

// The runtime's tests, once with each kind of ready queue.
class OrchQueueTest : public OrchTest, public ::testing::WithParamInterface<ReadyQueueKind> {
protected:
    ReadyQueueKind QueueKind() const override { return GetParam(); }
};
INSTANTIATE_TEST_SUITE_P(ReadyQueues, OrchQueueTest,
                         ::testing::Values(ReadyQueueKind::Locked, ReadyQueueKind::LockFree),
                         [](const auto& info) { return info.param == ReadyQueueKind::Locked ? "locked" : "lock_free"; });

TaskParam In(void* p, uint64_t n) { return {PARAM_INPUT, p, n, {}}; }
TaskParam Out(void* p, uint64_t n) { return {PARAM_OUTPUT, p, n, {}}; }
TaskParam InOut(void* p, uint64_t n) { return {PARAM_INOUT, p, n, {}}; }

TEST_P(OrchQueueTest, ChainRunsInOrder) {
    Make();
    uint32_t* x = Data(0, 64);
    TaskParam fill[] = {Out(x, 64)};
    TaskParam inc[] = {InOut(x, 64)};
    o().Submit(K_FILL, WORKER_VECTOR, fill);  // A -> B -> C
    o().Submit(K_INC, WORKER_CUBE, inc);
    o().Submit(K_INC, WORKER_HOST, inc);
    o().WaitAll();
    for (int i = 0; i < 16; ++i) EXPECT_EQ(x[i], 9u);
}

// pto_copy_out follows the tasks in flight that write its bytes, and
// pto_copy_in those that read or write them, as a task over those bytes
// would. Before, a copy ran at once: it read what a running task had not
// written yet, and overwrote what a queued task had still to read. The
// gated kernel is released 100 ms later from another thread: the copy ran
// before then without the wait (no timing is asserted).
TEST_P(OrchQueueTest, CopiesFollowTheTasksInFlightOverTheirBytes) {
    Make(64, 1 << 20, 4 << 20, 2, false);
    std::atomic<bool> open{false};
    o().RegisterHostKernel(K_GATED_COPY, [&](std::span<void* const> b, std::span<const uint64_t> s) {
        for (int i = 0; i < 10000 && !open.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::memcpy(b[1], b[0], s[1]);  // out = in
        return 0u;
    });
    auto release_later = [&] {
        open = false;
        return std::async(std::launch::async, [&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            open = true;
        });
    };
    uint32_t* src = Data(0, 64);
    uint32_t* dst = Data(4096, 64);
    std::vector<uint32_t> nines(16, 9), fives(16, 5), back(16);
    o().CopyIn(src, nines.data(), 64);
    TaskParam copy[] = {In(src, 64), Out(dst, 64)};
    {  // a copy out after a writer: its bytes
        auto release = release_later();
        o().Submit(K_GATED_COPY, WORKER_VECTOR, copy);
        o().CopyOut(back.data(), dst, 64);
        EXPECT_EQ(back, nines);
    }
    {  // a copy in over what a queued task reads: the task reads the old bytes
        std::memset(dst, 0, 64);
        auto release = release_later();
        o().Submit(K_GATED_COPY, WORKER_VECTOR, copy);
        o().CopyIn(src, fives.data(), 64);
        o().WaitAll();
        EXPECT_EQ(std::vector<uint32_t>(dst, dst + 16), nines);
        EXPECT_EQ(std::vector<uint32_t>(src, src + 16), fives);
    }
    {  // a copy out of bytes only an EXTERNAL task writes would never start
        TaskParam ext[] = {Out(dst, 64)};
        const int32_t t = o().Submit(K_EXT, WORKER_EXTERNAL, ext);
        EXPECT_SPYRE_ERROR(o().CopyOut(back.data(), dst, 64), Busy, "pto_copy_out would never start: task");
        o().CopyOut(back.data(), Data(8192, 64), 64);  // other bytes: at once
        o().Complete(t);
        o().CopyOut(back.data(), dst, 64);
        o().WaitAll();
    }
    // A host kernel copying over its own task's bytes does not wait for
    // itself, nor do threads it starts (they waited for the kernel, which
    // joined them: found probing from outside).
    o().RegisterHostKernel(K_COPY_IN_ITSELF, [&](std::span<void* const> b, std::span<const uint64_t>) {
        o().CopyIn(b[1], fives.data(), 32);
        std::thread helper([&] { o().CopyIn(static_cast<uint8_t*>(b[1]) + 32, fives.data(), 32); });
        helper.join();
        return 0u;
    });
    o().Submit(K_COPY_IN_ITSELF, WORKER_VECTOR, copy);
    o().WaitAll();
    EXPECT_EQ(std::vector<uint32_t>(dst, dst + 16), fives);
    {  // another thread's task is not waited for: a copy follows its own thread's tasks
        auto release = release_later();
        const int32_t t = o().Submit(K_GATED_COPY, WORKER_VECTOR, copy);
        std::thread([&] { o().CopyOut(back.data(), dst, 64); }).join();
        EXPECT_LT(o().TaskState(t), PTO_TASK_COMPLETED) << "the other thread's copy waited for this thread's task";
        o().WaitAll();
    }
    {  // a failed writer ends the wait: the copy goes ahead (it failed Busy "EXTERNAL")
        TaskParam fail[] = {Out(dst, 64)};
        o().Submit(K_FAIL, WORKER_VECTOR, fail);
        o().CopyOut(back.data(), dst, 64);
        o().CopyIn(dst, nines.data(), 64);
        EXPECT_THROW(o().WaitAll(), Error);
        EXPECT_EQ(std::vector<uint32_t>(dst, dst + 16), nines);
    }
}

// A host kernel asks for its parameters' kinds (Python makes an input's
// view read-only with them), on a worker thread and on the submitting one.
TEST_P(OrchQueueTest, AHostKernelLearnsItsParametersKinds) {
    for (const bool run_here : {false, true}) {
        Make(64, 1 << 20, 4 << 20, 2, run_here);
        std::mutex m;
        std::vector<std::vector<int32_t>> seen;
        o().RegisterHostKernel(K_MIX, [&](std::span<void* const>, std::span<const uint64_t>) {
            const std::lock_guard lock(m);
            seen.push_back(Orchestrator::RunningHostTaskParamKinds());
            return 0u;
        });
        TaskParam mixed[] = {In(Data(0, 64), 64), Out(Data(64, 64), 64), InOut(Data(128, 64), 64)};
        TaskParam one[] = {In(Data(0, 64), 64)};
        for (int i = 0; i < 4; ++i) {
            o().Submit(K_MIX, WORKER_HOST, mixed);
            o().Submit(K_MIX, WORKER_HOST, one);
        }
        o().WaitAll();
        ASSERT_EQ(seen.size(), 8u) << "run_here " << run_here;
        const std::vector<int32_t> want_mixed{PARAM_INPUT, PARAM_OUTPUT, PARAM_INOUT}, want_one{PARAM_INPUT};
        EXPECT_EQ(std::count(seen.begin(), seen.end(), want_mixed), 4) << "run_here " << run_here;
        EXPECT_EQ(std::count(seen.begin(), seen.end(), want_one), 4) << "run_here " << run_here;
        EXPECT_TRUE(Orchestrator::RunningHostTaskParamKinds().empty());  // outside a kernel
    }
}

TEST_P(OrchQueueTest, FanOutReadersSeeTheProducersData) {
    Make();
    uint32_t* a = Data(0, 256);
    uint32_t* outs = Data(4096, 3 * 256);
    auto scope = o().BeginScope();
    TaskParam fill[] = {Out(a, 256)};
    o().Submit(K_FILL, WORKER_VECTOR, fill);
    for (int k = 0; k < 3; ++k) {  // A -> {B, C, D}
        TaskParam add[] = {In(a, 256), In(a, 256), Out(outs + k * 64, 256)};
        o().Submit(K_ADD, WORKER_VECTOR, add);
    }
    o().WaitAll();
    for (int i = 0; i < 3 * 64; ++i) EXPECT_EQ(outs[i], 14u);
}

TEST_P(OrchQueueTest, NestedScopesHoldOutputsUntilTheOutermostEnds) {
    Make();
    uint32_t* a = Data(0, 64);
    auto outer = o().BeginScope();
    TaskParam fill[] = {Out(a, 64)};
    const int32_t t0 = o().Submit(K_FILL, WORKER_VECTOR, fill);
    int32_t t1;
    {
        auto inner = o().BeginScope();
        TaskParam add[] = {In(a, 64), In(a, 64), Out(nullptr, 64)};  // implicit output
        t1 = o().Submit(K_ADD, WORKER_VECTOR, add);
        o().WaitAll();
        EXPECT_EQ(static_cast<uint32_t*>(o().TaskOutput(t1))[3], 14u);
        inner.End();
    }
    // The inner scope released its reference; the outer one still holds t1.
    EXPECT_NE(o().TaskOutput(t1), nullptr);
    EXPECT_EQ(static_cast<uint32_t*>(o().TaskOutput(t1))[0], 14u);
    outer.End();
    EXPECT_SPYRE_ERROR(o().TaskOutput(t0), InvalidArgument, "is not live");
    EXPECT_SPYRE_ERROR(o().TaskOutput(t1), InvalidArgument, "is not live");
}

TEST_P(OrchQueueTest, AccumulatingWritersSerialiseDisjointWritersDoNot) {
    Make(256);
    uint32_t* x = Data(0, 4096);
    TaskParam inc[] = {InOut(x, 4096)};
    for (int i = 0; i < 200; ++i) o().Submit(K_INC, WORKER_VECTOR, inc);
    o().WaitAll();
    for (int i = 0; i < 1024; ++i) ASSERT_EQ(x[i], 200u) << i;  // no lost update

    // Writers of disjoint regions of one buffer are all ready at once;
    // an overlapping one waits for the two it overlaps.
    uint32_t* y = Data(8192, 1024);
    std::vector<int32_t> ids;
    for (int k = 0; k < 4; ++k) {
        TaskParam w[] = {{PARAM_OUTPUT, nullptr, 0, {y, uint64_t(k) * 256, 256}}};
        ids.push_back(o().Submit(K_EXT, WORKER_EXTERNAL, w));
    }
    TaskParam overlap[] = {{PARAM_OUTPUT, nullptr, 0, {y, 200, 100}}};  // [200, 300): regions 0 and 1
    const int32_t late = o().Submit(K_EXT, WORKER_EXTERNAL, overlap);
    for (int32_t id : ids) EXPECT_EQ(o().TaskState(id), PTO_TASK_RUNNING);
    EXPECT_EQ(o().TaskState(late), PTO_TASK_PENDING);
    o().Complete(ids[0]);
    o().Complete(ids[2]);
    o().Complete(ids[3]);
    EXPECT_EQ(o().TaskState(late), PTO_TASK_PENDING);
    o().Complete(ids[1]);
    EXPECT_EQ(o().TaskState(late), PTO_TASK_RUNNING);
    o().Complete(late);
    o().WaitAll();
}

// Seed 004's Example 2 as the seed spells it: every partial product is
// submitted as OUTPUT to a new pto_alloc tile and adds to it. That is right
// only if pto_alloc memory starts at zero, also on the heap ring's later
// laps, where it held the previous tiles (it did not: tile 16 read 6).
TEST_P(OrchQueueTest, PtoAllocBuffersStartAtZeroOnEveryLapOfTheHeapRing) {
    Make(/*ring=*/16, /*heap=*/4096);
    constexpr int kTiles = 40, kPartials = 3;  // 16 tiles of 256 bytes per lap: 2.5 laps
    const uint32_t* zeros = Data(0, 256);
    uint32_t* out = Data(4096, kTiles * 256);
    for (int t = 0; t < kTiles; ++t) {
        auto scope = o().BeginScope();
        void* tile = o().Alloc(256);
        for (int k = 0; k < kPartials; ++k) {
            TaskParam accumulate[] = {Out(tile, 256)};  // K_INC reads and writes it
            o().Submit(K_INC, WORKER_VECTOR, accumulate);
        }
        TaskParam copy_out[] = {In(tile, 256), In(const_cast<uint32_t*>(zeros), 256), Out(out + t * 64, 256)};
        o().Submit(K_ADD, WORKER_VECTOR, copy_out);
        o().Free(tile);
    }
    o().WaitAll();
    for (int t = 0; t < kTiles; ++t)
        for (int i = 0; i < 64; ++i) ASSERT_EQ(out[t * 64 + i], uint32_t(kPartials)) << "tile " << t << ", word " << i;
}

TEST_P(OrchQueueTest, WriteAfterReadWaitsForTheReadersOfTheVersionItOverwrites) {
    Make();
    uint32_t* x = Data(0, 128);
    TaskParam w[] = {Out(x, 128)};
    TaskParam r[] = {In(x, 128)};
    const int32_t w1 = o().Submit(K_EXT, WORKER_EXTERNAL, w);
    const int32_t r1 = o().Submit(K_EXT, WORKER_EXTERNAL, r);
    const int32_t r2 = o().Submit(K_EXT, WORKER_EXTERNAL, r);
    EXPECT_EQ(o().TaskState(r1), PTO_TASK_PENDING);  // RAW on w1
    o().Complete(w1);
    EXPECT_EQ(o().TaskState(r1), PTO_TASK_RUNNING);  // readers of one version run together
    EXPECT_EQ(o().TaskState(r2), PTO_TASK_RUNNING);
    const int32_t w2 = o().Submit(K_EXT, WORKER_EXTERNAL, w);
    const int32_t r3 = o().Submit(K_EXT, WORKER_EXTERNAL, r);
    EXPECT_EQ(o().TaskState(w2), PTO_TASK_PENDING);  // WAR on r1 and r2
    o().Complete(r1);
    EXPECT_EQ(o().TaskState(w2), PTO_TASK_PENDING);
    o().Complete(r2);
    EXPECT_EQ(o().TaskState(w2), PTO_TASK_RUNNING);
    EXPECT_EQ(o().TaskState(r3), PTO_TASK_PENDING);  // reads the new version: RAW on w2
    o().Complete(w2);
    EXPECT_EQ(o().TaskState(r3), PTO_TASK_RUNNING);
    o().Complete(r3);
    o().WaitAll();
}

// Found by TSan: a reader submitted after its producer completed has nothing
// to wait for, but must still hold the producer, or the producer's heap
// block is reused while the reader reads it.
TEST_P(OrchQueueTest, AReaderOfACompletedProducerHoldsItsOutput) {
    Make();
    int32_t p, r;
    {
        auto scope = o().BeginScope();
        TaskParam out[] = {Out(nullptr, 256)};
        p = o().Submit(K_EXT, WORKER_EXTERNAL, out);
        o().Complete(p);
        TaskParam in[] = {In(o().TaskOutput(p), 256)};
        r = o().Submit(K_EXT, WORKER_EXTERNAL, in);
        EXPECT_EQ(o().TaskState(r), PTO_TASK_RUNNING);  // nothing to wait for
    }
    EXPECT_EQ(o().TaskState(p), PTO_TASK_COMPLETED);  // the scope is gone, r still holds p
    o().Complete(r);
    EXPECT_EQ(o().TaskState(p), PTO_TASK_CONSUMED);
    o().WaitAll();
}

TEST_P(OrchQueueTest, MixedImplicitAndExplicitAllocation) {
    Make();
    uint32_t* a = Data(0, 256);
    for (int i = 0; i < 64; ++i) a[i] = uint32_t(i);
    void* buf = o().Alloc(256);
    auto scope = o().BeginScope();
    TaskParam p0[] = {In(a, 256), In(a, 256), Out(nullptr, 256)};  // implicit: 2i
    const int32_t t0 = o().Submit(K_ADD, WORKER_VECTOR, p0);
    void* t0_out = o().TaskOutput(t0);
    TaskParam p1[] = {In(t0_out, 256), In(a, 256), Out(buf, 256)};  // explicit: 3i
    o().Submit(K_ADD, WORKER_VECTOR, p1);
    o().WaitAll();
    for (int i = 0; i < 64; ++i) EXPECT_EQ(static_cast<uint32_t*>(buf)[i], uint32_t(3 * i));
    scope.End();
    // An address inside it is not the buffer (it said "not a live buffer":
    // an outside probe).
    EXPECT_SPYRE_ERROR(o().Free(static_cast<uint8_t*>(buf) + 8), InvalidArgument,
                       "is 8 bytes inside the live pto_alloc buffer at device address 0x");
    o().Free(buf);
    EXPECT_SPYRE_ERROR(o().Free(buf), InvalidArgument, "not a live buffer from pto_alloc");
}

TEST_P(OrchQueueTest, FreeIsDeferredUntilEveryTaskUsingTheBufferIsConsumed) {
    Make();
    uint32_t* src = Data(0, 128);
    void* buf = o().Alloc(128);
    TaskParam w[] = {Out(buf, 128)};
    TaskParam r[] = {In(buf, 128), In(src, 128), Out(Data(4096, 128), 128)};
    const int32_t writer = o().Submit(K_EXT, WORKER_EXTERNAL, w);
    const int32_t reader = o().Submit(K_EXT, WORKER_EXTERNAL, r);
    o().Free(buf);  // no more references: but two tasks still use it
    TaskParam again[] = {In(buf, 128)};
    EXPECT_SPYRE_ERROR(o().Submit(K_EXT, WORKER_EXTERNAL, again), InvalidArgument, "already freed with pto_free");
    EXPECT_SPYRE_ERROR(o().Free(buf), InvalidArgument, "freed already");
    // The heap still holds it: allocating the whole heap would have to wait,
    // and nothing but this caller can finish the EXTERNAL tasks: an error.
    EXPECT_SPYRE_ERROR(o().Alloc(1 << 20), OutOfMemory, "pto_alloc buffer at device address");
    o().Complete(writer);
    EXPECT_SPYRE_ERROR(o().Alloc(1 << 20), OutOfMemory, "heap ring (1048576 bytes)");
    o().Complete(reader);  // the last user is consumed: the buffer goes back
    void* whole = o().Alloc(1 << 20);
    EXPECT_NE(whole, nullptr);
    o().Free(whole);  // no users at all: reclaimed at once
    EXPECT_NE(o().Alloc(1 << 20), nullptr);
    o().WaitAll();
}

// Back-pressure: a full ring stalls submission until completions reclaim
// space; chains at depth 0 run through rings of 2 and 3 slots.
class BackPressure : public OrchTest, public ::testing::WithParamInterface<int32_t> {};

TEST_P(BackPressure, TaskRingStallsAndDrains) {
    Make(GetParam());
    uint32_t* x = Data(0, 64);
    TaskParam inc[] = {InOut(x, 64)};
    for (int i = 0; i < 100; ++i) o().Submit(K_INC, WORKER_VECTOR, inc);
    o().WaitAll();
    EXPECT_EQ(x[0], 100u);
    EXPECT_EQ(x[15], 100u);
}

TEST_P(BackPressure, HeapRingStallsAndDrains) {
    Make(GetParam(), 1024);
    uint32_t* a = Data(0, 512);
    uint32_t* out = Data(4096, 512);
    for (int i = 0; i < 128; ++i) a[i] = uint32_t(i);
    for (int i = 0; i < 50; ++i) {
        auto scope = o().BeginScope();
        TaskParam add[] = {In(a, 512), In(a, 512), Out(nullptr, 512)};  // half the heap each
        const int32_t t = o().Submit(K_ADD, WORKER_VECTOR, add);
        void* tmp = o().TaskOutput(t);
        TaskParam use[] = {In(tmp, 512), In(a, 512), Out(out, 512)};
        o().Submit(K_ADD, WORKER_VECTOR, use);
    }
    o().WaitAll();
    for (int i = 0; i < 128; ++i) EXPECT_EQ(out[i], uint32_t(3 * i));
}

TEST_P(BackPressure, AScopeOfImplicitOutputsLargerThanTheRingIsAnErrorNotAHang) {
    const int32_t n = GetParam();
    Make(n);
    TaskParam fill[] = {Out(nullptr, 64)};  // the scope keeps implicit outputs
    auto scope = o().BeginScope();
    for (int i = 0; i < n; ++i) o().Submit(K_FILL, WORKER_VECTOR, fill);
    EXPECT_SPYRE_ERROR(o().Submit(K_FILL, WORKER_VECTOR, fill), OutOfMemory,
                       "task ring (size " + std::to_string(n) + ") is full and cannot drain");
    try {
        o().Submit(K_FILL, WORKER_VECTOR, fill);
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("held by 1 open scope(s)"), std::string::npos) << e.what();
        EXPECT_EQ(e.context().sys_errno, EDEADLK);
    }
    scope.End();
    o().Submit(K_FILL, WORKER_VECTOR, fill);  // the ring drains once the scope ends
    o().WaitAll();
}

// The oldest task, from a scope already ended, is held by a consumer (an
// EXTERNAL task nobody completes); a later scope is open. The message
// blamed the open scope, which holds none of the tasks before it.
class RingMessages : public OrchTest {};

TEST_F(RingMessages, ATaskBeforeTheOpenScopesIsNotBlamedOnThem) {
    const int32_t n = 8;
    Make(n);
    TaskParam fill[] = {Out(nullptr, 64)};
    int32_t ext;
    {
        auto first = o().BeginScope();
        const int32_t t = o().Submit(K_FILL, WORKER_VECTOR, fill);
        TaskParam read[] = {In(o().TaskOutput(t), 64)};
        ext = o().Submit(K_EXT, WORKER_EXTERNAL, read);
    }
    auto scope = o().BeginScope();
    try {
        for (int i = 0; i < 2 * n; ++i) o().Submit(K_FILL, WORKER_VECTOR, fill);
        ADD_FAILURE() << "the ring never filled";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("task ring (size " + std::to_string(n) + ") is full and cannot drain"),
                  std::string::npos) << e.what();
        EXPECT_EQ(e.message().find("open scope"), std::string::npos) << e.what();
    }
    o().Complete(ext);
    scope.End();
    o().WaitAll();
}

// Seed 004: scopes exist so that loops of them stream through rings of any
// size. A scope holds only implicit outputs; tasks that write explicit
// buffers go once their consumers are done, inside the scope too.
TEST_P(BackPressure, AScopeOfExplicitWritesStreamsThroughTheRing) {
    const int32_t n = GetParam();
    Make(n);
    uint32_t* x = Data(0, 64);
    TaskParam fill[] = {Out(x, 64)};
    TaskParam inc[] = {InOut(x, 64)};
    auto scope = o().BeginScope();
    o().Submit(K_FILL, WORKER_VECTOR, fill);
    for (int i = 0; i < 16 * n; ++i) o().Submit(K_INC, WORKER_VECTOR, inc);
    scope.End();
    o().WaitAll();
    EXPECT_EQ(x[0], uint32_t(7 + 16 * n));
    EXPECT_EQ(x[15], uint32_t(7 + 16 * n));
}

// Seed 004's Example 1 at depth 0: the first task's implicit output is read
// right after it is submitted and passed to the second task. A cheap host
// kernel runs inside Submit, so before the depth-0 rule the output was
// already reclaimed when Submit returned.
TEST_P(BackPressure, DepthZeroOutputsStayLiveUntilATaskReadsThem) {
    Make(GetParam(), 256);
    uint32_t* a = Data(0, 64);
    uint32_t* zeros = Data(4096, 64);
    uint32_t* result = Data(8192, 64);
    for (int i = 0; i < 16; ++i) a[i] = uint32_t(i);
    for (int round = 0; round < 10'000; ++round) {
        TaskParam first[] = {In(a, 64), In(a, 64), Out(nullptr, 64)};
        const int32_t t0 = o().Submit(K_ADD, WORKER_VECTOR, first);
        auto* t0_out = static_cast<uint32_t*>(o().TaskOutput(t0));
        TaskParam second[] = {In(t0_out, 64), In(a, 64), Out(nullptr, 64)};
        const int32_t t1 = o().Submit(K_ADD, WORKER_VECTOR, second);
        TaskParam copy[] = {In(o().TaskOutput(t1), 64), In(zeros, 64), Out(result, 64)};
        o().Submit(K_ADD, WORKER_VECTOR, copy);
        if (round % 1000 == 0) {
            o().WaitAll();
            for (int i = 0; i < 16; ++i) ASSERT_EQ(result[i], uint32_t(3 * i)) << "round " << round;
            std::memset(result, 0, 64);
        }
    }
    o().WaitAll();
}

// 10,000 tasks in a row at depth 0 with nothing between them through a ring
// of 2 (or 3) slots and a heap of 2 outputs: outputs whose address nobody
// asked for go when the rings are full; those asked for stay until a wait.
TEST_P(BackPressure, DepthZeroTasksFlowThroughARingOfTwoAndAHeapOfTwoOutputs) {
    Make(GetParam(), 256);
    uint32_t* a = Data(0, 64);
    for (int i = 0; i < 16; ++i) a[i] = uint32_t(i);
    int32_t last = -1;
    for (int i = 0; i < 10'000; ++i) {
        TaskParam p[] = {In(a, 64), In(a, 64), Out(nullptr, 64)};
        last = o().Submit(K_ADD, WORKER_VECTOR, p);
    }
    EXPECT_EQ(last, 9'999);
    o().WaitAll();
    EXPECT_EQ(o().TaskState(last), PTO_TASK_CONSUMED);  // nothing is held after the wait
    for (int i = 0; i < 10'000; ++i) {
        TaskParam p[] = {In(a, 64), In(a, 64), Out(nullptr, 64)};
        const int32_t t = o().Submit(K_ADD, WORKER_VECTOR, p);
        const auto* out = static_cast<const uint32_t*>(o().TaskOutput(t));
        WaitForTask(t);  // not WaitAll: that lets go of it
        ASSERT_EQ(out[7], 14u) << "task " << i;
        o().WaitAll();  // lets go of what was asked for
    }
}

// Outputs taken early and read later by one task (a fan-in): both stay
// until it reads them. Before, the first was let go at the second's
// submission, its heap block went to the second's output, and the reader
// read the second twice: a wrong answer, silently.
TEST_P(OrchQueueTest, DepthZeroOutputsTakenEarlyAreKeptForTheirReader) {
    Make(16, 4096);
    uint32_t* a = Data(0, 64);
    uint32_t* b = Data(4096, 64);
    uint32_t* out = Data(8192, 64);
    for (int i = 0; i < 16; ++i) a[i] = uint32_t(i), b[i] = 100;
    TaskParam p0[] = {In(a, 64), In(a, 64), Out(nullptr, 64)};
    const int32_t t0 = o().Submit(K_ADD, WORKER_VECTOR, p0);
    void* t0_out = o().TaskOutput(t0);  // 2a
    WaitForTask(t0);  // done before t1 is submitted
    TaskParam p1[] = {In(b, 64), In(b, 64), Out(nullptr, 64)};
    void* t1_out = o().TaskOutput(o().Submit(K_ADD, WORKER_VECTOR, p1));  // 2b
    EXPECT_NE(t0_out, t1_out);
    TaskParam p2[] = {In(t0_out, 64), In(t1_out, 64), Out(out, 64)};
    o().Submit(K_ADD, WORKER_VECTOR, p2);
    o().WaitAll();
    for (int i = 0; i < 16; ++i) ASSERT_EQ(out[i], uint32_t(2 * i + 200)) << i;
}

// A depth-0 task of two outputs, both handed out, one read: the hold
// stays for the other. Before, reading one let the task go; its block
// went to a newer task's output, and a later read of the other output
// read that task's bytes, silently (found probing from outside).
TEST_P(OrchQueueTest, ADepthZeroHoldStaysUntilEveryOutputHandedOutWasRead) {
    Make(16, 256);
    RegisterOutputKernels();
    uint32_t* tag = Data(0, 64);
    uint32_t* result = Data(4096, 64);
    *tag = 10;
    TaskParam two[] = {In(tag, 4), Out(nullptr, 64), Out(nullptr, 64)};
    const int32_t t = o().Submit(kTwoOutputs, WORKER_VECTOR, two);
    void* first = o().TaskOutput(t, 0);   // 11s
    void* second = o().TaskOutput(t, 1);  // 12s
    TaskParam read_second[] = {In(second, 64), Out(result, 4)};
    const int32_t r = o().Submit(kCopyFirstWord, WORKER_VECTOR, read_second);
    WaitForTask(r);
    // A newer depth-0 task's output must not take the first output's block
    // (the heap ring's only one): there is no room while it is held.
    TaskParam newer[] = {In(tag, 4), Out(nullptr, 128)};
    EXPECT_SPYRE_ERROR(o().Submit(kTwoOutputs, WORKER_VECTOR, newer), OutOfMemory, "held by its submitting thread");
    TaskParam read_first[] = {In(first, 64), Out(result + 1, 4)};
    o().Submit(kCopyFirstWord, WORKER_VECTOR, read_first);
    o().WaitAll();
    EXPECT_EQ(result[0], 12u);
    EXPECT_EQ(result[1], 11u) << "the first output was let go with the second's read";
}

// An output handed out after the task's hold went (its other output was
// read) is held again for its reader; a task already let go gives no
// address. Before, the task went once the first reader ran, and the later
// read of the second output got a newer task's bytes (found probing from
// outside), or pto_task_output handed out a released block.
TEST_P(OrchQueueTest, AnOutputHandedOutAfterTheHoldWentIsHeldAgain) {
    std::atomic<bool> open{false};
    auto [tag, result] = MakeGated(open);
    TaskParam two[] = {In(tag, 4), Out(nullptr, 64), Out(nullptr, 64)};
    const int32_t t = o().Submit(kTwoOutputs, WORKER_VECTOR, two);
    TaskParam read_first[] = {In(o().TaskOutput(t, 0), 64), Out(result, 4)};
    const int32_t r = o().Submit(kGatedCopyFirstWord, WORKER_VECTOR, read_first);  // the hold went with this read
    void* second = o().TaskOutput(t, 1);  // while its reader keeps the task
    ReadAfterTheHeapWentRound(open, r, second, tag, result);
    EXPECT_EQ(result[0], 11u);
    EXPECT_EQ(result[1], 12u) << "the second output was read after its task was let go";
    // The same for an output asked for again for a second reader, once the
    // first was submitted (its read bit set already).
    *tag = 20;
    const int32_t t2 = o().Submit(kTwoOutputs, WORKER_VECTOR, two);
    TaskParam first_reader[] = {In(o().TaskOutput(t2, 0), 64), Out(result, 4)};
    open = false;
    const int32_t r2 = o().Submit(kGatedCopyFirstWord, WORKER_VECTOR, first_reader);
    void* again = o().TaskOutput(t2, 0);  // while the first reader keeps the task
    ReadAfterTheHeapWentRound(open, r2, again, tag, result);
    EXPECT_EQ(result[0], 21u);
    EXPECT_EQ(result[1], 21u) << "an output asked for again was read after its task was let go";
    // Asked for again while the task is still held (its other output not
    // read yet): the hold stays for the second reader. Before, the first
    // read's mark stood for the second ask, and the read of the other
    // output let the task go (found probing from outside, 60/60).
    *tag = 30;
    TaskParam three[] = {In(tag, 4), Out(nullptr, 64), Out(nullptr, 64)};
    const int32_t t3 = o().Submit(kTwoOutputs, WORKER_VECTOR, three);
    void* out0 = o().TaskOutput(t3, 0);
    void* out1 = o().TaskOutput(t3, 1);
    TaskParam reads0[] = {In(out0, 64), Out(result, 4)};
    WaitForTask(o().Submit(kCopyFirstWord, WORKER_VECTOR, reads0));
    void* out0_again = o().TaskOutput(t3, 0);
    TaskParam reads1[] = {In(out1, 64), Out(result + 1, 4)};
    WaitForTask(o().Submit(kCopyFirstWord, WORKER_VECTOR, reads1));
    *tag = 100;
    GoRoundTheHeap(tag, result + 3);
    TaskParam reads0_again[] = {In(out0_again, 64), Out(result + 2, 4)};
    o().Submit(kCopyFirstWord, WORKER_VECTOR, reads0_again);
    o().WaitAll();
    EXPECT_EQ(result[0], 31u);
    EXPECT_EQ(result[1], 32u);
    EXPECT_EQ(result[2], 31u) << "an output asked for again while held was read after its task was let go";
    // Asked for twice before its first reader: each ask is for a reader of
    // its own. Before, one mark stood for both, the first read cleared it,
    // and the second reader read a newer task's bytes (found probing from
    // outside, 20/20).
    *tag = 40;
    open = false;
    const int32_t t4 = o().Submit(kTwoOutputs, WORKER_VECTOR, three);
    void* ask1 = o().TaskOutput(t4, 0);
    void* ask2 = o().TaskOutput(t4, 0);
    TaskParam reads_ask1[] = {In(ask1, 64), Out(result, 4)};
    const int32_t r4 = o().Submit(kGatedCopyFirstWord, WORKER_VECTOR, reads_ask1);
    ReadAfterTheHeapWentRound(open, r4, ask2, tag, result);
    EXPECT_EQ(result[0], 41u);
    EXPECT_EQ(result[1], 41u) << "the second of two asks was read after its task was let go";
    // A task let go (consumed) while an older one keeps the ring's tail:
    // its outputs are refused, not handed out.
    TaskParam keeper[] = {In(tag, 4), Out(nullptr, 64)};
    const int32_t k = o().Submit(kTwoOutputs, WORKER_VECTOR, keeper);
    (void)o().TaskOutput(k, 0);  // held until read or a wait
    TaskParam one[] = {In(tag, 4), Out(nullptr, 64)};
    const int32_t u = o().Submit(kTwoOutputs, WORKER_VECTOR, one);
    TaskParam read_u[] = {In(o().TaskOutput(u, 0), 64), Out(result, 4)};
    WaitForTask(o().Submit(kCopyFirstWord, WORKER_VECTOR, read_u));
    while (o().TaskState(u) != PTO_TASK_CONSUMED) std::this_thread::yield();
    EXPECT_SPYRE_ERROR(o().TaskOutput(u, 0), InvalidArgument, "was let go: its outputs' block is another's now");
    o().WaitAll();
}

// Each thread that asks for an output holds the task for its own reader,
// until a later task of its own reads it, it waits or it exits. Before,
// one hold stood for every thread: another thread's ask took none while
// one existed, and when the holder let go (its exit), the asker's later
// read got a newer task's bytes (found probing from outside, 60/60).
TEST_P(OrchQueueTest, EachThreadAskingForAnOutputHoldsItForItsOwnReader) {
    std::atomic<bool> open{false};
    auto [tag, result] = MakeGated(open);
    TaskParam one[] = {In(tag, 4), Out(nullptr, 64)};
    const int32_t t = o().Submit(kTwoOutputs, WORKER_VECTOR, one);
    TaskParam first_reader[] = {In(o().TaskOutput(t, 0), 64), Out(result, 4)};
    const int32_t r = o().Submit(kGatedCopyFirstWord, WORKER_VECTOR, first_reader);  // this thread's hold went
    // Another thread asks (holding the task now); this one asks again
    // meanwhile; then the other exits, letting go of its hold.
    std::atomic<int> step{0};
    std::thread other([&] {
        EXPECT_EQ(o().TaskOutput(t, 0), first_reader[0].buffer);
        step = 1;
        for (int i = 0; i < 10000 && step.load() != 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    while (step.load() != 1) std::this_thread::yield();
    void* again = o().TaskOutput(t, 0);  // asked here again: held here
    step = 2;
    other.join();
    ReadAfterTheHeapWentRound(open, r, again, tag, result);
    EXPECT_EQ(result[0], 11u);
    EXPECT_EQ(result[1], 11u) << "read after another thread's exit let the task go";
}

// Two threads that both hold one depth-0 task (both asked for its output),
// each submitting a task whose output cannot fit until that task goes: each
// gets OutOfMemory, neither sleeps for good. Before, each waited for the
// other, a stalled holder "with room", and both slept (found probing from
// outside, 8/8).
TEST_P(OrchQueueTest, TwoThreadsHoldingOneTaskWaitForNoOtherForRoom) {
    Make(64, 512, 4 << 20, 2, false);
    TaskParam small[] = {{PARAM_OUTPUT, nullptr, 128, {}}};
    const int32_t p = o().Submit(K_FILL, WORKER_VECTOR, small);
    (void)o().TaskOutput(p);  // this thread holds p
    std::atomic<int> step{0};
    std::optional<ErrorKind> other_error;
    std::thread other([&] {
        (void)o().TaskOutput(p);  // and so does this one
        o().Submit(K_FILL, WORKER_VECTOR, small);
        step = 1;
        for (int i = 0; i < 10000 && step.load() != 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        TaskParam big[] = {{PARAM_OUTPUT, nullptr, 256, {}}};
        try {
            o().Submit(K_FILL, WORKER_VECTOR, big);
        } catch (const Error& e) {
            other_error = e.kind();
        }
    });
    while (step.load() != 1) std::this_thread::yield();
    o().Submit(K_FILL, WORKER_VECTOR, small);
    step = 2;
    TaskParam big[] = {{PARAM_OUTPUT, nullptr, 256, {}}};
    EXPECT_SPYRE_ERROR(o().Submit(K_FILL, WORKER_VECTOR, big), OutOfMemory, "cannot drain");
    o().WaitAll();  // lets go of this thread's holds: the other's submission fails (its own hold) or fits
    other.join();
    EXPECT_TRUE(!other_error || *other_error == ErrorKind::OutOfMemory);
    o().WaitAll();
}

// A helper thread that asks for outputs for the submitter holds them until
// it exits (it might read them itself): a helper per ask lets the tasks
// flow through a small ring; its asks and the submitter's own get the
// same addresses and the reads the right bytes.
TEST_P(OrchQueueTest, AHelperThreadAskingForOutputsHoldsThemUntilItExits) {
    Make(4, 4096);
    uint32_t* a = Data(0, 64);
    uint32_t* out = Data(8192, 64);
    for (int i = 0; i < 16; ++i) a[i] = uint32_t(i);
    try {
        for (int i = 0; i < 50; ++i) {
            TaskParam p[] = {In(a, 64), In(a, 64), Out(nullptr, 64)};
            const int32_t t = o().Submit(K_ADD, WORKER_VECTOR, p);
            void* answer = nullptr;
            std::thread([&] { answer = o().TaskOutput(t); }).join();
            TaskParam read[] = {In(answer, 64), In(a, 64), Out(out, 64)};
            EXPECT_EQ(o().TaskOutput(t), answer);
            o().Submit(K_ADD, WORKER_VECTOR, read);
        }
        o().WaitAll();
    } catch (const Error& e) {
        ADD_FAILURE() << e.what();
    }
    EXPECT_EQ(out[5], 15u);
}

// An output asked for after its task's scope ended is held for the asking
// thread's reader as a depth-0 one is. Before, nothing held it: once its
// first reader ran the task went, and the later read was refused, or read
// a newer output's bytes had that taken the block.
TEST_P(OrchQueueTest, AnOutputAskedForAfterItsScopeEndedIsHeldForItsReader) {
    std::atomic<bool> open{false};
    auto [tag, result] = MakeGated(open);
    TaskParam one[] = {In(tag, 4), Out(nullptr, 64)};
    int32_t t = -1, r = -1;
    {
        auto scope = o().BeginScope();
        t = o().Submit(kTwoOutputs, WORKER_VECTOR, one);
        TaskParam reader[] = {In(o().TaskOutput(t, 0), 64), Out(result, 4)};
        r = o().Submit(kGatedCopyFirstWord, WORKER_VECTOR, reader);
    }
    void* again = o().TaskOutput(t, 0);
    ReadAfterTheHeapWentRound(open, r, again, tag, result);
    EXPECT_EQ(result[0], 11u);
    EXPECT_EQ(result[1], 11u);
}

// Once its hold has gone (here: a wait), an output's address is refused,
// not read: nothing live is there, or what is there was never handed out.
TEST_P(OrchQueueTest, AnOutputUsedAfterItsHoldWentIsRefused) {
    Make(16, 4096);
    uint32_t* a = Data(0, 64);
    uint32_t* out = Data(8192, 64);
    TaskParam p0[] = {In(a, 64), In(a, 64), Out(nullptr, 64)};
    void* t0_out = o().TaskOutput(o().Submit(K_ADD, WORKER_VECTOR, p0));
    o().WaitAll();
    TaskParam p1[] = {In(t0_out, 64), In(a, 64), Out(out, 64)};
    EXPECT_SPYRE_ERROR(o().Submit(K_ADD, WORKER_VECTOR, p1), InvalidArgument,
                       "lies in the heap ring but not inside a live task's implicit outputs that pto_task_output "
                       "handed out");
    // A new task's outputs at the same place, never handed out: still refused.
    for (int i = 0; i < 64; ++i) {
        TaskParam fresh[] = {In(a, 64), In(a, 64), Out(nullptr, 64)};
        o().Submit(K_ADD, WORKER_VECTOR, fresh);
    }
    EXPECT_SPYRE_ERROR(o().Submit(K_ADD, WORKER_VECTOR, p1), InvalidArgument, "an output used after its task was let go");
    o().WaitAll();
}

// A task that reads the held output waits in its own slot beside it.
TEST_P(BackPressure, ADepthZeroChainFlowsThroughARingOfTwoSlots) {
    Make(GetParam(), 256);
    uint32_t* a = Data(0, 64);
    for (int i = 0; i < 16; ++i) a[i] = 1;
    TaskParam p0[] = {In(a, 64), In(a, 64), Out(nullptr, 64)};
    int32_t t = o().Submit(K_ADD, WORKER_VECTOR, p0);
    for (int i = 0; i < 10'000; ++i) {  // out_i = out_{i-1} + a
        TaskParam p[] = {In(o().TaskOutput(t), 64), In(a, 64), Out(nullptr, 64)};
        t = o().Submit(K_ADD, WORKER_VECTOR, p);
    }
    WaitForTask(t);
    EXPECT_EQ(static_cast<uint32_t*>(o().TaskOutput(t))[9], 10'002u);
    o().WaitAll();
}

// A thread that submitted and went away lets go of what it held.
TEST_P(BackPressure, AThreadThatExitsLetsGoOfItsHold) {
    Make(GetParam(), 256);
    uint32_t* a = Data(0, 64);
    std::thread([&] {
        TaskParam p[] = {In(a, 64), In(a, 64), Out(nullptr, 64)};
        o().Submit(K_ADD, WORKER_VECTOR, p);
    }).join();
    uint32_t* x = Data(4096, 64);
    TaskParam inc[] = {InOut(x, 64)};
    for (int i = 0; i < 100; ++i) o().Submit(K_INC, WORKER_VECTOR, inc);
    o().WaitAll();
    EXPECT_EQ(x[0], 100u);
}

TEST_P(BackPressure, TasksWaitingOnTheStalledCallerAreAnErrorNotAHang) {
    const int32_t n = GetParam();
    Make(n);
    uint32_t* x = Data(0, 64);
    TaskParam w[] = {Out(x, 64)};
    TaskParam inc[] = {InOut(x, 64)};
    const int32_t ext = o().Submit(K_EXT, WORKER_EXTERNAL, w);
    for (int i = 1; i < n; ++i) o().Submit(K_INC, WORKER_VECTOR, inc);  // wait for ext
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, inc), OutOfMemory, "EXTERNAL task(s)");
    EXPECT_SPYRE_ERROR(o().WaitAll(), Busy, "only pto_task_complete can finish");
    o().Complete(ext);
    o().Submit(K_INC, WORKER_VECTOR, inc);
    o().WaitAll();
}

INSTANTIATE_TEST_SUITE_P(RingSizes, BackPressure, ::testing::Values(2, 3));

TEST_P(OrchQueueTest, HeapLargerThanOneScopeIsAnError) {
    Make(16, 1024);
    uint32_t* a = Data(0, 512);
    auto scope = o().BeginScope();
    TaskParam add[] = {In(a, 512), In(a, 512), Out(nullptr, 512)};
    o().Submit(K_ADD, WORKER_VECTOR, add);
    const int32_t t1 = o().Submit(K_ADD, WORKER_VECTOR, add);
    EXPECT_SPYRE_ERROR(o().Submit(K_ADD, WORKER_VECTOR, add), OutOfMemory,
                       "heap ring (1024 bytes) cannot make room for 512 bytes");
    // The failed submission took nothing: the next id follows t1.
    scope.End();
    EXPECT_EQ(o().Submit(K_ADD, WORKER_VECTOR, add), t1 + 1);
    o().WaitAll();
}

// The message gave the bytes from the oldest live block to the head as the
// bytes "in" the live blocks: "1024 bytes in 1 live block(s)" for one
// 128-byte buffer (found probing from outside).
TEST_P(OrchQueueTest, AHeapHeldByABufferSaysWhatItsBytesAre) {
    Make(16, 1024);
    void* keep = o().Alloc(128);  // the oldest block: the ring frees in order behind it
    for (int i = 0; i < 7; ++i) {  // 128 bytes each, released at once
        auto scope = o().BeginScope();
        TaskParam out[] = {Out(nullptr, 128)};
        o().Complete(o().Submit(K_EXT, WORKER_EXTERNAL, out));
    }
    TaskParam out[] = {Out(nullptr, 128)};
    EXPECT_SPYRE_ERROR(o().Submit(K_EXT, WORKER_EXTERNAL, out), OutOfMemory,
                       "1024 bytes from the oldest of 1 live block(s) on (blocks released after it come back only "
                       "once it is); the oldest belongs to the pto_alloc buffer");
    o().Free(keep);
    o().Complete(o().Submit(K_EXT, WORKER_EXTERNAL, out));
    o().WaitAll();
}

TEST_P(OrchQueueTest, AFailedTaskPoisonsItsDependentsOnly) {
    Make();
    uint32_t* x = Data(0, 64);
    uint32_t* y = Data(4096, 64);
    uint32_t* z = Data(8192, 64);
    TaskParam fx[] = {Out(x, 64)};
    TaskParam bx[] = {In(x, 64), In(x, 64), Out(y, 64)};
    TaskParam cy[] = {InOut(y, 64)};
    TaskParam dz[] = {Out(z, 64)};
    TaskParam late[] = {In(y, 64), In(y, 64), Out(Data(12288, 64), 64)};
    auto scope = o().BeginScope();
    const int32_t a = o().Submit(K_EXT, WORKER_EXTERNAL, fx);
    const int32_t b = o().Submit(K_ADD, WORKER_VECTOR, bx);
    const int32_t c = o().Submit(K_INC, WORKER_VECTOR, cy);
    const int32_t d = o().Submit(K_FILL, WORKER_VECTOR, dz);  // independent
    o().Fail(a, 77);
    // Submitted after the failure, still behind it: skipped as well.
    const int32_t e = o().Submit(K_ADD, WORKER_VECTOR, late);
    // The caller's code is its own, not a device error's name (77 would read as one).
    try {
        scope.End();
        ADD_FAILURE() << "the scope's end must report the failure";
    } catch (const Error& err) {
        EXPECT_EQ(err.kind(), ErrorKind::DeviceError);
        EXPECT_NE(err.message().find("task " + std::to_string(a) + " (kernel " + std::to_string(K_EXT) +
                                     ") failed with pto_task_fail code 77"),
                  std::string::npos)
            << err.what();
        EXPECT_TRUE(err.context().host_kernel_code);
        EXPECT_NE(std::string(err.what()).find("host code 77"), std::string::npos) << err.what();
        EXPECT_EQ(std::string(err.what()).find("device code"), std::string::npos) << err.what();
    }
    try {
        o().WaitAll();
        ADD_FAILURE() << "WaitAll must report the failure";
    } catch (const Error& err) {
        EXPECT_EQ(err.kind(), ErrorKind::DeviceError);
        EXPECT_EQ(err.context().device_code, 77u);
        EXPECT_EQ(err.context().op_index, uint64_t(a));
        EXPECT_NE(err.message().find("3 dependent task(s) skipped"), std::string::npos) << err.what();
    }
    EXPECT_EQ(z[0], 7u);  // the independent task ran
    EXPECT_EQ(y[0], 0u);  // b and c never ran
    (void)b, (void)c, (void)d, (void)e;
    o().WaitAll();  // reported once
}

TEST_P(OrchQueueTest, FailuresNameTheRootCause) {
    Make();
    uint32_t* x = Data(0, 64);
    TaskParam fx[] = {Out(x, 64)};
    TaskParam inc[] = {InOut(x, 64)};
    const int32_t a = o().Submit(K_FAIL, WORKER_HOST, fx);
    const int32_t b = o().Submit(K_INC, WORKER_VECTOR, inc);
    try {
        o().WaitAll();
        ADD_FAILURE() << "WaitAll must report the failure";
    } catch (const Error& err) {
        // A host kernel's code is its own: a number, not a device error name.
        EXPECT_EQ(err.kind(), ErrorKind::DeviceError);
        EXPECT_NE(err.message().find("failed with host kernel return code 42"), std::string::npos) << err.what();
        EXPECT_EQ(err.context().device_code, 42u);
        EXPECT_TRUE(err.context().host_kernel_code);
        EXPECT_NE(std::string(err.what()).find("host code 42"), std::string::npos) << err.what();
        EXPECT_EQ(std::string(err.what()).find("device code"), std::string::npos) << err.what();
    }
    o().Submit(K_INC, WORKER_VECTOR, inc);  // x's writer b was skipped long ago; fine to go on
    o().WaitAll();
    (void)a, (void)b;
}

// A C++ host kernel that throws fails its task with what it threw, as
// TaskFailed: the message is the user's, and no code was returned.
TEST_P(OrchQueueTest, AHostKernelThatThrowsReportsWhatItThrew) {
    Make();
    o().RegisterHostKernel(K_THROW, [](std::span<void* const>, std::span<const uint64_t>) -> uint32_t {
        throw std::runtime_error("tile 3 has no scale");
    });
    uint32_t* x = Data(0, 64);
    TaskParam fx[] = {Out(x, 64)};
    TaskParam inc[] = {InOut(x, 64)};
    auto scope = o().BeginScope();
    const int32_t a = o().Submit(K_THROW, WORKER_HOST, fx);
    o().Submit(K_INC, WORKER_VECTOR, inc);
    try {
        o().WaitAll();
        ADD_FAILURE() << "WaitAll must report the failure";
    } catch (const Error& err) {
        EXPECT_EQ(err.kind(), ErrorKind::TaskFailed) << err.what();
        EXPECT_NE(err.message().find("task " + std::to_string(a) + " (kernel " + std::to_string(K_THROW) +
                                     ") failed: host kernel threw: tile 3 has no scale; 1 task(s) failed, 1 "
                                     "dependent task(s) skipped"),
                  std::string::npos)
            << err.what();
        EXPECT_EQ(err.context().device_code, 0u);
        EXPECT_EQ(err.context().op_index, uint64_t(a));
        EXPECT_EQ(std::string(err.what()).find("UNKNOWN"), std::string::npos) << err.what();
    }
    EXPECT_SPYRE_ERROR(scope.End(), TaskFailed, "failed: host kernel threw: tile 3 has no scale");  // its own report
    // A thrown string says what it was (it said only "not a std::exception").
    o().RegisterHostKernel(K_THROW + 100, [](std::span<void* const>, std::span<const uint64_t>) -> uint32_t {
        throw "tile 4 has no scale";
    });
    o().Submit(K_THROW + 100, WORKER_HOST, fx);
    EXPECT_SPYRE_ERROR(o().WaitAll(), TaskFailed,
                       "host kernel threw: an exception that is not a std::exception: the string \"tile 4 has no scale\"");
    // A kernel that returns the status a throw stands for is only returning a code.
    o().RegisterHostKernel(K_ALL_ONES, [](std::span<void* const>, std::span<const uint64_t>) { return 0xffffffffu; });
    o().Submit(K_ALL_ONES, WORKER_HOST, fx);
    EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "host kernel return code 4294967295");
}

// A failed writer with no consumer and no scope is consumed, and its slot
// reclaimed, as soon as it completes: a reader submitted after that still
// depends on what it did not write, and is skipped, until the failure is
// reported or a writer covers the region again.
TEST_P(OrchQueueTest, AFailedWritersRegionStaysPoisonedAfterItsSlotIsReclaimed) {
    Make(/*ring=*/4);
    uint32_t* x = Data(0, 64);
    uint32_t* y = Data(4096, 64);
    TaskParam fx[] = {Out(x, 64)};
    TaskParam read_x[] = {In(x, 32), In(x, 32), Out(y, 32)};  // the first half of x
    const int32_t a = o().Submit(K_FAIL, WORKER_HOST, fx);
    ASSERT_TRUE(WrapPast(a));
    const int32_t b = o().Submit(K_ADD, WORKER_VECTOR, read_x);
    // A full rewrite of x heals it: its readers run again.
    o().Submit(K_FILL, WORKER_VECTOR, fx);
    const int32_t c = o().Submit(K_ADD, WORKER_VECTOR, read_x);
    try {
        o().WaitAll();
        ADD_FAILURE() << "WaitAll must report the failure";
    } catch (const Error& err) {
        EXPECT_EQ(err.context().op_index, uint64_t(a));
        EXPECT_NE(err.message().find("1 task(s) failed, 1 dependent task(s) skipped"), std::string::npos) << err.what();
    }
    EXPECT_EQ(y[0], 14u);  // c ran on the rewritten x; b did not
    (void)b, (void)c;
}

// A failure WaitAll reported poisons no later reader, whether the failed
// task is gone or a scope still holds it (it has an implicit output).
// Before, the held one still skipped the reader, and the next WaitAll
// reported the same failure again (probe80, 5 of 5).
TEST_P(OrchQueueTest, AReportedFailurePoisonsNoLaterReaderWhileAScopeHoldsIt) {
    Make();
    uint32_t* m = Data(0, 64);
    uint32_t* out = Data(1024, 64);
    std::fill(m, m + 16, 3u);
    std::fill(out, out + 16, 1u);
    auto scope = o().BeginScope();
    TaskParam fail[] = {Out(m, 64), Out(nullptr, 64)};
    const int32_t failed = o().Submit(K_FAIL, WORKER_HOST, fail);
    EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "1 task(s) failed, 0 dependent task(s) skipped");
    EXPECT_EQ(o().TaskState(failed), PTO_TASK_COMPLETED);  // held by the scope
    TaskParam read[] = {In(m, 64), In(m, 64), Out(out, 64)};
    o().Submit(K_ADD, WORKER_HOST, read);
    o().WaitAll();  // nothing new to report
    EXPECT_EQ(out[0], 6u);
    // The scope's own report names its failed task, as documented.
    EXPECT_SPYRE_ERROR(scope.End(), DeviceError, "1 task(s) failed, 0 dependent task(s) skipped");
}

// A failed write into a held task's implicit output poisons its readers
// after the failed task is consumed, also when an earlier writer covered
// the range (the failed task then met that writer, not the output's owner,
// and its write was dropped from the map as if the output were gone: the
// reader ran on the failed bytes; probe 5, 20 of 20).
TEST_P(OrchQueueTest, AFailedWriteIntoAHeldOutputPoisonsItsReadersBehindAnEarlierWriter) {
    Make();
    uint32_t* out = Data(1024, 72);
    std::fill(out, out + 18, 1u);
    auto scope = o().BeginScope();
    TaskParam make[] = {Out(nullptr, 528)};
    const int32_t owner = o().Submit(K_FILL, WORKER_HOST, make);
    auto* output = static_cast<uint8_t*>(o().TaskOutput(owner));
    TaskParam cover[] = {InOut(output + 84, 412)};  // covers the failed write's range
    o().Submit(K_INC, WORKER_HOST, cover);
    TaskParam fail[] = {InOut(output + 428, 64)};
    const int32_t failed = o().Submit(K_FAIL, WORKER_HOST, fail);
    while (o().TaskState(failed) != PTO_TASK_CONSUMED) std::this_thread::yield();  // nothing reads it yet
    TaskParam read[] = {In(output + 432, 72), In(output + 432, 72), Out(out, 72)};
    o().Submit(K_ADD, WORKER_HOST, read);
    EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "1 task(s) failed, 1 dependent task(s) skipped");
    EXPECT_EQ(out[0], 1u);  // the reader did not run
    EXPECT_SPYRE_ERROR(scope.End(), DeviceError, "failed");
}

// A failed task a scope holds wrote into another task's implicit output;
// that output's block went back to the heap ring and came out again as a
// pto_alloc buffer. A reader of the fresh (zeroed) buffer runs. Before, the
// failed task's entries there skipped it (probe 6, 20 of 20).
TEST_P(OrchQueueTest, AFreshPtoAllocBufferWhereAHeldFailedTaskWroteIsNotPoisoned) {
    Make(/*ring=*/16, /*heap=*/4096);
    uint32_t* out = Data(0, 64);
    std::fill(out, out + 16, 1u);
    TaskParam make[] = {Out(nullptr, 256)};
    const int32_t owner = o().Submit(K_FILL, WORKER_HOST, make);  // held by this thread until a task reads it
    void* output = o().TaskOutput(owner);
    auto scope = o().BeginScope();
    TaskParam fail[] = {InOut(output, 256), Out(nullptr, 128)};  // its own output keeps it live
    const int32_t failed = o().Submit(K_FAIL, WORKER_HOST, fail);
    WaitForTask(failed);
    for (int spins = 0; o().TaskState(owner) != PTO_TASK_CONSUMED && spins < 20000; ++spins)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(o().TaskState(owner), PTO_TASK_CONSUMED);
    void* rest = o().Alloc(4096 - 384);                        // the ring past the two blocks
    auto* fresh = static_cast<uint32_t*>(o().Alloc(256));      // wraps round to the owner's block
    ASSERT_EQ(static_cast<void*>(fresh), output);
    TaskParam read[] = {In(fresh, 64), In(fresh, 64), Out(out, 64)};
    o().Submit(K_ADD, WORKER_HOST, read);
    EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "1 task(s) failed, 0 dependent task(s) skipped");
    EXPECT_EQ(out[0], 0u);  // the reader ran on the zeroed buffer
    o().Free(rest);
    o().Free(fresh);
    try {
        scope.End();
    } catch (const Error&) {  // the scope's own report of its failed task, as documented
    }
}

// A task that reaches an implicit output through a later writer of all of
// it holds the output's task as well: the block stays until the task ran.
// Before, only the writer held it: once the writer completed the block went
// back to the heap ring under the pending reader, and a pto_alloc handed
// its bytes out zeroed before the reader read them (probe 7, 32 of 32).
TEST_P(OrchQueueTest, AnOutputReachedThroughALaterWriterStaysUntilItsReaderRan) {
    Make(/*ring=*/16, /*heap=*/512);
    constexpr int32_t K_GATE = 50, K_COPY = 51;
    std::atomic<bool> go{false};
    o().RegisterHostKernel(K_GATE, [&](std::span<void* const> b, std::span<const uint64_t> s) {
        for (int i = 0; !go.load() && i < 20000; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::memset(b[0], 1, s[0]);
        return 0u;
    });
    o().RegisterHostKernel(K_COPY, [](std::span<void* const> b, std::span<const uint64_t> s) {
        std::memcpy(b.back(), b[0], s.back());
        return 0u;
    });
    auto* gate_out = reinterpret_cast<uint8_t*>(Data(0, 8));
    auto* copy = reinterpret_cast<uint8_t*>(Data(1024, 256));
    TaskParam make[] = {Out(nullptr, 256)};
    const int32_t owner = o().Submit(K_FILL, WORKER_HOST, make);
    auto* output = static_cast<uint8_t*>(o().TaskOutput(owner));
    TaskParam cover[] = {Out(output, 256)};
    const int32_t writer = o().Submit(K_EXT, WORKER_EXTERNAL, cover);
    TaskParam gate[] = {Out(gate_out, 8)};
    o().Submit(K_GATE, WORKER_HOST, gate);
    TaskParam read[] = {In(output, 256), In(gate_out, 8), Out(copy, 256)};
    const int32_t reader = o().Submit(K_COPY, WORKER_HOST, read);
    for (int spins = 0; o().TaskState(writer) != PTO_TASK_RUNNING && spins < 20000; ++spins)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::memset(output, 7, 256);  // the writer's work
    o().Complete(writer);
    WaitForTask(writer);
    EXPECT_LT(o().TaskState(reader), PTO_TASK_COMPLETED);
    EXPECT_NE(o().TaskState(owner), PTO_TASK_CONSUMED) << "the output's block went back under its pending reader";
    go = true;
    o().WaitAll();
    EXPECT_TRUE(std::all_of(copy, copy + 256, [](uint8_t b) { return b == 7; })) << int(copy[0]);
}

// A skipped task a scope held past the WaitAll that reported its failure
// poisons nothing once the scope lets it go. Before, its consumption kept
// its writes poisoned: a later reader was skipped, and the next WaitAll
// reported the reported failure again (probe 5, 20 of 20).
TEST_P(OrchQueueTest, AReportedSkipPoisonsNothingWhenItsScopeLetsItGo) {
    Make();
    uint32_t* x = Data(0, 64);
    uint32_t* y = Data(1024, 64);
    uint32_t* z = Data(2048, 64);
    std::fill(y, y + 16, 5u);
    std::fill(z, z + 16, 0u);
    {
        auto scope = o().BeginScope();
        TaskParam fail[] = {Out(x, 64), Out(nullptr, 64)};
        o().Submit(K_FAIL, WORKER_HOST, fail);
        TaskParam skipped[] = {InOut(x, 64), Out(y, 64), Out(nullptr, 64)};  // last param: K_FILL's
        o().Submit(K_FILL, WORKER_HOST, skipped);
        EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "1 task(s) failed, 1 dependent task(s) skipped");
        try {
            scope.End();
        } catch (const Error&) {  // the scope's own report of its failed tasks, as documented
        }
    }
    TaskParam read_y[] = {In(y, 64), In(y, 64), Out(z, 64)};
    o().Submit(K_ADD, WORKER_HOST, read_y);
    o().WaitAll();  // nothing new to report
    EXPECT_EQ(z[0], 10u);  // y as it was: the skipped task wrote nothing
}

// A heap ring whose size is not whole 128-byte granules holds the whole
// granules that cover it. Before, its last partial granule could never be
// handed out: a request that fitted the size asked for failed "cannot make
// room ... and cannot drain" with no live block and no owner, and on host
// memory of an odd size the ring came out smaller than asked (probe75).
TEST(OrchHeapRing, AHeapRingOfPartGranulesHoldsWholeOnes) {
    const struct {
        uint64_t memory, heap, alloc;
    } cases[] = {{1 << 20, 200, 200}, {1 << 20, 255, 256}, {1 << 20, 100, 4},
                 {4097, 1, 4},        {1048589, 1, 128},   {1048589, 20, 24}};
    for (const auto& c : cases) {
        SCOPED_TRACE("memory " + std::to_string(c.memory) + ", heap " + std::to_string(c.heap));
        auto orch = Orchestrator::CreateOnHostMemory(c.memory, {.task_ring_size = 4, .heap_size = c.heap});
        void* p = orch.Alloc(c.alloc);
        ASSERT_NE(p, nullptr);
        std::memset(p, 0x5a, c.alloc);
        orch.Free(p);
        const uint64_t held = (c.heap + 127) / 128 * 128;
        EXPECT_SPYRE_ERROR(orch.Alloc(held + 1), OutOfMemory,
                           "is larger than the heap ring (" + std::to_string(held) + " bytes)");
    }
    EXPECT_SPYRE_ERROR(Orchestrator::CreateOnHostMemory(100, {.task_ring_size = 4, .heap_size = 1}), InvalidArgument,
                       "heap ring of 1 bytes (whole 128-byte granules) does not fit host memory of 100 bytes");
}

// Whether a task behind a failed one runs depends on what it reads, not on
// when it was submitted. A task that overwrites all the failed task wrote
// (WAW), or writes what it read (WAR), runs, and so does a reader after it;
// a reader of what is left of the failed write is skipped. Before, the
// failure passed along every edge while the failed task was in the ring
// and only along reads once it was gone: the overwrite and its reader were
// skipped when submitted while the failed task ran, and run otherwise
// (probe75, 5 of 5 each way).
TEST_P(OrchQueueTest, WhetherATaskBehindAFailureRunsDoesNotDependOnTiming) {
    enum : int32_t { K_GATED_FAIL = 40 };
    enum class When { Running, Completed, Consumed };
    for (When when : {When::Running, When::Completed, When::Consumed}) {
        SCOPED_TRACE(when == When::Running ? "running" : when == When::Completed ? "completed" : "consumed");
        Make(/*ring=*/8);
        std::atomic<bool> open{false};
        o().RegisterHostKernel(K_GATED_FAIL, [&](std::span<void* const>, std::span<const uint64_t>) {
            for (int i = 0; i < 200000 && !open.load(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(50));
            return 9u;
        });
        uint32_t* x = Data(0, 64);      // written whole by the failed task, then overwritten whole
        uint32_t* y = Data(1024, 64);   // read by the failed task, then written
        uint32_t* q = Data(2048, 64);   // written by the failed task, then half overwritten
        uint32_t* z = Data(3072, 64);   // what a reader of x makes
        uint32_t* r = Data(4096, 64);   // what a reader of q makes
        uint32_t* w = Data(5120, 64);   // written by the failed task, then by a reader of x
        uint32_t* h = Data(6144, 64);   // what a reader of q's overwritten half makes
        for (uint32_t* p : {x, y, q, z, r, w, h}) std::fill(p, p + 16, 1u);
        TaskParam fail[] = {In(y, 64), Out(x, 64), Out(q, 64), Out(w, 64)};
        const int32_t a = o().Submit(K_GATED_FAIL, WORKER_HOST, fail);
        if (when != When::Running) {
            open = true;
            WaitForTask(a);
            if (when == When::Consumed) {
                ASSERT_TRUE(WrapPast(a));
            }
        }
        TaskParam overwrite_x[] = {Out(x, 64)};
        TaskParam read_x[] = {In(x, 64), In(x, 64), Out(z, 64)};
        TaskParam write_y[] = {Out(y, 64)};
        TaskParam half_q[] = {Out(q, 32)};
        TaskParam read_q[] = {In(q, 64), In(q, 64), Out(r, 64)};
        // Reads only the overwrite's bytes, and writes another output of
        // the failed task: it follows that one, and runs (it was skipped
        // while the failed task ran, probe79).
        TaskParam read_x_write_w[] = {In(x, 64), In(x, 64), Out(w, 64)};
        // Reads only the half of q the overwrite wrote: runs (the failed
        // task's whole region stayed in the hazard map until one write
        // covered it, so this was skipped; probe of 5 Dec).
        TaskParam read_half_q[] = {In(q, 32), In(q, 32), Out(h, 32)};
        const int32_t runs[] = {o().Submit(K_FILL, WORKER_HOST, overwrite_x), o().Submit(K_ADD, WORKER_HOST, read_x),
                                o().Submit(K_FILL, WORKER_HOST, write_y), o().Submit(K_FILL, WORKER_HOST, half_q),
                                o().Submit(K_ADD, WORKER_HOST, read_x_write_w),
                                o().Submit(K_ADD, WORKER_HOST, read_half_q)};
        const int32_t skipped = o().Submit(K_ADD, WORKER_HOST, read_q);
        open = true;
        EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "1 task(s) failed, 1 dependent task(s) skipped");
        (void)runs, (void)skipped;
        EXPECT_EQ(x[0], 7u);
        EXPECT_EQ(z[0], 14u);
        EXPECT_EQ(y[0], 7u);
        EXPECT_EQ(q[0], 7u);
        EXPECT_EQ(q[15], 1u);
        EXPECT_EQ(r[0], 1u);  // not run
        EXPECT_EQ(w[0], 14u);
        EXPECT_EQ(h[0], 14u);
        EXPECT_EQ(h[7], 14u);
        EXPECT_EQ(h[8], 1u);
        orch_.reset();
    }
}

// A failed task's buffer, partly overwritten since, takes the pieces the
// overwrite left of its poisoned region when it is freed. The erase matched
// whole ranges only: the pieces stayed while the failed task's other region
// kept it poisoned, and skipped the reader of the next buffer at that
// address (probe of 5 Dec). Likewise a piece of a region wider than 4 MiB
// is cut again by a later write (it lives in the wide list).
TEST_P(OrchQueueTest, APoisonedRegionsPiecesGoWithItsBuffer) {
    Make(/*ring=*/16, /*heap=*/4096, /*memory=*/16 << 20);
    auto* y = Data(0, 4096);
    auto* d = Data(64 << 10, 4096);
    auto* x = static_cast<uint32_t*>(o().Alloc(4096));
    TaskParam fail[] = {Out(x, 4096), Out(y, 4096)};
    o().Fail(o().Submit(K_EXT, WORKER_EXTERNAL, fail), 77);
    TaskParam part[] = {Out(x + 256, 1024)};
    o().Submit(K_FILL, WORKER_HOST, part);
    o().Free(x);
    // No wait before the reader (a failure a wait reported poisons nothing
    // later): the heap holds one such block, so this allocation waits for
    // x's to come back.
    auto* z = static_cast<uint32_t*>(o().Alloc(4096));
    ASSERT_EQ(z, x);  // the same block again: its bytes are another buffer's now
    std::fill(d, d + 1024, 9u);
    TaskParam copy[] = {In(z, 4096), In(z, 4096), Out(d, 4096)};
    o().Submit(K_ADD, WORKER_HOST, copy);
    EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "1 task(s) failed, 0 dependent task(s) skipped");
    EXPECT_EQ(d[0], 0u);
    EXPECT_EQ(d[1023], 0u);
    o().Free(z);

    // F writes 8 MiB (wide); W1 its second half, W2 its first 64 KiB: a
    // reader of those reads W2's bytes and runs.
    // At a granule's start, so W1 is 64 granules (narrow) and F's piece too.
    const auto at = (reinterpret_cast<uintptr_t>(Data(1 << 20, 9 << 20)) + 0xffff) & ~uintptr_t(0xffff);
    auto* wide = reinterpret_cast<uint32_t*>(at);
    TaskParam f[] = {Out(wide, 8 << 20)};
    o().Fail(o().Submit(K_EXT, WORKER_EXTERNAL, f), 77);
    TaskParam w1[] = {Out(wide + (1 << 20), 4 << 20)};
    TaskParam w2[] = {Out(wide, 64 << 10)};
    TaskParam read[] = {In(wide, 64 << 10), In(wide, 64 << 10), Out(d, 4096)};
    o().Submit(K_FILL, WORKER_HOST, w1);
    o().Submit(K_FILL, WORKER_HOST, w2);
    o().Submit(K_ADD, WORKER_HOST, read);
    EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "1 task(s) failed, 0 dependent task(s) skipped");
    EXPECT_EQ(d[0], 14u);
}

// Writers of a region a failed task poisoned are skipped, and each is kept
// poisoned in turn: they piled up in the hazard map, every submission
// scanning the pile under the lock (4,000 INOUTs after one failure took
// 16 s, 6,000 49 s). A later kept writer now supersedes the earlier.
TEST_P(OrchQueueTest, SkippedWritersOfOnePoisonedRegionDoNotPileUp) {
    Make(/*ring=*/16);
    uint32_t* x = Data(0, 4096);
    TaskParam inout_x[] = {InOut(x, 4096)};
    o().Submit(K_FAIL, WORKER_HOST, inout_x);
    size_t most = 0;
    for (int i = 0; i < 3000; ++i) {
        o().Submit(K_INC, WORKER_HOST, inout_x);
        if (i % 100 == 99)
            most = std::max(most, orchestration::HandleTable::Instance().Enter(o().handle(), "test")->graph->hazard_entries());
    }
    // The ring's live tasks (16) and what they keep, not the 3,000.
    EXPECT_LE(most, 64u);
    try {
        o().WaitAll();
        ADD_FAILURE() << "WaitAll must report the failure";
    } catch (const Error& err) {
        EXPECT_NE(err.message().find("1 task(s) failed, 3000 dependent task(s) skipped"), std::string::npos) << err.what();
    }
    EXPECT_EQ(x[0], 0u);  // no increment ran on the failed write
    // A full rewrite heals x as before: the next increments run.
    TaskParam fill_x[] = {Out(x, 4096)};
    o().Submit(K_FILL, WORKER_VECTOR, fill_x);
    o().Submit(K_INC, WORKER_HOST, inout_x);
    o().WaitAll();
    EXPECT_EQ(x[0], 8u);
}

// The poison of a failed write is kept in the hazard map, so it ends where
// the region does: a partial rewrite leaves it, a free of its buffer drops
// it, and so does the release of the heap block it was written into (a
// later task's output at that address is not the failed one's).
TEST_P(OrchQueueTest, PoisonEndsWithTheRegionItWasWrittenTo) {
    Make(/*ring=*/8, /*heap=*/4096);
    uint32_t* x = Data(0, 64);
    uint32_t* y = Data(4096, 128);
    auto* buf = static_cast<uint32_t*>(o().Alloc(64));
    TaskParam fill_x[] = {Out(x, 64)};
    o().Submit(K_FILL, WORKER_VECTOR, fill_x);
    // A failed write into another task's implicit output, and one into a buffer.
    // (Outside any scope: the failure is reported by WaitAll alone.)
    TaskParam make_spoilt[] = {In(x, 64), In(x, 64), Out(nullptr, 64)};
    auto* spoilt = static_cast<uint8_t*>(o().TaskOutput(o().Submit(K_ADD, WORKER_VECTOR, make_spoilt)));
    TaskParam fail[] = {InOut(spoilt, 64), Out(buf, 64)};
    o().Submit(K_FAIL, WORKER_VECTOR, fail);
    // Tasks that wrap the ring of 8, so the failed one is consumed.
    for (int i = 0; i < 16; ++i) o().Submit(K_FILL, WORKER_VECTOR, fill_x);
    // Half a rewrite of the buffer leaves the other half poisoned.
    TaskParam half[] = {Out(buf, 32)};
    o().Submit(K_FILL, WORKER_VECTOR, half);
    TaskParam read_buf[] = {In(buf, 64), In(buf, 64), Out(y, 64)};
    o().Submit(K_ADD, WORKER_VECTOR, read_buf);
    // Freed, the buffer's poison goes: a buffer at its address, written by
    // the host, is read by a task that runs.
    o().Free(buf);
    uint32_t* again = nullptr;
    for (int i = 0; i < 400 && again != buf; ++i) {
        if (again) o().Free(again);
        again = static_cast<uint32_t*>(o().Alloc(64));
    }
    ASSERT_EQ(again, buf) << "the heap ring never gave the buffer's address out again";
    for (int i = 0; i < 16; ++i) again[i] = 5;
    TaskParam read_again[] = {In(again, 64), In(again, 64), Out(y + 16, 32)};
    o().Submit(K_ADD, WORKER_VECTOR, read_again);
    o().Free(again);  // after its reader: the heap ring goes round again below
    // Outputs until one lands where the failed task wrote; its reader runs.
    bool reused = false;
    for (int i = 0; i < 400 && !reused; ++i) {
        auto scope = o().BeginScope();
        TaskParam make[] = {In(x, 64), In(x, 64), Out(nullptr, 64)};
        const int32_t q = o().Submit(K_ADD, WORKER_VECTOR, make);
        auto* out = static_cast<uint8_t*>(o().TaskOutput(q));
        if (out == spoilt) {
            reused = true;
            TaskParam read_out[] = {In(out, 64), In(out, 64), Out(y + 8, 32)};
            o().Submit(K_ADD, WORKER_VECTOR, read_out);
        }
        scope.End();
    }
    ASSERT_TRUE(reused) << "the heap ring never gave the spoilt address out again";
    try {
        o().WaitAll();
        ADD_FAILURE() << "WaitAll must report the failure";
    } catch (const Error& err) {
        // The one skipped: the reader of the half-rewritten buffer.
        EXPECT_NE(err.message().find("1 task(s) failed, 1 dependent task(s) skipped"), std::string::npos) << err.what();
    }
    EXPECT_EQ(y[8], 28u);   // (7 + 7) + (7 + 7): the reader of the new output ran
    EXPECT_EQ(y[0], 0u);    // the reader of the half-rewritten buffer did not
    EXPECT_EQ(y[16], 10u);  // the reader of the buffer at the freed one's address ran
}

// A failed task that names one region both as an INPUT and as an OUTPUT
// still poisons it: dropping its read entry, kept by task and range, must
// not drop the write entry of the same range.
TEST_P(OrchQueueTest, AFailedTaskThatReadsAndWritesOneRegionStillPoisonsIt) {
    Make(/*ring=*/4);
    uint32_t* x = Data(0, 64);
    uint32_t* y = Data(4096, 64);
    TaskParam fill_x[] = {Out(x, 64)};
    o().Submit(K_FILL, WORKER_HOST, fill_x);
    TaskParam both[] = {In(x, 64), Out(x, 64)};
    const int32_t a = o().Submit(K_FAIL, WORKER_HOST, both);
    ASSERT_TRUE(WrapPast(a));
    TaskParam read_x[] = {In(x, 64), In(x, 64), Out(y, 64)};
    o().Submit(K_ADD, WORKER_VECTOR, read_x);
    EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "1 task(s) failed, 1 dependent task(s) skipped");
    EXPECT_EQ(y[0], 0u);  // not 7 + 7: the reader did not run on what the failed task left
}

TEST_P(OrchQueueTest, FailureListBeforeWaitAll) {
    Make();
    uint32_t* x = Data(0, 64);
    TaskParam fx[] = {Out(x, 64)};
    TaskParam inc[] = {InOut(x, 64)};
    auto scope = o().BeginScope();
    const int32_t a = o().Submit(K_EXT, WORKER_EXTERNAL, fx);
    const int32_t b = o().Submit(K_INC, WORKER_VECTOR, inc);
    o().Fail(a, 5);
    // One failure record for the runtime and the host level.
    const std::vector<TaskFailureInfo> f = o().Failures();
    ASSERT_EQ(f.size(), 2u);
    EXPECT_EQ(f[0].task_id, uint64_t(a));
    EXPECT_FALSE(f[0].skipped);
    EXPECT_EQ(f[0].root_task_id, a);
    EXPECT_EQ(f[0].kernel_id, K_EXT);
    EXPECT_EQ(f[0].level, Level::CoreGroup);
    EXPECT_EQ(f[0].kind, ErrorKind::DeviceError);
    EXPECT_EQ(f[1].task_id, uint64_t(b));
    EXPECT_EQ(f[1].task, "task " + std::to_string(b));
    EXPECT_EQ(f[1].kernel_id, K_INC);
    EXPECT_TRUE(f[1].skipped);
    EXPECT_EQ(f[1].root_task_id, a);
    EXPECT_EQ(f[1].root_kernel_id, K_EXT);
    // A skipped task carries the cause it was skipped for.
    EXPECT_EQ(f[1].device_code, 5u);
    EXPECT_EQ(f[1].kind, ErrorKind::DeviceError);
    EXPECT_EQ(f[1].cause, f[0].cause);
    EXPECT_NE(f[1].cause.find("code 5"), std::string::npos) << f[1].cause;
    EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "code 5");
}

TEST_P(OrchQueueTest, BadInputIsATypedErrorNamingWhatWasWrong) {
    Make();
    uint32_t* x = Data(0, 64);
    uint32_t stack[16];
    TaskParam outside[] = {In(stack, 64)};
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, outside), InvalidArgument, "outside the function's memory");
    TaskParam past_end[] = {In(Data(0, 64), o().memory_size() + 1)};
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, past_end), InvalidArgument, "outside the function's memory");
    TaskParam ok[] = {InOut(x, 64)};
    EXPECT_SPYRE_ERROR(o().Submit(99, WORKER_VECTOR, ok), InvalidArgument, "kernel 99 is not registered");
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, 9, ok), InvalidArgument, "worker type 9 does not exist");
    TaskParam zero[] = {In(x, 0)};
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, zero), InvalidArgument, "has size 0");
    TaskParam null_in[] = {In(nullptr, 64)};
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, null_in), InvalidArgument, "only an OUTPUT");
    TaskParam both[] = {{PARAM_INPUT, x, 64, {x, 0, 64}}};
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, both), InvalidArgument, "use one spelling");
    TaskParam kind[] = {{7, x, 64, {}}};
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, kind), InvalidArgument, "unknown kind 7");
    // A NULL region buffer is an implicit output, allocated whole: an offset
    // used to be dropped without a word.
    TaskParam null_region_offset[] = {{PARAM_OUTPUT, nullptr, 0, {nullptr, 64, 16}}};
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, null_region_offset), InvalidArgument,
                       "has no buffer but a region offset of 64: an implicit output is allocated whole, at no offset");
    std::vector<TaskParam> many(PTO_MAX_PARAMS + 1, In(x, 4));
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, many), InvalidArgument, "at most 16");
    void* buf = o().Alloc(256);
    TaskParam past_buffer[] = {In(static_cast<uint8_t*>(buf) + 128, 256)};
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, past_buffer), InvalidArgument, "runs past the end of its pto_alloc buffer");
    // Sizes near 2^64: rounding one up to the heap's granule used to give
    // 0, and the task then hung walking 2^48 granules (fails by timeout).
    TaskParam huge_implicit[] = {In(x, 64), Out(nullptr, uint64_t(-4))};
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, huge_implicit), OutOfMemory,
                       "implicit output of 18446744073709551612 bytes is larger than the heap ring");
    TaskParam huge_region[] = {{PARAM_INPUT, nullptr, 0, {x, 8, uint64_t(-8)}}};
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, huge_region), InvalidArgument, "outside the function's memory");
    TaskParam wrapping_offset[] = {{PARAM_INPUT, nullptr, 0, {x, uint64_t(-64), 64}}};
    EXPECT_SPYRE_ERROR(o().Submit(K_INC, WORKER_VECTOR, wrapping_offset), InvalidArgument,
                       "is outside the function's memory");
    EXPECT_SPYRE_ERROR(o().Alloc(uint64_t(-4)), OutOfMemory, "larger than the heap ring");
    EXPECT_SPYRE_ERROR(o().Alloc(0), InvalidArgument, "0 bytes");
    EXPECT_SPYRE_ERROR(o().Alloc(2 << 20), OutOfMemory, "larger than the heap ring");
    EXPECT_SPYRE_ERROR(o().Free(stack), InvalidArgument, "not a live buffer");
    EXPECT_SPYRE_ERROR(o().Run(nullptr, nullptr), InvalidArgument, "no orchestration function");
    EXPECT_SPYRE_ERROR(o().Complete(12345), InvalidArgument, "is not live");
    auto scope = o().BeginScope();  // keeps t live after it ran (it has an implicit output)
    TaskParam with_output[] = {InOut(x, 64), Out(nullptr, 64)};
    const int32_t t = o().Submit(K_INC, WORKER_VECTOR, with_output);
    EXPECT_SPYRE_ERROR(o().Complete(t), InvalidArgument, "only EXTERNAL tasks");
    EXPECT_SPYRE_ERROR(o().TaskOutput(t, 1), InvalidArgument, "1 implicit output(s): index 1 is not one of them");
    EXPECT_SPYRE_ERROR(o().TaskOutput(t, -1), InvalidArgument, "index -1 is not one of them");
    EXPECT_SPYRE_ERROR(o().TaskOutput(t, INT32_MAX), InvalidArgument, "index 2147483647 is not one of them");
    const int32_t ext = o().Submit(K_EXT, WORKER_EXTERNAL, ok);  // live until completed
    EXPECT_SPYRE_ERROR(o().TaskOutput(ext, 0), InvalidArgument, "0 implicit output(s)");
    o().Complete(ext);
    EXPECT_SPYRE_ERROR(o().TaskState(1 << 30), InvalidArgument, "never submitted");
    EXPECT_SPYRE_ERROR(o().RegisterHostKernel(K_INC, [](auto, auto) { return 0u; }), InvalidArgument,
                       "already registered");
    EXPECT_SPYRE_ERROR(o().HostAddress(o().memory_size(), 1), InvalidArgument, "outside the function's memory");
    o().WaitAll();
}

TEST_P(OrchQueueTest, ExternalCompletionBeforeItsInputsTakesEffectLater) {
    Make();
    uint32_t* x = Data(0, 64);
    TaskParam w[] = {Out(x, 64)};
    const int32_t a = o().Submit(K_EXT, WORKER_EXTERNAL, w);
    const int32_t b = o().Submit(K_EXT, WORKER_EXTERNAL, w);  // WAW on a
    o().Complete(b);
    EXPECT_EQ(o().TaskState(b), PTO_TASK_PENDING);
    EXPECT_SPYRE_ERROR(o().Complete(b), InvalidArgument, "completed already");
    o().Complete(a);
    o().WaitAll();
    EXPECT_EQ(o().TaskState(b), PTO_TASK_CONSUMED);
}

// The same tasks submitted to the runtime and run one by one on a copy of
// the memory must give the same bytes: every dependency the runtime misses
// would let tasks race and (with this kernel) change the result.
TEST_P(OrchQueueTest, RandomDagMatchesASequentialRun) {
    Make(32, 1 << 16);
    constexpr uint64_t kArena = 16384;  // bytes, 4096 words
    struct Op {
        int32_t kinds[3];
        uint64_t off[3], len[3];
        int n;
        uint32_t seed;
    };
    // out[i] = out[i] * 3 + in0[i % n0] + in1[i % n1] + seed, over words.
    auto run = [](const Op& op, uint8_t* base) {
        auto* out = reinterpret_cast<uint32_t*>(base + op.off[0]);
        const size_t n = op.len[0] / 4;
        for (size_t i = 0; i < n; ++i) {
            uint32_t v = out[i] * 3 + op.seed;
            for (int k = 1; k < op.n; ++k) v += reinterpret_cast<const uint32_t*>(base + op.off[k])[i % (op.len[k] / 4)];
            out[i] = v;
        }
    };
    std::mt19937 rng(1234);
    std::vector<Op> ops;
    for (int t = 0; t < 2000; ++t) {
        Op op{};
        op.n = 1 + int(rng() % 3);
        for (int k = 0; k < op.n; ++k) {
            op.len[k] = 4 * (1 + rng() % 256);
            op.off[k] = 4 * (rng() % ((kArena - op.len[k]) / 4));
            op.kinds[k] = k == 0 ? (rng() % 2 ? PARAM_INOUT : PARAM_OUTPUT) : PARAM_INPUT;
        }
        op.seed = uint32_t(rng());
        ops.push_back(op);
    }
    uint8_t* base = reinterpret_cast<uint8_t*>(Data(0, kArena));
    std::vector<uint8_t> reference(kArena);
    for (uint64_t i = 0; i < kArena; ++i) base[i] = reference[i] = uint8_t(i * 7);
    for (const Op& op : ops) run(op, reference.data());

    o().RegisterHostKernel(K_MIX, [&](std::span<void* const> b, std::span<const uint64_t>) {
        // Each task finds its op by the seed it carries in its last buffer.
        const Op& op = ops[*static_cast<const uint32_t*>(b.back())];
        run(op, base);
        return 0u;
    });
    uint32_t* index = Data(kArena, 4 * ops.size());  // read-only task indices
    for (size_t t = 0; t < ops.size(); ++t) index[t] = uint32_t(t);
    for (size_t t = 0; t < ops.size(); ++t) {
        const Op& op = ops[t];
        std::vector<TaskParam> p;
        for (int k = 0; k < op.n; ++k) p.push_back({op.kinds[k], base + op.off[k], op.len[k], {}});
        p.push_back(In(index + t, 4));
        o().Submit(K_MIX, WORKER_VECTOR, p);
    }
    o().WaitAll();
    EXPECT_EQ(0, std::memcmp(base, reference.data(), kArena));
}

// Completions that find the task graph's lock held are parked and applied by
// its holder: with six workers finishing tiny tasks while the submitter
// holds the lock most of the time, none may be lost (a lost one would hang
// WaitAll or leave a counter short) and none applied twice.
TEST_P(OrchQueueTest, CompletionsFromManyWorkersAreNeverLostOrRepeated) {
    Make(128, 1 << 16, 4 << 20, 6, /*run_here=*/false);  // every task on a worker thread
    constexpr int kCounters = 48, kTasks = 12000;
    uint32_t* counters = Data(0, 64 * kCounters);  // 64 bytes apart: independent regions
    for (int c = 0; c < kCounters; ++c) counters[c * 16] = 0;
    std::vector<uint32_t> expected(kCounters, 0);
    std::mt19937 rng(77);
    for (int t = 0; t < kTasks; ++t) {
        const int c = int(rng() % kCounters);
        ++expected[size_t(c)];
        TaskParam inc[] = {InOut(counters + c * 16, 4)};
        o().Submit(K_INC, WORKER_VECTOR, inc);
    }
    o().WaitAll();
    for (int c = 0; c < kCounters; ++c) EXPECT_EQ(counters[c * 16], expected[size_t(c)]) << "counter " << c;
}

// --- host tasks on the submitting thread -------------------------------------

// Records, per task, whether its kernel ran on the submitting thread. The
// bound for "cheap" is a second unless a test says otherwise, so that what
// runs where does not depend on how fast this machine is right now (the
// averaging itself is tested in run_cost_test.cpp).
class RunHereTest : public OrchTest {
protected:
    enum : int32_t { K_WHERE = 20, K_SLOW, K_NEST };
    static constexpr uint32_t kSecond = 1'000'000'000;
    void MakeWith(bool run_here, uint32_t cheap_ns = kSecond) {
        Make(64, 1 << 20, 4 << 20, 2, run_here, cheap_ns);
        submitter_ = std::this_thread::get_id();
        auto where = [this](std::span<void* const> b, std::span<const uint64_t>) {
            *static_cast<uint32_t*>(b[0]) = std::this_thread::get_id() == submitter_ ? 1u : 2u;
            return 0u;
        };
        o().RegisterHostKernel(K_WHERE, where);
        o().RegisterHostKernel(K_SLOW, [where](std::span<void* const> b, std::span<const uint64_t> s) {
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            return where(b, s);
        });
    }
    // Runs one task of `kernel` writing its word and waits; true if it ran here.
    bool RanHere(int32_t kernel) {
        uint32_t* w = Data(0, 4);
        *w = 0;
        TaskParam p[] = {Out(w, 4)};
        o().Submit(kernel, WORKER_HOST, p);
        o().WaitAll();
        EXPECT_NE(*w, 0u) << "the task did not run";
        return *w == 1;
    }
    std::thread::id submitter_;
};

TEST_F(RunHereTest, ACheapKernelsReadyTasksRunOnTheSubmittingThread) {
    MakeWith(true);
    // Its first run is on a worker (nothing is known of its cost); once a
    // run is measured under the bound, a task ready at submission runs
    // inside Submit.
    EXPECT_FALSE(RanHere(K_WHERE));
    for (int i = 0; i < 50; ++i) EXPECT_TRUE(RanHere(K_WHERE)) << "task " << i + 1;
}

TEST_F(RunHereTest, WhenTurnedOffEveryTaskRunsOnAWorker) {
    MakeWith(false);
    for (int i = 0; i < 300; ++i) ASSERT_FALSE(RanHere(K_WHERE)) << "task " << i;
}

TEST_F(RunHereTest, ASlowKernelNeverRunsOnTheSubmittingThread) {
    MakeWith(true, 1000);  // the default bound, a microsecond
    for (int i = 0; i < 40; ++i) ASSERT_FALSE(RanHere(K_SLOW)) << "task " << i;  // 200 us per run: never cheap
}

TEST_F(RunHereTest, ATaskThatIsNotReadyAtSubmissionRunsOnAWorker) {
    MakeWith(true);
    ASSERT_FALSE(RanHere(K_WHERE));  // measured: cheap from now on
    ASSERT_TRUE(RanHere(K_WHERE));
    // Behind an EXTERNAL task, it becomes ready only when the test completes
    // that one: a worker runs it, not this thread.
    uint32_t* w = Data(0, 4);
    *w = 0;
    TaskParam p[] = {Out(w, 4)};
    const int32_t gate = o().Submit(K_EXT, WORKER_EXTERNAL, p);
    o().Submit(K_WHERE, WORKER_HOST, p);
    o().Complete(gate);
    o().WaitAll();
    EXPECT_EQ(*w, 2u);
}

TEST_F(RunHereTest, AKernelRunOnTheSubmittingThreadMaySubmitTasksOfItsOwn) {
    MakeWith(true);
    // K_NEST writes where it ran and, once armed, submits a K_FILL of its
    // own from inside its run (the locks are released while a kernel runs
    // on the submitting thread, or this would deadlock).
    std::atomic<bool> armed{false};
    uint32_t* filled = Data(4096, 64);
    o().RegisterHostKernel(K_NEST, [&](std::span<void* const> b, std::span<const uint64_t>) {
        *static_cast<uint32_t*>(b[0]) = std::this_thread::get_id() == submitter_ ? 1u : 2u;
        if (armed.load()) {
            TaskParam fill[] = {Out(filled, 64)};
            o().Submit(K_FILL, WORKER_HOST, fill);
        }
        return 0u;
    });
    ASSERT_FALSE(RanHere(K_NEST));  // measured: cheap from now on
    armed = true;
    for (int i = 0; i < 20; ++i) {
        std::memset(filled, 0, 64);
        ASSERT_TRUE(RanHere(K_NEST)) << "run " << i;
        for (int k = 0; k < 16; ++k) ASSERT_EQ(filled[k], 7u) << "the nested task of run " << i << " did not run";
    }
}

// A kernel run on the orchestration thread inside a scope submits as a
// worker's kernel does: its tasks are not the scope's, so the scope's end
// does not report their failures (pto_wait_all does). Before, the scope's
// end reported the child's failure only when the kernel had run here
// (probe 7, 4 of 4 each way).
TEST_F(RunHereTest, AKernelsTasksAreNotItsScopesWhereverTheKernelRan) {
    for (const bool here : {true, false}) {
        SCOPED_TRACE(here ? "run here" : "on a worker");
        MakeWith(here);
        std::atomic<bool> armed{false};
        uint32_t* child_out = Data(4096, 64);
        o().RegisterHostKernel(K_NEST, [&](std::span<void* const> b, std::span<const uint64_t>) {
            *static_cast<uint32_t*>(b[0]) = std::this_thread::get_id() == submitter_ ? 1u : 2u;
            if (armed.load()) {
                TaskParam fail[] = {Out(child_out, 64)};
                o().Submit(K_FAIL, WORKER_HOST, fail);
            }
            return 0u;
        });
        ASSERT_FALSE(RanHere(K_NEST));  // measured: cheap from now on
        armed = true;
        auto scope = o().BeginScope();
        uint32_t* w = Data(0, 4);
        *w = 0;
        TaskParam p[] = {Out(w, 4)};
        o().Submit(K_NEST, WORKER_HOST, p);
        for (int spins = 0; o().Failures().empty() && spins < 20000; ++spins)  // the child failed
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        EXPECT_EQ(*w, here ? 1u : 2u);  // where the kernel ran
        EXPECT_NO_THROW(scope.End());  // its own tasks' failures only
        EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "failed with host kernel return code 42");
    }
}

TEST_F(RunHereTest, AFailureOnTheSubmittingThreadPoisonsItsDependents) {
    MakeWith(true);
    uint32_t* x = Data(0, 64);
    uint32_t* y = Data(4096, 64);
    TaskParam px[] = {Out(x, 64)};
    o().Submit(K_FAIL, WORKER_HOST, px);  // on a worker; measured: cheap from now on
    EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "failed with host kernel return code 42");
    y[0] = 0;
    o().Submit(K_FAIL, WORKER_HOST, px);  // runs here and fails
    TaskParam dep[] = {In(x, 64), Out(y, 64)};
    o().Submit(K_FILL, WORKER_HOST, dep);  // poisoned at submission: never runs
    EXPECT_SPYRE_ERROR(o().WaitAll(), DeviceError, "1 task(s) failed, 1 dependent task(s) skipped");
    EXPECT_EQ(y[0], 0u);
}

// A kernel that waits for every task of its own runtime would wait for
// itself: a typed error instead of a hang, wherever the kernel runs.
class WaitInsideATask : public RunHereTest, public ::testing::WithParamInterface<bool> {};
INSTANTIATE_TEST_SUITE_P(Where, WaitInsideATask, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "submitting_thread" : "worker"; });

TEST_P(WaitInsideATask, IsAnErrorNotAHang) {
    MakeWith(/*run_here=*/GetParam());
    std::string caught;
    o().RegisterHostKernel(K_NEST, [&](std::span<void* const> b, std::span<const uint64_t>) {
        *static_cast<uint32_t*>(b[0]) = std::this_thread::get_id() == submitter_ ? 1u : 2u;
        try {
            o().WaitAll();
            caught = "no error";
        } catch (const Error& e) {
            caught = e.kind() == ErrorKind::InvalidArgument ? e.what() : "another kind of error";
        }
        return 0u;
    });
    EXPECT_FALSE(RanHere(K_NEST));  // the first run: on a worker
    EXPECT_NE(caught.find("would wait for that task itself"), std::string::npos) << caught;
    caught.clear();
    EXPECT_EQ(RanHere(K_NEST), GetParam());  // the second: here when allowed
    EXPECT_NE(caught.find("would wait for that task itself"), std::string::npos) << caught;
}

// A kernel may submit tasks of its own, but its task holds the task ring:
// the ring is reused in order, and once its task is the oldest, a kernel
// that submitted a ring's worth would wait for itself. It gets OutOfMemory
// (EDEADLK) instead of a hang, the tasks it did submit run, and the runtime
// goes on (a probe hung with a ring of 8 and 7 tasks submitted).
TEST_P(WaitInsideATask, SubmittingPastTheRingIsAnErrorNotAHang) {
    MakeWith(/*run_here=*/GetParam());
    constexpr int kTries = 200;  // the ring holds 64
    uint32_t* filled = Data(4096, 4 * kTries);
    std::atomic<bool> armed{false};
    std::string caught;
    int submitted = 0;
    o().RegisterHostKernel(K_NEST, [&](std::span<void* const> b, std::span<const uint64_t>) {
        *static_cast<uint32_t*>(b[0]) = std::this_thread::get_id() == submitter_ ? 1u : 2u;
        if (!armed.load()) return 0u;
        try {
            for (submitted = 0; submitted < kTries; ++submitted) {
                TaskParam fill[] = {Out(filled + submitted, 4)};
                o().Submit(K_FILL, WORKER_HOST, fill);
            }
            caught = "no error";
        } catch (const Error& e) {
            caught = e.kind() == ErrorKind::OutOfMemory ? e.what() : "another kind of error";
        }
        return 0u;
    });
    EXPECT_FALSE(RanHere(K_NEST));  // the first run: on a worker
    armed = true;
    std::memset(filled, 0, 4 * kTries);
    EXPECT_EQ(RanHere(K_NEST), GetParam());
    EXPECT_NE(caught.find("is the task whose kernel is submitting"), std::string::npos) << caught;
    ASSERT_GT(submitted, 0);
    ASSERT_LT(submitted, kTries);
    for (int i = 0; i < submitted; ++i) ASSERT_EQ(filled[i], 7u) << "task " << i << " of the kernel's did not run";
    armed = false;
    EXPECT_EQ(RanHere(K_NEST), GetParam());  // and the runtime goes on
}

// Scopes are the orchestration thread's. A scope a kernel opened on a
// worker thread stayed open for good (the thread never ends), and every
// later pto_scope_begin of the orchestration thread was EBUSY.
TEST_P(WaitInsideATask, AScopeBegunOrEndedInsideATaskIsRefused) {
    MakeWith(/*run_here=*/GetParam());
    std::string begun, ended;
    o().RegisterHostKernel(K_NEST, [&](std::span<void* const> b, std::span<const uint64_t>) {
        *static_cast<uint32_t*>(b[0]) = std::this_thread::get_id() == submitter_ ? 1u : 2u;
        begun = pto_scope_begin(o().handle()) == -EINVAL ? pto_last_error() : "not EINVAL";
        ended = pto_scope_end(o().handle()) == -EINVAL ? pto_last_error() : "not EINVAL";
        return 0u;
    });
    for (bool here : {false, GetParam()}) {
        ASSERT_EQ(pto_scope_begin(o().handle()), 0);
        EXPECT_EQ(RanHere(K_NEST), here);
        EXPECT_NE(begun.find("pto_scope_begin called from inside a task"), std::string::npos) << begun;
        EXPECT_NE(ended.find("pto_scope_end called from inside a task"), std::string::npos) << ended;
        ASSERT_EQ(pto_scope_end(o().handle()), 0);  // still this thread's, and still open
    }
    EXPECT_EQ(pto_scope_begin(o().handle()), 0);
    EXPECT_EQ(pto_scope_end(o().handle()), 0);
}

// Kernels on worker threads submit tasks of their own while the
// orchestration thread waits for room in a small ring. A stalled submitter
// used to keep the submitters' lock while it slept, so every such kernel,
// and with it the ring, waited for good (an outside probe hung every time).
// Now each kernel's submission gets in: it succeeds, or fails with
// OutOfMemory (EDEADLK) when its own task is what the ring waits for, and
// the increments that ran are exactly the submissions that succeeded.
TEST_P(OrchQueueTest, KernelsSubmittingWhileTheOrchestrationThreadWaitsForRoomDoNotHang) {
    Make(/*ring=*/8, 1 << 20, 4 << 20, /*threads=*/2, /*run_here=*/false);
    enum : int32_t { K_SUBMIT = 30 };
    uint32_t* counters = Data(0, 8);
    std::atomic<int> ok{0}, refused{0}, other{0};
    o().RegisterHostKernel(K_SUBMIT, [&](std::span<void* const> b, std::span<const uint64_t>) {
        TaskParam inc[] = {InOut(b[0], 4)};
        try {
            o().Submit(K_INC, WORKER_HOST, inc);
            ++ok;
        } catch (const Error& e) {
            const bool deadlock = e.kind() == ErrorKind::OutOfMemory &&
                                  std::string(e.what()).find("whose kernel is submitting") != std::string::npos;
            ++(deadlock ? refused : other);
        }
        return 0u;
    });
    constexpr int kTasks = 300;
    for (int i = 0; i < kTasks; ++i) {
        TaskParam p[] = {InOut(counters + (i & 1), 4)};
        o().Submit(K_SUBMIT, WORKER_HOST, p);
    }
    o().WaitAll();
    EXPECT_EQ(ok + refused, kTasks);
    EXPECT_EQ(other.load(), 0) << "a kernel's submission failed with another error";
    EXPECT_EQ(counters[0] + counters[1], uint32_t(ok.load())) << "increments that ran against submissions that succeeded";
}

// The one host thread runs a kernel whose submission finds the ring full,
// and what would free it is ready tasks no other thread can run (readers
// of an output that hold it in the ring until they end). The stalled
// kernel runs them itself, and its submission then gets in. It used to
// sleep until they ran, which was never.
TEST_P(OrchQueueTest, AKernelWaitingForRoomRunsTheReadyTasksThatWouldMakeIt) {
    Make(/*ring=*/8, 1 << 20, 4 << 20, /*threads=*/1, /*run_here=*/false);
    enum : int32_t { K_GATE = 31, K_SUBMIT };
    uint32_t* x = Data(0, 64);
    uint32_t* outs = Data(4096, 6 * 64);
    uint32_t* child = Data(8192, 64);
    std::atomic<bool> open{false};
    std::string outcome = "never ran";
    o().RegisterHostKernel(K_GATE, [&](std::span<void* const> b, std::span<const uint64_t>) {
        for (int i = 0; i < 200000 && !open.load(); ++i) std::this_thread::sleep_for(std::chrono::microseconds(50));
        *static_cast<uint32_t*>(b[0]) = 5;
        return 0u;
    });
    o().RegisterHostKernel(K_SUBMIT, [&](std::span<void* const>, std::span<const uint64_t>) {
        TaskParam fill[] = {Out(child, 64)};
        try {
            o().Submit(K_FILL, WORKER_HOST, fill);
            outcome = "submitted";
        } catch (const Error& e) {
            outcome = e.what();
        }
        return 0u;
    });
    std::memset(child, 0, 64);
    TaskParam gate[] = {Out(x, 4)};
    o().Submit(K_GATE, WORKER_HOST, gate);  // the thread waits in it
    TaskParam none[] = {Out(Data(12288, 64), 64)};
    o().Submit(K_SUBMIT, WORKER_HOST, none);  // queued next: ready at once
    for (int i = 0; i < 6; ++i) {  // the ring's other 6 slots: readers of x, queued after K_SUBMIT
        TaskParam add[] = {In(x, 4), In(x, 4), Out(outs + 16 * i, 4)};
        o().Submit(K_ADD, WORKER_HOST, add);
    }
    open = true;
    o().WaitAll();
    EXPECT_EQ(outcome, "submitted");
    for (int i = 0; i < 6; ++i) EXPECT_EQ(outs[16 * i], 10u) << "reader " << i;
    for (int i = 0; i < 16; ++i) ASSERT_EQ(child[i], 7u) << "the kernel's own task did not run";
}

void SeedStyleOrchestration(Runtime* rt, uint64_t* args) {
    auto* a = reinterpret_cast<uint32_t*>(args[0]);
    auto* out = reinterpret_cast<uint32_t*>(args[1]);
    TaskParam p0[] = {In(a, 64), In(a, 64), Out(nullptr, 64)};
    const int32_t t0 = pto_submit_task(rt, K_ADD, WORKER_VECTOR, p0, 3);
    TaskParam p1[] = {In(pto_task_output(rt, t0, 0), 64), In(a, 64), Out(out, 64)};
    pto_submit_task(rt, K_ADD, WORKER_VECTOR, p1, 3);
}

TEST_P(OrchQueueTest, RunCallsAnOrchestrationFunctionAndWaits) {
    Make();
    uint32_t* a = Data(0, 64);
    uint32_t* out = Data(4096, 64);
    for (int i = 0; i < 16; ++i) a[i] = uint32_t(i + 1);
    uint64_t args[] = {reinterpret_cast<uint64_t>(a), reinterpret_cast<uint64_t>(out)};
    o().Run(SeedStyleOrchestration, args);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], uint32_t(3 * (i + 1)));
    EXPECT_SPYRE_ERROR(o().RunLibrary("/nonexistent/orch.so", "f", args), NotFound, "cannot load");
}

// ConfineTasksTo with read-only regions: a task may read them, and one that
// writes them (OUTPUT, INOUT) is refused, unless a writable region holds the
// range too; outside every region stays refused.
TEST_F(OrchTest, ATaskWritingAReadOnlyConfinedRegionIsRefused) {
    Make();
    uint32_t* ro = Data(0, 64);
    uint32_t* rw = Data(4096, 64);
    uint32_t* shared = Data(8192, 64);  // read-only and writable both
    o().ConfineTasksTo(std::vector<Orchestrator::TaskRegion>{
        {ro, 64, false}, {rw, 64, true}, {shared, 64, false}, {shared, 64, true}});
    for (const TaskParam& write : {Out(ro, 64), InOut(ro, 64), Out(ro + 4, 16)}) {
        const TaskParam p[] = {In(rw, 64), write};
        EXPECT_SPYRE_ERROR(o().Submit(K_FILL, WORKER_HOST, p), InvalidArgument,
                           "writes memory its tasks may only read (ConfineTasksTo;");
    }
    const TaskParam reads[] = {In(ro, 64), Out(rw, 64)};
    o().Submit(K_FILL, WORKER_HOST, reads);
    const TaskParam both[] = {Out(shared, 64)};
    o().Submit(K_FILL, WORKER_HOST, both);
    const TaskParam outside[] = {In(Data(12288, 64), 64)};
    EXPECT_SPYRE_ERROR(o().Submit(K_FILL, WORKER_HOST, outside), InvalidArgument,
                       "is outside the memory its tasks are confined to");
    o().WaitAll();
    EXPECT_EQ(rw[0], 7u);
    EXPECT_EQ(shared[0], 7u);
    o().Unconfine();
    const TaskParam now[] = {Out(ro, 64)};
    o().Submit(K_FILL, WORKER_HOST, now);
    o().WaitAll();
    EXPECT_EQ(ro[0], 7u);
}

// A Scope let go of while an inner scope is open (its End() refused: the
// reverse order) ends with the inner one. It used to stay open with nobody
// to end it, holding every later implicit output: 12 through a ring of 8
// then failed "task ring (size 8) is full and cannot drain ... held by 1
// open scope(s)".
TEST_F(OrchTest, AScopeLetGoOfOutOfOrderEndsWithItsInnerScope) {
    Make(8);
    uint32_t* a = Data(0, 64);
    std::optional<Orchestrator::Scope> outer(o().BeginScope());
    Orchestrator::Scope inner = o().BeginScope();
    EXPECT_SPYRE_ERROR(outer->End(), InvalidArgument, "scopes end in the reverse order they began");
    outer.reset();  // destroyed out of order: ends once `inner` has
    TaskParam p[] = {In(a, 64), Out(nullptr, 16)};
    o().Submit(K_FILL, WORKER_HOST, p);
    inner.End();
    for (int i = 0; i < 12; ++i) o().Submit(K_FILL, WORKER_HOST, p);
    o().WaitAll();
    // Nothing is left open: a new scope is the outermost again.
    auto again = o().BeginScope();
    TaskParam q[] = {Out(a, 64)};
    o().Submit(K_FILL, WORKER_HOST, q);
    again.End();
    o().WaitAll();
    EXPECT_EQ(a[0], 7u);
}

// Run with WaitSlices waits for the function's tasks in slices and calls
// `between` after each: what it throws ends the wait at once and comes out
// of Run while the task is still held (the tasks go on; WaitAll finishes
// them); what the function threw comes out first; a `between` that never
// throws waits as Run does.
TEST_F(OrchTest, RunWaitingInSlicesStopsWhenBetweenThrows) {
    Make();
    constexpr int32_t kHeld = 100;
    static std::atomic<bool> release{false};
    release = false;
    o().RegisterHostKernel(kHeld, [](std::span<void* const> b, std::span<const uint64_t>) -> uint32_t {
        while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        static_cast<uint32_t*>(b[0])[0] = 5;
        return 0;
    });
    static int32_t submitted = -1;
    struct Fns {
        static void Submit(Runtime* rt, uint64_t* args) {
            TaskParam p[] = {InOut(reinterpret_cast<uint32_t*>(args[0]), 64)};
            submitted = pto_submit_task(rt, kHeld, WORKER_HOST, p, 1);
        }
        static void SubmitAndThrow(Runtime* rt, uint64_t* args) {
            Submit(rt, args);
            throw std::logic_error("the function gave up");
        }
    };
    uint32_t* x = Data(0, 64);
    uint64_t args[] = {reinterpret_cast<uint64_t>(x)};
    int calls = 0;
    const Orchestrator::WaitSlices stop_third{std::chrono::milliseconds(1), [&] {
        if (++calls == 3) throw std::runtime_error("stop waiting");
    }};
    try {
        o().Run(Fns::Submit, args, {}, stop_third);
        ADD_FAILURE() << "Run waited for the held task";
    } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "stop waiting");
    }
    EXPECT_EQ(calls, 3);
    EXPECT_LT(o().TaskState(submitted), PTO_TASK_COMPLETED);  // still held: the task goes on
    release = true;
    o().WaitAll();
    EXPECT_EQ(x[0], 5u);

    // The function's own error comes first; the wait still ends at the stop.
    release = false;
    calls = 0;
    try {
        o().Run(Fns::SubmitAndThrow, args, {}, stop_third);
        ADD_FAILURE() << "Run did not throw";
    } catch (const std::logic_error& e) {
        EXPECT_STREQ(e.what(), "the function gave up");
    }
    EXPECT_LT(o().TaskState(submitted), PTO_TASK_COMPLETED);
    release = true;
    o().WaitAll();

    // A `between` that lets the wait go on: Run returns once the task is done.
    release = false;
    x[0] = 0;
    calls = 0;
    std::thread releaser([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        release = true;
    });
    o().Run(Fns::Submit, args, {}, {std::chrono::milliseconds(1), [&] { ++calls; }});
    releaser.join();
    EXPECT_EQ(x[0], 5u);
    EXPECT_GE(calls, 1);

    EXPECT_SPYRE_ERROR(o().Run(Fns::Submit, args, {}, {std::chrono::nanoseconds(0), [] {}}), InvalidArgument,
                       "WaitSlices needs a slice > 0 and a between");
    EXPECT_SPYRE_ERROR(o().Run(Fns::Submit, args, {}, {std::chrono::milliseconds(1), {}}), InvalidArgument,
                       "WaitSlices needs a slice > 0 and a between");
}

// Seed 004's Example 2 shape: a loop of scopes, each with a pto_alloc'd
// tile that several tasks write in turn and one copies out. pto_run used to
// hold every task of the function in a scope of its own, so a function of
// more tasks than the ring failed with "task ring ... cannot drain".
void LoopOfScopes(Runtime* rt, uint64_t* args) {
    auto* out = reinterpret_cast<uint32_t*>(args[0]);
    const auto tiles = int(args[1]), writers = int(args[2]);
    for (int i = 0; i < tiles; ++i) {
        pto_scope_begin(rt);
        void* tile = pto_alloc(rt, 64);
        TaskParam fill[] = {Out(tile, 64)};
        pto_submit_task(rt, K_FILL, WORKER_CUBE, fill, 1);
        for (int k = 1; k < writers; ++k) {
            TaskParam inc[] = {InOut(tile, 64)};
            pto_submit_task(rt, K_INC, WORKER_CUBE, inc, 1);
        }
        TaskParam copy[] = {In(tile, 64), In(tile, 64), Out(out + 16 * i, 64)};
        pto_submit_task(rt, K_ADD, WORKER_VECTOR, copy, 3);
        pto_free(rt, tile);
        pto_scope_end(rt);
    }
}

TEST_P(OrchQueueTest, ALoopOfScopesRunsThroughPtoRunBeyondTheRing) {
    Make(16);
    const int tiles = 64, writers = 3;  // 256 tasks: 16 times the ring
    uint32_t* out = Data(0, 64 * tiles);
    uint64_t args[] = {reinterpret_cast<uint64_t>(out), uint64_t(tiles), uint64_t(writers)};
    o().Run(LoopOfScopes, args);
    for (int i = 0; i < 16 * tiles; ++i) ASSERT_EQ(out[i], 2u * (7 + writers - 1)) << i;
    // One scope of more tasks than the ring (Example 2 with a long K).
    uint64_t long_k[] = {reinterpret_cast<uint64_t>(out), 1, 16 * 16};
    o().Run(LoopOfScopes, long_k);
    EXPECT_EQ(out[0], 2u * (7 + 16 * 16 - 1));
}

// Example 1's pattern (t0, its output read by t1, t1's read by a third
// task) at depth 0 from several threads at once. A thread whose hold kept
// the ring's oldest task while the others filled the ring behind it found
// no slot for the task that lets go of it: the ring could not drain, and
// the threads failed OutOfMemory (an outside probe, every run of 2 threads
// on a ring of 2; 7 of 8 runs on the default ring of 1024). The last slot
// is kept for that thread now, and the others wait for it.
// Host kernel `id`: *b[2] = *b[0] + *b[1], as uint64 (Example 1's add).
void RegisterAddU64(Orchestrator& orch, int32_t id) {
    orch.RegisterHostKernel(id, [](std::span<void* const> b, std::span<const uint64_t>) {
        *static_cast<uint64_t*>(b[2]) = *static_cast<uint64_t*>(b[0]) + *static_cast<uint64_t*>(b[1]);
        return 0u;
    });
}

// Example 1 from `threads` threads at once, `rounds` times each, checked
// exactly; thread 0 puts each round in a scope of its own when `scoped`,
// and (`alloc`) adds t1's output into a pto_alloc'd buffer there first, as
// Example 2 accumulates.
void Example1FromThreads(int32_t ring, int threads, int rounds, bool scoped, bool alloc = false,
                         uint64_t heap = 1 << 16) {
    auto orch = Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = ring, .heap_size = heap});
    using Args = std::span<void* const>;
    using Sizes = std::span<const uint64_t>;
    RegisterAddU64(orch, 1);
    orch.RegisterHostKernel(2, [](Args b, Sizes) {
        *static_cast<uint64_t*>(b[2]) = *static_cast<uint64_t*>(b[0]) * *static_cast<uint64_t*>(b[1]);
        return 0u;
    });
    orch.RegisterHostKernel(3, [](Args b, Sizes) {
        *static_cast<uint64_t*>(b[1]) += *static_cast<uint64_t*>(b[0]);
        return 0u;
    });
    std::vector<std::thread> pool;
    std::vector<std::string> errors(static_cast<size_t>(threads));
    std::vector<uint64_t*> acc(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t) {
        auto* in = static_cast<uint64_t*>(orch.HostAddress(uint64_t(4096 * t), 32));
        in[0] = uint64_t(t + 1), in[1] = 10, in[2] = 3, in[3] = 0;
        acc[size_t(t)] = in + 3;
        pool.emplace_back([&, t, in] {
            try {
                for (int i = 0; i < rounds; ++i) {
                    std::optional<Orchestrator::Scope> scope;
                    if (scoped && t == 0) scope.emplace(orch.BeginScope());
                    TaskParam p0[] = {{PARAM_INPUT, &in[0], 8}, {PARAM_INPUT, &in[1], 8}, {PARAM_OUTPUT, nullptr, 8}};
                    const int32_t t0 = orch.Submit(1, WORKER_VECTOR, p0);
                    TaskParam p1[] = {{PARAM_INPUT, orch.TaskOutput(t0, 0), 8}, {PARAM_INPUT, &in[2], 8},
                                      {PARAM_OUTPUT, nullptr, 8}};
                    const int32_t t1 = orch.Submit(2, WORKER_VECTOR, p1);
                    if (alloc && t == 0) {
                        void* sum = orch.Alloc(256);  // zeroed
                        TaskParam into[] = {{PARAM_INPUT, orch.TaskOutput(t1, 0), 8}, {PARAM_INOUT, sum, 8}};
                        orch.Submit(3, WORKER_VECTOR, into);
                        TaskParam out[] = {{PARAM_INPUT, sum, 8}, {PARAM_INOUT, &in[3], 8}};
                        orch.Submit(3, WORKER_VECTOR, out);
                        orch.Free(sum);
                        continue;
                    }
                    TaskParam p2[] = {{PARAM_INPUT, orch.TaskOutput(t1, 0), 8}, {PARAM_INOUT, &in[3], 8}};
                    orch.Submit(3, WORKER_VECTOR, p2);
                }
            } catch (const Error& e) {
                errors[size_t(t)] = e.what();
            }
        });
    }
    for (std::thread& th : pool) th.join();
    orch.WaitAll();
    for (int t = 0; t < threads; ++t) {
        EXPECT_EQ(errors[size_t(t)], "") << "thread " << t;
        EXPECT_EQ(*acc[size_t(t)], uint64_t(rounds) * uint64_t(t + 11) * 3) << "thread " << t;
    }
}

// Example 1's pattern (t0, its output read by t1, t1's read by a third
// task) at depth 0 from several threads at once. A thread whose hold kept
// the ring's oldest task while the others filled the ring behind it found
// no slot for the task that lets go of it: the ring could not drain, and
// the threads failed OutOfMemory (an outside probe, every run of 2 threads
// on a ring of 2; 7 of 8 runs on the default ring of 1024). The last slot
// is kept for that thread now, and the others wait for it.
class DepthZeroThreads : public ::testing::TestWithParam<std::pair<int32_t, int>> {};

TEST_P(DepthZeroThreads, Example1FromSeveralThreadsAtOnce) {
    const auto [ring, threads] = GetParam();
    Example1FromThreads(ring, threads, ring > 16 ? 20'000 : 3'000, false);
}

// One thread runs Example 1 in a scope per round while the others run it at
// depth 0. The open scopes held the other threads' tasks, and their end let
// go of them before those threads read them: "task N is not live" from
// pto_task_output, refused reads, and "a scope can hold at most 32 tasks"
// for the scoped thread (an outside probe: 5 of 5 runs on a ring of 32).
// (Rings of room for the scope's 3 tasks beside the others' holds.)
class ScopesBesideDepthZero : public ::testing::TestWithParam<std::pair<int32_t, int>> {};

TEST_P(ScopesBesideDepthZero, AnotherThreadsScopesDoNotHoldOrCountADepthZeroThreadsTasks) {
    const auto [ring, threads] = GetParam();
    Example1FromThreads(ring, threads, ring > 16 ? 20'000 : 3'000, true);
}

// The scopes' thread may wait for the depth-0 thread (here it joins it
// with its scope open): a depth-0 thread that left the scopes half the ring
// with no bound on its wait hung both. It waits kScopeRoomWait (1 s) at
// most, then takes the room for the rest of those scopes.
TEST(OrchScopes, ADepthZeroThreadThatTheScopesWaitForTakesTheRoomAfterAWhile) {
    auto orch = Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 8, .heap_size = 1 << 16});
    RegisterAddU64(orch, 1);
    auto* in = static_cast<uint64_t*>(orch.HostAddress(0, 16));
    auto* out = static_cast<uint64_t*>(orch.HostAddress(4096, 8 * 6));
    in[0] = 5, in[1] = 7;
    auto done = std::async(std::launch::async, [&] {
        auto scope = orch.BeginScope();
        TaskParam held[] = {{PARAM_INPUT, &in[0], 8}, {PARAM_INPUT, &in[1], 8}, {PARAM_OUTPUT, nullptr, 8}};
        orch.Submit(1, WORKER_HOST, held);  // the scope holds the ring's oldest task
        std::string error;
        std::thread depth_zero([&] {
            try {
                for (int i = 0; i < 6; ++i) {  // past half the ring
                    TaskParam p[] = {{PARAM_INPUT, &in[0], 8}, {PARAM_INPUT, &in[1], 8}, {PARAM_OUTPUT, &out[i], 8}};
                    orch.Submit(1, WORKER_HOST, p);
                }
            } catch (const Error& e) {
                error = e.what();
            }
        });
        depth_zero.join();  // with the scope open
        return error;
    });
    if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
        std::fprintf(stderr, "the depth-0 thread waited for the scope that waited for it\n");
        std::_Exit(1);
    }
    EXPECT_EQ(done.get(), "");
    orch.WaitAll();
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], 12u) << i;
}

// Two threads each taking a pto_alloc buffer, writing it with a task and
// freeing it: while one's buffer was the heap's oldest block, the other's
// freed blocks behind it did not come back, and it failed "cannot drain
// ... not freed with pto_free" instead of waiting (an outside probe: every
// run, heaps of 8 KiB to 1 MiB). It waits for the other thread's free now.
TEST(OrchScopes, ThreadsTakingAndFreeingPtoAllocBuffersWaitForEachOther) {
    auto orch = Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 1024, .heap_size = 8192});
    orch.RegisterHostKernel(1, [](std::span<void* const> b, std::span<const uint64_t>) {
        *static_cast<uint64_t*>(b[1]) = *static_cast<uint64_t*>(b[0]) + 1;
        return 0u;
    });
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
        threads.emplace_back([&, t] {
            auto* x = static_cast<uint64_t*>(orch.HostAddress(uint64_t(4096 * t), 8));
            *x = uint64_t(t);
            try {
                for (int i = 0; i < 50'000; ++i) {
                    void* buf = orch.Alloc(256);
                    if (i % 8 == 0) {  // a task writes one in eight
                        TaskParam p[] = {{PARAM_INPUT, x, 8}, {PARAM_OUTPUT, buf, 8}};
                        orch.Submit(1, WORKER_HOST, p);
                    }
                    orch.Free(buf);
                }
            } catch (const Error& e) {
                errors[size_t(t)] = e.what();
            }
        });
    for (std::thread& th : threads) th.join();
    orch.WaitAll();
    EXPECT_EQ(errors[0], "");
    EXPECT_EQ(errors[1], "");
}

// How a chain of 100 depth-0 outputs (Example 1's) submitted from a thread
// of its own, which the caller joins, ended: tasks submitted, and the
// error's kind and message if one stopped it.
struct ChainEnd {
    int submitted = 0;
    std::optional<ErrorKind> kind;
    std::string error;
};
ChainEnd ChainFromAnotherThread(Orchestrator& orch) {
    ChainEnd end;
    std::thread([&] {
        try {
            void* last = nullptr;
            for (int i = 0; i < 100; ++i) {
                TaskParam read_last{PARAM_INPUT, last, 256, {}}, out{PARAM_OUTPUT, nullptr, 256, {}};
                std::vector<TaskParam> p;
                if (last) p.push_back(read_last);
                p.push_back(out);
                last = orch.TaskOutput(orch.Submit(1, WORKER_HOST, p), 0);
                ++end.submitted;
            }
        } catch (const Error& e) {
            end.kind = e.kind();
            end.error = e.what();
        }
    }).join();
    return end;
}

// Main takes a pto_alloc buffer, starts a thread that submits Example 1's
// chain of depth-0 outputs through a small heap, and joins it: the
// submitter waits, with nothing in flight, for main to free the buffer at
// the heap's tail, and main waits for it. It slept for good (found probing
// from outside); the wait is bounded (5 s) and fails OutOfMemory saying so.
TEST(OrchScopes, ASubmitterBehindAnotherThreadsBufferThatNeverComesFails) {
    auto orch = Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 64, .heap_size = 8192});
    orch.RegisterHostKernel(1, [](std::span<void* const>, std::span<const uint64_t>) { return 0u; });
    void* pinned = orch.Alloc(4096);
    const auto [submitted, kind, error] = ChainFromAnotherThread(orch);
    EXPECT_GT(submitted, 4);
    EXPECT_EQ(kind, ErrorKind::OutOfMemory) << error;
    EXPECT_NE(error.find("for the thread that took that pto_alloc buffer to pto_free it"), std::string::npos) << error;
    orch.WaitAll();
    orch.Free(pinned);
}

// The same with the ring's oldest task held by the main thread's depth-0
// hold (a task it submitted outside any scope and whose output it took),
// while main joins the submitter: the submitter slept for good (an outside
// probe). It fails after the same bound, naming the hold.
TEST(OrchScopes, ASubmitterBehindAThreadsHeldOutputsThatNeverComeFails) {
    auto orch = Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 4, .heap_size = 8192});
    orch.RegisterHostKernel(1, [](std::span<void* const>, std::span<const uint64_t>) { return 0u; });
    TaskParam first{PARAM_OUTPUT, nullptr, 256, {}};
    const int32_t held = orch.Submit(1, WORKER_HOST, {&first, 1});
    ASSERT_NE(orch.TaskOutput(held, 0), nullptr);  // handed out: main's hold keeps it
    const auto [submitted, kind, error] = ChainFromAnotherThread(orch);
    EXPECT_GE(submitted, 2);
    EXPECT_EQ(kind, ErrorKind::OutOfMemory) << error;
    EXPECT_NE(error.find("for the thread holding outputs of tasks it submitted outside any scope"), std::string::npos)
        << error;
    orch.WaitAll();
}

// A kernel whose submission waits for room that only the orchestration
// thread can give back (its scope holds the ring's oldest task), while that
// thread waits for room behind the kernel's task: both slept for good (an
// outside probe: 8 of 8). A kernel's wait is bounded (5 s): its submission
// fails OutOfMemory and its task ends; the orchestration thread then goes
// on, or fails "cannot drain" itself (its scope holds the oldest task):
// errors, never a hang.
TEST(OrchScopes, AKernelWaitingForRoomTheOrchestrationThreadHoldsFailsInsteadOfHanging) {
    auto orch = Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 8, .heap_size = 1 << 16,
                                                           .run_cheap_host_tasks_here = false});
    using Args = std::span<void* const>;
    using Sizes = std::span<const uint64_t>;
    auto* x = static_cast<uint64_t*>(orch.HostAddress(0, 16));
    auto* out = static_cast<uint64_t*>(orch.HostAddress(4096, 8 * 8));
    x[0] = 5, x[1] = 7;
    RegisterAddU64(orch, 1);
    std::string kernel_error;
    orch.RegisterHostKernel(2, [&](Args, Sizes) {
        try {
            void* prev = &x[0];
            for (int i = 0; i < 8; ++i) {  // a depth-0 chain, each link reading the one before
                TaskParam p[] = {{PARAM_INPUT, prev, 8}, {PARAM_INPUT, &x[1], 8}, {PARAM_OUTPUT, nullptr, 8}};
                prev = orch.TaskOutput(orch.Submit(1, WORKER_HOST, p), 0);
            }
        } catch (const Error& e) {
            kernel_error = e.what();
        }
        return 0u;
    });
    auto done = std::async(std::launch::async, [&]() -> std::string {
        try {
            auto scope = orch.BeginScope();
            TaskParam held[] = {{PARAM_INPUT, &x[0], 8}, {PARAM_INPUT, &x[1], 8}, {PARAM_OUTPUT, nullptr, 8}};
            orch.Submit(1, WORKER_HOST, held);
            TaskParam none[] = {{PARAM_INPUT, &x[0], 8}};
            orch.Submit(2, WORKER_HOST, none);
            for (int i = 0; i < 8; ++i) {
                TaskParam p[] = {{PARAM_INPUT, &x[0], 8}, {PARAM_INPUT, &x[1], 8}, {PARAM_OUTPUT, &out[i], 8}};
                orch.Submit(1, WORKER_HOST, p);
            }
            scope.End();
            orch.WaitAll();
            return "";
        } catch (const Error& e) {
            orch.WaitAll();
            return e.what();
        }
    });
    if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
        std::fprintf(stderr, "the kernel and the orchestration thread waited for each other\n");
        std::_Exit(1);
    }
    const std::string main_error = done.get();
    EXPECT_NE(kernel_error.find("a kernel's submission waited 5 s for room"), std::string::npos) << kernel_error;
    if (!main_error.empty()) {
        EXPECT_NE(main_error.find("out of memory: task ring (size 8) is full and cannot drain"), std::string::npos)
            << main_error;
    }
}

// The scopes' thread also takes a pto_alloc buffer each round. pto_alloc
// took the heap room kept for the depth-0 thread's next task (the one that
// lets go of its hold), which then failed "heap ring ... cannot drain ...
// held by its submitting thread" (an outside probe: 5 of 5 runs).
TEST(OrchScopes, PtoAllocLeavesTheHeapRoomKeptForAnotherThreadsHold) {
    for (int i = 0; i < 3; ++i) Example1FromThreads(1024, 2, 20'000, true, true, 4096);
    Example1FromThreads(1024, 2, 20'000, true, true, 65536);
}

// A host kernel that submits a depth-0 task with an implicit output and
// returns without reading it left a hold on a worker thread, which neither
// waits nor exits: the ring could not drain, and the next submitter slept
// for good (an outside probe: 5 of 5). The hold goes when the kernel's
// task completes.
TEST(OrchScopes, AHoldAKernelTookGoesWhenItsTaskCompletes) {
    auto orch = Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 16, .heap_size = 1 << 16,
                                                           .run_cheap_host_tasks_here = false});
    using Args = std::span<void* const>;
    using Sizes = std::span<const uint64_t>;
    auto* x = static_cast<uint64_t*>(orch.HostAddress(0, 16));
    auto* out = static_cast<uint64_t*>(orch.HostAddress(4096, 8 * 40));
    x[0] = 5, x[1] = 7;
    RegisterAddU64(orch, 1);
    std::atomic<bool> handed_out{false};
    orch.RegisterHostKernel(2, [&](Args, Sizes) {
        TaskParam p[] = {{PARAM_INPUT, &x[0], 8}, {PARAM_INPUT, &x[1], 8}, {PARAM_OUTPUT, nullptr, 8}};
        handed_out = orch.TaskOutput(orch.Submit(1, WORKER_HOST, p), 0) != nullptr;
        return 0u;  // returns without a task that reads it
    });
    TaskParam none[] = {{PARAM_INPUT, &x[0], 8}};
    orch.Submit(2, WORKER_HOST, none);
    orch.WaitAll();
    EXPECT_TRUE(handed_out.load());
    auto submitted = std::async(std::launch::async, [&] {
        for (int i = 0; i < 40; ++i) {
            TaskParam p[] = {{PARAM_INPUT, &x[0], 8}, {PARAM_INPUT, &x[1], 8}, {PARAM_OUTPUT, &out[i], 8}};
            orch.Submit(1, WORKER_HOST, p);
        }
        orch.WaitAll();
    });
    if (submitted.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
        std::fprintf(stderr, "the submitter behind the kernel's hold never went on\n");
        std::_Exit(1);  // it sleeps for good: nothing else ends this test
    }
    submitted.get();
    for (int i = 0; i < 40; ++i) EXPECT_EQ(out[i], 12u) << i;
}

INSTANTIATE_TEST_SUITE_P(RingsAndThreads, ScopesBesideDepthZero,
                         ::testing::Values(std::pair{16, 4}, std::pair{32, 2}, std::pair{1024, 2}, std::pair{1024, 4}));

// A scope holds its tasks with implicit outputs until it ends, and the ring
// is reused in order behind the oldest: a depth-0 thread that filled the
// rest of the ring meanwhile left the scope no slot for its next task, and
// both failed "a scope can hold at most 8 tasks" (an outside probe). Half
// the ring is kept for another thread's scopes now.
TEST(OrchScopes, ADepthZeroThreadLeavesHalfTheRingToAnotherThreadsScope) {
    auto orch = Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 8, .heap_size = 1 << 16});
    RegisterAddU64(orch, 1);
    auto* in = static_cast<uint64_t*>(orch.HostAddress(0, 16));
    auto* b_out = static_cast<uint64_t*>(orch.HostAddress(4096, 8 * 20));
    auto* a_out = static_cast<uint64_t*>(orch.HostAddress(8192, 8));
    in[0] = 5, in[1] = 7;
    std::string a_error, b_error;
    std::atomic<bool> scope_open{false};
    std::thread b([&] {
        while (!scope_open.load()) std::this_thread::yield();
        try {
            for (int i = 0; i < 20; ++i) {
                TaskParam p[] = {{PARAM_INPUT, &in[0], 8}, {PARAM_INPUT, &in[1], 8}, {PARAM_OUTPUT, &b_out[i], 8}};
                orch.Submit(1, WORKER_HOST, p);
            }
        } catch (const Error& e) {
            b_error = e.what();
        }
    });
    try {
        auto scope = orch.BeginScope();
        TaskParam p0[] = {{PARAM_INPUT, &in[0], 8}, {PARAM_INPUT, &in[1], 8}, {PARAM_OUTPUT, nullptr, 8}};
        int32_t prev = orch.Submit(1, WORKER_HOST, p0);
        scope_open = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // b fills what it may of the ring
        for (int i = 0; i < 3; ++i) {  // the scope's 4 tasks and b's 3 fit a ring of 8
            TaskParam p[] = {{PARAM_INPUT, orch.TaskOutput(prev, 0), 8}, {PARAM_INPUT, &in[0], 8}, {PARAM_OUTPUT, nullptr, 8}};
            prev = orch.Submit(1, WORKER_HOST, p);
        }
        TaskParam last[] = {{PARAM_INPUT, orch.TaskOutput(prev, 0), 8}, {PARAM_INPUT, &in[0], 8}, {PARAM_OUTPUT, a_out, 8}};
        orch.Submit(1, WORKER_HOST, last);
    } catch (const Error& e) {
        a_error = e.what();
    }
    scope_open = true;
    b.join();
    orch.WaitAll();
    EXPECT_EQ(a_error, "");
    EXPECT_EQ(b_error, "");
    EXPECT_EQ(*a_out, 12u + 4 * 5);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(b_out[i], 12u) << i;
}

INSTANTIATE_TEST_SUITE_P(RingsAndThreads, DepthZeroThreads,
                         ::testing::Values(std::pair{2, 2}, std::pair{3, 4}, std::pair{16, 4}, std::pair{1024, 2},
                                           std::pair{1024, 4}));

// Seed 004's Example 1 verbatim, 10,000 times at depth 0 with host kernels
// (cheap: they run inside pto_submit_task, so t0 has completed by the time
// its output is read).
TEST_P(OrchQueueTest, Example1VerbatimTenThousandTimes) {
    auto add = [](std::span<void* const> b, std::span<const uint64_t> s) {
        for (size_t i = 0; i < s[2] / 4; ++i)
            static_cast<float*>(b[2])[i] = static_cast<const float*>(b[0])[i] + static_cast<const float*>(b[1])[i];
        return 0u;
    };
    auto mul = [](std::span<void* const> b, std::span<const uint64_t> s) {
        for (size_t i = 0; i < s[2] / 4; ++i)
            static_cast<float*>(b[2])[i] = static_cast<const float*>(b[0])[i] * static_cast<const float*>(b[1])[i];
        return 0u;
    };
    orch_.emplace(Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 16, .heap_size = 4096,
                                                             .ready_queues = QueueKind()}));
    o().RegisterHostKernel(1, add);
    o().RegisterHostKernel(2, mul);
    auto* f = static_cast<float*>(o().HostAddress(0, 3 * 1024));
    EXPECT_EQ(test::RunExample1Verbatim(o().handle(), f, f + 256, f + 512, 10'000), "");
}

// A C runtime on host memory with kernel 1, a host kernel that does nothing.
::Runtime* HostRuntimeWithAnEmptyKernel1() {
    ::Runtime* rt = pto_runtime_create_host(1 << 20, 64, 1 << 16);
    if (rt && pto_register_host_kernel(
                  rt, 1, [](void* const*, const uint64_t*, int32_t, void*) -> uint32_t { return 0; }, nullptr) != 0) {
        pto_runtime_destroy(rt);
        return nullptr;
    }
    return rt;
}

// Runtime* is a generation-checked handle: once the runtime is gone every
// call on it is refused, while calls in flight in other threads finish
// first. (Before, every call only checked for NULL and used freed memory.)
TEST(OrchestrationHandles, AGoneRuntimesHandleIsRefusedAndCallsInFlightFinishFirst) {
    ::Runtime* rt = HostRuntimeWithAnEmptyKernel1();
    ASSERT_NE(rt, nullptr) << pto_last_error();
    std::atomic<bool> started{false};
    std::atomic<int> refused{0}, ran{0};
    std::thread caller([&] {
        auto* x = static_cast<uint32_t*>(pto_host_address(rt, 0, 64));
        for (;;) {
            TaskParam p[] = {{PARAM_INOUT, x, 64, {}}};
            const int32_t r = pto_submit_task(rt, 1, WORKER_HOST, p, 1);
            started = true;
            if (r == -EINVAL) {
                ++refused;
                const std::string why = pto_last_error();
                EXPECT_TRUE(why.find("not a live runtime") != std::string::npos ||
                            why.find("is being destroyed") != std::string::npos)
                    << why;
                return;
            }
            ASSERT_GE(r, 0) << pto_last_error();
            ++ran;
        }
    });
    while (!started) std::this_thread::yield();
    EXPECT_EQ(pto_runtime_destroy(rt), 0) << pto_last_error();
    caller.join();
    EXPECT_EQ(refused, 1);
    EXPECT_GT(ran, 0);
    EXPECT_EQ(pto_wait_all(rt), -EINVAL);
    EXPECT_EQ(pto_runtime_destroy(rt), -EINVAL);

    // An Orchestrator's handle is its own: C may use it, not destroy it,
    // and it is refused once the Orchestrator is gone.
    ::Runtime* handle;
    {
        Orchestrator orch = Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 8, .heap_size = 4096});
        handle = orch.handle();
        EXPECT_EQ(pto_scope_begin(handle), 0);
        EXPECT_EQ(pto_runtime_destroy(handle), -EINVAL);
        EXPECT_NE(std::string(pto_last_error()).find("belongs to a spyre::Orchestrator"), std::string::npos);
        EXPECT_EQ(pto_scope_end(handle), 0);
    }
    EXPECT_EQ(pto_scope_begin(handle), -EINVAL);
}

// A child forked after a runtime was created has none of its worker
// threads: its submits were accepted and pto_wait_all never returned. Every
// call on such a runtime (C or C++) is InvalidArgument in the child, naming
// both processes and saying to create a runtime there; destroying it there
// returns without touching the parent's, a runtime created in the child
// works, and the parent's goes on working.
TEST(OrchestrationHandles, AForkedChildCannotUseItsParentsRuntime) {
#if defined(__SANITIZE_THREAD__)
    // The child starts threads of its own runtime, and TSan's runtime ends
    // a child of a threaded process that starts threads (die_after_fork).
    GTEST_SKIP() << "ThreadSanitizer does not let a forked child of a threaded process start threads";
#endif
#if defined(__SANITIZE_ADDRESS__)
    // GCC 12's AddressSanitizer does not hold its allocator's locks across
    // fork(): the child inherits one locked by a runtime thread that was
    // starting (allocating) in the parent, and its first malloc blocks for
    // good (seen in the child's stack; glibc's malloc takes its locks in fork).
    GTEST_SKIP() << "AddressSanitizer's allocator can leave a forked child of a threaded process blocked in malloc";
#endif
    ::Runtime* rt = HostRuntimeWithAnEmptyKernel1();
    ASSERT_NE(rt, nullptr) << pto_last_error();
    std::optional<Orchestrator> orch(Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 16, .heap_size = 4096}));
    orch->RegisterHostKernel(1, [](std::span<void* const>, std::span<const uint64_t>) { return 0u; });
    auto* x = static_cast<uint32_t*>(pto_host_address(rt, 0, 64));
    ASSERT_NE(x, nullptr);
    const int code = test::InChild([&] {
        ::alarm(20);  // a hang ends the child, and the test sees it
        const auto forked = [](const std::string& why) {
            return why.find("before it forked") != std::string::npos &&
                   why.find("create a runtime in the child") != std::string::npos;
        };
        TaskParam p[] = {{PARAM_INOUT, x, 64, {}}};
        if (pto_submit_task(rt, 1, WORKER_HOST, p, 1) != -EINVAL || !forked(pto_last_error())) return 10;
        if (std::string(pto_last_error()).find("pto_submit_task") == std::string::npos) return 11;
        if (pto_wait_all(rt) != -EINVAL || !forked(pto_last_error())) return 12;
        if (pto_alloc(rt, 64) != nullptr || !forked(pto_last_error())) return 13;
        if (pto_scope_begin(rt) != -EINVAL || !forked(pto_last_error())) return 14;
        if (pto_runtime_destroy(rt) != -EINVAL || !forked(pto_last_error())) return 15;
        // The Orchestrator's calls, its C handle, its destruction.
        const auto refused = [&](const std::function<void()>& call) {
            try {
                call();
            } catch (const Error& e) {
                return e.kind() == ErrorKind::InvalidArgument && forked(e.message());
            }
            return false;
        };
        if (!refused([&] { orch->Alloc(64); })) return 20;
        if (!refused([&] { orch->WaitAll(); })) return 21;
        if (!refused([&] { orch->Submit(1, WORKER_HOST, {}); })) return 22;
        if (!refused([&] { (void)orch->BeginScope(); })) return 23;
        if (pto_wait_all(orch->handle()) != -EINVAL || !forked(pto_last_error())) return 24;
        orch.reset();  // returns: nothing of the parent's is waited for
        // A runtime of the child's own works.
        ::Runtime* mine = HostRuntimeWithAnEmptyKernel1();
        if (!mine) return 30;
        auto* y = static_cast<uint32_t*>(pto_host_address(mine, 0, 64));
        TaskParam q[] = {{PARAM_INOUT, y, 64, {}}};
        if (pto_submit_task(mine, 1, WORKER_HOST, q, 1) < 0 || pto_wait_all(mine) != 0) return 31;
        if (pto_runtime_destroy(mine) != 0) return 32;
        return 0;
    });
    EXPECT_EQ(code, 0) << "255: the child hung or crashed; 1x: a C call was not refused as forked; 2x: an "
                          "Orchestrator call; 3x: the child's own runtime failed";
    TaskParam p[] = {{PARAM_INOUT, x, 64, {}}};
    EXPECT_GE(pto_submit_task(rt, 1, WORKER_HOST, p, 1), 0) << pto_last_error();
    EXPECT_EQ(pto_wait_all(rt), 0) << pto_last_error();
    EXPECT_EQ(pto_runtime_destroy(rt), 0) << pto_last_error();
    orch->Submit(1, WORKER_HOST, {});
    orch->WaitAll();
}

// pto_runtime_destroy from a pto_wait_all_progress callback would wait for
// itself: it is -EBUSY, and its message names the progress callback (it
// said "its orchestration function"). The runtime is destroyed afterwards.
TEST(OrchestrationHandles, ADestroyFromAProgressCallbackIsBusyNamingTheCallback) {
    ::Runtime* rt = HostRuntimeWithAnEmptyKernel1();
    ASSERT_NE(rt, nullptr) << pto_last_error();
    auto* x = static_cast<uint32_t*>(pto_host_address(rt, 0, 64));
    TaskParam p[] = {{PARAM_INOUT, x, 64, {}}};
    ASSERT_GE(pto_submit_task(rt, 1, WORKER_HOST, p, 1), 0) << pto_last_error();
    struct Seen {
        ::Runtime* rt;
        int32_t rc = 0;
        std::string why;
    } seen{rt};
    const auto destroy = [](uint64_t, uint64_t, void* user) {
        auto* s = static_cast<Seen*>(user);
        if (s->rc != 0) return;
        s->rc = pto_runtime_destroy(s->rt);
        s->why = pto_last_error();
    };
    EXPECT_EQ(pto_wait_all_progress(rt, destroy, &seen), 0) << pto_last_error();
    EXPECT_EQ(seen.rc, -EBUSY);
    EXPECT_NE(seen.why.find("pto_runtime_destroy called from inside pto_wait_all_progress on the same runtime (its "
                            "progress callback): it would wait for itself"),
              std::string::npos)
        << seen.why;
    EXPECT_EQ(pto_runtime_destroy(rt), 0) << pto_last_error();
}

// A destroy while another thread's submit waits for heap room that only
// the destroying thread could give back (its pto_alloc buffer is the
// heap's oldest block): the waiting submit fails saying why, and the
// destroy returns. It waited for that submit for good (probe of 6 Dec).
TEST(OrchestrationHandles, ADestroyEndsAnotherThreadsWaitForRoomOnlyTheDestroyerCouldMake) {
    ::Runtime* rt = pto_runtime_create_host(1 << 24, 8, 1 << 16);
    ASSERT_NE(rt, nullptr) << pto_last_error();
    ASSERT_EQ(pto_register_host_kernel(
                  rt, 1, [](void* const*, const uint64_t*, int32_t, void*) -> uint32_t { return 0; }, nullptr),
              0);
    ASSERT_NE(pto_alloc(rt, 16384), nullptr) << pto_last_error();  // never freed: the heap's oldest block
    auto* in = static_cast<uint8_t*>(pto_host_address(rt, 0, 64));
    std::atomic<int64_t> submitted{0};
    int32_t refused = 0;
    std::string why;
    std::thread submitter([&] {
        for (;;) {
            TaskParam p[] = {{PARAM_INPUT, in, 64, {}}, {PARAM_OUTPUT, nullptr, 64, {}}};
            if (const int32_t r = pto_submit_task(rt, 1, WORKER_HOST, p, 2); r < 0) {
                refused = r;
                why = pto_last_error();
                return;
            }
            ++submitted;
        }
    });
    // The submits stop once the heap is full: the submitter waits for room.
    for (int64_t seen = -1, i = 0; i < 200 && seen != submitted.load(); ++i) {
        seen = submitted.load();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    test::Watchdog watchdog(std::chrono::seconds(30), "pto_runtime_destroy with a submit waiting for heap room");
    EXPECT_EQ(pto_runtime_destroy(rt), 0) << pto_last_error();
    submitter.join();
    EXPECT_GT(submitted.load(), 0);
    EXPECT_EQ(refused, -EINVAL);
    EXPECT_NE(why.find("the runtime is being destroyed (pto_runtime_destroy or ~Orchestrator on another thread), "
                       "and this call waited for room: heap ring (65536 bytes) cannot make room"),
              std::string::npos)
        << why;
}

// An orchestration function whose runtime another thread destroys under
// it: once a query is refused (the destroy has begun and waits for this
// run), its next submit is refused too, and pto_run reports that call.
void SubmitsWhileItsRuntimeIsDestroyed(Runtime* rt, uint64_t* args) {
    auto* started = reinterpret_cast<std::atomic<bool>*>(args[0]);
    auto* x = static_cast<uint32_t*>(pto_host_address(rt, 0, 64));
    TaskParam p[] = {{PARAM_INOUT, x, 64, {}}};
    if (pto_submit_task(rt, 1, WORKER_HOST, p, 1) < 0) return;
    started->store(true);
    for (int i = 0; i < 200'000 && pto_host_address(rt, 0, 64) != nullptr; ++i) std::this_thread::yield();
    pto_submit_task(rt, 1, WORKER_HOST, p, 1);  // refused; the function goes on as if not
}

TEST(OrchestrationHandles, APtoRunWhoseRuntimeIsDestroyedUnderItReportsTheRefusedCall) {
    ::Runtime* rt = HostRuntimeWithAnEmptyKernel1();
    ASSERT_NE(rt, nullptr) << pto_last_error();
    std::atomic<bool> started{false};
    int32_t run = 0;
    std::string why;
    std::thread runner([&] {
        uint64_t args[] = {uint64_t(reinterpret_cast<uintptr_t>(&started))};
        run = pto_run(rt, SubmitsWhileItsRuntimeIsDestroyed, args);
        why = pto_last_error();
    });
    while (!started) std::this_thread::yield();
    EXPECT_EQ(pto_runtime_destroy(rt), 0) << pto_last_error();  // returns once pto_run did
    runner.join();
    EXPECT_EQ(run, -EINVAL);
    EXPECT_NE(why.find("the orchestration function's pto_submit_task failed"), std::string::npos) << why;
    EXPECT_NE(why.find("is being destroyed"), std::string::npos) << why;
}

// A Scope belongs to the runtime, not to the Orchestrator object: it ends
// after the object moved (it threw "moved from", and the scope stayed open
// for good), after a vector of them grew (a use-after-free), and is
// refused once the runtime is gone.
TEST(OrchestrationScopes, AScopeEndsWhereverItsOrchestratorMoved) {
    const OrchestratorOptions options{.task_ring_size = 8, .heap_size = 4096};
    Orchestrator a = Orchestrator::CreateOnHostMemory(1 << 16, options);
    auto scope = a.BeginScope();
    Orchestrator b = std::move(a);
    scope.End();
    EXPECT_EQ(pto_scope_end(b.handle()), -EINVAL);  // none left open
    EXPECT_NE(std::string(pto_last_error()).find("without an open scope"), std::string::npos) << pto_last_error();

    std::vector<Orchestrator> many;
    many.push_back(Orchestrator::CreateOnHostMemory(1 << 16, options));
    auto first = many[0].BeginScope();
    for (int i = 0; i < 16; ++i) many.push_back(Orchestrator::CreateOnHostMemory(1 << 16, options));  // moves many[0]
    first.End();
    EXPECT_EQ(pto_scope_end(many[0].handle()), -EINVAL);

    std::optional<Orchestrator> gone(Orchestrator::CreateOnHostMemory(1 << 16, options));
    auto orphan = gone->BeginScope();
    gone.reset();
    EXPECT_SPYRE_ERROR(orphan.End(), InvalidArgument, "is not a live runtime");
}

// A task ring past what the host can hold is OutOfMemory from C++ too
// (it was std::bad_alloc; the C call said "out of memory" already).
TEST(OrchestrationScopes, ARingPastTheHostsMemoryIsOutOfMemory) {
    EXPECT_SPYRE_ERROR(Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = INT32_MAX, .heap_size = 4096}),
                       OutOfMemory, "task ring of 2147483647 slots needs");
}

// host_threads had no bound (100,000 started 32k threads before the host
// ran out), and a ready_queues value past Locked and LockFree ran as
// Locked: both are InvalidArgument naming the option, before anything is
// allocated, and a runtime within the bounds works.
TEST(OrchestrationOptions, HostThreadsPastTheBoundAndUnknownReadyQueuesAreRefused) {
    EXPECT_SPYRE_ERROR(Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 8, .heap_size = 4096,
                                                                  .host_threads = 100000}),
                       InvalidArgument, "OrchestratorOptions::host_threads is 100000: at most 1024");
    EXPECT_SPYRE_ERROR(Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 8, .heap_size = 4096,
                                                                  .host_threads = kMaxHostThreads + 1}),
                       InvalidArgument, "host_threads is 1025: at most 1024 (0: one per hardware thread)");
    EXPECT_SPYRE_ERROR(Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 8, .heap_size = 4096,
                                                                  .ready_queues = static_cast<ReadyQueueKind>(9)}),
                       InvalidArgument, "OrchestratorOptions::ready_queues 9 is none of Locked, LockFree");
    Orchestrator o = Orchestrator::CreateOnHostMemory(1 << 20, {.task_ring_size = 8, .heap_size = 4096, .host_threads = 4,
                                                                .ready_queues = ReadyQueueKind::Locked});
    int ran = 0;
    o.RegisterHostKernel(1, [&](auto, auto) { return ++ran, 0u; });
    o.Submit(1, WORKER_HOST, {});
    o.WaitAll();
    EXPECT_EQ(ran, 1);
}

// A device kernel on a runtime of host memory was accepted, and every task
// of it refused at submission ("cannot run on worker type"); the C call
// that uploads a program refused at once. Both registrations now refuse
// (Unsupported, -ENOTSUP), and the kernel id stays free for a host kernel.
TEST(OrchestrationOptions, ADeviceKernelOnHostMemoryIsRefusedWhenRegistered) {
    Orchestrator o = Orchestrator::CreateOnHostMemory(1 << 16, {.task_ring_size = 8, .heap_size = 4096});
    // A good program image in the runtime's memory: only the missing device is wrong.
    const std::vector<uint8_t> program = test::AddProgram256();
    void* image = o.Alloc(program.size());
    std::memcpy(image, program.data(), program.size());
    const uint64_t address = o.DeviceAddress(image);
    EXPECT_SPYRE_ERROR(o.RegisterDeviceKernel(3, address), Unsupported,
                       "a runtime on host memory has no device to run kernel 3's device program: register a host kernel instead");
    EXPECT_EQ(pto_register_device_kernel(o.handle(), 3, address), -ENOTSUP);
    int ran = 0;
    o.RegisterHostKernel(3, [&](auto, auto) { return ++ran, 0u; });
    o.Submit(3, WORKER_HOST, {});
    o.WaitAll();
    EXPECT_EQ(ran, 1);
}

TEST(OrchestrationScopes, ScopesEndInTheReverseOrderTheyBegan) {
    Orchestrator o = Orchestrator::CreateOnHostMemory(1 << 16, {.task_ring_size = 8, .heap_size = 4096});
    auto outer = o.BeginScope();
    auto inner = o.BeginScope();
    EXPECT_SPYRE_ERROR(outer.End(), InvalidArgument, "still has 1 inner scope(s) open");
    inner.End();
    outer.End();  // refused above, still open: it ends now
    EXPECT_EQ(pto_scope_end(o.handle()), -EINVAL);
    auto again = o.BeginScope();
    EXPECT_EQ(pto_scope_end(o.handle()), 0);  // ended under it by C
    EXPECT_SPYRE_ERROR(again.End(), InvalidArgument, "without an open scope");
    // A scope C ended while an outer one stays open: its own End is refused, the outer one's is not.
    auto outer2 = o.BeginScope();
    auto inner2 = o.BeginScope();
    EXPECT_EQ(pto_scope_end(o.handle()), 0);
    EXPECT_SPYRE_ERROR(inner2.End(), InvalidArgument, "this scope (depth 2) was ended already");
    outer2.End();
    EXPECT_EQ(pto_scope_end(o.handle()), -EINVAL);  // nothing left open
    // A scope C ended, and another begun at its depth by C: the first's End
    // and destructor leave the second alone (they used to end it).
    {
        auto stale = o.BeginScope();
        EXPECT_EQ(pto_scope_end(o.handle()), 0);
        EXPECT_EQ(pto_scope_begin(o.handle()), 0);
        EXPECT_SPYRE_ERROR(stale.End(), InvalidArgument,
                           "this scope (depth 1) was ended already (by pto_scope_end or pto_run); the scope open at "
                           "its depth now is another one");
        auto stale2 = o.BeginScope();  // depth 2
        EXPECT_EQ(pto_scope_end(o.handle()), 0);
        EXPECT_EQ(pto_scope_begin(o.handle()), 0);
        EXPECT_EQ(pto_scope_begin(o.handle()), 0);  // depth 3 inside the new depth 2
    }  // stale2's destructor: refused, ends nothing and marks nothing
    EXPECT_EQ(pto_scope_end(o.handle()), 0);
    EXPECT_EQ(pto_scope_end(o.handle()), 0);
    EXPECT_EQ(pto_scope_end(o.handle()), 0);  // the depth-1 scope C began
    EXPECT_EQ(pto_scope_end(o.handle()), -EINVAL);
}

void EndsTheCallersScope(Runtime* rt, uint64_t*) { pto_scope_end(rt); }

TEST_P(OrchQueueTest, AnOrchestrationFunctionCannotEndItsCallersScope) {
    Make();
    auto outer = o().BeginScope();
    // pto_run reports the call the function made and ignored.
    EXPECT_SPYRE_ERROR(o().Run(EndsTheCallersScope, nullptr), InvalidArgument,
                       "the orchestration function's pto_scope_end failed: pto_scope_end of a scope the "
                       "orchestration function did not begin");
    outer.End();  // still open: the function could not end it
}

// Scopes record ranges of task ids, so the open scopes of a runtime are one
// thread's at a time. Two threads each running a loop of scopes used to end
// each other's scopes and leave tasks held by scopes nobody could end (both
// pto_runs failed, the ring "held by 2 open scope(s)"); another thread's
// pto_scope_begin is now Busy and its pto_scope_end InvalidArgument, and the
// runtime stays whole.
TEST_F(OrchTest, TheOpenScopesOfARuntimeAreOneThreadsAtATime) {
    Make(64);
    Runtime* rt = o().handle();
    {
        auto scope = o().BeginScope();
        std::thread other([&] {
            EXPECT_EQ(pto_scope_begin(rt), -EBUSY);
            EXPECT_NE(std::string(pto_last_error()).find("another thread has 1 scope(s) open"), std::string::npos)
                << pto_last_error();
            EXPECT_EQ(pto_scope_end(rt), -EINVAL);
            EXPECT_NE(std::string(pto_last_error()).find("a scope another thread began"), std::string::npos)
                << pto_last_error();
        });
        other.join();
    }
    // Closed: any thread's turn.
    std::thread([&] {
        EXPECT_EQ(pto_scope_begin(rt), 0);
        EXPECT_EQ(pto_scope_end(rt), 0);
    }).join();

    // Two orchestration functions, each a loop of scopes with a task whose
    // output is implicit, at once: each finishes or stops at a Busy begin.
    struct Loop {
        static void Run(Runtime* r, uint64_t* args) {
            for (uint64_t i = 0; i < args[0]; ++i) {
                if (pto_scope_begin(r) < 0) return;
                TaskParam p[] = {{PARAM_OUTPUT, nullptr, 64, {}}};
                if (pto_submit_task(r, K_FILL, WORKER_HOST, p, 1) < 0) return;
                if (pto_scope_end(r) < 0) return;
            }
        }
    };
    std::atomic<int> busy{0};
    auto run = [&] {
        uint64_t args[] = {500};
        const int32_t rc = pto_run(rt, &Loop::Run, args);
        EXPECT_TRUE(rc == 0 || rc == -EBUSY) << rc << " " << pto_last_error();
        if (rc == -EBUSY) ++busy;
    };
    std::thread a(run), b(run);
    a.join();
    b.join();
    o().WaitAll();
    // Nothing is left held by a scope (500 scopes through a ring of 64
    // would stall on a leak), and this thread may open scopes again.
    uint64_t args[] = {500};
    EXPECT_EQ(pto_run(rt, &Loop::Run, args), 0) << pto_last_error();
    o().WaitAll();
    auto scope = o().BeginScope();
}

// A thread that exits with scopes open (the caller's bug) no longer wedges
// the runtime: its scopes end with it. Every other thread's pto_scope_begin
// used to be Busy for good, and the tasks its scopes held pinned the ring
// ("task ring (size 16) is full and cannot drain ... held by 1 open
// scope(s)").
TEST_F(OrchTest, AThreadThatExitsWithScopesOpenLetsGoOfThem) {
    Make(16);
    Runtime* rt = o().handle();
    std::thread([&] {
        ASSERT_EQ(pto_scope_begin(rt), 0);
        ASSERT_EQ(pto_scope_begin(rt), 0);
        TaskParam p[] = {{PARAM_OUTPUT, nullptr, 64, {}}};
        for (int i = 0; i < 4; ++i) ASSERT_GE(pto_submit_task(rt, K_FILL, WORKER_HOST, p, 1), 0) << pto_last_error();
    }).join();
    ASSERT_EQ(pto_scope_begin(rt), 0) << pto_last_error();
    ASSERT_EQ(pto_scope_end(rt), 0) << pto_last_error();
    // 64 implicit outputs through a ring of 16, outside scopes: the exited
    // thread's scopes hold none of the ring.
    for (int i = 0; i < 64; ++i) {
        TaskParam p[] = {{PARAM_OUTPUT, nullptr, 64, {}}};
        ASSERT_GE(pto_submit_task(rt, K_FILL, WORKER_HOST, p, 1), 0) << i << ": " << pto_last_error();
        if (i % 4 == 3) o().WaitAll();
    }
    o().WaitAll();
}

// Host kernels of the two tests below: fill the last parameter with 7, or
// write in[i] + 1 to it (x[i] += 1 with one parameter).
uint32_t FillSevens(void* const* b, const uint64_t* s, int32_t n, void*) {
    std::memset(b[n - 1], 7, s[n - 1]);
    return 0;
}
uint32_t PlusOne(void* const* b, const uint64_t* s, int32_t n, void*) {
    auto* out = static_cast<uint8_t*>(b[n - 1]);
    const auto* in = static_cast<const uint8_t*>(b[0]);
    for (uint64_t i = 0; i < s[n - 1]; ++i) out[i] = uint8_t(in[i] + 1);
    return 0;
}

// An implicit output handed out, then overwritten whole by a later task
// (INOUT of all of it), is still a live output: a reader after that reads
// the overwrite. It used to be refused ("lies in the heap ring but not
// inside a live task's implicit outputs"): the overwrite took the
// producer's place in the region map, where the check looked.
TEST(OrchHolds, AnOutputOverwrittenWholeStaysReadable) {
    Runtime* rt = pto_runtime_create_host(1 << 20, 64, 64 << 10);
    ASSERT_NE(rt, nullptr) << pto_last_error();
    ASSERT_EQ(pto_register_host_kernel(rt, 1, FillSevens, nullptr), 0);
    ASSERT_EQ(pto_register_host_kernel(rt, 2, PlusOne, nullptr), 0);
    auto* ex = static_cast<uint8_t*>(pto_host_address(rt, 0, 4096));
    for (bool wait_between : {false, true}) {
        ASSERT_EQ(pto_scope_begin(rt), 0);
        TaskParam p1[] = {{PARAM_OUTPUT, nullptr, 256, {}}};
        const int32_t producer = pto_submit_task(rt, 1, WORKER_HOST, p1, 1);
        ASSERT_GE(producer, 0) << pto_last_error();
        auto* out = static_cast<uint8_t*>(pto_task_output(rt, producer, 0));
        TaskParam p2[] = {{PARAM_INOUT, out, 256, {}}};
        ASSERT_GE(pto_submit_task(rt, 2, WORKER_HOST, p2, 1), 0) << pto_last_error();
        if (wait_between) {
            ASSERT_EQ(pto_wait_all(rt), 0) << pto_last_error();
        }
        TaskParam p3[] = {{PARAM_INPUT, out, 256, {}}, {PARAM_OUTPUT, ex, 256, {}}};
        ASSERT_GE(pto_submit_task(rt, 2, WORKER_HOST, p3, 2), 0) << pto_last_error();
        ASSERT_EQ(pto_wait_all(rt), 0) << pto_last_error();
        for (int i = 0; i < 256; ++i) ASSERT_EQ(ex[i], 9) << "byte " << i;
        ASSERT_EQ(pto_scope_end(rt), 0) << pto_last_error();
    }
    pto_runtime_destroy(rt);
}

// Under pressure, outputs nobody asked for go; each thread's newest task
// that took a hold keeps it. An older hold used to count as the newest
// once the newer one went (a later task read it), and pinned the ring
// ("held by its submitting thread", -EDEADLK) though nobody could name it.
TEST(OrchHolds, AnOlderOutputNeverHandedOutGoesUnderPressure) {
    Runtime* rt = pto_runtime_create_host(1 << 20, 4, 64 << 10);
    ASSERT_NE(rt, nullptr) << pto_last_error();
    ASSERT_EQ(pto_register_host_kernel(rt, 1, FillSevens, nullptr), 0);
    auto* ex = static_cast<uint8_t*>(pto_host_address(rt, 0, 4096));
    TaskParam a[] = {{PARAM_OUTPUT, nullptr, 64, {}}};
    ASSERT_GE(pto_submit_task(rt, 1, WORKER_HOST, a, 1), 0) << pto_last_error();  // never asked for
    TaskParam b[] = {{PARAM_OUTPUT, nullptr, 64, {}}};
    const int32_t read_later = pto_submit_task(rt, 1, WORKER_HOST, b, 1);
    ASSERT_GE(read_later, 0) << pto_last_error();
    TaskParam c[] = {{PARAM_INPUT, pto_task_output(rt, read_later, 0), 64, {}}, {PARAM_OUTPUT, ex, 64, {}}};
    ASSERT_GE(pto_submit_task(rt, 1, WORKER_HOST, c, 2), 0) << pto_last_error();
    for (int i = 0; i < 8; ++i) {
        TaskParam d[] = {{PARAM_OUTPUT, ex + 64 * (i + 1), 64, {}}};
        ASSERT_GE(pto_submit_task(rt, 1, WORKER_HOST, d, 1), 0) << "task " << i << ": " << pto_last_error();
    }
    ASSERT_EQ(pto_wait_all(rt), 0) << pto_last_error();
    for (int i = 0; i < 64 * 9; ++i) ASSERT_EQ(ex[i], 7) << "byte " << i;
    pto_runtime_destroy(rt);
}

// The newest hold stays even when its output was never handed out; the
// refusal says so (it said only that such outputs go sooner, which read as
// a contradiction: found probing from outside).
TEST(OrchHolds, TheRefusalOfAHeapPinnedByTheNewestHoldSaysItStays) {
    Runtime* rt = pto_runtime_create_host(1 << 20, 8, 8192);
    ASSERT_NE(rt, nullptr) << pto_last_error();
    ASSERT_EQ(pto_register_host_kernel(rt, 1, FillSevens, nullptr), 0);
    TaskParam a[] = {{PARAM_OUTPUT, nullptr, 4096, {}}};
    ASSERT_GE(pto_submit_task(rt, 1, WORKER_HOST, a, 1), 0) << pto_last_error();  // never asked for
    EXPECT_EQ(pto_alloc(rt, 6144), nullptr);
    const std::string error = pto_last_error();
    EXPECT_NE(error.find("held by its submitting thread"), std::string::npos) << error;
    EXPECT_NE(error.find("except the one of each thread's newest task that took a hold"), std::string::npos) << error;
    ASSERT_EQ(pto_wait_all(rt), 0) << pto_last_error();  // lets go of it
    void* room = pto_alloc(rt, 6144);
    EXPECT_NE(room, nullptr) << pto_last_error();
    EXPECT_EQ(pto_free(rt, room), 0);
    pto_runtime_destroy(rt);
}

// An Orchestrator destroyed by one of its own host kernels: its destructor
// waited for every task, the calling one too, and never returned (the C
// API refuses the same with -EBUSY). It now returns, and the runtime is
// freed once the kernel has returned.
TEST(OrchestratorLifetime, DestroyedByItsOwnHostKernelFreesItOnceTheKernelReturns) {
    std::optional<Orchestrator> orch(Orchestrator::CreateOnHostMemory(
        1 << 20, {.task_ring_size = 16, .heap_size = 4096, .run_cheap_host_tasks_here = false}));
    std::atomic<bool> reset_returned{false}, submitted{false};
    orch->RegisterHostKernel(1, [&](std::span<void* const>, std::span<const uint64_t>) -> uint32_t {
        // Not while the test's own Submit is still inside the runtime.
        while (!submitted) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        orch.reset();
        reset_returned = true;
        return 0;
    });
    auto* x = static_cast<uint32_t*>(orch->HostAddress(0, 64));
    const TaskParam p[] = {{PARAM_INOUT, x, 64, {}}};
    orch->Submit(1, WORKER_HOST, p);
    submitted = true;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!reset_returned && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!reset_returned) {
        ADD_FAILURE() << "~Orchestrator inside its own kernel did not return within 20 s";
        std::_Exit(1);  // the runtime's threads wait for each other for good
    }
    EXPECT_FALSE(orch.has_value());
}

}  // namespace
}  // namespace spyre
