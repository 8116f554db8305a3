// SPDX-License-Identifier: Apache-2.0
// Fan-in and fan-out with poisoning (dependency/fan_out.hpp) over a toy
// engine: chains and diamonds run in dependency order, a failed producer
// poisons everything downstream that reads what it wrote with its own
// record as the root (an edge that only orders passes nothing), the first
// failure a task meets wins, and a task submitted after a producer finished
// inherits that producer's root at once.
#include "dependency/fan_out.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace spyre::dependency {
namespace {

// A toy engine: tasks by index, each Done, Failed or Skipped when it
// finishes; `started` lists, in order, those that became ready (run or skipped).
struct Engine {
    enum class State { Pending, Ready, Done, Failed, Skipped };
    struct Task {
        Gate gate;
        std::vector<size_t> consumers;
        std::vector<size_t> follows;  // producers it only follows (WAW, WAR): it reads nothing they write
        State state = State::Pending;
    };
    std::vector<Task> tasks;
    std::vector<size_t> started;

    // A task reading what `producers` write, and ordered after `follows`
    // (submitted in order, as the engines do).
    size_t Submit(std::vector<size_t> producers, std::vector<size_t> follows = {}) {
        tasks.emplace_back();
        const size_t id = tasks.size() - 1;
        tasks[id].follows = follows;
        producers.insert(producers.end(), follows.begin(), follows.end());
        for (size_t p : producers)
            if (Meet(tasks[id].gate, tasks[p].gate, Finished(p), [&] { return Reads(tasks[id], p); }))
                tasks[p].consumers.push_back(id);
        if (tasks[id].gate.fanin_remaining == 0) MakeReady(tasks[id]);
        return id;
    }
    static bool Reads(const Task& consumer, size_t producer) {
        return std::find(consumer.follows.begin(), consumer.follows.end(), producer) == consumer.follows.end();
    }
    bool Finished(size_t id) const {
        const State s = tasks[id].state;
        return s == State::Done || s == State::Failed || s == State::Skipped;
    }
    void MakeReady(Task& t) {
        started.push_back(size_t(&t - tasks.data()));
        if (t.gate.root) {
            Finish(t, State::Skipped);  // skipped tasks release their consumers at once
            return;
        }
        t.state = State::Ready;
    }
    void Finish(Task& t, State state) {
        t.state = state;
        const size_t id = size_t(&t - tasks.data());
        Release(t.gate.root, t.consumers, [&](size_t c) -> Task& { return tasks[c]; },
                [&](Task& c) { MakeReady(c); }, [&](const Task& c) { return Reads(c, id); });
    }
    // Task `id` (ready) ran: well, or failing with `code`.
    void Run(size_t id, uint32_t code = 0) {
        Task& t = tasks.at(id);
        ASSERT_EQ(t.state, State::Ready) << "task " << id << " ran before it was ready";
        if (code == 0) {
            Finish(t, State::Done);
            return;
        }
        auto f = std::make_shared<TaskFailureInfo>();
        f->task = "t" + std::to_string(id);
        f->task_id = id;
        f->device_code = code;
        t.gate.root = std::move(f);
        Finish(t, State::Failed);
    }
    State StateOf(size_t id) const { return tasks.at(id).state; }
    const Root& RootOf(size_t id) const { return tasks.at(id).gate.root; }
    void Reserve(size_t n) { tasks.reserve(n); }  // references stay valid while tasks finish
};
using S = Engine::State;

// top -> {left, right} -> join
struct Diamond {
    size_t top, left, right, join;
    explicit Diamond(Engine& e)
        : top(e.Submit({})), left(e.Submit({top})), right(e.Submit({top})), join(e.Submit({left, right})) {}
};

TEST(FanOut, AChainRunsLinkByLink) {
    Engine e;
    e.Reserve(8);
    const size_t a = e.Submit({});
    const size_t b = e.Submit({a});
    const size_t c = e.Submit({b});
    EXPECT_EQ(e.started, (std::vector<size_t>{a}));
    EXPECT_EQ(e.tasks[c].gate.fanin_remaining, 1);
    e.Run(a);
    EXPECT_EQ(e.StateOf(b), S::Ready);
    EXPECT_EQ(e.StateOf(c), S::Pending);
    e.Run(b);
    e.Run(c);
    EXPECT_EQ(e.started, (std::vector<size_t>{a, b, c}));
    for (size_t t : {a, b, c}) EXPECT_EQ(e.RootOf(t), nullptr);
}

TEST(FanOut, ADiamondsJoinWaitsForBothSides) {
    Engine e;
    e.Reserve(8);
    const auto [top, left, right, join] = Diamond(e);
    EXPECT_EQ(e.tasks[join].gate.fanin_remaining, 2);
    e.Run(top);  // fans out to both sides
    EXPECT_EQ(e.StateOf(left), S::Ready);
    EXPECT_EQ(e.StateOf(right), S::Ready);
    e.Run(right);
    EXPECT_EQ(e.StateOf(join), S::Pending);  // fan-in: one side left
    e.Run(left);
    EXPECT_EQ(e.StateOf(join), S::Ready);
    e.Run(join);
    EXPECT_EQ(e.StateOf(join), S::Done);
}

TEST(FanOut, AFailedProducerPoisonsTheDiamondWithItsOwnRecord) {
    Engine e;
    e.Reserve(8);
    const auto [top, left, right, join] = Diamond(e);
    const size_t after = e.Submit({join});
    const size_t other = e.Submit({});  // independent: untouched
    e.Run(top, 42);
    EXPECT_EQ(e.StateOf(top), S::Failed);
    for (size_t t : {left, right, join, after}) {
        EXPECT_EQ(e.StateOf(t), S::Skipped) << "task " << t;
        ASSERT_NE(e.RootOf(t), nullptr) << "task " << t;
        EXPECT_EQ(e.RootOf(t), e.RootOf(top)) << "task " << t << " shares the failed task's record";
        EXPECT_EQ(e.RootOf(t)->task_id, top);
        EXPECT_EQ(e.RootOf(t)->device_code, 42u);
    }
    EXPECT_EQ(e.StateOf(other), S::Ready);
    EXPECT_EQ(e.RootOf(other), nullptr);
}

TEST(FanOut, OneFailedSideSkipsTheJoinOnceTheOtherSideFinishes) {
    Engine e;
    e.Reserve(8);
    const size_t left = e.Submit({});
    const size_t right = e.Submit({});
    const size_t join = e.Submit({left, right});
    e.Run(left, 7);
    EXPECT_EQ(e.StateOf(join), S::Pending);  // poisoned, but still waits for its other producer
    ASSERT_NE(e.RootOf(join), nullptr);
    e.Run(right);
    EXPECT_EQ(e.StateOf(join), S::Skipped);
    EXPECT_EQ(e.RootOf(join)->task_id, left);
}

TEST(FanOut, TheFirstFailureWins) {
    Engine e;
    e.Reserve(8);
    const size_t first = e.Submit({});
    const size_t second = e.Submit({});
    const size_t join = e.Submit({first, second});
    const size_t after = e.Submit({join});
    e.Run(second, 2);  // fails first in time: its failure is the root
    e.Run(first, 1);
    EXPECT_EQ(e.StateOf(join), S::Skipped);
    EXPECT_EQ(e.RootOf(join)->task_id, second);
    EXPECT_EQ(e.RootOf(join)->device_code, 2u);
    EXPECT_EQ(e.RootOf(after)->task_id, second);  // passed on unchanged
    EXPECT_EQ(e.RootOf(first)->task_id, first);   // a failed task's root is its own record
}

TEST(FanOut, ATaskMeetingAFinishedProducerInheritsItsRoot) {
    Engine e;
    e.Reserve(8);
    const size_t good = e.Submit({});
    const size_t bad = e.Submit({});
    e.Run(good);
    e.Run(bad, 9);
    const size_t reads_good = e.Submit({good});  // nothing to wait for, nothing inherited
    EXPECT_EQ(e.StateOf(reads_good), S::Ready);
    EXPECT_EQ(e.RootOf(reads_good), nullptr);
    const size_t reads_bad = e.Submit({good, bad});  // skipped at once
    EXPECT_EQ(e.StateOf(reads_bad), S::Skipped);
    EXPECT_EQ(e.RootOf(reads_bad)->task_id, bad);
    const size_t reads_skipped = e.Submit({reads_bad});  // a skipped producer passes the root on
    EXPECT_EQ(e.StateOf(reads_skipped), S::Skipped);
    EXPECT_EQ(e.RootOf(reads_skipped)->task_id, bad);
}

// A task that only follows a failed one (it overwrites what that one wrote,
// or writes what it read) runs, whether the failure came before or after
// its submission: its bytes do not depend on the failed task's. A reader of
// both is skipped. Before, the failure passed along every edge, so such a
// task was skipped when it was submitted while the failed task ran, and run
// when submitted after the failed task was gone (probe75).
TEST(FanOut, AnEdgeThatOnlyOrdersPassesNoFailure) {
    Engine e;
    e.Reserve(16);
    const size_t bad = e.Submit({});
    const size_t overwrite_pending = e.Submit({}, {bad});
    const size_t reads_both = e.Submit({bad, overwrite_pending});
    const size_t reads_overwrite = e.Submit({overwrite_pending});
    e.Run(bad, 5);
    EXPECT_EQ(e.StateOf(overwrite_pending), S::Ready);
    EXPECT_EQ(e.RootOf(overwrite_pending), nullptr);
    EXPECT_EQ(e.StateOf(reads_both), S::Pending);  // poisoned, waits for its other producer
    e.Run(overwrite_pending);
    EXPECT_EQ(e.StateOf(reads_both), S::Skipped);
    EXPECT_EQ(e.RootOf(reads_both)->task_id, bad);
    EXPECT_EQ(e.StateOf(reads_overwrite), S::Ready);
    // The same after the failure: the same outcome.
    const size_t overwrite_after = e.Submit({}, {bad});
    EXPECT_EQ(e.StateOf(overwrite_after), S::Ready);
    EXPECT_EQ(e.RootOf(overwrite_after), nullptr);
    // A skipped task passes its root along reads only, too.
    const size_t follows_skipped = e.Submit({}, {reads_both});
    EXPECT_EQ(e.StateOf(follows_skipped), S::Ready);
    EXPECT_EQ(e.StateOf(e.Submit({reads_both})), S::Skipped);
}

TEST(FanOut, InheritKeepsTheFirstRoot) {
    Root root;
    Inherit(root, nullptr);
    EXPECT_EQ(root, nullptr);
    auto one = std::make_shared<const TaskFailureInfo>(TaskFailureInfo{.task_id = 1});
    auto two = std::make_shared<const TaskFailureInfo>(TaskFailureInfo{.task_id = 2});
    Inherit(root, one);
    Inherit(root, two);
    EXPECT_EQ(root, one);
}

}  // namespace
}  // namespace spyre::dependency
