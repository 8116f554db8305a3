// SPDX-License-Identifier: Apache-2.0
// A queue lane (execution/queue_lane.hpp) over a counting queue kind: it
// polls after its work while polling pays off, stops polling once work has
// come seldom (each spell longer than its budget), and polls again once work
// comes within the budget. In the mockdev-model suite, so ThreadSanitizer
// runs it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "execution/queue_lane.hpp"
#include "spyre/uapi/spyre_regs.h"

using namespace spyre::mockdev;
using namespace std::chrono_literals;

namespace {

// Each submission is one unit of work; a turn takes all of them.
class CountingKind final : public QueueKind {
public:
    bool Submitted() const override { return submitted.load() != served.load(); }
    Turn Serve(std::unique_lock<std::mutex>&, CycleClock& clock, Clock::time_point& now) override {
        served.store(submitted.load());
        now = clock.Now();
        return Turn::Served;
    }
    void Clear() override {}
    bool PollYields() const override { return true; }  // the test's thread shares the CPUs

    std::atomic<uint32_t> submitted{0};
    std::atomic<uint32_t> served{0};
};

class QueueLaneTest : public ::testing::Test {
protected:
    static constexpr auto kBudget = std::chrono::milliseconds(100);

    // Submits one unit and waits (bounded) until the lane served it.
    void SubmitAndWait() {
        const uint32_t n = kind_.submitted.fetch_add(1) + 1;
        lane_.Doorbell();
        for (int i = 0; i < 100000 && kind_.served.load() != n; ++i) std::this_thread::sleep_for(100us);
        ASSERT_EQ(kind_.served.load(), n);
    }

    std::vector<uint64_t> registers_ = std::vector<uint64_t>(SPYRE_REG_FILE_SIZE / sizeof(uint64_t));
    RegisterFile regs_{reinterpret_cast<uint8_t*>(registers_.data())};
    uint32_t wake_ = 0;
    uint32_t sleeping_ = 0;
    CountingKind kind_;
    QueueLane lane_{regs_, kind_, LaneWords{&wake_, true, &sleeping_}, 0, kBudget};
};

TEST_F(QueueLaneTest, WorkThatComesSeldomStopsThePollAndWorkThatComesSoonStartsIt) {
    lane_.SetServing(true);
    lane_.Start("test-lane");
    EXPECT_EQ(lane_.poll_window(), kBudget);
    // Two units back to back: however long the lane took to start, the
    // second comes within the budget, and the count of misses starts at 0.
    SubmitAndWait();
    SubmitAndWait();
    // Each next unit comes after the lane's whole budget: its polls find
    // nothing, and after kMissesToClose of them it no longer polls.
    for (uint32_t i = 1; i <= PollWindow::kMissesToClose; ++i) {
        EXPECT_EQ(lane_.poll_window(), kBudget) << "after " << i - 1 << " long spells";
        std::this_thread::sleep_for(kBudget + 50ms);
        SubmitAndWait();
    }
    EXPECT_EQ(lane_.poll_window(), std::chrono::nanoseconds::zero());
    // It sleeps at once now; the next unit wakes it, well within the budget:
    // polling pays again.
    bool slept = false;
    for (int i = 0; i < 10000 && !slept; ++i) {
        slept = std::atomic_ref<uint32_t>(sleeping_).load() == 1;
        if (!slept) std::this_thread::sleep_for(1ms);
    }
    EXPECT_TRUE(slept);
    SubmitAndWait();
    EXPECT_EQ(lane_.poll_window(), kBudget);
    lane_.Stop();
}

}  // namespace
