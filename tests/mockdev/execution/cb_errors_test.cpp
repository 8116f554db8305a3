// SPDX-License-Identifier: Apache-2.0
// Garbage control blocks get error completions with the right code, latch the
// error registers, and leave the device (and other functions) working.
#include "mock_fixture.hpp"
#include "spyre/uapi/spyre_regdesc.hpp"

using namespace spyre::driver;
using spyre::test::MockDeviceTest;

namespace {

struct BadCb {
    const char* name;
    spyre_cb cb;
    uint16_t expected;
};

std::vector<BadCb> Garbage() {
    std::vector<BadCb> v;
    spyre_cb zero{};
    v.push_back({"zeroed slot (framing: 0 slots)", zero, SPYRE_ERR_BAD_SLOT_COUNT});
    spyre_cb zero_op = NopCb(0);
    zero_op.opcode = 0;
    v.push_back({"opcode 0", zero_op, SPYRE_ERR_INVALID_OPCODE});
    spyre_cb unknown = NopCb(0);
    unknown.opcode = 0x7F;
    v.push_back({"unknown opcode", unknown, SPYRE_ERR_INVALID_OPCODE});
    spyre_cb flags = NopCb(0);
    flags.flags = 0x80;
    v.push_back({"reserved flag", flags, SPYRE_ERR_RESERVED_NONZERO});
    spyre_cb reserved = NopCb(0);
    reserved.stream = 1;  // a ring stream without F_STREAM
    v.push_back({"stream without F_STREAM", reserved, SPYRE_ERR_RESERVED_NONZERO});
    spyre_cb args = NopCb(0);
    args.u.args[5] = 0xDEAD;
    v.push_back({"NOP with arguments", args, SPYRE_ERR_RESERVED_NONZERO});
    spyre_cb slots0 = NopCb(0);
    slots0.slots = 0;
    v.push_back({"zero slots", slots0, SPYRE_ERR_BAD_SLOT_COUNT});
    spyre_cb slots_many = NopCb(0);
    slots_many.slots = SPYRE_CB_MAX_SLOTS + 1;
    v.push_back({"NOP claiming more slots than a CB may have", slots_many, SPYRE_ERR_BAD_SLOT_COUNT});
    spyre_cb bad_inline = NopCb(0);
    bad_inline.opcode = SPYRE_OP_COPY_INLINE;  // size 0: no valid slot count
    v.push_back({"COPY_INLINE of 0 bytes", bad_inline, SPYRE_ERR_BAD_SLOT_COUNT});
    // 3.0: a task belongs on a task queue; the ring refuses it.
    v.push_back({"TASK on the CB ring", TaskCb(0, 64, 128, 0), SPYRE_ERR_WRONG_QUEUE});
    return v;
}

}  // namespace

TEST_F(MockDeviceTest, MalformedCbsGetErrorCompletionsAndTheDeviceGoesOn) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    uint64_t tag = 100;
    for (BadCb bad : Garbage()) {
        SCOPED_TRACE(bad.name);
        bad.cb.user_data = ++tag;
        // The bad CB sits between two good ones: the ring keeps its order.
        std::array cbs{NopCb(tag * 10), bad.cb, NopCb(tag * 10 + 1)};
        const uint32_t pos = ring.Submit(cbs);
        std::array<Completion, 3> done;
        size_t got = 0;
        while (got < 3) got += ring.Wait(std::span(done).subspan(got), 3 - got, {.mode = WaitMode::Blocking});
        EXPECT_TRUE(done[0].ok());
        EXPECT_EQ(done[1].status, bad.expected) << spyre_error_name(done[1].status);
        EXPECT_EQ(done[1].user_data, tag);
        EXPECT_EQ(done[1].sq_pos, pos + 1);
        EXPECT_TRUE(done[2].ok());
        EXPECT_EQ(done[2].user_data, tag * 10 + 1);

        // The first fault is latched with where it happened.
        EXPECT_TRUE(fn.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_ERROR);
        EXPECT_EQ(fn.Read32(SPYRE_REG_ERR_CODE), bad.expected);
        EXPECT_EQ(fn.Read32(SPYRE_REG_ERR_SQ_POS), pos + 1);
        EXPECT_EQ(fn.Read64(SPYRE_REG_ERR_USER_DATA), tag);
        fn.Write32(SPYRE_REG_ERR_CLEAR, 1);  // trapped write-1-to-clear
        EXPECT_EQ(fn.Read32(SPYRE_REG_ERR_CODE), 0u);
        EXPECT_FALSE(fn.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_ERROR);
    }
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_CB_ERRORS), Garbage().size());
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_NOPS), 2 * Garbage().size());
}

TEST_F(MockDeviceTest, GarbageCopyInlineIsAnErrorNotACrash) {
    Function fn = Function::Open(Vf(1));
    CommandRing ring(fn);
    spyre_cb cb = NopCb(SPYRE_OP_COPY_INLINE);
    cb.opcode = SPYRE_OP_COPY_INLINE;
    cb.u.args[0] = 0xFFFFFFFFFFFFFFFFull;  // src_addr must be 0
    cb.u.copy.size = 8;
    cb.slots = 2;
    std::array<spyre_cb, 2> slots{cb, spyre_cb{}};
    ring.Submit(slots);
    Completion c;
    ring.Wait({&c, 1}, 1, {.mode = WaitMode::Adaptive});
    EXPECT_EQ(c.status, SPYRE_ERR_RESERVED_NONZERO);
    EXPECT_EQ(c.opcode, SPYRE_OP_COPY_INLINE);
    // CAPS tells the truth: every contract opcode is executed.
    EXPECT_TRUE(fn.Read32(SPYRE_REG_CAPS) & SPYRE_CAP_COPY_INLINE);
    EXPECT_TRUE(fn.Read32(SPYRE_REG_CAPS) & SPYRE_CAP_LAUNCH);
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_COPIES), 0u);
}

TEST_F(MockDeviceTest, RingOverflowHaltsOnlyThatFunctionUntilReset) {
    Function vf1 = Function::Open(Vf(1));
    Function vf2 = Function::Open(Vf(2));
    CommandRing ring2(vf2);
    {
        CommandRing ring1(vf1);
        // A driver bug: sq_tail far beyond what the ring can hold.
        auto* db = reinterpret_cast<spyre_doorbell_page*>(vf1.bar4() + vf1.Read32(SPYRE_REG_DB_OFFSET));
        std::atomic_ref<uint32_t>(db->sq_tail).store(ring1.sq_entries() * 3, std::memory_order_release);
        vf1.WriteRegion(SPYRE_REGION_BAR4, SPYRE_DB_SQ_TAIL,
                        std::span(reinterpret_cast<const uint8_t*>(&db->sq_tail), 4));  // trapped: wakes the ring lane
        for (int i = 0; i < 200 && !(vf1.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED); ++i) usleep(5000);
        EXPECT_TRUE(vf1.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED);
        EXPECT_EQ(vf1.Read32(SPYRE_REG_ERR_CODE), SPYRE_ERR_RING_OVERFLOW);
    }
    // The neighbour never noticed.
    ring2.Submit(std::array{NopCb(1)});
    Completion c;
    ring2.Wait({&c, 1}, 1);
    EXPECT_TRUE(c.ok());
    // Reset (done by a new ring) brings the halted function back.
    CommandRing again(vf1);
    EXPECT_FALSE(vf1.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED);
    again.Submit(std::array{NopCb(2)});
    again.Wait({&c, 1}, 1);
    EXPECT_TRUE(c.ok());
}

TEST_F(MockDeviceTest, CompletionHeadAheadOfTailHaltsTheRing) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    auto* db = reinterpret_cast<spyre_doorbell_page*>(fn.bar4() + fn.Read32(SPYRE_REG_DB_OFFSET));
    std::atomic_ref<uint32_t>(db->cq_head).store(100, std::memory_order_release);  // never posted
    ring.Submit(std::array{NopCb(1)});
    for (int i = 0; i < 200 && !(fn.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED); ++i) usleep(5000);
    EXPECT_TRUE(fn.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED);
    EXPECT_EQ(fn.Read32(SPYRE_REG_ERR_CODE), SPYRE_ERR_RING_OVERFLOW);
    Completion c;
    EXPECT_SPYRE_ERROR(ring.Wait({&c, 1}, 1, {.mode = WaitMode::Blocking}), DeviceError, "halted");
}

// A driver that does not reap holds the ring back: the device takes no CB
// whose completion the CQ has no room for, so it never overwrites a CQE the
// driver has not consumed. Once cq_head moves, the CBs left run.
TEST_F(MockDeviceTest, AFullCompletionQueueHoldsTheRingBackUntilReaped) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);  // enables the ring; the CBs below bypass it
    const uint32_t entries = fn.Read32(SPYRE_REG_CQ_ENTRIES);
    ASSERT_EQ(fn.Read32(SPYRE_REG_SQ_ENTRIES), entries);
    uint8_t* bar4 = fn.bar4();
    auto* db = reinterpret_cast<spyre_doorbell_page*>(bar4 + fn.Read32(SPYRE_REG_DB_OFFSET));
    auto* sq = reinterpret_cast<spyre_cb*>(bar4 + fn.Read32(SPYRE_REG_SQ_OFFSET));
    const auto* cq = reinterpret_cast<const spyre_cqe*>(bar4 + fn.Read32(SPYRE_REG_CQ_OFFSET));
    const auto word = [](uint32_t& w) { return std::atomic_ref<uint32_t>(w); };
    const auto publish = [&](uint32_t tail) {
        word(db->sq_tail).store(tail, std::memory_order_release);
        fn.WriteRegion(SPYRE_REGION_BAR4, fn.Read32(SPYRE_REG_DB_OFFSET) + SPYRE_DB_SQ_TAIL,
                       std::span(reinterpret_cast<const uint8_t*>(&db->sq_tail), 4));  // trapped: wakes the ring lane
    };
    const auto wait_cq_tail = [&](uint32_t n) {
        for (int i = 0; i < 5000 && word(db->cq_tail).load(std::memory_order_acquire) != n; ++i) usleep(1000);
        return word(db->cq_tail).load(std::memory_order_acquire);
    };
    // A whole lap, never reaped: the CQ is full.
    for (uint32_t i = 0; i < entries; ++i) sq[i] = NopCb(i);
    publish(entries);
    ASSERT_EQ(wait_cq_tail(entries), entries);
    ASSERT_EQ(word(db->sq_head).load(), entries);
    // Three more in the SQ slots the device gave back.
    for (uint32_t i = 0; i < 3; ++i) sq[i] = NopCb(entries + i);
    publish(entries + 3);
    usleep(20 * 1000);
    EXPECT_EQ(word(db->sq_head).load(), entries) << "a CB was taken with no room for its completion";
    EXPECT_EQ(word(db->cq_tail).load(), entries);
    for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(cq[i].user_data, i) << "an unreaped CQE was overwritten";
    EXPECT_FALSE(fn.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED);
    // The driver reaps the first lap: the three run, on the CQ's second lap.
    word(db->cq_head).store(entries, std::memory_order_release);
    ASSERT_EQ(wait_cq_tail(entries + 3), entries + 3);
    for (uint32_t i = 0; i < 3; ++i) {
        EXPECT_EQ(cq[i].user_data, entries + i);
        EXPECT_EQ(cq[i].sq_pos, entries + i);
        EXPECT_EQ(cq[i].status, SPYRE_ERR_NONE);
        EXPECT_EQ(cq[i].phase, 0u);  // second lap
    }
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_CB_DONE), uint64_t(entries) + 3);
}
