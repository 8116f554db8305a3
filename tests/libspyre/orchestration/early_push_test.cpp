// SPDX-License-Identifier: Apache-2.0
// The task graph's early push (Executor::OrdersAfterProducers): a task whose
// producers are all on one such executor, pushed already (four at most),
// goes to it at once, naming them; the executor orders it after them (the
// device's task queues wait on the card). Completions may then come in any
// order, a consumer's before its producers' (as a batch parked in the
// inbox is applied), and a consumer the executor did not run because a
// producer failed (DEPENDENCY_FAILED) is a skip with that producer's root.
// A scripted executor stands in for the device: the test pops what was
// pushed and completes it by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "mock_fixture.hpp"
#include "orchestration/task_graph.hpp"
#include "spyre/uapi/spyre_errors.h"

namespace spyre::orchestration {
namespace {

class ScriptedExecutor final : public Executor {
public:
    const char* name() const noexcept override { return "scripted"; }
    bool CanRun(const KernelEntry& kernel) const noexcept override { return kernel.has_program; }
    void Start(ReadyQueue& queue, CompletionSink& sink) override {
        queue_ = &queue;
        sink_ = &sink;
    }
    void Stop() override {}
    bool OrdersAfterProducers() const noexcept override { return true; }

    // What was pushed since the last look, in order.
    std::vector<ReadyTask> Pushed() {
        std::vector<ReadyTask> v;
        queue_->TryPopBatch(v, SIZE_MAX);
        for (const ReadyTask& r : v) outstanding_.push_back(r.task_id);
        return v;
    }
    void Complete(int32_t id, uint32_t status) {
        Forget(id);
        sink_->OnTaskComplete(id, status);
    }
    // As DeviceWorker reports a reaped batch (parked, applied in any order).
    void CompleteAll(std::vector<CompletionSink::Done> done) {
        for (const CompletionSink::Done& d : done) Forget(d.task_id);
        sink_->OnTasksComplete(done);
    }
    // Completes everything pushed and not completed, and what that makes
    // ready in turn, so the graph can go: a test whose check failed
    // half-way ends instead of hanging in the graph's destructor.
    void CompleteTheRest() {
        for (Pushed(); !outstanding_.empty(); Pushed()) {
            const std::vector<int32_t> ids = std::move(outstanding_);
            outstanding_.clear();
            for (int32_t id : ids) sink_->OnTaskComplete(id, 0);
        }
    }

private:
    void Forget(int32_t id) {
        const auto it = std::find(outstanding_.begin(), outstanding_.end(), id);
        if (it != outstanding_.end()) outstanding_.erase(it);
    }
    std::vector<int32_t> outstanding_;  // pushed, seen by Pushed, not completed
    ReadyQueue* queue_ = nullptr;
    CompletionSink* sink_ = nullptr;
};

constexpr int32_t kDeviceKernel = 1;
constexpr int32_t kHostKernel = 2;
constexpr int32_t kExternalKernel = 3;

// Each test runs from task id 0 and from just before the ids wrap
// (TaskRing: pto.h's ids are int32_t), so the chains it pushes cross the
// wrap and name producers on both sides of it.
class EarlyPushTest : public ::testing::TestWithParam<int64_t> {
protected:
    void SetUp() override {
        memory_.resize(1 << 20);
        graph_.emplace(TaskGraphOptions{.task_ring_size = 64, .memory = memory_.data(), .memory_size = memory_.size(),
                                        .heap_offset = 1 << 19, .heap_size = 1 << 19, .host_threads = 1,
                                        .run_cheap_host_tasks_here = false, .device = "test",
                                        .first_task_seq = GetParam()});
        graph_->RegisterKernel(KernelEntry{.kernel_id = kDeviceKernel, .program_address = 64, .has_program = true});
        graph_->RegisterKernel(KernelEntry{
            .kernel_id = kHostKernel, .host_callable = [](void* const*, const uint64_t*, int32_t) { return 0u; }});
        graph_->RegisterKernel(KernelEntry{
            .kernel_id = kExternalKernel, .host_callable = [](void* const*, const uint64_t*, int32_t) { return 0u; }});
        graph_->SetExecutor(WORKER_VECTOR, executor_);
    }
    void TearDown() override { executor_->CompleteTheRest(); }
    uint8_t* At(uint64_t offset) { return memory_.data() + offset; }
    int32_t Device(std::vector<TaskParam> params) { return graph_->Submit(kDeviceKernel, WORKER_VECTOR, params); }
    static std::vector<int32_t> After(const ReadyTask& r) {
        return {r.task->after_ids, r.task->after_ids + r.task->after_count};
    }

    std::vector<uint8_t> memory_;
    std::shared_ptr<ScriptedExecutor> executor_ = std::make_shared<ScriptedExecutor>();
    std::optional<TaskGraph> graph_;
};

TaskParam InOut(uint8_t* p) { return {PARAM_INOUT, p, 64, {}}; }
TaskParam In(uint8_t* p) { return {PARAM_INPUT, p, 64, {}}; }
TaskParam Out(uint8_t* p) { return {PARAM_OUTPUT, p, 64, {}}; }

// A chain goes to the executor whole, each link naming the one before; the
// links completed last-first still complete in order, once their producers
// have.
TEST_P(EarlyPushTest, AChainIsPushedWholeAndCompletesInOrderWhateverOrderItsCompletionsCome) {
    const int32_t a = Device({InOut(At(0))});
    const int32_t b = Device({InOut(At(0))});
    const int32_t c = Device({InOut(At(0))});
    const std::vector<ReadyTask> pushed = executor_->Pushed();
    ASSERT_EQ(pushed.size(), 3u);
    EXPECT_EQ(pushed[0].task_id, a);
    EXPECT_EQ(After(pushed[0]), std::vector<int32_t>{});
    EXPECT_EQ(After(pushed[1]), std::vector<int32_t>{a});
    EXPECT_EQ(After(pushed[2]), std::vector<int32_t>{b});
    executor_->Complete(c, 0);
    executor_->Complete(b, 0);
    EXPECT_EQ(graph_->State(b), TaskState::Ready) << "completed before its producer";
    EXPECT_EQ(graph_->State(c), TaskState::Ready);
    executor_->Complete(a, 0);
    graph_->WaitAll();
    EXPECT_EQ(graph_->Failures().size(), 0u);
    EXPECT_EQ(graph_->Stats().completed, 3u);
}

// The same when the completions come as one batch, parked and applied in
// whatever order the inbox gives them.
TEST_P(EarlyPushTest, ABatchOfCompletionsOfAChainAppliesInAnyOrder) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back(Device({InOut(At(0))}));
    ASSERT_EQ(executor_->Pushed().size(), 40u);
    std::vector<CompletionSink::Done> done;
    for (int32_t id : ids) done.push_back({id, 0});
    executor_->CompleteAll(done);
    graph_->WaitAll();
    EXPECT_EQ(graph_->Stats().completed, 40u);
}

// A producer fails: the consumers the executor did not run (it reports
// DEPENDENCY_FAILED, here before the failure itself) are skipped with the
// producer as their root, and an independent task is not touched.
TEST_P(EarlyPushTest, ConsumersAProducersFailureKeptFromRunningAreSkippedWithItsRoot) {
    const int32_t a = Device({InOut(At(0))});
    const int32_t b = Device({InOut(At(0))});
    const int32_t c = Device({In(At(0)), Out(At(4096))});
    const int32_t d = Device({Out(At(8192))});
    ASSERT_EQ(executor_->Pushed().size(), 4u);
    executor_->Complete(c, SPYRE_ERR_DEPENDENCY_FAILED);
    executor_->Complete(b, SPYRE_ERR_DEPENDENCY_FAILED);
    executor_->Complete(d, 0);
    executor_->Complete(a, 77);
    try {
        graph_->WaitAll();
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceError) << e.what();
        EXPECT_EQ(e.context().device_code, 77u) << e.what();
        EXPECT_EQ(e.context().op_index, uint64_t(a)) << e.what();
        EXPECT_NE(e.message().find("2 dependent task(s) skipped"), std::string::npos) << e.what();
    }
}

// DEPENDENCY_FAILED for a task whose producers all succeeded is the
// executor's own failure, reported as one, never a silent skip.
TEST_P(EarlyPushTest, DependencyFailedWithoutAFailedProducerIsAFailure) {
    const int32_t a = Device({InOut(At(0))});
    const int32_t b = Device({InOut(At(0))});
    ASSERT_EQ(executor_->Pushed().size(), 2u);
    executor_->Complete(a, 0);
    executor_->Complete(b, SPYRE_ERR_DEPENDENCY_FAILED);
    EXPECT_SPYRE_ERROR(graph_->WaitAll(), DeviceError, "task " + std::to_string(b));
}

// A task that only follows its producers (WAW: it overwrites what they
// wrote; WAR: it overwrites what they read) goes early too, naming them.
TEST_P(EarlyPushTest, TasksThatOnlyFollowTheirProducersArePushedEarlyNamingThem) {
    const int32_t writer = Device({Out(At(0))});
    const int32_t reader = Device({In(At(4096)), Out(At(8192))});
    const int32_t overwrites_both = Device({Out(At(0)), Out(At(4096))});  // WAW on writer, WAR on reader
    const std::vector<ReadyTask> pushed = executor_->Pushed();
    ASSERT_EQ(pushed.size(), 3u) << "a task that only follows others waited on the host";
    EXPECT_EQ(pushed[2].task_id, overwrites_both);
    std::vector<int32_t> after = After(pushed[2]);
    std::sort(after.begin(), after.end());
    std::vector<int32_t> want{writer, reader};
    std::sort(want.begin(), want.end());
    EXPECT_EQ(after, want);
    for (const ReadyTask& r : pushed) executor_->Complete(r.task_id, 0);
    graph_->WaitAll();
    EXPECT_EQ(graph_->Stats().completed, 3u);
}

// Its producer fails: the executor holds it back (DEPENDENCY_FAILED, as
// the card does whatever the edge), but a task that only follows a failed
// one must run. It goes to the executor again, naming nobody, and its own
// run is its outcome; so does its reader, which the executor held back
// behind it, in turn. Only the producer's failure is reported.
TEST_P(EarlyPushTest, AFollowerHeldBackForAFailedProducerIsSentAgainAndRuns) {
    for (const bool failure_first : {true, false}) {
        SCOPED_TRACE(failure_first ? "the failure reported first" : "the holds reported first");
        const int32_t failing = Device({InOut(At(0))});
        const int32_t follower = Device({Out(At(0))});               // WAW on the failing task
        const int32_t reader = Device({In(At(0)), Out(At(4096))});  // RAW on the follower
        ASSERT_EQ(executor_->Pushed().size(), 3u);
        if (failure_first) executor_->Complete(failing, 77);
        executor_->CompleteAll({{reader, SPYRE_ERR_DEPENDENCY_FAILED}, {follower, SPYRE_ERR_DEPENDENCY_FAILED}});
        if (!failure_first) executor_->Complete(failing, 77);
        std::vector<ReadyTask> again = executor_->Pushed();
        ASSERT_EQ(again.size(), 1u) << "the follower was not sent again";
        EXPECT_EQ(again[0].task_id, follower);
        EXPECT_EQ(again[0].task->after_count, 0);
        EXPECT_EQ(graph_->State(reader), TaskState::Ready) << "the reader ended before the task it reads";
        executor_->Complete(follower, 0);
        again = executor_->Pushed();
        ASSERT_EQ(again.size(), 1u) << "the follower's reader was not sent again";
        EXPECT_EQ(again[0].task_id, reader);
        executor_->Complete(reader, 0);
        EXPECT_SPYRE_ERROR(graph_->WaitAll(), DeviceError, "1 task(s) failed, 0 dependent task(s) skipped");
        EXPECT_EQ(graph_->State(follower), TaskState::Consumed);
    }
}

// Sent again, the follower fails on its own: its reader is skipped for
// that failure (its root), and what only follows the follower runs.
TEST_P(EarlyPushTest, AFollowerSentAgainThatFailsPoisonsItsReadersOnly) {
    const int32_t failing = Device({InOut(At(0))});
    const int32_t follower = Device({Out(At(0))});
    const int32_t reader = Device({In(At(0)), Out(At(4096))});
    const int32_t overwriter = Device({Out(At(0))});  // WAR on the reader, WAW on the follower
    ASSERT_EQ(executor_->Pushed().size(), 4u);
    executor_->Complete(failing, 77);
    executor_->CompleteAll({{follower, SPYRE_ERR_DEPENDENCY_FAILED},
                            {reader, SPYRE_ERR_DEPENDENCY_FAILED},
                            {overwriter, SPYRE_ERR_DEPENDENCY_FAILED}});
    std::vector<ReadyTask> again = executor_->Pushed();
    ASSERT_EQ(again.size(), 1u);
    executor_->Complete(follower, 78);
    again = executor_->Pushed();
    ASSERT_EQ(again.size(), 1u) << "the overwriter was not sent again";
    EXPECT_EQ(again[0].task_id, overwriter);
    executor_->Complete(overwriter, 0);
    bool reader_skipped = false;
    for (const TaskFailureInfo& f : graph_->Failures())
        if (f.task_id == uint64_t(reader)) reader_skipped = f.skipped && f.device_code == 78u;
    EXPECT_TRUE(reader_skipped) << "the reader of the failed follower was not skipped for its failure";
    EXPECT_SPYRE_ERROR(graph_->WaitAll(), DeviceError, "2 task(s) failed, 1 dependent task(s) skipped");
    EXPECT_EQ(graph_->State(overwriter), TaskState::Consumed);
}

// Not pushed early: a producer that is not the executor's (an EXTERNAL
// task, a host task), one that is not pushed yet, or more than four.
TEST_P(EarlyPushTest, OnlyTasksWaitingForAFewPushedTasksOfTheSameExecutorGoEarly) {
    const int32_t ext = graph_->Submit(kExternalKernel, WORKER_EXTERNAL, std::vector<TaskParam>{Out(At(0))});
    const int32_t after_ext = Device({InOut(At(0))});
    const int32_t after_that = Device({InOut(At(0))});  // its producer is not pushed yet
    EXPECT_TRUE(executor_->Pushed().empty());
    graph_->Complete(ext, 0);
    std::vector<ReadyTask> pushed = executor_->Pushed();
    ASSERT_EQ(pushed.size(), 1u);
    EXPECT_EQ(pushed[0].task_id, after_ext);
    executor_->Complete(after_ext, 0);
    pushed = executor_->Pushed();
    ASSERT_EQ(pushed.size(), 1u);
    EXPECT_EQ(pushed[0].task_id, after_that);
    executor_->Complete(after_that, 0);
    // Five producers on the executor: too many to name.
    std::vector<TaskParam> five;
    for (int i = 0; i < 5; ++i) {
        Device({Out(At(4096 * (i + 1)))});
        five.push_back(In(At(4096 * (i + 1))));
    }
    five.push_back(Out(At(65536)));
    const std::vector<ReadyTask> producers = executor_->Pushed();
    ASSERT_EQ(producers.size(), 5u);
    const int32_t wide = Device(five);
    EXPECT_TRUE(executor_->Pushed().empty());
    // Four of them: named.
    std::vector<TaskParam> four(five.begin() + 1, five.end());
    four.back() = Out(At(131072));
    const int32_t four_wide = Device(four);
    pushed = executor_->Pushed();
    ASSERT_EQ(pushed.size(), 1u);
    EXPECT_EQ(pushed[0].task_id, four_wide);
    EXPECT_EQ(pushed[0].task->after_count, 4);
    for (const ReadyTask& r : producers) executor_->Complete(r.task_id, 0);
    pushed = executor_->Pushed();  // the wide one, now that its producers are done
    ASSERT_EQ(pushed.size(), 1u);
    EXPECT_EQ(pushed[0].task_id, wide);
    EXPECT_EQ(pushed[0].task->after_count, 0);
    executor_->Complete(wide, 0);
    executor_->Complete(four_wide, 0);
    graph_->WaitAll();
}

// Host tasks and scopes on both sides of the wrap: a scope that spans it
// counts the failure and the skip after it, a chain longer than the ring
// computes the right count, and ids stay non-negative; a reclaimed id is
// CONSUMED and one never handed out is refused.
TEST_P(EarlyPushTest, HostChainsAndScopesKeepTheirMeaningAcrossTheIdWrap) {
    constexpr int32_t kIncrement = 4;
    graph_->RegisterKernel(KernelEntry{.kernel_id = kIncrement,
                                       .host_callable = [](void* const* buffers, const uint64_t*, int32_t) {
                                           ++*static_cast<uint32_t*>(buffers[0]);
                                           return 0u;
                                       }});
    auto* counter = reinterpret_cast<uint32_t*>(At(0));
    *counter = 0;
    *reinterpret_cast<uint32_t*>(At(64)) = 0;
    graph_->ScopeBegin();
    const int32_t first = graph_->Submit(kIncrement, WORKER_CUBE, std::vector<TaskParam>{InOut(At(64))});
    const int32_t ext = graph_->Submit(kExternalKernel, WORKER_EXTERNAL, std::vector<TaskParam>{InOut(At(0))});
    const int32_t after = graph_->Submit(kIncrement, WORKER_CUBE, std::vector<TaskParam>{InOut(At(0))});
    graph_->Complete(ext, 9);
    EXPECT_SPYRE_ERROR(graph_->ScopeEnd(), DeviceError,
                       "scope of tasks [" + std::to_string(first) + ", " + std::to_string(after + 1) +
                           "): task " + std::to_string(ext) + " (kernel 3) failed with pto_task_fail code 9; "
                           "1 task(s) failed, 1 dependent task(s) skipped");
    EXPECT_SPYRE_ERROR(graph_->WaitAll(), DeviceError, "1 dependent task(s) skipped");
    EXPECT_EQ(*counter, 0u);  // the task after the failure was skipped
    EXPECT_EQ(*reinterpret_cast<uint32_t*>(At(64)), 1u);
    std::vector<int32_t> ids;
    graph_->ScopeBegin();
    for (int i = 0; i < 200; ++i)  // more than the ring: slots are reused inside the scope
        ids.push_back(graph_->Submit(kIncrement, WORKER_CUBE, std::vector<TaskParam>{InOut(At(0))}));
    graph_->ScopeEnd();
    graph_->WaitAll();
    EXPECT_EQ(*counter, 200u);
    for (size_t i = 0; i < ids.size(); ++i) ASSERT_GE(ids[i], 0) << i;
    EXPECT_EQ(graph_->State(first), TaskState::Consumed);
    EXPECT_EQ(graph_->State(ids.back()), TaskState::Consumed);
    EXPECT_SPYRE_ERROR(graph_->State(5000), InvalidArgument, "task 5000 was never submitted");
    EXPECT_SPYRE_ERROR(graph_->State(-1), InvalidArgument, "never submitted");
}

// The ring has 64 slots: its ids wrap at INT32_MAX / 64 * 64; start two before.
INSTANTIATE_TEST_SUITE_P(FromZeroAndAcrossTheIdWrap, EarlyPushTest,
                         ::testing::Values(int64_t(0), int64_t(INT32_MAX / 64 * 64) - 2),
                         [](const auto& info) { return info.param == 0 ? "FromZero" : "AcrossTheWrap"; });

// Task ids come round after TaskRing::period() submissions (here 8, on a
// ring of 4). Whatever the graph keeps by id must by then be gone, or it
// names the newer task: the hazard map's entry of a task no lookup met,
// and a failed task's kept writes (not reported by a WaitAll).
class IdsComeRoundTest : public ::testing::Test {
protected:
    static constexpr int32_t kPeriod = 8;
    void SetUp() override {
        memory_.resize(1 << 20);
        graph_.emplace(TaskGraphOptions{.task_ring_size = 4, .memory = memory_.data(), .memory_size = memory_.size(),
                                        .heap_offset = 1 << 19, .heap_size = 1 << 19, .host_threads = 1,
                                        .run_cheap_host_tasks_here = false, .device = "test",
                                        .task_id_period = kPeriod});
        graph_->RegisterKernel(KernelEntry{.kernel_id = kDeviceKernel, .program_address = 64, .has_program = true});
        graph_->SetExecutor(WORKER_VECTOR, executor_);
    }
    void TearDown() override { executor_->CompleteTheRest(); }
    uint8_t* At(uint64_t offset) { return memory_.data() + offset; }
    int32_t Device(std::vector<TaskParam> params) { return graph_->Submit(kDeviceKernel, WORKER_VECTOR, params); }
    // Completes what was pushed with `status`.
    void RunPushed(uint32_t status) {
        for (const ReadyTask& r : executor_->Pushed()) executor_->Complete(r.task_id, status);
    }
    // Runs a task writing x with `first_status`, then tasks touching
    // nothing until its id comes round, then the task given that id, which
    // writes y and ends with `second_status`; returns that id.
    int32_t TwoTasksOfOneId(uint8_t* x, uint32_t first_status, uint8_t* y, uint32_t second_status) {
        const int32_t id = Device({Out(x)});
        RunPushed(first_status);
        for (int i = 0; i < 2 * kPeriod; ++i) {
            const int32_t t = Device({});
            RunPushed(0);
            if ((t + 1) % kPeriod == id) break;
        }
        const int32_t again = Device({Out(y)});
        EXPECT_EQ(again, id) << "the ids did not come round";
        RunPushed(second_status);
        return id;
    }
    const TaskFailureInfo* FailureOf(int32_t task) {
        failures_ = graph_->Failures();
        for (const TaskFailureInfo& f : failures_)
            if (f.task_id == uint64_t(task) && f.skipped) return &f;
        return nullptr;
    }

    std::vector<uint8_t> memory_;
    std::shared_ptr<ScriptedExecutor> executor_ = std::make_shared<ScriptedExecutor>();
    std::optional<TaskGraph> graph_;
    std::vector<TaskFailureInfo> failures_;
};

TEST_F(IdsComeRoundTest, ARingOfFourRefusesAPeriodThatIsNotAMultipleOfItOrUnderTwiceIt) {
    EXPECT_SPYRE_ERROR(TaskRing(4, 0, 6), InvalidArgument, "not a multiple of the ring size 4");
    EXPECT_SPYRE_ERROR(TaskRing(4, 0, 4), InvalidArgument, "of at least twice it");
    EXPECT_EQ(TaskRing(4, 0, 8).period(), 8);
}

// A task wrote x and ended well; no lookup met its entry since. The task
// given its id a period later fails: a reader of x does not wait for it,
// nor is it skipped for its failure.
TEST_F(IdsComeRoundTest, AnOldWritersEntryDoesNotMakeAReaderDependOnTheTaskGivenItsIdLater) {
    const int32_t a = TwoTasksOfOneId(At(0), 0, At(8192), 77);
    const int32_t r = Device({In(At(0)), Out(At(16384))});
    const std::vector<ReadyTask> pushed = executor_->Pushed();
    ASSERT_EQ(pushed.size(), 1u) << "the reader of x waits for, or was skipped for, the task now named " << a;
    EXPECT_EQ(pushed[0].task_id, r);
    EXPECT_EQ(pushed[0].task->after_count, 0);
    executor_->Complete(r, 0);
    EXPECT_EQ(FailureOf(r), nullptr);
    EXPECT_SPYRE_ERROR(graph_->WaitAll(), DeviceError, "1 task(s) failed");
}

// A failed task's kept writes go after half a period without a WaitAll, so
// the failure of the task given its id later is kept in turn: its reader is
// skipped for that failure (its code), not the old one.
TEST_F(IdsComeRoundTest, TheFailureOfTheTaskGivenAFailedTasksIdLaterPoisonsItsOwnOutputs) {
    TwoTasksOfOneId(At(0), 77, At(8192), 78);
    const int32_t r = Device({In(At(8192)), Out(At(16384))});
    EXPECT_TRUE(executor_->Pushed().empty()) << "a reader of what the failed task left ran";
    const TaskFailureInfo* skip = FailureOf(r);
    ASSERT_NE(skip, nullptr) << "the reader of the failed task's output was not skipped";
    EXPECT_EQ(skip->device_code, 78u);
    EXPECT_SPYRE_ERROR(graph_->WaitAll(), DeviceError, "2 task(s) failed, 1 dependent task(s) skipped");
}

}  // namespace
}  // namespace spyre::orchestration
