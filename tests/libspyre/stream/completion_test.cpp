// SPDX-License-Identifier: Apache-2.0
// Completion handling without a device: ring completions retire in ring
// order onto their streams and events, a failed CB becomes the stream's
// sticky error (the first one wins), cancelled CBs are counted, the work of
// a faulted stream is dropped in order (but event records and cleanup
// callbacks), and a lost device fails everything in flight.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "mock_fixture.hpp"
#include "spyre/uapi/spyre_errors.h"
#include "stream/completion.hpp"

using namespace spyre;
using namespace spyre::detail;

namespace {

driver::Completion Done(uint64_t user_data, uint16_t status = SPYRE_ERR_NONE, uint64_t result = 0,
                        uint64_t timestamp = 0) {
    driver::Completion c;
    c.user_data = user_data;
    c.status = status;
    c.result = result;
    c.timestamp_ns = timestamp;
    return c;
}

}  // namespace

TEST(Completion, RetiresInRingOrderOntoEachStream) {
    StreamState a(0, 0), b(1, 0);
    RingRecords records("0000:00:00.0");
    records.Add({&a, 0, 1, OpKind::Launch, 0, nullptr});
    records.Add({&b, 0, 2, OpKind::Launch, 0, nullptr});
    records.Add({&a, 1, 3, OpKind::SemWrite, 0, nullptr});
    EXPECT_EQ(a.ring_inflight, 2u);
    EXPECT_EQ(records.Retire(std::vector{Done(1), Done(2)}), 0u);
    EXPECT_EQ(a.completed.load(), 1u);
    EXPECT_EQ(b.completed.load(), 1u);
    EXPECT_EQ(a.ring_inflight, 1u);
    EXPECT_EQ(b.ring_inflight, 0u);
    records.Retire(std::vector{Done(3)});
    EXPECT_EQ(a.completed.load(), 2u);
    EXPECT_TRUE(records.empty());
    EXPECT_FALSE(a.faulted.load());
}

TEST(Completion, OutOfOrderCompletionIsAProtocolError) {
    StreamState a(0, 0);
    RingRecords records("0000:00:00.0");
    records.Add({&a, 0, 7, OpKind::Launch, 0, nullptr});
    EXPECT_SPYRE_ERROR(records.Retire(std::vector{Done(8)}), ProtocolError, "completed CB 8 out of ring order");
    EXPECT_SPYRE_ERROR(RingRecords("x").Retire(std::vector{Done(1)}), ProtocolError, "out of ring order");
}

TEST(Completion, AFailedCbFaultsItsStreamFirstFailureWins) {
    StreamState a(3, 0);
    RingRecords records("0000:00:00.0");
    records.Add({&a, 4, 1, OpKind::Launch, 0, nullptr});
    records.Add({&a, 5, 2, OpKind::SemWait, 0, nullptr});
    records.Add({&a, 6, 3, OpKind::Launch, 0, nullptr});
    const size_t cancelled = records.Retire(
        std::vector{Done(1, SPYRE_ERR_ADDR_RANGE, 0xdead00), Done(2, SPYRE_ERR_CANCELED), Done(3, SPYRE_ERR_CANCELED)});
    EXPECT_EQ(cancelled, 2u);
    EXPECT_EQ(a.completed.load(), 7u) << "failed and cancelled ops complete";
    ASSERT_TRUE(a.faulted.load());
    ASSERT_TRUE(a.fault.has_value());
    const Error& e = *a.fault;
    EXPECT_EQ(e.kind(), ErrorKind::DeviceError);
    EXPECT_NE(std::string(e.what()).find("stream 3 op #4: Launch failed on the device"), std::string::npos) << e.what();
    EXPECT_EQ(e.context().stream, 3);
    EXPECT_EQ(e.context().op_index, 4u);
    EXPECT_EQ(e.context().device_code, SPYRE_ERR_ADDR_RANGE);
    EXPECT_EQ(e.context().address, 0xdead00u);
    EXPECT_EQ(e.context().device, "0000:00:00.0");
}

TEST(Completion, EventRecordsMoveTheirEventForwardOnly) {
    StreamState a(0, 0);
    auto ev = std::make_shared<EventState>();
    RingRecords records("d");
    records.Add({&a, 0, 1, OpKind::EventRecord, 2, ev});
    records.Add({&a, 1, 2, OpKind::EventRecord, 1, ev});  // an older record, completing later
    records.Retire(std::vector{Done(1, SPYRE_ERR_NONE, 0, 500), Done(2, SPYRE_ERR_NONE, 0, 900)});
    EXPECT_EQ(ev->completed.load(), 2u);
    EXPECT_EQ(ev->timestamp_ns.load(), 500u);
    EXPECT_FALSE(ev->error.has_value());
    EXPECT_EQ(ev.use_count(), 1) << "the records let go of the event";
}

TEST(Completion, AnEventRecordedAfterAFailureCarriesTheError) {
    StreamState a(0, 0);
    auto ev = std::make_shared<EventState>();
    RingRecords records("d");
    records.Add({&a, 0, 1, OpKind::Launch, 0, nullptr});
    records.Add({&a, 1, 2, OpKind::EventRecord, 1, ev});
    records.Retire(std::vector{Done(1, SPYRE_ERR_MISALIGNED), Done(2)});
    EXPECT_EQ(ev->completed.load(), 1u);
    ASSERT_TRUE(ev->error.has_value());
    EXPECT_EQ(ev->error->kind(), ErrorKind::DeviceError);
}

TEST(Completion, DropFaultedDropsInOrderButKeepsRecordsAndCleanup) {
    StreamState s(0, 0);
    EXPECT_EQ(DropFaulted(s), 0u) << "a healthy stream drops nothing";
    for (int i = 0; i < 3; ++i) s.local.emplace_back();
    QueuedOp cleanup;
    cleanup.kind = OpKind::HostCallback;
    cleanup.always = true;
    s.local.push_back(cleanup);
    s.local.emplace_back();
    Fault(s, Error(ErrorKind::DeviceError, "first"));
    Fault(s, Error(ErrorKind::Timeout, "second"));
    EXPECT_EQ(s.fault->kind(), ErrorKind::DeviceError) << "the first failure is kept";
    s.ring_inflight = 1;
    EXPECT_EQ(DropFaulted(s), 0u) << "nothing is dropped while work is in flight";
    s.ring_inflight = 0;
    EXPECT_EQ(DropFaulted(s), 3u);
    EXPECT_EQ(s.completed.load(), 3u);
    EXPECT_EQ(s.next_seq, 3u);
    ASSERT_EQ(s.local.size(), 2u);
    EXPECT_TRUE(s.local.front().always) << "cleanup still runs";
}

TEST(Completion, FailAllFailsEverythingInFlight) {
    StreamState a(0, 0), b(1, 0);
    auto ev = std::make_shared<EventState>();
    RingRecords records("d");
    records.Add({&a, 0, 1, OpKind::Launch, 0, nullptr});
    records.Add({&b, 0, 2, OpKind::EventRecord, 1, ev});
    records.FailAll(Error(ErrorKind::DeviceLost, "device lost: gone"));
    EXPECT_TRUE(records.empty());
    for (StreamState* s : {&a, &b}) {
        EXPECT_EQ(s->completed.load(), 1u);
        EXPECT_EQ(s->ring_inflight, 0u);
        ASSERT_TRUE(s->fault.has_value());
        EXPECT_EQ(s->fault->kind(), ErrorKind::DeviceLost);
    }
    EXPECT_EQ(ev->completed.load(), 1u);
    ASSERT_TRUE(ev->error.has_value());
    EXPECT_EQ(ev->error->kind(), ErrorKind::DeviceLost);
}
