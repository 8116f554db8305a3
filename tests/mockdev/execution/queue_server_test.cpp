// SPDX-License-Identifier: Apache-2.0
// A function's queue server (execution/queue_server.hpp) without a daemon:
// a card's PF, its server started and the function held (a function nobody
// holds runs nothing), driven through the trapped region accesses the FUSE
// files use. The CB ring and a task queue each answer
// their garbage with an error CQE while the other kind goes on, and a reset
// empties both. In the mockdev-model suite, so ThreadSanitizer runs it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "pci/card.hpp"
#include "pci/function.hpp"
#include "pci/shm_object.hpp"
#include "spyre/uapi/spyre_task.h"

using namespace spyre::mockdev;

namespace {

constexpr RingGeometry kRing{};
constexpr TaskGeometry kTasks{};

spyre_cb Nop(uint64_t user_data) {
    spyre_cb cb{};
    cb.opcode = SPYRE_OP_NOP;
    cb.slots = 1;
    cb.user_data = user_data;
    return cb;
}

class QueueServerTest : public ::testing::Test {
protected:
    void SetUp() override {
        StartCard(1);
        ASSERT_EQ(Read32(SPYRE_REGION_BAR0, SPYRE_REG_TQ_COUNT), 1u);  // one core: one task queue
        EnableRing();
    }
    // The test's card (again) with `cores` cores, its PF held.
    void StartCard(unsigned cores) {
        fn_ = nullptr;
        card_.reset();
        card_ = std::make_unique<Card>(CardParams{0, 64ull << 20, Prefix(),
                                                  std::chrono::microseconds(50), cores, 10000});
        card_->Start();
        fn_ = card_->FindFunction(0);
        ASSERT_TRUE(fn_);
        ASSERT_EQ(fn_->Open(kHolder), 0);
    }

    // The process the tests' function is held by (the device never looks it up).
    static constexpr ProcessId kHolder{1, 1};

    uint32_t Read32(unsigned region, uint64_t offset) {
        uint32_t v = 0;
        EXPECT_EQ(fn_->ReadRegion(region, offset, &v, sizeof v), ssize_t(sizeof v));
        return v;
    }
    void Write(uint64_t bar4_offset, const void* bytes, size_t len) {
        ASSERT_EQ(fn_->WriteRegion(SPYRE_REGION_BAR4, bar4_offset, bytes, len), ssize_t(len));
    }
    void EnableRing() {
        const uint32_t on = SPYRE_CONTROL_RING_ENABLE;
        ASSERT_EQ(fn_->WriteRegion(SPYRE_REGION_BAR0, SPYRE_REG_CONTROL, &on, sizeof on), 4);
    }
    // Writes `cbs` into an SQ from ring position `pos` on and publishes the
    // new tail at `tail_offset` (a trapped write: the doorbell).
    void Submit(uint64_t sq, uint32_t entries, uint32_t pos, const std::vector<spyre_cb>& cbs, uint64_t tail_offset) {
        for (size_t i = 0; i < cbs.size(); ++i)
            Write(sq + uint64_t((pos + i) & (entries - 1)) * sizeof(spyre_cb), &cbs[i], sizeof(spyre_cb));
        const uint32_t tail = pos + uint32_t(cbs.size());
        Write(tail_offset, &tail, sizeof tail);
    }
    // Waits (bounded) until the word at `tail_offset` reaches `n`.
    uint32_t WaitFor(uint64_t tail_offset, uint32_t n) {
        for (int i = 0; i < 10000 && Read32(SPYRE_REGION_BAR4, tail_offset) != n; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return Read32(SPYRE_REGION_BAR4, tail_offset);
    }
    spyre_cqe Cqe(uint64_t cq, uint32_t entries, uint32_t pos) {
        spyre_cqe c{};
        fn_->ReadRegion(SPYRE_REGION_BAR4, cq + uint64_t(pos & (entries - 1)) * sizeof c, &c, sizeof c);
        return c;
    }

    // The CB ring's and task queue 0's submit and wait.
    void SubmitRing(uint32_t pos, const std::vector<spyre_cb>& cbs) {
        Submit(kRing.sq_offset, kRing.sq_entries, pos, cbs, kRing.db_offset + SPYRE_DB_SQ_TAIL);
    }
    void SubmitTasks(uint32_t pos, const std::vector<spyre_cb>& cbs) {
        Submit(kTasks.offset, kTasks.sq_entries, pos, cbs, kTasks.db_offset + SPYRE_TDB_SQ_TAIL(0));
    }
    uint32_t WaitRing(uint32_t n) { return WaitFor(kRing.db_offset + SPYRE_DB_CQ_TAIL, n); }
    uint32_t WaitTasks(uint32_t n) { return WaitFor(kTasks.db_offset + SPYRE_TDB_CQ_TAIL(0), n); }
    spyre_cqe RingCqe(uint32_t pos) { return Cqe(kRing.cq_offset, kRing.cq_entries, pos); }
    // Task completions come in the order tasks finish: by user_data.
    std::map<uint64_t, spyre_cqe> TaskCqes(uint32_t from, uint32_t to) {
        std::map<uint64_t, spyre_cqe> out;
        for (uint32_t pos = from; pos < to; ++pos) {
            const spyre_cqe c = Cqe(kTasks.offset + kTasks.cq_offset, kTasks.cq_entries, pos);
            out[c.user_data] = c;
        }
        return out;
    }

    // From power-on state (a reset, a new holder): the ring enabled, a NOP
    // on it and one on task queue 0 complete, each at position 0.
    void ExpectBothServeFromPowerOn(uint64_t ring_nop, uint64_t task_nop) {
        EnableRing();
        SubmitRing(0, {Nop(ring_nop)});
        SubmitTasks(0, {Nop(task_nop)});
        ASSERT_EQ(WaitRing(1), 1u);
        ASSERT_EQ(WaitTasks(1), 1u);
        EXPECT_EQ(RingCqe(0).user_data, ring_nop);
        EXPECT_EQ(TaskCqes(0, 1).at(task_nop).status, SPYRE_ERR_NONE);
    }

    static std::string Prefix() { return "spyre-qs-test-" + std::to_string(::getpid()); }
    ShmDirectory shm_dir_{Prefix()};  // the objects' directory, before card_: it outlives the card
    std::unique_ptr<Card> card_;
    std::shared_ptr<Function> fn_;
};

TEST_F(QueueServerTest, GarbageOnEachKindGetsItsErrorAndTheOtherKindGoesOn) {
    spyre_cb unknown = Nop(1);
    unknown.opcode = 0x99;
    spyre_cb task_on_ring = Nop(2);
    task_on_ring.opcode = SPYRE_OP_TASK;
    SubmitRing(0, {unknown, task_on_ring, Nop(3)});
    SubmitTasks(0, {spyre_cb{}, Nop(11)});  // a zeroed slot: opcode 0 (user_data 0)
    ASSERT_EQ(WaitRing(3), 3u);
    ASSERT_EQ(WaitTasks(2), 2u);
    EXPECT_EQ(RingCqe(0).status, SPYRE_ERR_INVALID_OPCODE);
    EXPECT_EQ(RingCqe(0).user_data, 1u);
    EXPECT_EQ(RingCqe(1).status, SPYRE_ERR_WRONG_QUEUE);
    EXPECT_EQ(RingCqe(2).status, SPYRE_ERR_NONE);
    EXPECT_EQ(RingCqe(2).sq_pos, 2u);
    auto tasks = TaskCqes(0, 2);
    ASSERT_EQ(tasks.size(), 2u);
    EXPECT_EQ(tasks.at(0).status, SPYRE_ERR_INVALID_OPCODE);
    EXPECT_EQ(tasks.at(11).status, SPYRE_ERR_NONE);
    // The ring's first fault is latched; task faults are counted, not latched.
    EXPECT_EQ(Read32(SPYRE_REGION_BAR0, SPYRE_REG_ERR_CODE), SPYRE_ERR_INVALID_OPCODE);
    EXPECT_EQ(Read32(SPYRE_REGION_BAR0, SPYRE_REG_CNT_CB_ERRORS), 2u);
    EXPECT_EQ(Read32(SPYRE_REGION_BAR0, SPYRE_REG_CNT_TASK_ERRORS), 1u);

    // Both go on.
    SubmitRing(3, {Nop(4)});
    SubmitTasks(2, {Nop(12)});
    ASSERT_EQ(WaitRing(4), 4u);
    ASSERT_EQ(WaitTasks(3), 3u);
    EXPECT_EQ(RingCqe(3).status, SPYRE_ERR_NONE);
    EXPECT_EQ(TaskCqes(2, 3).at(12).status, SPYRE_ERR_NONE);
}

// Short tasks run on the task lane itself: a batch of them known to be
// short (NOPs here) wakes no worker, not one per task, nor the helper a
// batch gets when a task in it may run long (task_queues_test). On a host
// with few CPUs each wake-up cost more than an empty task's whole run, and
// a helper made the lane trade the queue's lock with it. The lane posts
// their completions in groups: one lock, one completion interrupt and one
// add per counter for the group, not per task (each locked instruction
// waits for the CQE stored before it). Every task is still completed once
// and counted, and each CQE carries its own task's end on the device
// clock. Posted one by one, a batch of 64 raised 64 interrupts (irq_seq
// counts them).
TEST_F(QueueServerTest, ABatchOfKnownShortTasksWakesNoWorkerAndPostsInGroups) {
#if defined(__SANITIZE_THREAD__)
    // "Short" is a measured run time (kShortTaskNs, execution/run_time_hints.hpp): under
    // ThreadSanitizer an empty task takes longer than that.
    GTEST_SKIP() << "ThreadSanitizer makes an empty task longer than a short one";
#endif
    // One core per group would make every batch a single worker's anyway.
    StartCard(8);  // one group of 8 cores
    SubmitTasks(0, {Nop(1)});  // the queue's recent tasks are short from here on
    ASSERT_EQ(WaitTasks(1), 1u);
    const uint64_t irq_seq = kTasks.db_offset + SPYRE_TDB_IRQ_SEQ;
    // The best of 5 batches: a lane preempted in the middle of a task (a
    // loaded host) makes its queue's tasks look long for a while, and that
    // batch goes to the workers, which post one by one. Handing every batch
    // out per task cost 8-9 wake-ups in each.
    constexpr uint32_t kBatch = 64, kRounds = 5;
    uint64_t fewest_wakes = UINT64_MAX;
    uint32_t fewest_irqs = UINT32_MAX;
    std::string seen;
    for (uint32_t round = 0; round < kRounds; ++round) {
        const uint64_t wakes = card_->compute().wakes_sent();
        const uint32_t irqs = Read32(SPYRE_REGION_BAR4, irq_seq);
        const uint32_t done = Read32(SPYRE_REGION_BAR0, SPYRE_REG_CNT_TASKS_DONE);
        std::vector<spyre_cb> batch;
        for (uint32_t i = 0; i < kBatch; ++i) batch.push_back(Nop(100 + round * kBatch + i));
        const uint32_t from = 1 + round * kBatch;
        SubmitTasks(from, batch);
        ASSERT_EQ(WaitTasks(from + kBatch), from + kBatch);
        const auto cqes = TaskCqes(from, from + kBatch);
        ASSERT_EQ(cqes.size(), size_t(kBatch)) << "a task completed twice, or one not at all";
        std::vector<uint64_t> ends;
        for (const auto& [id, c] : cqes) {
            EXPECT_EQ(c.status, SPYRE_ERR_NONE) << id;
            ends.push_back(c.timestamp_ns);
        }
        std::sort(ends.begin(), ends.end());
        EXPECT_LT(ends.front(), ends.back()) << "the CQEs carry the time they were posted, not their tasks' ends";
        EXPECT_EQ(Read32(SPYRE_REGION_BAR0, SPYRE_REG_CNT_TASKS_DONE) - done, kBatch);
        const uint64_t sent = card_->compute().wakes_sent() - wakes;
        fewest_wakes = std::min(fewest_wakes, sent);
        fewest_irqs = std::min(fewest_irqs, Read32(SPYRE_REGION_BAR4, irq_seq) - irqs);
        seen += " " + std::to_string(sent);
    }
    EXPECT_EQ(fewest_wakes, 0u) << "wake-ups per batch:" << seen;
    EXPECT_LT(fewest_irqs, kBatch) << "every short task's completion was posted on its own";
}

// A task queue whose sq_tail runs past its ring halts alone: the CB ring
// goes on, and a reset brings the queue back with both kinds empty.
TEST_F(QueueServerTest, ATaskQueueOverflowHaltsItAloneUntilReset) {
    const uint32_t bogus = kTasks.sq_entries + 9;
    Write(kTasks.db_offset + SPYRE_TDB_SQ_TAIL(0), &bogus, sizeof bogus);
    for (int i = 0; i < 10000 && Read32(SPYRE_REGION_BAR0, SPYRE_REG_TQ_HALTED) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(Read32(SPYRE_REGION_BAR0, SPYRE_REG_TQ_HALTED), 1u);
    EXPECT_EQ(Read32(SPYRE_REGION_BAR0, SPYRE_REG_ERR_CODE), SPYRE_ERR_RING_OVERFLOW);
    EXPECT_FALSE(Read32(SPYRE_REGION_BAR0, SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED);
    SubmitRing(0, {Nop(1)});
    ASSERT_EQ(WaitRing(1), 1u);
    EXPECT_EQ(RingCqe(0).status, SPYRE_ERR_NONE);

    ASSERT_EQ(fn_->Reset(), 0);
    EXPECT_EQ(Read32(SPYRE_REGION_BAR0, SPYRE_REG_TQ_HALTED), 0u);
    for (uint32_t off : {SPYRE_DB_SQ_TAIL, SPYRE_DB_SQ_HEAD, SPYRE_DB_CQ_TAIL})
        EXPECT_EQ(Read32(SPYRE_REGION_BAR4, kRing.db_offset + off), 0u) << off;
    for (uint32_t off : {SPYRE_TDB_SQ_TAIL(0), SPYRE_TDB_SQ_HEAD(0), SPYRE_TDB_CQ_TAIL(0)})
        EXPECT_EQ(Read32(SPYRE_REGION_BAR4, kTasks.db_offset + off), 0u) << off;
    EXPECT_EQ(RingCqe(0).user_data, 0u);  // the CQ was zeroed
    ExpectBothServeFromPowerOn(5, 6);      // a reset disables the ring: enabled again
}

// A function nobody holds runs nothing: its ring cannot be enabled and its
// task queues are not served, whatever is written to its rings and
// doorbells (the PF's work addresses the whole card, held VFs included).
// What was submitted meanwhile never runs: the next holder's open drops it.
TEST_F(QueueServerTest, AFunctionNobodyHoldsRunsNothing) {
    fn_->Close();
    const uint32_t on = SPYRE_CONTROL_RING_ENABLE;
    EXPECT_EQ(fn_->WriteRegion(SPYRE_REGION_BAR0, SPYRE_REG_CONTROL, &on, sizeof on), -EACCES);
    EXPECT_FALSE(Read32(SPYRE_REGION_BAR0, SPYRE_REG_STATUS) & SPYRE_STATUS_RING_ENABLED);
    SubmitRing(0, {Nop(1)});
    SubmitTasks(0, {Nop(2), Nop(3)});
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a served queue answers in microseconds
    EXPECT_EQ(Read32(SPYRE_REGION_BAR4, kRing.db_offset + SPYRE_DB_CQ_TAIL), 0u);
    EXPECT_EQ(Read32(SPYRE_REGION_BAR4, kTasks.db_offset + SPYRE_TDB_CQ_TAIL(0)), 0u);
    EXPECT_EQ(Read32(SPYRE_REGION_BAR4, kTasks.db_offset + SPYRE_TDB_SQ_HEAD(0)), 0u);  // not even taken
    EXPECT_EQ(Read32(SPYRE_REGION_BAR0, SPYRE_REG_CNT_TASKS_DONE), 0u);

    // Held again: fresh, empty queues that work.
    ASSERT_EQ(fn_->Open(kHolder), 0);
    EXPECT_EQ(Read32(SPYRE_REGION_BAR4, kTasks.db_offset + SPYRE_TDB_SQ_TAIL(0)), 0u);
    ExpectBothServeFromPowerOn(4, 5);
    EXPECT_EQ(Read32(SPYRE_REGION_BAR0, SPYRE_REG_CNT_TASKS_DONE), 1u);
}

}  // namespace

// The card's heartbeat (contract 3.3): every function's doorbell-page word
// moves at least every period, a VF's too, until the card shuts down.
TEST_F(QueueServerTest, TheHeartbeatMovesEveryPeriodUntilTheCardShutsDown) {
    ASSERT_EQ(card_->SetNumVfs(1), 0);
    std::shared_ptr<Function> vf = card_->FindFunction(1);
    ASSERT_TRUE(vf);
    auto beat = [&](Function& f) {
        uint32_t v = 0;
        EXPECT_EQ(f.ReadRegion(SPYRE_REGION_BAR4, kRing.db_offset + SPYRE_DB_HEARTBEAT, &v, sizeof v), ssize_t(sizeof v));
        return v;
    };
    // Bounded: 20 periods for each of three beats.
    for (Function* f : {fn_.get(), vf.get()}) {
        uint32_t last = beat(*f);
        for (int moves = 0; moves < 3; ++moves) {
            uint32_t now = last;
            for (int look = 0; look < 200 && now == last; ++look) {
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
                now = beat(*f);
            }
            ASSERT_NE(now, last) << f->address() << ": no beat in 20 periods";
            last = now;
        }
    }
    card_->Shutdown();  // joins the heartbeat thread (a hang here is the failure)
}
