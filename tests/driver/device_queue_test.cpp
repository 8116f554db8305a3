// SPDX-License-Identifier: Apache-2.0
// DeviceQueue, the one queue implementation under CommandRing and TaskQueue,
// against a real spyre-mockdev whose geometry registers a test forges by
// storing to the function's mapped register file (a mapped read returns
// the store, as from a device that publishes bad geometry). Each kind reads
// its own registers, refuses what it cannot use with the check's message
// and register, and names itself in the errors of its waits and health.
#include <atomic>

#include "mock_fixture.hpp"
#include "spyre/driver/device_queue.hpp"

using namespace spyre;
using namespace spyre::driver;
using namespace std::chrono_literals;
using spyre::test::MockDeviceTest;

namespace {

// Makes the mapped register at `offset` read `value`.
void Forge(Function& fn, uint32_t offset, uint32_t value) {
    std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(fn.bar0() + offset)).store(value);
}

// The error `make` throws, or an Internal one saying it threw none.
Error ErrorOf(auto&& make) {
    try {
        make();
    } catch (const Error& e) {
        return e;
    }
    return Error(ErrorKind::Internal, "no error");
}

void ExpectError(const Error& e, ErrorKind kind, const std::string& text, const std::string& reg) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    EXPECT_EQ(e.context().reg, reg) << e.what();
}

}  // namespace

TEST_F(MockDeviceTest, DeviceQueueLocatesBothKindsFromTheirRegisters) {
    Function fn = Function::Open(Vf(1));
    const DeviceQueue ring(fn, QueueId::Ring());
    EXPECT_EQ(ring.sq_entries(), SPYRE_DEFAULT_SQ_ENTRIES);
    EXPECT_EQ(ring.cq_entries(), SPYRE_DEFAULT_CQ_ENTRIES);
    EXPECT_EQ(ring.InFlight(), 0u);
    const DeviceQueue task(fn, QueueId::Task(0));
    EXPECT_EQ(task.sq_entries(), SPYRE_DEFAULT_TQ_SQ_ENTRIES);
    EXPECT_EQ(task.cq_entries(), SPYRE_DEFAULT_TQ_CQ_ENTRIES);
    EXPECT_TRUE(task.DeviceIdle());
    EXPECT_FALSE(task.Halted());
    EXPECT_EQ(ring.id().Name(), "the CB ring");
    EXPECT_EQ(task.id().Name(), "task queue 0");
}

TEST_F(MockDeviceTest, DeviceQueueRefusesHostileRingGeometryByKindMessageAndRegister) {
    Function fn = Function::Open(Vf(1));
    Forge(fn, SPYRE_REG_SQ_ENTRIES, 3000);
    ExpectError(ErrorOf([&] { DeviceQueue(fn, QueueId::Ring()); }), ErrorKind::ProtocolError,
                "ring sizes must be powers of two with CQ >= SQ (SQ 3000, CQ 4096)", "SQ_ENTRIES");
    // CommandRing is that queue: the same refusal, before it resets anything.
    ExpectError(ErrorOf([&] { CommandRing ring(fn); }), ErrorKind::ProtocolError, "(SQ 3000, CQ 4096)", "SQ_ENTRIES");
    Forge(fn, SPYRE_REG_SQ_ENTRIES, SPYRE_DEFAULT_SQ_ENTRIES);
    Forge(fn, SPYRE_REG_CB_SIZE, 128);
    ExpectError(ErrorOf([&] { CommandRing ring(fn); }), ErrorKind::ProtocolError,
                "device publishes CB/CQE sizes 128/32, driver expects 64/32", "CB_SIZE");
    Forge(fn, SPYRE_REG_CB_SIZE, sizeof(spyre_cb));
    Forge(fn, SPYRE_REG_CQ_OFFSET, SPYRE_DEFAULT_SQ_OFFSET);
    ExpectError(ErrorOf([&] { CommandRing ring(fn); }), ErrorKind::ProtocolError,
                "ring geometry overlaps: doorbell page, SQ and CQ must be disjoint", "");
    Forge(fn, SPYRE_REG_CQ_OFFSET, SPYRE_DEFAULT_CQ_OFFSET);
    EXPECT_NO_THROW(CommandRing ring(fn));
}

TEST_F(MockDeviceTest, DeviceQueueRefusesHostileTaskGeometryByKindMessageAndRegister) {
    Function fn = Function::Open(Vf(1));
    Forge(fn, SPYRE_REG_TQ_CQE_SIZE, 64);
    ExpectError(ErrorOf([&] { TaskQueue q(fn, 0); }), ErrorKind::ProtocolError,
                "device publishes task queue CB/CQE sizes 64/64, driver expects 64/32", "TQ_DESC_SIZE");
    Forge(fn, SPYRE_REG_TQ_CQE_SIZE, sizeof(spyre_cqe));
    Forge(fn, SPYRE_REG_TQ_SQ_ENTRIES, 1000);
    ExpectError(ErrorOf([&] { TaskQueue q(fn, 0); }), ErrorKind::ProtocolError,
                "task ring sizes must be powers of two (SQ 1000, CQ 1024)", "TQ_SQ_ENTRIES");
    Forge(fn, SPYRE_REG_TQ_SQ_ENTRIES, SPYRE_DEFAULT_TQ_SQ_ENTRIES);
    Forge(fn, SPYRE_REG_TQ_STRIDE, SPYRE_DEFAULT_TQ_CQ_OFFSET);  // each CQ runs into the next block
    ExpectError(ErrorOf([&] { TaskQueue q(fn, 0); }), ErrorKind::ProtocolError,
                "are misaligned, overlap each other or the task doorbell page, or leave BAR4", "TQ_OFFSET");
    Forge(fn, SPYRE_REG_TQ_STRIDE, SPYRE_DEFAULT_TQ_STRIDE);
    const uint32_t queues = fn.Read32(SPYRE_REG_TQ_COUNT);
    ExpectError(ErrorOf([&] { TaskQueue q(fn, queues); }), ErrorKind::InvalidArgument,
                "task queue " + std::to_string(queues) + " does not exist: the device has " + std::to_string(queues),
                "TQ_COUNT");
    // A task queue learns whether the device lives from the CB ring's
    // doorbell page, so it checks that page's offset too.
    Forge(fn, SPYRE_REG_DB_OFFSET, 64);
    ExpectError(ErrorOf([&] { TaskQueue q(fn, 0); }), ErrorKind::ProtocolError,
                "doorbell page offset 64 is not a page inside", "DB_OFFSET");
    ExpectError(ErrorOf([&] { CommandRing ring(fn); }), ErrorKind::ProtocolError,
                "doorbell page offset 64 is not a page inside", "DB_OFFSET");
    Forge(fn, SPYRE_REG_DB_OFFSET, SPYRE_DEFAULT_DB_OFFSET);
    EXPECT_NO_THROW(TaskQueue q(fn, 0));
}

TEST_F(MockDeviceTest, DeviceQueueNamesItsQueueInWaitAndHealthErrors) {
    Function fn = Function::Open(Vf(1));
    CommandRing ring(fn);
    TaskQueue tasks(fn, 0);
    std::vector<Completion> done(2);
    std::vector<spyre_cqe> reaped(2);
    EXPECT_SPYRE_ERROR(ring.Wait(done, 2), InvalidArgument,
                       "waiting for 2 completions with only 0 CBs in flight on the CB ring");
    EXPECT_SPYRE_ERROR(tasks.Wait(reaped, 1), InvalidArgument,
                       "waiting for 1 completions with only 0 tasks in flight on task queue 0");
    const DeviceQueue task0(fn, QueueId::Task(0));
    ExpectError(task0.TimedOut(250ms), ErrorKind::Timeout,
                "no completion within 250 ms (0 tasks in flight on task queue 0)", "");
    EXPECT_NO_THROW(task0.CheckHealth());

    // A halt bit, as the device sets it on a ring overflow: health names the
    // queue and the register that says so, with the device's error code.
    Forge(fn, SPYRE_REG_TQ_HALTED, 1u);
    EXPECT_TRUE(task0.Halted());
    ExpectError(ErrorOf([&] { task0.CheckHealth(); }), ErrorKind::DeviceError,
                "the device halted task queue 0; reset the function to recover", "TQ_HALTED");
    Forge(fn, SPYRE_REG_TQ_HALTED, 0u);
    const DeviceQueue ring_queue(fn, QueueId::Ring());
    Forge(fn, SPYRE_REG_STATUS, fn.Read32(SPYRE_REG_STATUS) | SPYRE_STATUS_HALTED);
    ExpectError(ErrorOf([&] { ring_queue.CheckHealth(); }), ErrorKind::DeviceError,
                "the device halted the CB ring; reset the function to recover", "STATUS");
}
