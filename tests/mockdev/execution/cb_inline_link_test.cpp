// SPDX-License-Identifier: Apache-2.0
// Multi-slot CBs and linked chains through a real device: COPY_INLINE round
// trips (also across the ring's end), LINK cancelling the rest of a chain
// (also across doorbells), ring streams cancelling a failed stream's later
// CBs (contract 1.4), garbage framing, and the driver's slot and CB
// accounting over many wraps.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <optional>
#include <random>

#include "mock_fixture.hpp"
#include "random_data.hpp"

using namespace spyre;
using namespace spyre::driver;
using spyre::test::MockDeviceTest;

namespace {

std::vector<Completion> WaitAll(CommandRing& ring, size_t n) {
    std::vector<Completion> done(n);
    for (size_t got = 0; got < n;)
        got += ring.Wait(std::span(done).subspan(got), n - got, {.mode = WaitMode::Blocking});
    return done;
}

// Runs NOPs until the ring's next position is `pos` modulo the ring size.
void MoveRingTo(CommandRing& ring, uint32_t pos, uint32_t next) {
    const uint32_t n = (pos - next) & (ring.sq_entries() - 1);
    if (n == 0) return;
    std::vector<spyre_cb> nops(n, NopCb(7));
    ring.Submit(nops);
    WaitAll(ring, n);
}

std::vector<uint8_t> ReadBack(DmaQueue& q, uint64_t addr, size_t n) {
    std::vector<uint8_t> out(n);
    q.Wait(q.DeviceToHost(out.data(), addr, n));
    return out;
}

constexpr uint64_t kBase = 16ull << 20;  // device addresses the tests write

}  // namespace

TEST_F(MockDeviceTest, CopyInlineRoundTripsByteForByte) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    DmaQueue q(fn);
    EXPECT_TRUE(fn.Read32(SPYRE_REG_CAPS) & SPYRE_CAP_COPY_INLINE);
    const std::vector<size_t> sizes{1, 63, 64, 65, SPYRE_CB_INLINE_MAX_BYTES};
    std::vector<std::vector<uint8_t>> data;
    std::vector<spyre_cb> batch;
    for (size_t i = 0; i < sizes.size(); ++i) {
        data.push_back(test::RandomBytes(sizes[i], i + 1));
        AppendCopyInline(batch, kBase + i * 8192, data.back(), 100 + i);
    }
    ASSERT_EQ(batch.size(), 2u + 2u + 2u + 3u + 64u);
    const std::vector<uint8_t> fill(8192 * sizes.size(), 0xEE);
    q.Wait(q.HostToDevice(fill.data(), kBase, fill.size()));
    const uint32_t first = ring.Submit(batch);
    EXPECT_EQ(ring.InFlight(), sizes.size());
    EXPECT_EQ(ring.FreeSlots(), ring.sq_entries() - batch.size());
    const auto done = WaitAll(ring, sizes.size());
    uint32_t pos = first;
    for (size_t i = 0; i < sizes.size(); ++i) {
        SCOPED_TRACE(sizes[i]);
        EXPECT_TRUE(done[i].ok()) << spyre_error_name(done[i].status);
        EXPECT_EQ(done[i].user_data, 100 + i);
        EXPECT_EQ(done[i].result, sizes[i]);
        EXPECT_EQ(done[i].opcode, SPYRE_OP_COPY_INLINE);
        EXPECT_EQ(done[i].sq_pos, pos);  // the CB's first slot
        pos += SPYRE_CB_INLINE_SLOTS(sizes[i]);
        const auto back = ReadBack(q, kBase + i * 8192, sizes[i] + 1);
        EXPECT_EQ(std::memcmp(back.data(), data[i].data(), sizes[i]), 0);
        EXPECT_EQ(back[sizes[i]], 0xEE) << "one byte past the copy";
    }
    EXPECT_EQ(ring.InFlight(), 0u);
    EXPECT_EQ(ring.FreeSlots(), ring.sq_entries());
    EXPECT_EQ(fn.Read32(SPYRE_REG_SQ_HEAD), pos);
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_COPIES), sizes.size());
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_COPY_BYTES), 1u + 63 + 64 + 65 + SPYRE_CB_INLINE_MAX_BYTES);
}

TEST_F(MockDeviceTest, CopyInlineBatchesWrapAroundTheRingEnd) {
    Function fn = Function::Open(Vf(1));
    CommandRing ring(fn);
    DmaQueue q(fn);
    uint32_t next = 0;
    // The wrap falls at every offset inside a large CB: in its payload, right
    // after the CB, and between CBs.
    for (uint32_t before_end : {1u, 2u, 3u, 17u, 63u, 64u, 65u}) {
        SCOPED_TRACE(before_end);
        MoveRingTo(ring, ring.sq_entries() - before_end, next);
        std::vector<spyre_cb> batch;
        std::vector<std::vector<uint8_t>> data;
        const std::vector<size_t> sizes{SPYRE_CB_INLINE_MAX_BYTES, 65, 1, 64, 4000};
        for (size_t i = 0; i < sizes.size(); ++i) {
            data.push_back(test::RandomBytes(sizes[i], before_end * 10 + i));
            AppendCopyInline(batch, kBase + i * 4096, data.back(), i);
        }
        const uint32_t first = ring.Submit(batch);
        EXPECT_EQ(spyre_ring_slot(first, ring.sq_entries()), ring.sq_entries() - before_end);
        const auto done = WaitAll(ring, sizes.size());
        for (size_t i = 0; i < sizes.size(); ++i) {
            ASSERT_TRUE(done[i].ok()) << i << " " << spyre_error_name(done[i].status);
            ASSERT_EQ(ReadBack(q, kBase + i * 4096, sizes[i]), data[i]) << i;
        }
        next = first + uint32_t(batch.size());
        EXPECT_EQ(fn.Read32(SPYRE_REG_SQ_HEAD), next);
    }
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_CB_ERRORS), 0u);
}

TEST_F(MockDeviceTest, CopyInlineBuildersRefuseBadSizesAndFlags) {
    const std::vector<uint8_t> none;
    const std::vector<uint8_t> too_big(SPYRE_CB_INLINE_MAX_BYTES + 1);
    std::vector<spyre_cb> out{NopCb(1)};
    EXPECT_SPYRE_ERROR(AppendCopyInline(out, 0, none), InvalidArgument, "1 to 4032 bytes, not 0");
    EXPECT_SPYRE_ERROR(AppendCopyInline(out, 0, too_big), InvalidArgument, "not 4033");
    EXPECT_SPYRE_ERROR(CopyInlineCbs(0, too_big), InvalidArgument, "4032");
    EXPECT_SPYRE_ERROR(AppendCopyInline(out, 0, std::vector<uint8_t>(5), 0, 0x02), InvalidArgument, "reserved");
    EXPECT_EQ(out.size(), 1u) << "a refused append leaves the batch alone";
    AppendCopyInline(out, 0x40, std::vector<uint8_t>(65, 9), 5, SPYRE_CB_F_LINK);
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(out[1].opcode, SPYRE_OP_COPY_INLINE);
    EXPECT_EQ(out[1].flags, SPYRE_CB_F_LINK);
    EXPECT_EQ(out[1].slots, 3u);
    EXPECT_EQ(out[1].u.copy.src_addr, 0u);
    EXPECT_EQ(out[1].u.copy.dst_addr, 0x40u);
    EXPECT_EQ(out[1].u.copy.size, 65u);
    const auto* pad = reinterpret_cast<const uint8_t*>(&out[3]);
    EXPECT_EQ(pad[0], 9);
    EXPECT_EQ(pad[1], 0) << "padding after the data is zero";
    EXPECT_EQ(Linked(NopCb(3)).flags, SPYRE_CB_F_LINK);
}

TEST_F(MockDeviceTest, LinkedFailureCancelsTheRestOfTheChain) {
    Function fn = Function::Open(Vf(2));
    CommandRing ring(fn);
    DmaQueue q(fn);
    const uint64_t mem = fn.Read64(SPYRE_REG_MEM_SIZE);
    const std::vector<uint8_t> fill(5 * 4096, 0xEE);
    q.Wait(q.HostToDevice(fill.data(), kBase, fill.size()));
    const auto a = test::RandomBytes(100, 1), b = test::RandomBytes(200, 2), c = test::RandomBytes(300, 3), d = test::RandomBytes(400, 4);

    std::vector<spyre_cb> batch;
    AppendCopyInline(batch, kBase, a, 1, SPYRE_CB_F_LINK);                        // runs
    batch.push_back(Linked(CopyCb(kBase, mem - 10, 4096, 2)));                   // fails: ADDR_RANGE
    AppendCopyInline(batch, kBase + 4096, b, 3, SPYRE_CB_F_LINK);                 // cancelled
    batch.push_back(Linked(SemWriteCb(kBase + 3 * 4096, 77, 4)));                // cancelled
    AppendCopyInline(batch, kBase + 2 * 4096, c, 5);                              // cancelled: end of the chain
    AppendCopyInline(batch, kBase + 4 * 4096, d, 6);                              // runs
    const uint32_t first = ring.Submit(batch);
    ASSERT_EQ(ring.InFlight(), 6u);
    const auto done = WaitAll(ring, 6);

    const uint16_t expected[6] = {SPYRE_ERR_NONE, SPYRE_ERR_ADDR_RANGE, SPYRE_ERR_CANCELED,
                                  SPYRE_ERR_CANCELED, SPYRE_ERR_CANCELED, SPYRE_ERR_NONE};
    const uint8_t opcodes[6] = {SPYRE_OP_COPY_INLINE, SPYRE_OP_COPY, SPYRE_OP_COPY_INLINE,
                                SPYRE_OP_SEM_WRITE, SPYRE_OP_COPY_INLINE, SPYRE_OP_COPY_INLINE};
    uint32_t pos = first;
    for (size_t i = 0; i < 6; ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(done[i].status, expected[i]) << spyre_error_name(done[i].status);
        EXPECT_EQ(done[i].user_data, i + 1);
        EXPECT_EQ(done[i].opcode, opcodes[i]);
        EXPECT_EQ(done[i].sq_pos, pos);
        if (expected[i] == SPYRE_ERR_CANCELED) {
            EXPECT_EQ(done[i].result, 0u);
        }
        pos += batch[pos - first].slots;
    }
    // Only the first and the last copies happened.
    EXPECT_EQ(ReadBack(q, kBase, a.size()), a);
    EXPECT_EQ(ReadBack(q, kBase + 4096, 4096), std::vector<uint8_t>(4096, 0xEE));
    EXPECT_EQ(ReadBack(q, kBase + 2 * 4096, 4096), std::vector<uint8_t>(4096, 0xEE));
    EXPECT_EQ(ReadBack(q, kBase + 3 * 4096, 8), std::vector<uint8_t>(8, 0xEE)) << "the semaphore was not written";
    EXPECT_EQ(ReadBack(q, kBase + 4 * 4096, d.size()), d);

    // The real fault is latched, not the cancellations; all four count as errors.
    EXPECT_EQ(fn.Read32(SPYRE_REG_ERR_CODE), SPYRE_ERR_ADDR_RANGE);
    EXPECT_EQ(fn.Read32(SPYRE_REG_ERR_SQ_POS), done[1].sq_pos);
    EXPECT_EQ(fn.Read64(SPYRE_REG_ERR_USER_DATA), 2u);
    EXPECT_EQ(fn.Read32(SPYRE_REG_ERR_COUNT), 1u);
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_CB_ERRORS), 4u);
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_CB_DONE), 2u);
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_COPIES), 2u);
}

TEST_F(MockDeviceTest, SuccessfulLinkedChainsRunEveryCb) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    DmaQueue q(fn);
    std::vector<spyre_cb> batch;
    std::vector<std::vector<uint8_t>> data;
    for (int i = 0; i < 10; ++i) {
        data.push_back(test::RandomBytes(50 + i * 300, i));
        AppendCopyInline(batch, kBase + i * 4096, data.back(), i, i < 9 ? SPYRE_CB_F_LINK : 0);
    }
    ring.Submit(batch);
    for (const auto& c : WaitAll(ring, 10)) EXPECT_TRUE(c.ok()) << spyre_error_name(c.status);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(ReadBack(q, kBase + i * 4096, data[i].size()), data[i]) << i;
    // A failing CB without LINK cancels nothing.
    std::array plain{CopyCb(0, ~0ull - 5, 64, 1), NopCb(2)};
    ring.Submit(plain);
    const auto done = WaitAll(ring, 2);
    EXPECT_EQ(done[0].status, SPYRE_ERR_ADDR_RANGE);
    EXPECT_TRUE(done[1].ok());
}

TEST_F(MockDeviceTest, ChainSplitAcrossSubmitsStillCancels) {
    Function fn = Function::Open(Vf(1));
    CommandRing ring(fn);
    DmaQueue q(fn);
    const std::vector<uint8_t> fill(4096, 0xEE);
    q.Wait(q.HostToDevice(fill.data(), kBase, fill.size()));
    const auto data = test::RandomBytes(1000, 9);

    // The failing linked CB completes before its successor is even submitted.
    ring.Submit(std::array{Linked(CopyCb(~0ull - 100, kBase, 16, 1))});
    EXPECT_EQ(WaitAll(ring, 1)[0].status, SPYRE_ERR_ADDR_RANGE);
    std::vector<spyre_cb> next = CopyInlineCbs(kBase, data, 2);
    next.push_back(NopCb(3));
    ring.Submit(next);
    auto done = WaitAll(ring, 2);
    EXPECT_EQ(done[0].status, SPYRE_ERR_CANCELED);
    EXPECT_EQ(done[0].user_data, 2u);
    EXPECT_TRUE(done[1].ok());
    EXPECT_EQ(ReadBack(q, kBase, 4096), fill);

    // Back to back, without waiting between the two submits.
    std::vector<spyre_cb> tail;
    AppendCopyInline(tail, kBase, data, 5, SPYRE_CB_F_LINK);
    ring.Submit(std::array{Linked(SemWaitCb(kBase + 4096 * 2 + 1, 0, 0, 4))});  // MISALIGNED
    ring.Submit(tail);
    ring.Submit(std::array{NopCb(6)});
    done = WaitAll(ring, 3);
    EXPECT_EQ(done[0].status, SPYRE_ERR_MISALIGNED);
    EXPECT_EQ(done[1].status, SPYRE_ERR_CANCELED);
    EXPECT_EQ(done[2].status, SPYRE_ERR_CANCELED) << "the cancelled inline copy carried LINK";
    EXPECT_EQ(done[2].user_data, 6u);
    ring.Submit(std::array{NopCb(7)});
    EXPECT_TRUE(WaitAll(ring, 1)[0].ok()) << "the chain ended at the NOP";
    EXPECT_EQ(ReadBack(q, kBase, 4096), fill);
}

TEST_F(MockDeviceTest, ResetDropsAPendingCancellation) {
    Function fn = Function::Open(Pf());
    {
        CommandRing ring(fn);
        ring.Submit(std::array{Linked(CopyCb(~0ull - 100, 0, 16, 1))});
        EXPECT_EQ(WaitAll(ring, 1)[0].status, SPYRE_ERR_ADDR_RANGE);
    }
    CommandRing ring(fn);  // resets the function
    ring.Submit(std::array{NopCb(2)});
    EXPECT_TRUE(WaitAll(ring, 1)[0].ok());
}

spyre_cb InStream(spyre_cb cb, uint32_t stream, bool restart = false) {
    PutInRingStream(cb, stream, restart);
    return cb;
}

// Contract 1.4: a failure of one ring stream cancels that stream's later
// CBs, whatever sits between them, until a CB of it carries RESTART.
TEST_F(MockDeviceTest, RingStreamFailureCancelsItsLaterCbsWhereverTheySit) {
    Function fn = Function::Open(Vf(1));
    ASSERT_TRUE(fn.Read32(SPYRE_REG_CAPS) & SPYRE_CAP_RING_STREAMS);
    CommandRing ring(fn);
    DmaQueue q(fn);
    const std::vector<uint8_t> fill(4096, 0xEE);
    q.Wait(q.HostToDevice(fill.data(), kBase, fill.size()));
    const uint64_t sem = kBase;  // u64 words at kBase + 8 * i

    // Stream 3 fails; stream 5 and untagged CBs between its CBs run.
    ring.Submit(std::array{InStream(SemWriteCb(sem, 1, 1), 3, true), InStream(CopyCb(~0ull - 100, kBase, 16, 2), 3),
                           InStream(SemWriteCb(sem + 8, 2, 3), 5, true), NopCb(4)});
    auto done = WaitAll(ring, 4);
    EXPECT_TRUE(done[0].ok());
    EXPECT_EQ(done[1].status, SPYRE_ERR_ADDR_RANGE);
    EXPECT_TRUE(done[2].ok()) << "another ring stream goes on";
    EXPECT_TRUE(done[3].ok());
    EXPECT_EQ(fn.Read64(SPYRE_REG_RING_STREAMS_FAILED), 1ull << 3);

    // A later doorbell: stream 3's CBs are cancelled, even one that carries LINK
    // (its untagged successor is cancelled too); stream 5's run.
    ring.Submit(std::array{InStream(SemWriteCb(sem + 16, 3, 5), 3), InStream(SemWriteCb(sem + 24, 4, 6), 5),
                           Linked(InStream(SemWriteCb(sem + 32, 5, 7), 3)), NopCb(8), NopCb(9)});
    done = WaitAll(ring, 5);
    EXPECT_EQ(done[0].status, SPYRE_ERR_CANCELED);
    EXPECT_TRUE(done[1].ok());
    EXPECT_EQ(done[2].status, SPYRE_ERR_CANCELED);
    EXPECT_EQ(done[3].status, SPYRE_ERR_CANCELED) << "LINK still cancels the successor";
    EXPECT_TRUE(done[4].ok());
    // Cancellations do not latch: the one real fault is the copy.
    EXPECT_EQ(fn.Read32(SPYRE_REG_ERR_COUNT), 1u);
    EXPECT_EQ(fn.Read64(SPYRE_REG_ERR_USER_DATA), 2u);

    // RESTART: stream 3 runs again.
    ring.Submit(std::array{InStream(SemWriteCb(sem + 40, 6, 10), 3, true), InStream(SemWriteCb(sem + 48, 7, 11), 3)});
    done = WaitAll(ring, 2);
    EXPECT_TRUE(done[0].ok());
    EXPECT_TRUE(done[1].ok());
    EXPECT_EQ(fn.Read64(SPYRE_REG_RING_STREAMS_FAILED), 0u);

    std::vector<uint64_t> words(7);
    q.Wait(q.DeviceToHost(words.data(), sem, words.size() * 8));
    const uint64_t untouched = 0xEEEEEEEEEEEEEEEEull;
    EXPECT_EQ(words, (std::vector<uint64_t>{1, 2, untouched, 4, untouched, 6, 7}));
}

TEST_F(MockDeviceTest, ResetForgetsFailedRingStreams) {
    Function fn = Function::Open(Pf());
    {
        CommandRing ring(fn);
        ring.Submit(std::array{InStream(CopyCb(~0ull - 100, 0, 16, 1), SPYRE_RING_STREAMS - 1)});
        EXPECT_EQ(WaitAll(ring, 1)[0].status, SPYRE_ERR_ADDR_RANGE);
        EXPECT_EQ(fn.Read64(SPYRE_REG_RING_STREAMS_FAILED), 1ull << (SPYRE_RING_STREAMS - 1));
    }
    CommandRing ring(fn);  // resets the function
    EXPECT_EQ(fn.Read64(SPYRE_REG_RING_STREAMS_FAILED), 0u);
    ring.Submit(std::array{InStream(NopCb(2), SPYRE_RING_STREAMS - 1)});
    EXPECT_TRUE(WaitAll(ring, 1)[0].ok());
}

// Slot counts the ring cannot hold consume one slot and fail the CB; the
// device goes on with the next slot. The driver refuses to build such a
// batch, so this test writes the ring by hand.
TEST_F(MockDeviceTest, GarbageFramingGetsBadSlotCountAndTheDeviceGoesOn) {
    Function fn = Function::Open(Pf());
    std::optional<CommandRing> ring(std::in_place, fn);  // reset and enable the ring
    auto* db = reinterpret_cast<spyre_doorbell_page*>(fn.bar4() + fn.Read32(SPYRE_REG_DB_OFFSET));
    auto* sq = reinterpret_cast<spyre_cb*>(fn.bar4() + fn.Read32(SPYRE_REG_SQ_OFFSET));
    const auto* cq = reinterpret_cast<const spyre_cqe*>(fn.bar4() + fn.Read32(SPYRE_REG_CQ_OFFSET));
    const uint32_t entries = fn.Read32(SPYRE_REG_SQ_ENTRIES), cq_entries = fn.Read32(SPYRE_REG_CQ_ENTRIES);
    uint32_t tail = 0, cq_head = 0;
    auto put = [&](const spyre_cb& cb) { std::memcpy(&sq[spyre_ring_slot(tail++, entries)], &cb, sizeof cb); };
    auto publish = [&] {
        std::atomic_ref<uint32_t>(db->sq_tail).store(tail, std::memory_order_release);
        fn.WriteRegion(SPYRE_REGION_BAR4, fn.Read32(SPYRE_REG_DB_OFFSET) + SPYRE_DB_SQ_TAIL,
                       std::span(reinterpret_cast<const uint8_t*>(&tail), 4));  // trapped: wakes the ring lane
    };
    auto next = [&]() -> spyre_cqe {
        for (int i = 0; i < 4000 && std::atomic_ref<uint32_t>(db->cq_tail).load(std::memory_order_acquire) == cq_head; ++i)
            usleep(500);
        EXPECT_NE(std::atomic_ref<uint32_t>(db->cq_tail).load(std::memory_order_acquire), cq_head) << "no completion";
        spyre_cqe e = cq[spyre_ring_slot(cq_head++, cq_entries)];
        std::atomic_ref<uint32_t>(db->cq_head).store(cq_head, std::memory_order_release);
        return e;
    };

    // A NOP claiming 9 slots with 1 published, then 3 good NOPs.
    spyre_cb nine = NopCb(1);
    nine.slots = 9;
    put(nine);
    publish();
    spyre_cqe e = next();
    EXPECT_EQ(e.status, SPYRE_ERR_BAD_SLOT_COUNT);
    EXPECT_EQ(e.sq_pos, 0u);
    EXPECT_EQ(e.user_data, 1u);
    EXPECT_EQ(std::atomic_ref<uint32_t>(db->sq_head).load(), 1u) << "exactly one slot consumed";
    for (int i = 0; i < 3; ++i) put(NopCb(10 + i));
    publish();
    for (uint32_t i = 0; i < 3; ++i) {
        e = next();
        EXPECT_EQ(e.status, SPYRE_ERR_NONE);
        EXPECT_EQ(e.sq_pos, 1 + i);
        EXPECT_EQ(e.user_data, 10 + i);
    }

    // A 3-slot COPY_INLINE of which 2 slots are published: the CB fails and
    // its first payload slot is read as the next CB; so is the third once
    // published. Their bytes make a zeroed slot (framing: 0 slots) and a CB
    // with opcode 0x77. Nothing reaches memory.
    std::vector<uint8_t> payload(100, 0);
    payload[64] = 0x77;  // opcode of the second payload slot
    payload[66] = 1;     // its slots
    std::vector<spyre_cb> inline_cb = CopyInlineCbs(kBase, payload);
    inline_cb[0].user_data = 20;
    for (const auto& s : inline_cb) put(s);
    tail -= 1;
    publish();
    e = next();
    EXPECT_EQ(e.status, SPYRE_ERR_BAD_SLOT_COUNT);
    EXPECT_EQ(e.user_data, 20u);
    EXPECT_EQ(e.sq_pos, 4u);
    EXPECT_EQ(next().status, SPYRE_ERR_BAD_SLOT_COUNT);
    tail += 1;
    publish();
    e = next();
    EXPECT_EQ(e.status, SPYRE_ERR_INVALID_OPCODE);
    EXPECT_EQ(e.opcode, 0x77u);
    EXPECT_EQ(e.sq_pos, 6u);

    // Slot counts 0 and above the maximum are never framed.
    for (uint16_t slots : {uint16_t(0), uint16_t(SPYRE_CB_MAX_SLOTS + 1), uint16_t(0xFFFF)}) {
        spyre_cb bad = NopCb(30);
        bad.slots = slots;
        put(bad);
        put(NopCb(31));
        publish();
        EXPECT_EQ(next().status, SPYRE_ERR_BAD_SLOT_COUNT) << slots;
        EXPECT_EQ(next().status, SPYRE_ERR_NONE) << slots;
    }
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_COPIES), 0u);
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_CB_ERRORS), 7u);
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_NOPS), 6u);

    // A new ring resets the function and works.
    ring.reset();
    ring.emplace(fn);
    ring->Submit(std::array{NopCb(40)});
    EXPECT_TRUE(WaitAll(*ring, 1)[0].ok());
}

// Through the driver: a slot count of 0 or above the maximum is a one-slot CB
// that fails; a payload running past the batch is refused before submission;
// an inline CB whose slots do not match its size is framed by its slots and
// fails.
TEST_F(MockDeviceTest, DriverFramesBatchesLikeTheDevice) {
    Function fn = Function::Open(Vf(2));
    CommandRing ring(fn);
    spyre_cb zero = NopCb(1), huge = NopCb(2), two = NopCb(3);
    zero.slots = 0;
    huge.slots = SPYRE_CB_MAX_SLOTS + 1;
    two.slots = 2;
    ring.Submit(std::array{zero, huge, NopCb(4)});
    EXPECT_EQ(ring.InFlight(), 3u);
    auto done = WaitAll(ring, 3);
    EXPECT_EQ(done[0].status, SPYRE_ERR_BAD_SLOT_COUNT);
    EXPECT_EQ(done[1].status, SPYRE_ERR_BAD_SLOT_COUNT);
    EXPECT_TRUE(done[2].ok());

    EXPECT_SPYRE_ERROR(ring.Submit(std::array{NopCb(5), two}), InvalidArgument, "declares 2 ring slots but only 1 remain");
    std::vector<spyre_cb> cut = CopyInlineCbs(0, std::vector<uint8_t>(200, 1));
    cut.pop_back();
    EXPECT_SPYRE_ERROR(ring.Submit(cut), InvalidArgument, "a CB and its payload must be submitted together");
    EXPECT_EQ(ring.InFlight(), 0u);
    EXPECT_EQ(ring.FreeSlots(), ring.sq_entries()) << "a refused batch leaves nothing behind";

    // A NOP claiming 2 slots takes the next slot with it.
    ring.Submit(std::array{two, NopCb(6), NopCb(7)});
    EXPECT_EQ(ring.InFlight(), 2u);
    done = WaitAll(ring, 2);
    EXPECT_EQ(done[0].status, SPYRE_ERR_BAD_SLOT_COUNT);
    EXPECT_EQ(done[1].user_data, 7u);
    // An inline copy of 100 bytes claiming 2 slots (it needs 3).
    std::vector<spyre_cb> wrong = CopyInlineCbs(kBase, std::vector<uint8_t>(100, 1), 8);
    wrong[0].slots = 2;
    wrong[2] = NopCb(9);
    ring.Submit(wrong);
    done = WaitAll(ring, 2);
    EXPECT_EQ(done[0].status, SPYRE_ERR_BAD_SLOT_COUNT);
    EXPECT_TRUE(done[1].ok());
    EXPECT_EQ(done[1].user_data, 9u);
    EXPECT_EQ(ring.FreeSlots(), ring.sq_entries());
}

// Thousands of inline copies of random sizes through a ring kept partly full
// wrap it many times; the driver's slot and CB counts stay exact and every
// byte arrives.
TEST_F(MockDeviceTest, InlineCopiesOverManyWrapsKeepExactAccounting) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    DmaQueue q(fn);
    constexpr int kCopies = 20000;
    constexpr uint64_t kArea = 1ull << 20;  // copies land in 256 slots of 4 KiB
    std::vector<uint8_t> mirror(kArea, 0);
    q.Wait(q.HostToDevice(mirror.data(), kBase, kArea));
    std::mt19937_64 rng(2024);
    std::deque<uint32_t> slots_in_flight;  // per CB, as the test built them
    uint32_t used = 0;
    std::vector<Completion> done(256);
    uint64_t expected_tag = 0, bytes = 0;
    int submitted = 0;
    const uint32_t wraps_from = fn.Read32(SPYRE_REG_SQ_HEAD);
    while (submitted < kCopies || !slots_in_flight.empty()) {
        // Build a batch of up to 40 copies that fits what the ring says is free.
        std::vector<spyre_cb> batch;
        const int want = int(rng() % 40) + 1;
        for (int i = 0; i < want && submitted < kCopies; ++i) {
            const size_t size = size_t(rng() % SPYRE_CB_INLINE_MAX_BYTES) + 1;
            if (batch.size() + SPYRE_CB_INLINE_SLOTS(size) > ring.FreeSlots()) break;
            const uint64_t offset = (rng() % 256) * 4096 + rng() % (4096 - size + 1);
            std::vector<uint8_t> data(size);
            for (auto& b : data) b = uint8_t(rng());
            std::memcpy(mirror.data() + offset, data.data(), size);  // the device runs them in ring order
            AppendCopyInline(batch, kBase + offset, data, uint64_t(submitted));
            slots_in_flight.push_back(SPYRE_CB_INLINE_SLOTS(size));
            used += SPYRE_CB_INLINE_SLOTS(size);
            bytes += size;
            ++submitted;
        }
        if (!batch.empty()) ring.Submit(batch);
        ASSERT_EQ(ring.InFlight(), slots_in_flight.size());
        ASSERT_EQ(ring.FreeSlots(), ring.sq_entries() - used);
        // Reap some: sometimes all, sometimes few, so the ring stays partly full.
        const size_t min = rng() % 2 ? slots_in_flight.size() : std::min<size_t>(slots_in_flight.size(), 3);
        size_t got = ring.Wait(std::span(done).subspan(0, std::min<size_t>(done.size(), slots_in_flight.size())),
                               std::min(min, done.size()), {.mode = WaitMode::Adaptive});
        for (size_t i = 0; i < got; ++i) {
            ASSERT_TRUE(done[i].ok()) << spyre_error_name(done[i].status);
            ASSERT_EQ(done[i].user_data, expected_tag++);
            used -= slots_in_flight.front();
            slots_in_flight.pop_front();
        }
        ASSERT_EQ(ring.InFlight(), slots_in_flight.size());
        ASSERT_EQ(ring.FreeSlots(), ring.sq_entries() - used);
        if (slots_in_flight.empty() && submitted % 1000 < 40) {
            ASSERT_EQ(ReadBack(q, kBase, kArea), mirror);
        }
    }
    ASSERT_EQ(ReadBack(q, kBase, kArea), mirror);
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_COPIES), uint64_t(kCopies));
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_COPY_BYTES), bytes);
    EXPECT_GT(fn.Read32(SPYRE_REG_SQ_HEAD) - wraps_from, 10 * ring.sq_entries()) << "the ring wrapped many times";
}
