// SPDX-License-Identifier: Apache-2.0
// Completion handling without a device: ring completions retire in ring
// order onto their streams, event records ride in the ring behind their
// stream's work (fired when retired) or, and waits, settle on the host once
// their stream is idle (a record fires with the stream's error, never moves
// its event back), a failed CB becomes the stream's sticky error (the first
// one wins), cancelled CBs are counted, the work of a faulted stream is
// dropped in order (but event records and cleanup callbacks), and a lost
// device fails everything in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "mock_fixture.hpp"
#include "spyre/common/device_clock.hpp"
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
    records.Add({&a, 0, 1, OpKind::Launch});
    records.Add({&b, 0, 2, OpKind::Launch});
    records.Add({&a, 1, 3, OpKind::SemWrite});
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
    records.Add({&a, 0, 7, OpKind::Launch});
    EXPECT_SPYRE_ERROR(records.Retire(std::vector{Done(8)}), ProtocolError, "completed CB 8 out of ring order");
    EXPECT_SPYRE_ERROR(RingRecords("x").Retire(std::vector{Done(1)}), ProtocolError, "out of ring order");
}

TEST(Completion, AFailedCbFaultsItsStreamFirstFailureWins) {
    StreamState a(3, 0);
    RingRecords records("0000:00:00.0");
    records.Add({&a, 4, 1, OpKind::Launch});
    records.Add({&a, 5, 2, OpKind::SemWait});
    records.Add({&a, 6, 3, OpKind::Launch});
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

// One event recorded on two streams: the records settle in any order, and
// an older one never moves the event back.
TEST(Completion, EventRecordsMoveTheirEventForwardOnly) {
    StreamState a(0, 0), b(1, 0);
    auto ev = std::make_shared<EventState>();
    QueuedOp newer, older;
    newer.kind = older.kind = OpKind::EventRecord;
    newer.event = older.event = ev;
    newer.value = 2;
    older.value = 1;
    a.local.push_back(std::move(newer));
    b.local.push_back(std::move(older));
    ASSERT_TRUE(SettleEventOnHost(a, "d"));
    const uint64_t stamp = ev->timestamp_ns.load();
    ASSERT_TRUE(SettleEventOnHost(b, "d"));
    EXPECT_EQ(ev->completed.load(), 2u);
    EXPECT_EQ(ev->timestamp_ns.load(), stamp);
    EXPECT_FALSE(ev->error.has_value());
    EXPECT_EQ(b.completed.load(), 1u) << "the older record is done all the same";
    EXPECT_EQ(ev.use_count(), 1) << "the settled records let go of the event";
}

// Event::Record from several threads at once (on streams of their own):
// every record takes a sequence of its own, and `recorded` ends at the
// highest. The queueing step yields, as a real enqueue that pumps the ring
// may, so records overlap.
TEST(Completion, ConcurrentRecordsOfOneEventTakeDistinctSequences) {
    EventState ev;
    constexpr int kThreads = 4, kRecords = 2000;
    std::vector<std::vector<uint64_t>> taken(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < kRecords; ++i)
                RecordEvent(ev, [&](uint64_t seq) {
                    std::this_thread::yield();
                    taken[t].push_back(seq);
                });
        });
    for (auto& th : threads) th.join();
    std::vector<uint64_t> all;
    for (const auto& v : taken) all.insert(all.end(), v.begin(), v.end());
    std::sort(all.begin(), all.end());
    ASSERT_EQ(all.size(), size_t(kThreads * kRecords));
    EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "two records took one sequence";
    EXPECT_EQ(all.back(), uint64_t(kThreads * kRecords));
    EXPECT_EQ(ev.recorded.load(), all.back()) << "recorded moved back below a sequence handed out";
}

// A Record whose enqueue fails (a faulted stream) records nothing: the
// event's waiters do not wait for a record that never comes.
TEST(Completion, ARecordThatFailsToQueueRecordsNothing) {
    EventState ev;
    RecordEvent(ev, [](uint64_t) {});
    EXPECT_THROW(RecordEvent(ev, [](uint64_t) { throw Error(ErrorKind::DeviceError, "stream faulted"); }), Error);
    EXPECT_EQ(ev.recorded.load(), 1u);
    uint64_t next = 0;
    RecordEvent(ev, [&](uint64_t seq) { next = seq; });
    EXPECT_EQ(next, 2u);
}

TEST(Completion, AnEventRecordedAfterAFailureCarriesTheError) {
    StreamState a(0, 0);
    auto ev = std::make_shared<EventState>();
    RingRecords records("d");
    records.Add({&a, 0, 1, OpKind::Launch});
    a.next_seq = 1;
    QueuedOp record;
    record.kind = OpKind::EventRecord;
    record.event = ev;
    record.value = 1;
    a.local.push_back(std::move(record));
    EXPECT_FALSE(SettleEventOnHost(a, "d")) << "the launch before it is in the ring";
    records.Retire(std::vector{Done(1, SPYRE_ERR_MISALIGNED)});
    ASSERT_TRUE(SettleEventOnHost(a, "d"));
    EXPECT_EQ(ev->completed.load(), 1u);
    ASSERT_TRUE(ev->error.has_value());
    EXPECT_EQ(ev->error->kind(), ErrorKind::DeviceError);
    EXPECT_EQ(a.completed.load(), 2u);
}

TEST(Completion, AnIdleStreamsEventRecordAndWaitSettleOnTheHost) {
    StreamState s(0, 0);
    auto ev = std::make_shared<EventState>(), later = std::make_shared<EventState>();
    QueuedOp record;
    record.kind = OpKind::EventRecord;
    record.event = ev;
    record.value = 1;
    QueuedOp wait;
    wait.kind = OpKind::EventWait;
    wait.event = ev;
    wait.value = 1;
    QueuedOp launch;
    s.local = {record, wait, launch};
    s.ring_inflight = 1;
    EXPECT_FALSE(SettleEventOnHost(s, "d")) << "work before it is in the ring";
    s.ring_inflight = 0;
    s.host_busy = true;
    EXPECT_FALSE(SettleEventOnHost(s, "d")) << "a copy before it is running";
    s.host_busy = false;
    const uint64_t t0 = DeviceClockNs();
    EXPECT_TRUE(SettleEventOnHost(s, "d"));
    EXPECT_EQ(ev->completed.load(), 1u);
    EXPECT_GE(ev->timestamp_ns.load(), t0);
    EXPECT_LE(ev->timestamp_ns.load(), DeviceClockNs());
    EXPECT_EQ(s.completed.load(), 1u);
    EXPECT_TRUE(SettleEventOnHost(s, "d")) << "a wait on a completed event";
    EXPECT_EQ(s.completed.load(), 2u);
    EXPECT_EQ(ev.use_count(), 3) << "settled ops let go of the event (the test's record and wait hold it)";
    EXPECT_FALSE(SettleEventOnHost(s, "d")) << "a launch is the ring's";
    s.local.front() = wait;
    s.local.front().event = later;
    EXPECT_FALSE(SettleEventOnHost(s, "d")) << "a wait on an event not yet complete";

    // On a faulted stream a record still fires, with the stream's error.
    s.local.front() = record;
    s.local.front().event = later;
    s.local.front().value = 4;
    Fault(s, Error(ErrorKind::DeviceError, "boom"));
    EXPECT_TRUE(SettleEventOnHost(s, "d"));
    EXPECT_TRUE(later->Reached(4));
    ASSERT_TRUE(later->error.has_value());
    EXPECT_EQ(later->error->kind(), ErrorKind::DeviceError);
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

// A record riding in the ring fires when its NOP retires: after the CBs of
// its stream before it, with the stream's error if one of them failed
// (cancelled or not), and the turns in the ring are counted down.
TEST(Completion, ARecordInTheRingFiresWhenRetiredWithTheStreamsError) {
    StreamState a(2, 0);
    auto ok = std::make_shared<EventState>(), failed = std::make_shared<EventState>();
    RingRecords records("d");
    records.Add({&a, 0, 1, OpKind::Launch});
    records.Add({.stream = &a, .seq = 1, .user_data = 2, .kind = OpKind::EventRecord, .event = ok, .event_seq = 1});
    records.EndTurn();
    records.Add({&a, 2, 3, OpKind::Launch});
    records.Add({.stream = &a, .seq = 3, .user_data = 4, .kind = OpKind::EventRecord, .event = failed, .event_seq = 7});
    records.EndTurn();
    EXPECT_EQ(a.turns_inflight, 2u);
    EXPECT_EQ(records.last_stream(), &a);
    records.Retire(std::vector{Done(1)});
    EXPECT_EQ(ok->completed.load(), 0u) << "fired before its NOP retired";
    EXPECT_EQ(records.Retire(std::vector{Done(2)}), 0u);
    EXPECT_EQ(ok->completed.load(), 1u);
    EXPECT_FALSE(ok->error.has_value());
    EXPECT_NE(ok->timestamp_ns.load(), 0u);
    EXPECT_EQ(a.turns_inflight, 1u);
    // The second launch fails; the record behind it is cancelled, and fires.
    EXPECT_EQ(records.Retire(std::vector{Done(3, SPYRE_ERR_ADDR_RANGE), Done(4, SPYRE_ERR_CANCELED)}), 0u)
        << "a cancelled record is not dropped work";
    EXPECT_TRUE(failed->Reached(7));
    ASSERT_TRUE(failed->error.has_value());
    EXPECT_NE(std::string(failed->error->what()).find("stream 2 op #2"), std::string::npos) << failed->error->what();
    EXPECT_EQ(a.turns_inflight, 0u);
    EXPECT_EQ(a.completed.load(), 4u);
    EXPECT_EQ(records.last_stream(), nullptr);
}

TEST(Completion, FailAllFailsEverythingInFlight) {
    StreamState a(0, 0), b(1, 0);
    auto ev = std::make_shared<EventState>();
    RingRecords records("d");
    records.Add({&a, 0, 1, OpKind::Launch});
    records.Add({&b, 0, 2, OpKind::SemWrite});
    records.Add({.stream = &b, .seq = 1, .user_data = 3, .kind = OpKind::EventRecord, .event = ev, .event_seq = 1});
    records.EndTurn();
    records.FailAll(Error(ErrorKind::DeviceLost, "device lost: gone"));
    EXPECT_TRUE(records.empty());
    EXPECT_EQ(ev->completed.load(), 1u) << "a record in the ring fires, failed";
    ASSERT_TRUE(ev->error.has_value());
    EXPECT_EQ(ev->error->kind(), ErrorKind::DeviceLost);
    EXPECT_EQ(b.turns_inflight, 0u);
    for (StreamState* s : {&a, &b}) {
        EXPECT_EQ(s->completed.load(), s == &a ? 1u : 2u);
        EXPECT_EQ(s->ring_inflight, 0u);
        ASSERT_TRUE(s->fault.has_value());
        EXPECT_EQ(s->fault->kind(), ErrorKind::DeviceLost);
    }
}
