// SPDX-License-Identifier: Apache-2.0
// RingBatcher without a device: a stream's turn as ring CBs — what goes in
// the ring, LINK flags within a turn, the quantum, groups kept whole, event
// records and waits riding in a turn as NOPs, ring streams, and the budget.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "spyre/uapi/spyre_cb.h"
#include "stream/ring_batcher.hpp"

using namespace spyre;
using namespace spyre::detail;

namespace {

constexpr size_t kInlineMax = 256;

QueuedOp Launch(uint64_t addr, bool link = false) {
    QueuedOp op;
    op.kind = OpKind::Launch;
    op.device_addr = addr;
    op.link = link;
    return op;
}

QueuedOp Copy(uint64_t size, const void* src) {
    QueuedOp op;
    op.kind = OpKind::CopyToDevice;
    op.size = size;
    op.src = src;
    op.device_addr = 0x1000;
    return op;
}

QueuedOp EventOp(OpKind kind, std::shared_ptr<EventState> event, uint64_t value) {
    QueuedOp op;
    op.kind = kind;
    op.event = std::move(event);
    op.value = value;
    return op;
}

struct Fixture {
    StreamState s{0, 0};
    RingBatcher batcher{kInlineMax};
    RingRecords records{"test"};
    std::vector<spyre_cb> batch;
    RingBatcher::Budget budget{256, 256, true};
    size_t Take(size_t quantum) { return batcher.TakeTurn(s, quantum, budget, batch, records); }
};

}  // namespace

TEST(RingBatcher, WhatGoesInTheRing) {
    RingBatcher b(kInlineMax);
    QueuedOp cb;
    for (OpKind k : {OpKind::Launch, OpKind::SemWrite, OpKind::SemWait, OpKind::EventRecord, OpKind::EventWait}) {
        cb.kind = k;
        EXPECT_TRUE(b.IsRingOp(cb)) << ToString(k);
    }
    cb.kind = OpKind::HostCallback;
    EXPECT_FALSE(b.IsRingOp(cb));
    cb.kind = OpKind::CopyFromDevice;
    EXPECT_FALSE(b.IsRingOp(cb));
    EXPECT_TRUE(b.IsRingOp(Copy(kInlineMax, nullptr))) << "a small copy rides in the ring";
    EXPECT_FALSE(b.IsRingOp(Copy(kInlineMax + 1, nullptr))) << "a large one goes to the DMA engine";
    EXPECT_FALSE(RingBatcher(0).IsRingOp(Copy(8, nullptr))) << "no inline copies on this device";
    EXPECT_EQ(RingBatcher::SlotsFor(Launch(0)), 1u);
    EXPECT_EQ(RingBatcher::SlotsFor(Copy(64, nullptr)), 2u);
    EXPECT_EQ(RingBatcher::SlotsFor(Copy(65, nullptr)), 3u);
}

TEST(RingBatcher, ATurnIsOneLinkedChainUpToTheQuantum) {
    Fixture f;
    for (uint64_t i = 0; i < 10; ++i) f.s.local.push_back(Launch(0x100 * (i + 1)));
    EXPECT_EQ(f.Take(4), 4u);
    ASSERT_EQ(f.batch.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(f.batch[i].opcode, SPYRE_OP_LAUNCH);
        EXPECT_EQ(f.batch[i].u.launch.program_addr, 0x100 * (i + 1)) << "FIFO order";
        EXPECT_EQ(f.batch[i].flags & SPYRE_CB_F_LINK, i + 1 < 4 ? SPYRE_CB_F_LINK : 0u) << "CB " << i;
    }
    EXPECT_EQ(f.s.local.size(), 6u);
    EXPECT_EQ(f.s.next_seq, 4u);
    EXPECT_EQ(f.s.ring_inflight, 4u);
    EXPECT_EQ(f.records.size(), 4u);
    EXPECT_EQ(f.budget.cbs, 252u);
    EXPECT_EQ(f.budget.slots, 252u);
}

TEST(RingBatcher, InlineCopiesCarryTheirBytes) {
    Fixture f;
    std::vector<uint8_t> bytes(100);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7);
    f.s.local.push_back(Copy(bytes.size(), bytes.data()));
    f.s.local.push_back(Launch(0x40));
    EXPECT_EQ(f.Take(64), 2u);
    ASSERT_EQ(f.batch.size(), 1u + 2u + 1u);  // copy CB, two payload slots, launch
    EXPECT_EQ(f.batch[0].opcode, SPYRE_OP_COPY_INLINE);
    EXPECT_EQ(f.batch[0].slots, 3u);
    EXPECT_EQ(f.batch[0].flags & SPYRE_CB_F_LINK, SPYRE_CB_F_LINK);
    EXPECT_EQ(0, std::memcmp(&f.batch[1], bytes.data(), bytes.size()));
    EXPECT_EQ(f.batch[3].flags & SPYRE_CB_F_LINK, 0u);
    EXPECT_EQ(f.batcher.inline_copies(), 1u);
    EXPECT_EQ(f.budget.slots, 256u - 4u);
}

TEST(RingBatcher, AnEventRecordRidesBehindItsStreamsRingWorkAsANop) {
    Fixture f;
    auto event = std::make_shared<EventState>();
    f.s.local.push_back(EventOp(OpKind::EventRecord, event, 1));
    // Nothing of the stream in the ring: the host settles it at once.
    EXPECT_FALSE(f.batcher.Ready(f.s));
    EXPECT_EQ(f.Take(64), 0u);
    f.s.local.clear();
    f.s.local.push_back(Launch(0x10));
    f.s.local.push_back(EventOp(OpKind::EventRecord, event, 1));
    f.s.local.push_back(Launch(0x20));
    // Behind the launch it goes in the turn, LINKed like the rest: it is
    // fired when retired, after the launch, done or failed.
    EXPECT_EQ(f.Take(64), 3u);
    ASSERT_EQ(f.batch.size(), 3u);
    EXPECT_EQ(f.batch[1].opcode, SPYRE_OP_NOP);
    EXPECT_NE(f.batch[0].flags & SPYRE_CB_F_LINK, 0u);
    EXPECT_NE(f.batch[1].flags & SPYRE_CB_F_LINK, 0u);
    EXPECT_EQ(f.batch[2].flags & SPYRE_CB_F_LINK, 0u);
    EXPECT_TRUE(f.s.local.empty());
    EXPECT_EQ(f.s.turns_inflight, 1u);
}

TEST(RingBatcher, CbsGoInTheStreamsRingStreamRestartedOnlyWithNothingAhead) {
    Fixture f;
    f.s.ring_stream = 5;
    for (uint64_t i = 0; i < 4; ++i) f.s.local.push_back(Launch(0x100 * (i + 1)));
    EXPECT_EQ(f.Take(2), 2u);
    ASSERT_EQ(f.batch.size(), 2u);
    for (const spyre_cb& cb : f.batch) {
        EXPECT_NE(cb.flags & SPYRE_CB_F_STREAM, 0u);
        EXPECT_EQ(cb.stream, 5u);
    }
    // The first turn with nothing of the stream ahead: its failures before were seen.
    EXPECT_NE(f.batch[0].flags & SPYRE_CB_F_STREAM_RESTART, 0u);
    EXPECT_EQ(f.batch[1].flags & SPYRE_CB_F_STREAM_RESTART, 0u);
    // A turn behind the first, still in the ring: no restart, so the device
    // cancels it should the first fail.
    f.batch.clear();
    EXPECT_EQ(f.Take(2), 2u);
    EXPECT_EQ(f.s.turns_inflight, 2u);
    for (const spyre_cb& cb : f.batch) {
        EXPECT_EQ(cb.stream, 5u);
        EXPECT_EQ(cb.flags & SPYRE_CB_F_STREAM_RESTART, 0u);
    }
    // Without a ring stream the CBs carry none.
    Fixture g;
    g.s.local.push_back(Launch(0x10));
    EXPECT_EQ(g.Take(1), 1u);
    EXPECT_EQ(g.batch[0].flags & (SPYRE_CB_F_STREAM | SPYRE_CB_F_STREAM_RESTART), 0u);
    EXPECT_EQ(g.batch[0].stream, 0u);
}

TEST(RingBatcher, StopsAtHostWork) {
    Fixture f;
    f.s.local.push_back(Launch(0x10));
    QueuedOp callback;
    callback.kind = OpKind::HostCallback;
    f.s.local.push_back(callback);
    EXPECT_EQ(f.Take(64), 1u);
    f.s.ring_inflight = 0;
    EXPECT_FALSE(f.batcher.Ready(f.s)) << "a callback is host work";
    EXPECT_EQ(f.s.local.size(), 1u);
}

TEST(RingBatcher, AWaitRidesInATurnAsANopOnceItsEventHasCompleted) {
    Fixture f;
    auto event = std::make_shared<EventState>();
    f.s.local.push_back(Launch(0x10, /*link=*/true));
    f.s.local.push_back(EventOp(OpKind::EventWait, event, 2));
    f.s.local.back().link = true;
    f.s.local.push_back(Launch(0x20));
    event->completed.store(1);
    EXPECT_EQ(f.Take(64), 1u) << "the wait's event has not reached 2: the turn ends before it";
    f.batch.clear();
    f.s.ring_inflight = 0;
    EXPECT_FALSE(f.batcher.Ready(f.s));
    event->completed.store(2);
    ASSERT_TRUE(f.batcher.Ready(f.s));
    EXPECT_EQ(f.Take(64), 2u);
    EXPECT_EQ(f.batch[0].opcode, SPYRE_OP_NOP);
    EXPECT_EQ(f.batch[0].flags & SPYRE_CB_F_LINK, SPYRE_CB_F_LINK);
    EXPECT_EQ(f.batch[1].opcode, SPYRE_OP_LAUNCH);
}

TEST(RingBatcher, AGroupIsNotSplitUnlessItCannotFitAtAll) {
    Fixture f;
    for (uint64_t i = 0; i < 5; ++i) f.s.local.push_back(Launch(i + 1, /*link=*/i + 1 < 5));
    // The ring is busy and holds room for 3: the group of 5 waits whole.
    f.budget = {3, 256, false};
    EXPECT_EQ(f.Take(64), 0u);
    EXPECT_TRUE(f.batch.empty());
    // The ring is idle and still too small: the group goes in parts.
    f.budget = {3, 256, true};
    EXPECT_EQ(f.Take(64), 3u);
    EXPECT_EQ(f.budget.cbs, 0u);
    // The quantum never splits a group: a turn that starts one finishes it.
    Fixture g;
    for (uint64_t i = 0; i < 5; ++i) g.s.local.push_back(Launch(i + 1, i + 1 < 5));
    g.s.local.push_back(Launch(6));
    EXPECT_EQ(g.Take(2), 5u);
    EXPECT_EQ(g.s.local.size(), 1u);
}

TEST(RingBatcher, AFaultedStreamSendsNothing) {
    Fixture f;
    f.s.local.push_back(Launch(1));
    f.s.faulted.store(true);
    EXPECT_FALSE(f.batcher.Ready(f.s));
    f.s.local.front() = EventOp(OpKind::EventRecord, std::make_shared<EventState>(), 1);
    EXPECT_FALSE(f.batcher.Ready(f.s)) << "its records fire on the host (SettleEventOnHost)";
}
