// SPDX-License-Identifier: Apache-2.0
// TurnPolicy without a device: the order in which streams get their turn
// under each SchedulerPolicy, the quantum, and aging under Priority.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "stream/turn_policy.hpp"

using namespace spyre;
using namespace spyre::detail;

namespace {

struct Streams {
    explicit Streams(std::vector<int> priorities) {
        for (size_t i = 0; i < priorities.size(); ++i) {
            owned.push_back(std::make_unique<StreamState>(int(i), priorities[i]));
            active.push_back(owned.back().get());
        }
    }
    std::vector<int> Indices(std::span<StreamState* const> order) const {
        std::vector<int> out;
        for (const StreamState* s : order) out.push_back(s->index);
        return out;
    }
    std::vector<std::unique_ptr<StreamState>> owned;
    std::vector<StreamState*> active;
};

void GiveWork(StreamState& s) { s.local.emplace_back(); }

}  // namespace

TEST(TurnPolicy, RoundRobinRotatesTheFirstTurn) {
    Streams st({0, 0, 0});
    TurnPolicy p(SchedulerPolicy::RoundRobin, 8, 4);
    EXPECT_EQ(st.Indices(p.Order(st.active)), (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(st.Indices(p.Order(st.active)), (std::vector<int>{1, 2, 0}));
    EXPECT_EQ(st.Indices(p.Order(st.active)), (std::vector<int>{2, 0, 1}));
    EXPECT_EQ(st.Indices(p.Order(st.active)), (std::vector<int>{0, 1, 2}));
    // Priorities do not matter to round-robin; every stream gets the quantum.
    for (StreamState* s : st.active) EXPECT_EQ(p.Quantum(s), 8u);
}

TEST(TurnPolicy, RoundRobinSurvivesStreamsLeaving) {
    Streams st({0, 0, 0, 0});
    TurnPolicy p(SchedulerPolicy::RoundRobin, 1, 1);
    p.Order(st.active);
    p.Order(st.active);
    p.Order(st.active);  // the cursor now points past the end of a shorter list
    std::vector<StreamState*> two = {st.active[0], st.active[1]};
    const auto order = st.Indices(p.Order(two));
    ASSERT_EQ(order.size(), 2u);
    EXPECT_NE(order[0], order[1]);
    EXPECT_TRUE(p.Order({}).empty());
}

TEST(TurnPolicy, PriorityOrdersByPriorityTiesInRotation) {
    Streams st({1, kStreamPriorityHighest, 0, 0});
    TurnPolicy p(SchedulerPolicy::Priority, 4, 4);
    // Highest first, lowest last; the two default-priority streams in
    // rotation order, so each goes first in some round.
    int two_first = 0, three_first = 0;
    for (int round = 0; round < 4; ++round) {
        const auto order = st.Indices(p.Order(st.active));
        ASSERT_EQ(order.size(), 4u);
        EXPECT_EQ(order[0], 1);
        EXPECT_EQ(order[3], 0);
        (order[1] == 2 ? two_first : three_first)++;
    }
    EXPECT_EQ(two_first, 3);  // rotations starting at 0, 1, 2 put 2 before 3
    EXPECT_EQ(three_first, 1);
}

TEST(TurnPolicy, PriorityAgesAPassedOverStreamUntilItLeads) {
    // A lowest-priority stream passed over every round gains one level per
    // `aging_turns` rounds: it draws level with a highest-priority one after
    // (lowest - highest) * aging_turns rounds (then ties go by rotation) and
    // overtakes it one level later at most. It never starves.
    const uint32_t aging = 4;
    Streams st({kStreamPriorityHighest, kStreamPriorityLowest});
    StreamState& high = *st.active[0];
    StreamState& low = *st.active[1];
    TurnPolicy p(SchedulerPolicy::Priority, 4, aging);
    int rounds = 0;
    while (p.Order(st.active).front() != &low) {
        TurnPolicy::EndTurn(high, true);
        TurnPolicy::EndTurn(low, false);
        ASSERT_LT(++rounds, 1000) << "the low-priority stream starves";
    }
    EXPECT_GE(rounds, int((kStreamPriorityLowest - kStreamPriorityHighest) * aging));
    EXPECT_LE(rounds, int((kStreamPriorityLowest - kStreamPriorityHighest + 1) * aging));
    EXPECT_LE(p.EffectivePriority(low), p.EffectivePriority(high));
    // Once it had its turn it is back at its own priority.
    TurnPolicy::EndTurn(low, true);
    EXPECT_EQ(p.EffectivePriority(low), kStreamPriorityLowest);
    EXPECT_EQ(p.Order(st.active).front(), &high);
}

TEST(TurnPolicy, AgingTurnsZeroActsAsOne) {
    Streams st({2});
    TurnPolicy p(SchedulerPolicy::Priority, 1, 0);
    TurnPolicy::EndTurn(*st.active[0], false);
    EXPECT_EQ(p.EffectivePriority(*st.active[0]), 1);
}

TEST(TurnPolicy, DrainOneFirstStaysOnAStreamUntilItIsEmpty) {
    Streams st({0, 0, 0});
    TurnPolicy p(SchedulerPolicy::DrainOneFirst, 8, 4);
    // No work anywhere: no stream is being drained, plain order.
    EXPECT_EQ(st.Indices(p.Order(st.active)), (std::vector<int>{0, 1, 2}));
    GiveWork(*st.active[1]);
    GiveWork(*st.active[2]);
    // The rest follow in rotation from the one after it.
    EXPECT_EQ(st.Indices(p.Order(st.active)), (std::vector<int>{1, 2, 0}));
    EXPECT_EQ(p.Quantum(st.active[1]), SIZE_MAX) << "the drained stream is not limited";
    EXPECT_EQ(p.Quantum(st.active[2]), 8u);
    // Stream 0 gets work meanwhile: stream 1 keeps its turn while it has any
    // (in flight counts too).
    GiveWork(*st.active[0]);
    st.active[1]->local.clear();
    st.active[1]->ring_inflight = 1;
    EXPECT_EQ(st.Indices(p.Order(st.active)), (std::vector<int>{1, 2, 0}));
    st.active[1]->ring_inflight = 0;
    // Drained: the next stream with work after it is next, then the rest
    // in rotation.
    EXPECT_EQ(st.Indices(p.Order(st.active)), (std::vector<int>{2, 0, 1}));
    // A stream that leaves is forgotten.
    p.Forget(st.active[2]);
    std::vector<StreamState*> rest = {st.active[0], st.active[1]};
    EXPECT_EQ(p.Order(rest).front(), st.active[0]);
}

// Two streams that run dry in turn (each submits a batch, synchronizes,
// submits again) do not pass the drain between them for good: a third
// stream with work becomes current at the next switch. Before, the first
// stream with work in registry order was taken, and with a budget one
// launch fills the third waited as long as the two kept submitting.
TEST(TurnPolicy, DrainOneFirstGivesEveryStreamWithWorkItsTurn) {
    Streams st({0, 0, 0});
    TurnPolicy p(SchedulerPolicy::DrainOneFirst, 8, 4);
    for (StreamState* s : st.active) GiveWork(*s);
    StreamState* current = p.Order(st.active).front();
    std::vector<int> currents{current->index};
    for (int i = 0; i < 4 && current->index != 2; ++i) {
        current->local.clear();  // it ran dry (it synchronizes)
        StreamState* next = p.Order(st.active).front();
        GiveWork(*current);  // and submits its next batch
        current = next;
        currents.push_back(current->index);
    }
    EXPECT_EQ(currents, (std::vector<int>{0, 1, 2}));
}
