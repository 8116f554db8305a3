// SPDX-License-Identifier: Apache-2.0
// Task queues (uapi/spyre_task.h) end to end: one uploaded kernel run by many
// tasks with their own argument tables, concurrently on several cores and
// completing out of order; every kind of bad task CB answered with its
// error code while the queue goes on; isolation between functions; the
// watchdog; fair sharing between functions; the CB ring at the same time;
// queues emptied by a reset and when the function changes hands.
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "execution_support.hpp"
#include "reference.hpp"
#include "spyre/common/device_clock.hpp"
#include "spyre/driver/task_queue.hpp"
#include "spyre/plan/program_image.hpp"
#include "spyre/uapi/spyre_regdesc.hpp"

using namespace spyre;
using namespace spyre::driver;
using namespace spyre::test;

namespace {

constexpr WaitOptions kBlocking{.mode = WaitMode::Blocking};
constexpr double kU32 = 0x1p-24;  // fp32 unit roundoff

// Two core groups of 8: two queues per function.
class TaskQueueTest : public ExecutionTest {
protected:
    MockOptions Options() const override {
        MockOptions o = ExecutionTest::Options();
        o.extra_args = {"--cores", "16"};
        return o;
    }
};

class TaskWatchdogTest : public TaskQueueTest {
protected:
    MockOptions Options() const override {
        MockOptions o = TaskQueueTest::Options();
        o.extra_args.insert(o.extra_args.end(), {"--watchdog-ms", "300"});
        return o;
    }
};

// The argument table of a task: the addresses as little-endian u64s.
uint64_t PutArgs(TestDevice& dev, std::span<const uint64_t> addrs) {
    return dev.Put({reinterpret_cast<const uint8_t*>(addrs.data()), addrs.size() * sizeof(uint64_t)});
}

// A task's completion (spyre_task.h): the core that ran it, and when it ran
// on the device clock (it ended at timestamp_ns, after run_ns).
uint16_t Core(const spyre_cqe& c) { return spyre_task_result_core(c.result); }
uint64_t End(const spyre_cqe& c) { return c.timestamp_ns; }
uint64_t Start(const spyre_cqe& c) { return c.timestamp_ns - spyre_task_result_run_ns(c.result); }

// Submits every task (reaping while the queue is full) and waits for all completions.
std::vector<spyre_cqe> RunAll(TaskQueue& q, std::span<const spyre_cb> tasks) {
    std::vector<spyre_cqe> done(tasks.size());
    size_t sent = 0, got = 0;
    while (got < tasks.size()) {
        sent += q.Submit(tasks.subspan(sent));
        got += q.Wait(std::span(done).subspan(got), 1, kBlocking);
    }
    return done;
}

spyre_cqe RunOne(TaskQueue& q, const spyre_cb& d) { return RunAll(q, std::span(&d, 1))[0]; }

// When (device clock) `dev`'s task lane took a batch after the `batches`
// it had taken before: polled, so late by up to a poll, never early.
uint64_t TakenAfter(TestDevice& dev, uint64_t batches) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (dev.fn().Read64(SPYRE_REG_CNT_TASK_DOORBELLS) == batches && std::chrono::steady_clock::now() < give_up)
        std::this_thread::yield();
    return DeviceClockNs();
}

uint64_t MonotonicNs() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// One elementwise-add task's buffers and expected result.
struct AddTask {
    std::vector<uint64_t> addrs;  // A, B, C
    uint64_t args = 0;
    std::vector<double> expect;
};

AddTask PlaceAdd(TestDevice& dev, const BuiltKernel& k, uint32_t seed) {
    const auto a = RandomValues(Numel(k.inputs[0].shape), DType::FP32, seed);
    const auto b = RandomValues(Numel(k.inputs[1].shape), DType::FP32, seed + 7777);
    AddTask t;
    t.addrs = dev.Place(k, {a, b});
    t.args = PutArgs(dev, t.addrs);
    for (size_t i = 0; i < a.size(); ++i) t.expect.push_back(RoundTo(DType::FP32, a[i] + b[i]));
    return t;
}

// A 16x16 add task whose output holds 0x5A bytes until it runs: a test sees
// whether a refused CB ran.
struct WatchedAdd {
    BuiltKernel kernel = KernelBuilder().Elementwise(ElementwiseOp::Add, {16, 16}, {16, 16}, DType::FP32);
    uint64_t program = 0;
    AddTask task;
    uint64_t out_bytes() const { return kernel.outputs[0].bytes; }
};

WatchedAdd PlaceWatchedAdd(TestDevice& dev, uint32_t seed) {
    WatchedAdd w;
    w.program = dev.Put(w.kernel.program);
    w.task = PlaceAdd(dev, w.kernel, seed);
    std::memset(dev.At(w.task.addrs[2], w.out_bytes()), 0x5A, w.out_bytes());
    return w;
}

bool OutputUntouched(TestDevice& dev, const WatchedAdd& w) {
    const uint8_t* out = dev.At(w.task.addrs[2], w.out_bytes());
    return std::all_of(out, out + w.out_bytes(), [](uint8_t b) { return b == 0x5A; });
}

// A matmul of zeros large enough to run for seconds on one core.
struct LongTask {
    uint64_t program = 0;
    uint64_t args = 0;
    uint32_t arg_count = 0;
};

LongTask PlaceLong(TestDevice& dev, int64_t n) {
    const BuiltKernel k = KernelBuilder().Matmul(n, n, n, DType::FP32);
    LongTask t;
    t.program = dev.Put(k.program);
    std::vector<uint64_t> addrs;
    for (const KernelTensor& x : k.inputs) addrs.push_back(dev.Alloc(x.bytes));
    for (const KernelTensor& x : k.outputs) addrs.push_back(dev.Alloc(x.bytes));
    t.args = PutArgs(dev, addrs);
    t.arg_count = uint32_t(addrs.size());
    return t;
}

}  // namespace

TEST_F(TaskQueueTest, TopologyIsPublishedInRegisters) {
    Function& fn = pf().fn();
    const TaskTopology topo = ReadTaskTopology(fn);
    ASSERT_EQ(topo.queues(), 2u);
    EXPECT_EQ(topo.group_cores[0], 8u);
    EXPECT_EQ(topo.group_cores[1], 8u);
    EXPECT_EQ(topo.cores(), 16u);
    EXPECT_TRUE(fn.Read32(SPYRE_REG_CAPS) & SPYRE_CAP_TASKS);
    EXPECT_EQ(fn.Read32(SPYRE_REG_TQ_DESC_SIZE), sizeof(spyre_cb));  // a task is a CB (3.0)
    EXPECT_EQ(fn.Read32(SPYRE_REG_TQ_CQE_SIZE), sizeof(spyre_cqe));
    std::optional<TaskQueue> q(std::in_place, fn, 1);
    EXPECT_EQ(q->cores(), 8u);
    // One holder per queue in a process: a second would share its ring.
    EXPECT_SPYRE_ERROR(TaskQueue(fn, 1), Busy, "task queue 1 is held by another TaskQueue of this process");
    EXPECT_EQ(q->capacity(), SPYRE_DEFAULT_TQ_SQ_ENTRIES);
    const std::string dump = fn.RegisterDump();
    for (const char* name : {"TQ_COUNT", "TQ_DB_OFFSET", "TQ1_CORES", "TQ_HALTED", "CNT_TASKS_DONE"})
        EXPECT_NE(dump.find(name), std::string::npos) << name;
    EXPECT_SPYRE_ERROR(TaskQueue(fn, 2), InvalidArgument, "task queue 2 does not exist");
    q.reset();
    EXPECT_NO_THROW(TaskQueue(fn, 1));
}

// One thread serving both core groups sleeps on the function's one task
// completion interrupt: a completion on either queue ends the wait.
TEST_F(TaskQueueTest, WaitAnyWakesOnEitherQueue) {
    TestDevice& dev = pf();
    const uint64_t program = dev.Put(ProgramImage{}.Encode());
    TaskQueue q0(dev.fn(), 0), q1(dev.fn(), 1);
    std::array<TaskQueue*, 2> both{&q0, &q1};
    EXPECT_SPYRE_ERROR(TaskQueue::WaitAny(both, kBlocking), InvalidArgument, "with no task in flight");
    EXPECT_SPYRE_ERROR(TaskQueue::WaitAny({}, kBlocking), InvalidArgument, "on no queue");
    for (TaskQueue* q : {&q1, &q0, &q1}) {
        const spyre_cb d = TaskCb(q->group() + 10, program, program, 0);
        ASSERT_EQ(q->Submit({&d, 1}), 1u);
        TaskQueue::WaitAny(both, kBlocking);
        spyre_cqe done{};
        size_t got = q0.Reap({&done, 1});
        got += q1.Reap({&done, 1});
        ASSERT_EQ(got, 1u);
        EXPECT_EQ(done.user_data, q->group() + 10);
        EXPECT_EQ(done.status, SPYRE_ERR_NONE);
    }
}

// A device that shows asleep but has not yet taken the tasks published with
// the driver's last wake is already being woken: it does not sleep while a
// queue holds tasks it has not taken, so the driver rings it once for all
// of them. It woke it again for each submission (wake_seq counts the
// wakes), a system call each while the device's thread waited for a CPU.
TEST_F(TaskQueueTest, ADeviceStillWakingIsWokenOnceForSeveralSubmissions) {
    TestDevice& dev = pf();
    const uint64_t program = dev.Put(ProgramImage{}.Encode());
    TaskQueue q(dev.fn(), 0);
    auto* page = reinterpret_cast<spyre_task_doorbell*>(dev.fn().bar4() + dev.fn().Read32(SPYRE_REG_TQ_DB_OFFSET));
    auto word = [](uint32_t& w) { return std::atomic_ref<uint32_t>(w).load(); };
    // Idle past its poll budget, the task lane sleeps; stopped there, it
    // takes nothing until it goes on.
    for (int look = 0; look < 2000 && word(page->device_sleeping) == 0; ++look)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(word(page->device_sleeping), 1u) << "the task lane never slept";
    const ResumeAtScopeEnd go_on(daemon());
    daemon().Signal(SIGSTOP);
    ASSERT_TRUE(WaitUntilStopped(daemon().pid())) << "the daemon did not stop";
    const uint32_t wakes = word(page->wake_seq);
    for (uint64_t i = 0; i < 4; ++i) {
        const spyre_cb d = TaskCb(20 + i, program, program, 0);
        ASSERT_EQ(q.Submit({&d, 1}), 1u);
    }
    EXPECT_EQ(word(page->wake_seq) - wakes, 1u);
    daemon().Signal(SIGCONT);
    std::array<spyre_cqe, 4> done{};
    size_t got = 0;
    for (int look = 0; look < 5000 && got < done.size(); ++look) {
        got += q.Reap(std::span(done).subspan(got));
        if (got < done.size()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(got, done.size()) << "the woken device did not run every task";
    for (const spyre_cqe& c : done) EXPECT_EQ(c.status, SPYRE_ERR_NONE) << c.user_data;
}

TEST_F(TaskQueueTest, OneKernelManyArgumentTablesOnSeveralCores) {
    TestDevice& dev = pf();
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {32, 64}, {32, 64}, DType::FP32);
    const std::vector<uint8_t> image = add.program;
    const uint64_t program = dev.Put(image);
    TaskQueue q0(dev.fn(), 0), q1(dev.fn(), 1);

    constexpr int kTasks = 400;
    std::vector<AddTask> tasks;
    std::vector<spyre_cb> d0, d1;
    for (int i = 0; i < kTasks; ++i) {
        tasks.push_back(PlaceAdd(dev, add, uint32_t(i)));
        (i % 2 ? d1 : d0).push_back(TaskCb(1000 + i, program, tasks.back().args, uint32_t(add.tensor_count())));
    }
    ASSERT_EQ(q0.Submit(d0), d0.size());
    ASSERT_EQ(q1.Submit(d1), d1.size());
    std::vector<spyre_cqe> done(kTasks);
    size_t got = q0.Wait(std::span(done).first(d0.size()), d0.size(), kBlocking);
    got += q1.Wait(std::span(done).subspan(got), d1.size(), kBlocking);
    ASSERT_EQ(got, size_t(kTasks));

    std::set<uint64_t> ids;
    std::map<uint16_t, int> per_core;
    for (const spyre_cqe& c : done) {
        EXPECT_EQ(c.status, SPYRE_ERR_NONE) << spyre_error_name(c.status);
        EXPECT_TRUE(ids.insert(c.user_data).second) << "task " << c.user_data << " completed twice";
        EXPECT_LE(Start(c), End(c));
        ++per_core[Core(c)];
    }
    EXPECT_EQ(ids.size(), size_t(kTasks));
    EXPECT_EQ(*ids.begin(), 1000u);
    EXPECT_EQ(*ids.rbegin(), 1000u + kTasks - 1);
    // Both groups ran tasks: cores 0-7 serve queue 0, cores 8-15 queue 1.
    for (const spyre_cqe& c : done) EXPECT_EQ(Core(c) / 8, (c.user_data - 1000) % 2) << "task on the wrong group";
    EXPECT_GE(per_core.size(), 2u);
    // Every result is the CPU's.
    for (int i = 0; i < kTasks; ++i)
        ASSERT_EQ(dev.ReadTensor(tasks[i].addrs[2], add.outputs[0]), tasks[i].expect) << "task " << i;
    // The program in memory was never written: each core worked on its own copy.
    EXPECT_EQ(std::memcmp(dev.At(program, image.size()), image.data(), image.size()), 0);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_CNT_TASKS_DONE), uint64_t(kTasks));
}

TEST_F(TaskQueueTest, TasksRunConcurrentlyAndCompleteOutOfOrder) {
    TestDevice& dev = pf();
    TaskQueue q(dev.fn(), 0);
    // A long task first, then short ones behind it in the same queue: the
    // short ones run on the group's other cores and complete first.
    const BuiltKernel mm = KernelBuilder().Matmul(96, 96, 96, DType::FP32);
    const uint64_t program = dev.Put(mm.program);
    std::vector<spyre_cb> shorts;
    std::vector<std::vector<uint64_t>> addrs;
    for (int i = 0; i < 32; ++i) {
        const auto a = RandomValues(96 * 96, DType::FP32, 10 + i), b = RandomValues(96 * 96, DType::FP32, 50 + i);
        addrs.push_back(dev.Place(mm, {a, b}));
        shorts.push_back(TaskCb(100 + i, program, PutArgs(dev, addrs.back()), 3));
    }
    // The long task must outlast a worker's wake-up, which on a loaded host
    // (CI runs two tests at once) can take tens of ms: a round whose long
    // task ended first is tried again with a longer one (3 rounds at most,
    // a bound, not a timing; 2048^3 is well inside the watchdog). Cores
    // that never overlap fail every round.
    std::vector<spyre_cqe> done;
    for (const int64_t n : {768, 1536, 2048}) {
        const LongTask slow = PlaceLong(dev, n);
        std::vector<spyre_cb> batch{TaskCb(1, slow.program, slow.args, slow.arg_count)};
        batch.insert(batch.end(), shorts.begin(), shorts.end());
        done = RunAll(q, batch);
        ASSERT_EQ(done.size(), batch.size());
        if (done.front().user_data != 1u) break;
    }
    std::set<uint64_t> ids;
    for (const spyre_cqe& c : done) {
        EXPECT_EQ(c.status, SPYRE_ERR_NONE) << c.user_data << ": " << spyre_error_name(c.status);
        ids.insert(c.user_data);
    }
    EXPECT_EQ(ids.size(), shorts.size() + 1);
    EXPECT_NE(done.front().user_data, 1u) << "the long task, submitted first, should not complete first";
    // Concurrency from the device's own timestamps: two tasks on different
    // cores whose [start, end] intervals overlap.
    bool overlap = false;
    for (size_t i = 0; i < done.size() && !overlap; ++i)
        for (size_t j = i + 1; j < done.size() && !overlap; ++j)
            overlap = Core(done[i]) != Core(done[j]) && Start(done[i]) < End(done[j]) &&
                      Start(done[j]) < End(done[i]);
    EXPECT_TRUE(overlap);
    // Results of the short tasks against the CPU.
    for (int i = 0; i < 32; ++i) {
        const auto a = RandomValues(96 * 96, DType::FP32, 10 + i), b = RandomValues(96 * 96, DType::FP32, 50 + i);
        const MatmulRef ref = RefMatmul(a, b, 96, 96, 96);
        ExpectClose(dev.ReadTensor(addrs[i][2], mm.outputs[0]), ref.c,
                    [&](size_t e) { return 96.0 * kU32 * ref.magnitude[e]; });
    }
}

TEST_F(TaskQueueTest, BadTaskCbsCompleteWithTheirErrorAndTheQueueGoesOn) {
    TestDevice& dev = pf();
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {16, 16}, {16, 16}, DType::FP32);
    const uint64_t program = dev.Put(add.program);
    const AddTask ok = PlaceAdd(dev, add, 3);
    const uint64_t mem = dev.mem_size();
    TaskQueue q(dev.fn(), 0);
    const spyre_cb good = TaskCb(1, program, ok.args, 3);

    std::vector<std::pair<spyre_cb, uint16_t>> cases;
    auto with = [&](auto change, uint16_t code) {
        spyre_cb d = good;
        change(d);
        d.user_data = 100 + cases.size();
        cases.emplace_back(d, code);
    };
    // LINK and ring streams mean nothing on a task queue.
    with([](spyre_cb& d) { d.flags = SPYRE_CB_F_LINK; }, SPYRE_ERR_RESERVED_NONZERO);
    with([](spyre_cb& d) { d.flags = SPYRE_CB_F_STREAM; }, SPYRE_ERR_RESERVED_NONZERO);
    with([](spyre_cb& d) { d.flags = 0x80; }, SPYRE_ERR_RESERVED_NONZERO);
    with([](spyre_cb& d) { d.stream = 2; }, SPYRE_ERR_RESERVED_NONZERO);
    with([](spyre_cb& d) { d.u.task.reserved = 1; }, SPYRE_ERR_RESERVED_NONZERO);
    with([](spyre_cb& d) { d.u.task.after[2] = 5; }, SPYRE_ERR_RESERVED_NONZERO);  // past after_count
    with([](spyre_cb& d) { d.u.task.after_count = SPYRE_TASK_MAX_AFTER + 1; }, SPYRE_ERR_BAD_DEPENDENCY);
    with([](spyre_cb& d) { d.slots = 0; }, SPYRE_ERR_BAD_SLOT_COUNT);
    with([](spyre_cb& d) { d.slots = 2; }, SPYRE_ERR_BAD_SLOT_COUNT);  // no inline payload on a task queue
    with([](spyre_cb& d) { d.opcode = 0x99; }, SPYRE_ERR_INVALID_OPCODE);
    with([&](spyre_cb& d) { d.u.task.program_addr = mem + 4096; }, SPYRE_ERR_ADDR_RANGE);
    with([&](spyre_cb& d) { d.u.task.program_addr = ~0ull - 7; }, SPYRE_ERR_ADDR_RANGE);
    with([](spyre_cb& d) { d.u.task.program_addr += 4; }, SPYRE_ERR_MISALIGNED);
    const uint64_t zeros = dev.Alloc(add.program.size());  // never written: not a program
    with([&](spyre_cb& d) { d.u.task.program_addr = zeros; }, SPYRE_ERR_PROGRAM_FORMAT);  // total_size 0
    with([&](spyre_cb& d) {
        d.u.task.program_addr = zeros;
        d.u.task.program_size = uint32_t(add.program.size());
    }, SPYRE_ERR_PROGRAM_MAGIC);
    with([](spyre_cb& d) { d.u.task.program_size = 10; }, SPYRE_ERR_PROGRAM_FORMAT);
    with([&](spyre_cb& d) { d.u.task.program_size = uint32_t(add.program.size() + 64); }, SPYRE_ERR_PROGRAM_FORMAT);
    with([](spyre_cb& d) { d.u.task.arg_count = 2; }, SPYRE_ERR_RELOCATION);
    with([](spyre_cb& d) { d.u.task.arg_count = 0; }, SPYRE_ERR_RELOCATION);
    with([](spyre_cb& d) { d.u.task.args_addr += 4; }, SPYRE_ERR_MISALIGNED);
    with([&](spyre_cb& d) { d.u.task.args_addr = mem - 8; }, SPYRE_ERR_ADDR_RANGE);
    // A table whose output address leaves the window, or wraps around 2^64.
    const std::vector<uint64_t> out_of_window{ok.addrs[0], ok.addrs[1], mem - 64};
    with([&](spyre_cb& d) { d.u.task.args_addr = PutArgs(dev, out_of_window); }, SPYRE_ERR_ADDR_RANGE);
    const std::vector<uint64_t> wrapping{~0ull & ~uint64_t(255), ok.addrs[1], ok.addrs[2]};
    with([&](spyre_cb& d) { d.u.task.args_addr = PutArgs(dev, wrapping); }, SPYRE_ERR_ADDR_RANGE);
    // All zeros (user_data 0): opcode 0 is never valid, so a zeroed slot is caught.
    cases.emplace_back(spyre_cb{}, SPYRE_ERR_INVALID_OPCODE);

    std::vector<spyre_cb> batch;
    for (const auto& [d, code] : cases) batch.push_back(d);
    batch.push_back(good);  // in the same batch, after all the garbage
    const std::vector<spyre_cqe> done = RunAll(q, batch);
    std::map<uint64_t, uint16_t> status;
    for (const spyre_cqe& c : done) status[c.user_data] = c.status;
    for (size_t i = 0; i + 1 < cases.size(); ++i)
        EXPECT_EQ(spyre_error_name(status.at(100 + i)), std::string(spyre_error_name(cases[i].second))) << "case " << i;
    EXPECT_EQ(status.at(0), SPYRE_ERR_INVALID_OPCODE);
    EXPECT_EQ(status.at(1), SPYRE_ERR_NONE);
    EXPECT_EQ(dev.ReadTensor(ok.addrs[2], add.outputs[0]), ok.expect);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_CNT_TASK_ERRORS), uint64_t(cases.size()));
    // The queue keeps working, and the CB ring never saw a fault.
    EXPECT_EQ(RunOne(q, good).status, SPYRE_ERR_NONE);
    EXPECT_EQ(dev.fn().Read32(SPYRE_REG_ERR_CODE), 0u);
}

TEST_F(TaskQueueTest, ATaskCannotReachAnotherFunctionsMemory) {
    TestDevice a(Vf(1)), b(Vf(2));
    const BuiltKernel copy = KernelBuilder().Copy({64, 16}, DType::FP32);  // 4 KiB in, 4 KiB out
    const uint64_t program = a.Put(copy.program);
    const uint64_t secret = b.Alloc(4096);
    std::memset(b.At(secret, 4096), 0x5B, 4096);
    const uint64_t mine = a.Alloc(4096), other = a.Alloc(4096);
    // Where B's secret would be if A's addresses reached the card memory.
    const uint64_t b_from_a = b.fn().Read64(SPYRE_REG_MEM_BASE) - a.fn().Read64(SPYRE_REG_MEM_BASE) + secret;
    TaskQueue qa(a.fn(), 0);

    const std::vector<uint64_t> read_b{b_from_a, mine}, write_b{mine, b_from_a}, own{mine, other};
    const std::vector<spyre_cb> batch{
        TaskCb(1, program, PutArgs(a, read_b), 2),
        TaskCb(2, program, PutArgs(a, write_b), 2),
        TaskCb(3, b_from_a & ~7ull, PutArgs(a, own), 2),  // B's memory as a program
        TaskCb(4, program, b_from_a & ~7ull, 2),           // B's memory as the argument table
    };
    for (const spyre_cqe& c : RunAll(qa, batch))
        EXPECT_EQ(c.status, SPYRE_ERR_ADDR_RANGE) << "task " << c.user_data << ": " << spyre_error_name(c.status);
    EXPECT_EQ(std::count(b.At(secret, 4096), b.At(secret, 4096) + 4096, uint8_t(0x5B)), 4096);
    EXPECT_EQ(b.fn().Read64(SPYRE_REG_CNT_TASK_ERRORS), 0u);
    // A's own copy works.
    std::memset(a.At(mine, 4096), 0x11, 4096);
    EXPECT_EQ(RunOne(qa, TaskCb(5, program, PutArgs(a, own), 2)).status, SPYRE_ERR_NONE);
    EXPECT_EQ(std::memcmp(a.At(mine, 4096), a.At(other, 4096), 4096), 0);
}

TEST_F(TaskWatchdogTest, AHungTaskIsCutByTheWatchdog) {
    TestDevice& dev = pf();
    TaskQueue q(dev.fn(), 0);
    const LongTask slow = PlaceLong(dev, 4096);  // about 137 GFLOP on one core: seconds
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {16, 16}, {16, 16}, DType::FP32);
    const AddTask ok = PlaceAdd(dev, add, 5);
    const std::vector<spyre_cb> batch{TaskCb(1, slow.program, slow.args, slow.arg_count),
                                             TaskCb(2, dev.Put(add.program), ok.args, 3)};
    std::map<uint64_t, uint16_t> status;
    for (const spyre_cqe& c : RunAll(q, batch)) status[c.user_data] = c.status;
    EXPECT_EQ(spyre_error_name(status.at(1)), std::string("WATCHDOG"));
    EXPECT_EQ(status.at(2), SPYRE_ERR_NONE);  // the other cores were not held up
    EXPECT_EQ(dev.ReadTensor(ok.addrs[2], add.outputs[0]), ok.expect);
}

TEST_F(TaskQueueTest, TwoFunctionsShareTheCoresFairly) {
    TestDevice a(Vf(1)), b(Vf(2));
    const BuiltKernel mm = KernelBuilder().Matmul(128, 128, 128, DType::FP32);
    TaskQueue qa(a.fn(), 0), qb(b.fn(), 0);
    auto flood = [&](TestDevice& dev, int n, uint64_t first_id) {
        const uint64_t program = dev.Put(mm.program);
        const uint64_t in_a = dev.Alloc(mm.inputs[0].bytes), in_b = dev.Alloc(mm.inputs[1].bytes);
        std::vector<spyre_cb> tasks;
        for (int i = 0; i < n; ++i) {
            const std::vector<uint64_t> addrs{in_a, in_b, dev.Alloc(mm.outputs[0].bytes)};  // own output each
            tasks.push_back(TaskCb(first_id + i, program, PutArgs(dev, addrs), 3));
        }
        return tasks;
    };
    const auto many = flood(a, 1000, 0), few = flood(b, 20, 5000);
    // B's tasks must arrive while most of A's flood still waits: a test
    // thread preempted between the two submissions (a loaded CI host) lets
    // A run ahead for as long. What counts is measured from when B's lane
    // took B's batch (on the device clock), and a round in which A's flood
    // had nearly run out by then is tried again (at most 5 rounds: a bound,
    // not a timing).
    for (int round = 0;; ++round) {
        ASSERT_EQ(qa.Submit(many), many.size());
        const uint64_t b_batches = b.fn().Read64(SPYRE_REG_CNT_TASK_DOORBELLS);
        ASSERT_EQ(qb.Submit(few), few.size());
        // From when B's lane took the batch: how soon a lane thread gets a
        // CPU is the host's scheduling (up to ~100 ms seen beside two
        // other 16-core cards on 2 CPUs), not the cores' fairness.
        const uint64_t b_taken = TakenAfter(b, b_batches);
        std::vector<spyre_cqe> da(many.size()), db(few.size());
        ASSERT_EQ(qb.Wait(db, db.size(), kBlocking), db.size());
        ASSERT_EQ(qa.Wait(da, da.size(), kBlocking), da.size());
        const auto a_pending =
            std::count_if(da.begin(), da.end(), [&](const auto& c) { return Start(c) >= b_taken; });
        if (a_pending < 200 && round < 4) continue;
        ASSERT_GE(a_pending, 200) << "in 5 rounds, A's flood had nearly run out before B's lane took B's 20 tasks";
        // Starts, not ends: a core stamps a task's start when it takes it
        // (under the cores' lock, in the order they take them), while an end
        // can be late by however long the host preempts that worker.
        uint64_t b_first = ~0ull, b_last_start = 0, a_last_start = 0;
        for (const auto& c : db) {
            EXPECT_EQ(c.status, SPYRE_ERR_NONE);
            b_first = std::min(b_first, Start(c));
            b_last_start = std::max(b_last_start, Start(c));
        }
        for (const auto& c : da) {
            EXPECT_EQ(c.status, SPYRE_ERR_NONE);
            a_last_start = std::max(a_last_start, Start(c));
        }
        // B's few tasks did not wait behind A's flood...
        EXPECT_LT(b_last_start, a_last_start);
        // ...and from B's first start to its last, B got at least a third of
        // the starts (the cores alternate between the functions: about half).
        const auto a_in = std::count_if(da.begin(), da.end(),
                                        [&](const auto& c) { return Start(c) >= b_first && Start(c) <= b_last_start; });
        const double share = double(db.size()) / double(db.size() + size_t(a_in));
        EXPECT_GE(share, 1.0 / 3) << a_in << " of A's tasks started while B's 20 did";
        // And most of what was left of A's flood when B came was still to
        // come when B's last task started: B was not served at the end.
        const auto a_after = std::count_if(da.begin(), da.end(), [&](const auto& c) { return Start(c) > b_last_start; });
        EXPECT_GE(a_after, a_pending / 2) << "of the " << a_pending << " of A's tasks that started after B's lane took B's";
        return;
    }
}

TEST_F(TaskQueueTest, CbRingAndTaskQueuesAtOnce) {
    TestDevice& dev = pf();
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {64, 64}, {64, 64}, DType::FP32);
    const uint64_t program = dev.Put(add.program);
    TaskQueue q(dev.fn(), 0);
    std::vector<AddTask> tasks;
    std::vector<spyre_cb> batch;
    for (int i = 0; i < 300; ++i) {
        tasks.push_back(PlaceAdd(dev, add, 100 + i));
        batch.push_back(TaskCb(i, program, tasks.back().args, 3));
    }
    ASSERT_EQ(q.Submit(batch), batch.size());
    // While the tasks run: LAUNCHes and NOPs through the CB ring.
    const AddTask launched = PlaceAdd(dev, add, 9999);
    std::vector<spyre_cb> cbs;
    const uint64_t bound = dev.Put(add.Bind(launched.addrs));
    for (int i = 0; i < 20; ++i) {
        cbs.push_back(LaunchCb(bound, 0));
        cbs.push_back(NopCb(0));
    }
    for (const Completion& c : dev.Run(cbs)) EXPECT_TRUE(c.ok()) << spyre_error_name(c.status);
    EXPECT_EQ(dev.ReadTensor(launched.addrs[2], add.outputs[0]), launched.expect);
    std::vector<spyre_cqe> done(batch.size());
    ASSERT_EQ(q.Wait(done, done.size(), kBlocking), done.size());
    for (const auto& c : done) EXPECT_EQ(c.status, SPYRE_ERR_NONE);
    for (size_t i = 0; i < tasks.size(); ++i)
        ASSERT_EQ(dev.ReadTensor(tasks[i].addrs[2], add.outputs[0]), tasks[i].expect) << i;
}

TEST_F(TaskQueueTest, AResetEmptiesTheQueuesAndAnOverflowHaltsOnlyItsQueue) {
    TestDevice& dev = pf();
    Function& fn = dev.fn();
    const uint32_t db = fn.Read32(SPYRE_REG_TQ_DB_OFFSET);
    {
        TaskQueue q(fn, 0);
        const LongTask slow = PlaceLong(dev, 2048);
        const std::vector<spyre_cb> batch(4, TaskCb(1, slow.program, slow.args, slow.arg_count));
        ASSERT_EQ(q.Submit(batch), 4u);
        // Held: the holder's tasks are its own ("reset the function" would
        // wreck them, and was what this said).
        EXPECT_SPYRE_ERROR(TaskQueue(fn, 0), Busy, "held by another TaskQueue of this process");
    }
    // Its holder gone with tasks not reaped: the queue is not idle.
    EXPECT_SPYRE_ERROR(TaskQueue(fn, 0), Busy, "not idle");
    dev.Reset();  // aborts the running tasks and empties every queue
    const auto word = [&](uint32_t off) { return *reinterpret_cast<volatile uint32_t*>(fn.bar4() + db + off); };
    EXPECT_EQ(word(SPYRE_TDB_SQ_TAIL(0)), 0u);
    EXPECT_EQ(word(SPYRE_TDB_CQ_TAIL(0)), 0u);
    TaskQueue q0(fn, 0);
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {16, 16}, {16, 16}, DType::FP32);
    const AddTask ok = PlaceAdd(dev, add, 1);
    const spyre_cb good = TaskCb(7, dev.Put(add.program), ok.args, 3);
    EXPECT_EQ(RunOne(q0, good).status, SPYRE_ERR_NONE);

    // A driver that claims more descriptors than the ring holds halts queue 1 only.
    const uint32_t bogus = SPYRE_DEFAULT_TQ_SQ_ENTRIES + 5;
    fn.WriteRegion(SPYRE_REGION_BAR4, db + SPYRE_TDB_SQ_TAIL(1),
                   {reinterpret_cast<const uint8_t*>(&bogus), sizeof bogus});
    for (int i = 0; i < 5000 && !(fn.Read32(SPYRE_REG_TQ_HALTED) & 2u); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(fn.Read32(SPYRE_REG_TQ_HALTED), 2u);
    EXPECT_EQ(fn.Read32(SPYRE_REG_ERR_CODE), SPYRE_ERR_RING_OVERFLOW);
    EXPECT_SPYRE_ERROR(TaskQueue(fn, 1), Busy, "not idle");
    EXPECT_EQ(RunOne(q0, good).status, SPYRE_ERR_NONE);  // queue 0 goes on
    dev.Reset();
    EXPECT_EQ(fn.Read32(SPYRE_REG_TQ_HALTED), 0u);
    TaskQueue q1(fn, 1);
    EXPECT_EQ(RunOne(q1, good).status, SPYRE_ERR_NONE);
}

TEST_F(TaskQueueTest, QueuesAreEmptyForTheNextOwner) {
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {16, 16}, {16, 16}, DType::FP32);
    uint64_t output = 0;
    {
        TestDevice first(Vf(1));
        TaskQueue q(first.fn(), 0);
        const LongTask slow = PlaceLong(first, 2048);
        const AddTask ok = PlaceAdd(first, add, 1);
        output = ok.addrs[2];
        const spyre_cb done_one = TaskCb(1, first.Put(add.program), ok.args, 3);
        EXPECT_EQ(RunOne(q, done_one).status, SPYRE_ERR_NONE);
        const std::vector<spyre_cb> batch(8, TaskCb(2, slow.program, slow.args, slow.arg_count));
        ASSERT_EQ(q.Submit(batch), 8u);
        // The owner goes away with tasks running and queued.
    }
    TestDevice next(Vf(1));
    TaskQueue q(next.fn(), 0);  // idle: nothing of the old owner's is in flight
    EXPECT_EQ(q.InFlight(), 0u);
    // The old owner's result is gone with its memory.
    EXPECT_EQ(std::count(next.At(output, 1024), next.At(output, 1024) + 1024, uint8_t(0)), 1024);
    const AddTask ok = PlaceAdd(next, add, 2);
    EXPECT_EQ(RunOne(q, TaskCb(3, next.Put(add.program), ok.args, 3)).status, SPYRE_ERR_NONE);
    EXPECT_EQ(next.ReadTensor(ok.addrs[2], add.outputs[0]), ok.expect);
}

TEST_F(TaskQueueTest, WaitingOnADeadDaemonIsDeviceLost) {
    TestDevice& dev = pf();
    TaskQueue q(dev.fn(), 0);
    const LongTask slow = PlaceLong(dev, 2048);
    ASSERT_EQ(q.Submit(std::array{TaskCb(1, slow.program, slow.args, slow.arg_count)}), 1u);
    daemon().Signal(SIGKILL);
    std::vector<spyre_cqe> out(1);
    EXPECT_SPYRE_ERROR(q.Wait(out, 1, kBlocking), DeviceLost, "");
}

// Contract 3.0: one submission format, each queue kind refusing the other's
// opcodes. A TASK on the CB ring completes with WRONG_QUEUE (latched like any
// CB fault) without running.
TEST_F(TaskQueueTest, TheRingRefusesATaskWithWrongQueue) {
    TestDevice& dev = pf();
    const WatchedAdd w = PlaceWatchedAdd(dev, 21);
    const std::vector<Completion> done = dev.Run(std::vector{TaskCb(77, w.program, w.task.args, 3), NopCb(78)});
    ASSERT_EQ(done.size(), 2u);
    EXPECT_STREQ(spyre_error_name(done[0].status), "WRONG_QUEUE");
    EXPECT_EQ(done[0].user_data, 77u);
    EXPECT_EQ(done[0].opcode, SPYRE_OP_TASK);
    EXPECT_TRUE(done[1].ok());  // the ring goes on
    EXPECT_EQ(dev.fn().Read32(SPYRE_REG_ERR_CODE), SPYRE_ERR_WRONG_QUEUE);
    EXPECT_EQ(dev.fn().Read32(SPYRE_REG_ERR_OPCODE), SPYRE_OP_TASK);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_ERR_USER_DATA), 77u);
    EXPECT_TRUE(OutputUntouched(dev, w)) << "the task ran on the ring";
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_CNT_TASKS_DONE), 0u);
}

// A task queue runs TASK and NOP; every other opcode completes with
// WRONG_QUEUE (echoing its opcode and position) without any effect, and the
// queue goes on with the next CB.
TEST_F(TaskQueueTest, ATaskQueueRefusesEveryOpcodeButTaskAndNop) {
    TestDevice& dev = pf();
    const WatchedAdd w = PlaceWatchedAdd(dev, 22);
    const uint64_t program = w.program;
    const std::vector<uint8_t>& image = w.kernel.program;
    const uint64_t sem = dev.Alloc(8), src = dev.Alloc(64), dst = dev.Alloc(64);
    std::memset(dev.At(src, 64), 0x33, 64);
    std::memset(dev.At(dst, 64), 0, 64);
    std::memset(dev.At(sem, 8), 0, 8);
    spyre_cb inline_copy = CopyCb(0, dst, 8, 13);
    inline_copy.opcode = SPYRE_OP_COPY_INLINE;  // one slot: refused for its opcode before its slot count
    const std::vector<spyre_cb> batch{
        LaunchCb(program, 0, 10), CorrectCb(program, w.task.args, 3, 11), CopyCb(src, dst, 64, 12), inline_copy,
        SemWriteCb(sem, 99, 14),  SemWaitCb(sem, 0, 0, 15),                NopCb(20),
        TaskCb(21, program, w.task.args, 3),
    };
    TaskQueue q(dev.fn(), 0);
    const std::vector<spyre_cqe> done = RunAll(q, batch);
    ASSERT_EQ(done.size(), batch.size());
    std::map<uint64_t, spyre_cqe> by_id;
    for (const spyre_cqe& c : done) by_id[c.user_data] = c;
    ASSERT_EQ(by_id.size(), batch.size());
    for (uint32_t i = 0; i < batch.size(); ++i) {
        const spyre_cqe& c = by_id.at(batch[i].user_data);
        SCOPED_TRACE(spyre::uapi::OpcodeName(batch[i].opcode));
        EXPECT_EQ(c.opcode, batch[i].opcode);
        EXPECT_EQ(c.sq_pos, i);  // a fresh queue: positions from 0
        const bool runs = batch[i].opcode == SPYRE_OP_TASK || batch[i].opcode == SPYRE_OP_NOP;
        EXPECT_STREQ(spyre_error_name(c.status), runs ? "NONE" : "WRONG_QUEUE");
    }
    // None of the refused CBs had an effect; the task ran.
    EXPECT_EQ(*reinterpret_cast<const uint64_t*>(dev.At(sem, 8)), 0u);
    EXPECT_EQ(std::count(dev.At(dst, 64), dev.At(dst, 64) + 64, uint8_t(0)), 64);
    EXPECT_EQ(std::memcmp(dev.At(program, image.size()), image.data(), image.size()), 0);
    EXPECT_EQ(dev.ReadTensor(w.task.addrs[2], w.kernel.outputs[0]), w.task.expect);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_CNT_TASK_ERRORS), 6u);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_CNT_TASKS_DONE), 2u);
    EXPECT_EQ(dev.fn().Read32(SPYRE_REG_ERR_CODE), 0u);  // task faults do not latch the ring's registers
}

// A task's CQE says which core of its group ran it and for how long, on the
// device clock (CLOCK_MONOTONIC): it started at timestamp_ns - run_ns, both
// inside the host's bracket around the submission and the reap.
TEST_F(TaskQueueTest, ATaskCompletionCarriesItsCoreAndRunTime) {
    TestDevice& dev = pf();
    Function& fn = dev.fn();
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {32, 32}, {32, 32}, DType::FP32);
    const uint64_t program = dev.Put(add.program);
    const TaskTopology topo = ReadTaskTopology(fn);
    ASSERT_EQ(topo.queues(), 2u);
    const uint64_t busy_before = fn.Read64(SPYRE_REG_CNT_TASK_BUSY_NS);
    uint64_t run_total = 0;
    uint32_t first_core = 0;
    for (uint32_t g = 0; g < topo.queues(); ++g) {
        TaskQueue q(fn, g);
        std::vector<AddTask> tasks;
        std::vector<spyre_cb> batch;
        for (uint32_t i = 0; i < 12; ++i) {
            tasks.push_back(PlaceAdd(dev, add, 300 + i));
            batch.push_back(TaskCb(g * 100 + i, program, tasks.back().args, 3));
        }
        const uint64_t before = MonotonicNs();
        const std::vector<spyre_cqe> done = RunAll(q, batch);
        const uint64_t after = MonotonicNs();
        std::set<uint32_t> positions;
        for (const spyre_cqe& c : done) {
            SCOPED_TRACE("task " + std::to_string(c.user_data));
            EXPECT_EQ(c.status, SPYRE_ERR_NONE);
            EXPECT_EQ(c.opcode, SPYRE_OP_TASK);
            positions.insert(c.sq_pos);
            EXPECT_EQ(c.sq_pos, c.user_data - g * 100);  // its own submission position
            EXPECT_GE(Core(c), first_core);
            EXPECT_LT(Core(c), first_core + topo.group_cores[g]);
            EXPECT_LE(before, Start(c));
            EXPECT_LE(Start(c), End(c));
            EXPECT_LE(End(c), after);
            run_total += spyre_task_result_run_ns(c.result);
        }
        EXPECT_EQ(positions.size(), batch.size());
        for (size_t i = 0; i < tasks.size(); ++i)
            EXPECT_EQ(dev.ReadTensor(tasks[i].addrs[2], add.outputs[0]), tasks[i].expect) << i;
        first_core += topo.group_cores[g];
    }
    // The device counts the same run times as core time.
    EXPECT_EQ(fn.Read64(SPYRE_REG_CNT_TASK_BUSY_NS) - busy_before, run_total);
}

// Every field is checked before a task runs: a reserved word set, and the
// task's program never touches its output; cleared, the same CB runs.
TEST_F(TaskQueueTest, AReservedWordStopsATaskBeforeItRuns) {
    TestDevice& dev = pf();
    const WatchedAdd w = PlaceWatchedAdd(dev, 23);
    TaskQueue q(dev.fn(), 0);
    for (int word = 0; word < 3; ++word) {
        spyre_cb cb = TaskCb(40 + word, w.program, w.task.args, 3);
        if (word == 0) cb.u.task.reserved = 1u << 20;
        else cb.u.task.after[word] = 1u << (10 * word);  // past after_count (0)
        const spyre_cqe c = RunOne(q, cb);
        EXPECT_STREQ(spyre_error_name(c.status), "RESERVED_NONZERO") << "reserved[" << word << "]";
        EXPECT_EQ(c.user_data, uint64_t(40 + word));
    }
    EXPECT_TRUE(OutputUntouched(dev, w)) << "a refused task ran";
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_CNT_TASKS_DONE), 0u);
    EXPECT_EQ(RunOne(q, TaskCb(50, w.program, w.task.args, 3)).status, SPYRE_ERR_NONE);
    EXPECT_EQ(dev.ReadTensor(w.task.addrs[2], w.kernel.outputs[0]), w.task.expect);
}

// The task CQ's phase bit works as the CB ring's: 1 on the first lap, 0 on
// the second. The driver reads completions by it, so more tasks than the CQ
// holds all complete once, each record carrying its lap's phase.
TEST_F(TaskQueueTest, TheCompletionPhaseFlipsOnTheSecondLap) {
    TestDevice& dev = pf();
    Function& fn = dev.fn();
    const uint32_t entries = fn.Read32(SPYRE_REG_TQ_CQ_ENTRIES);
    const uint64_t program = dev.Put(ProgramImage{}.Encode());  // an empty program, no arguments
    std::vector<spyre_cb> tasks;
    const uint32_t total = entries + entries / 2;
    for (uint32_t i = 0; i < total; ++i) tasks.push_back(i % 5 ? TaskCb(i, program, program, 0) : NopCb(i));
    TaskQueue q(fn, 0);
    const std::vector<spyre_cqe> done = RunAll(q, tasks);  // reaped in CQ order
    ASSERT_EQ(done.size(), size_t(total));
    std::set<uint64_t> ids;
    for (uint32_t i = 0; i < total; ++i) {
        EXPECT_EQ(done[i].status, SPYRE_ERR_NONE) << i;
        EXPECT_EQ(done[i].phase, i < entries ? 1u : 0u) << "completion " << i;
        ids.insert(done[i].user_data);
    }
    EXPECT_EQ(ids.size(), size_t(total));
    // The ring memory itself: the slots of the second lap show phase 0, the rest still 1.
    const uint8_t* cq = fn.bar4() + fn.Read32(SPYRE_REG_TQ_OFFSET) + fn.Read32(SPYRE_REG_TQ_CQ_OFFSET);
    for (uint32_t slot = 0; slot < entries; ++slot)
        ASSERT_EQ(cq[slot * sizeof(spyre_cqe) + SPYRE_CQE_PHASE_OFFSET], slot < total - entries ? 0u : 1u) << slot;
}

// One server serves the function's CB ring and its task queues (each kind
// on its own doorbell): a fault on one kind is answered on that kind alone,
// and the other kind goes on.

// Garbage on the ring (an unknown opcode, a slot count of 0) completes with
// its error and latches the error registers; a task queue used at the same
// time runs its tasks as if nothing happened.
TEST_F(TaskQueueTest, GarbageOnTheRingLeavesTheTaskQueuesWorking) {
    TestDevice& dev = pf();
    const WatchedAdd w = PlaceWatchedAdd(dev, 31);
    TaskQueue q(dev.fn(), 0);
    ASSERT_EQ(q.Submit(std::array{TaskCb(5, w.program, w.task.args, 3)}), 1u);
    spyre_cb unknown = NopCb(1);
    unknown.opcode = 0x99;
    spyre_cb no_slots = NopCb(2);
    no_slots.slots = 0;
    const std::vector<Completion> ring = dev.Run(std::vector{unknown, no_slots, NopCb(3)});
    ASSERT_EQ(ring.size(), 3u);
    EXPECT_STREQ(spyre_error_name(ring[0].status), "INVALID_OPCODE");
    EXPECT_STREQ(spyre_error_name(ring[1].status), "BAD_SLOT_COUNT");
    EXPECT_TRUE(ring[2].ok()) << spyre_error_name(ring[2].status);
    EXPECT_EQ(dev.fn().Read32(SPYRE_REG_ERR_CODE), SPYRE_ERR_INVALID_OPCODE);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_ERR_USER_DATA), 1u);
    std::vector<spyre_cqe> done(1);
    ASSERT_EQ(q.Wait(done, 1, kBlocking), 1u);
    EXPECT_EQ(done[0].user_data, 5u);
    EXPECT_STREQ(spyre_error_name(done[0].status), "NONE");
    EXPECT_EQ(dev.ReadTensor(w.task.addrs[2], w.kernel.outputs[0]), w.task.expect);
    EXPECT_STREQ(spyre_error_name(RunOne(q, TaskCb(6, w.program, w.task.args, 3)).status), "NONE");
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_CNT_CB_ERRORS), 2u);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_CNT_TASK_ERRORS), 0u);
}

// Garbage on a task queue (a zeroed slot, a ring-only opcode) completes with
// its error on that queue; the ring, used between them, never sees a fault.
TEST_F(TaskQueueTest, GarbageOnATaskQueueLeavesTheRingWorking) {
    TestDevice& dev = pf();
    const uint64_t sem = dev.Alloc(8);
    std::memset(dev.At(sem, 8), 0, 8);
    TaskQueue q(dev.fn(), 1);
    const std::vector<spyre_cqe> bad = RunAll(q, std::vector{spyre_cb{}, SemWriteCb(sem, 7, 41)});
    std::map<uint64_t, uint16_t> status;
    for (const spyre_cqe& c : bad) status[c.user_data] = c.status;
    EXPECT_STREQ(spyre_error_name(status.at(0)), "INVALID_OPCODE");
    EXPECT_STREQ(spyre_error_name(status.at(41)), "WRONG_QUEUE");
    const Completion c = dev.Run(SemWriteCb(sem, 9, 42));
    EXPECT_TRUE(c.ok()) << spyre_error_name(c.status);
    EXPECT_EQ(*reinterpret_cast<const uint64_t*>(dev.At(sem, 8)), 9u);
    EXPECT_EQ(dev.fn().Read32(SPYRE_REG_ERR_CODE), 0u);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_CNT_CB_ERRORS), 0u);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_CNT_TASK_ERRORS), 2u);
    EXPECT_STREQ(spyre_error_name(RunOne(q, NopCb(43)).status), "NONE");
}

// A driver that publishes an impossible ring sq_tail halts the ring only:
// tasks still run, and a reset brings the ring back.
TEST_F(TaskQueueTest, ARingOverflowHaltsTheRingAloneAndTasksGoOn) {
    TestDevice& dev = pf();
    Function& fn = dev.fn();
    const WatchedAdd w = PlaceWatchedAdd(dev, 32);
    const uint32_t bogus = fn.Read32(SPYRE_REG_SQ_ENTRIES) + 5;
    fn.WriteRegion(SPYRE_REGION_BAR4, fn.Read32(SPYRE_REG_DB_OFFSET) + SPYRE_DB_SQ_TAIL,
                   {reinterpret_cast<const uint8_t*>(&bogus), sizeof bogus});
    for (int i = 0; i < 5000 && !(fn.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_TRUE(fn.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED);
    EXPECT_EQ(fn.Read32(SPYRE_REG_ERR_CODE), SPYRE_ERR_RING_OVERFLOW);
    EXPECT_EQ(fn.Read32(SPYRE_REG_TQ_HALTED), 0u);
    {
        TaskQueue q(fn, 0);
        EXPECT_STREQ(spyre_error_name(RunOne(q, TaskCb(7, w.program, w.task.args, 3)).status), "NONE");
        EXPECT_EQ(dev.ReadTensor(w.task.addrs[2], w.kernel.outputs[0]), w.task.expect);
    }
    dev.Reset();
    EXPECT_FALSE(fn.Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_HALTED);
    EXPECT_TRUE(dev.Run(NopCb(8)).ok());
}

// The ring runs its CBs in order, one at a time: a SEM_WAIT holds it. The
// task queues are served beside it, so tasks submitted meanwhile run and
// complete while the ring waits.
TEST_F(TaskQueueTest, ARingWaitingOnASemaphoreDoesNotHoldUpTheTasks) {
    TestDevice& dev = pf();
    const WatchedAdd w = PlaceWatchedAdd(dev, 33);
    const uint64_t sem = dev.Alloc(8);
    std::memset(dev.At(sem, 8), 0, 8);
    dev.ring().Submit(std::vector{SemWaitCb(sem, 1, 0, 51), NopCb(52)});
    TaskQueue q(dev.fn(), 0);
    const spyre_cqe task = RunOne(q, TaskCb(53, w.program, w.task.args, 3));
    EXPECT_STREQ(spyre_error_name(task.status), "NONE");
    EXPECT_EQ(dev.ReadTensor(w.task.addrs[2], w.kernel.outputs[0]), w.task.expect);
    EXPECT_FALSE(dev.ring().CompletionsReady()) << "the SEM_WAIT completed before its semaphore was written";
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(dev.At(sem, 8))).store(1, std::memory_order_release);
    std::vector<Completion> ring(2);
    ASSERT_EQ(dev.ring().Wait(ring, 2, kBlocking), 2u);
    EXPECT_EQ(ring[0].user_data, 51u);
    EXPECT_TRUE(ring[0].ok()) << spyre_error_name(ring[0].status);
    EXPECT_TRUE(ring[1].ok()) << spyre_error_name(ring[1].status);
}

// Contract 3.1: a task names earlier tasks of its queue (after) and starts
// only once they have ended. A chain of adds, each reading the one before's
// output, submitted in one batch to a group of 8 cores: without the waits
// they would run at once and read outputs not yet written.
TEST_F(TaskQueueTest, ATaskWaitsForTheTasksItNamesAndReadsWhatTheyWrote) {
    TestDevice& dev = pf();
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {64, 64}, {64, 64}, DType::FP32);
    const uint64_t program = dev.Put(add.program);
    const size_t n = 64 * 64;
    const uint64_t bytes = n * 4;
    // Integer-valued fp32: every partial sum is exact.
    std::vector<float> step(n), start(n);
    for (size_t i = 0; i < n; ++i) {
        step[i] = float(int(i % 7) - 3);
        start[i] = float(int(i % 11) - 5);
    }
    const uint64_t b = dev.Alloc(bytes), first = dev.Alloc(bytes);
    std::memcpy(dev.At(b, bytes), step.data(), bytes);
    std::memcpy(dev.At(first, bytes), start.data(), bytes);
    constexpr int kLinks = 48;
    std::vector<uint64_t> outs;
    for (int i = 0; i < kLinks; ++i) {
        outs.push_back(dev.Alloc(bytes));
        std::memset(dev.At(outs.back(), bytes), 0x7F, bytes);  // NaN-like garbage until written
    }
    TaskQueue q(dev.fn(), 0);
    // A slow head: the chain's first add waits for it (it writes nothing the
    // chain reads, so only the wait orders them).
    const LongTask slow = PlaceLong(dev, 512);
    const uint32_t head = q.NextPosition();
    std::vector<spyre_cb> batch{TaskCb(1, slow.program, slow.args, slow.arg_count)};
    for (int i = 0; i < kLinks; ++i) {
        const uint64_t in = i == 0 ? first : outs[size_t(i - 1)];
        const std::vector<uint64_t> table{in, b, outs[size_t(i)]};
        const uint32_t previous = head + uint32_t(i);  // the slow task, then each link's predecessor
        batch.push_back(After(TaskCb(100 + i, program, PutArgs(dev, table), 3), std::array{previous}));
    }
    const std::vector<spyre_cqe> done = RunAll(q, batch);
    std::map<uint64_t, spyre_cqe> by_id;
    for (const spyre_cqe& c : done) by_id[c.user_data] = c;
    ASSERT_EQ(by_id.size(), batch.size());
    for (const auto& [id, c] : by_id) EXPECT_STREQ(spyre_error_name(c.status), "NONE") << id;
    // Each link started after the task it named had ended (device clock).
    EXPECT_GE(Start(by_id[100]), End(by_id[1]));
    for (int i = 1; i < kLinks; ++i) EXPECT_GE(Start(by_id[100 + i]), End(by_id[99 + i])) << "link " << i;
    // And the result is the CPU's, exactly: start + kLinks * step.
    std::vector<double> expect(n);
    for (size_t i = 0; i < n; ++i) expect[i] = double(start[i]) + kLinks * double(step[i]);
    EXPECT_EQ(dev.ReadTensor(outs.back(), add.outputs[0]), expect);
}

// A task whose producer fails does not run: it completes with
// DEPENDENCY_FAILED, and so does one that waits for it. A task naming a
// producer that ended well long ago (reaped) runs.
TEST_F(TaskQueueTest, ATaskWhoseProducerFailedCompletesWithoutRunning) {
    TestDevice& dev = pf();
    const WatchedAdd first = PlaceWatchedAdd(dev, 31), second = PlaceWatchedAdd(dev, 32), third = PlaceWatchedAdd(dev, 33);
    TaskQueue q(dev.fn(), 1);
    const uint32_t ok_pos = q.NextPosition();
    ASSERT_STREQ(spyre_error_name(RunOne(q, TaskCb(1, first.program, first.task.args, 3)).status), "NONE");
    const uint32_t bad_pos = q.NextPosition();
    spyre_cb failing = TaskCb(2, first.program, first.task.args, 2);  // wrong arg count: RELOCATION
    const std::vector<spyre_cb> batch{
        failing,
        After(TaskCb(3, second.program, second.task.args, 3), std::array{bad_pos, ok_pos}),
        After(TaskCb(4, second.program, second.task.args, 3), std::array{bad_pos + 1}),
        After(TaskCb(5, third.program, third.task.args, 3), std::array{ok_pos}),
    };
    std::map<uint64_t, uint16_t> status;
    for (const spyre_cqe& c : RunAll(q, batch)) status[c.user_data] = c.status;
    EXPECT_STREQ(spyre_error_name(status.at(2)), "RELOCATION");
    EXPECT_STREQ(spyre_error_name(status.at(3)), "DEPENDENCY_FAILED");
    EXPECT_STREQ(spyre_error_name(status.at(4)), "DEPENDENCY_FAILED");
    EXPECT_TRUE(OutputUntouched(dev, second)) << "a task whose producer failed ran";
    EXPECT_STREQ(spyre_error_name(status.at(5)), "NONE");
    EXPECT_EQ(dev.ReadTensor(third.task.addrs[2], third.kernel.outputs[0]), third.task.expect);
    EXPECT_EQ(dev.fn().Read64(SPYRE_REG_CNT_TASK_ERRORS), 3u);
}

// An after list that names no earlier task of the queue is BAD_DEPENDENCY
// (never a wait that cannot end), the task does not run, and the queue goes on.
TEST_F(TaskQueueTest, AnAfterListNamingNoEarlierTaskIsBadDependency) {
    TestDevice& dev = pf();
    const WatchedAdd w = PlaceWatchedAdd(dev, 41);
    TaskQueue q(dev.fn(), 0);
    const spyre_cb task = TaskCb(0, w.program, w.task.args, 3);
    // The queue's first task: nothing came before it (position 2^32 - 1 is
    // before the reset, not a task of this queue).
    std::vector<spyre_cb> firsts{After(task, std::array{uint32_t(0xFFFFFFFF)})};
    firsts[0].user_data = 1;
    EXPECT_STREQ(spyre_error_name(RunAll(q, firsts)[0].status), "BAD_DEPENDENCY");
    for (int i = 0; i < 4; ++i) ASSERT_EQ(RunOne(q, NopCb(10 + i)).status, SPYRE_ERR_NONE);
    const uint32_t pos = q.NextPosition();
    const uint32_t sq_entries = SPYRE_DEFAULT_TQ_SQ_ENTRIES;
    std::vector<spyre_cb> batch;
    for (const uint32_t named : {pos, pos + 1, pos - sq_entries, pos - 6}) {  // itself, a later one, a lap back, before the reset
        batch.push_back(After(task, std::array{named}));
        batch.back().user_data = 20 + batch.size();
    }
    batch.push_back(After(task, std::array{pos - 1, pos - 2, pos - 3, pos - 4}));
    batch.back().u.task.after_count = SPYRE_TASK_MAX_AFTER + 1;
    batch.back().user_data = 30;
    // Right after: a task naming the NOP before the garbage runs.
    batch.push_back(After(TaskCb(40, w.program, w.task.args, 3), std::array{pos - 1}));
    std::map<uint64_t, uint16_t> status;
    for (const spyre_cqe& c : RunAll(q, batch)) status[c.user_data] = c.status;
    for (uint64_t id : {21, 22, 23, 24, 30}) EXPECT_STREQ(spyre_error_name(status.at(id)), "BAD_DEPENDENCY") << id;
    EXPECT_STREQ(spyre_error_name(status.at(40)), "NONE");
    EXPECT_EQ(dev.ReadTensor(w.task.addrs[2], w.kernel.outputs[0]), w.task.expect);
}

// Queue 0 runs a long matmul while queue 1 gets `probe`: each round runs
// the matmul twice (the device learns it runs long: one long run may be a
// preempted short one), then `before`, then
// submits the matmul again and, once the lane has taken it, the probe. A
// round whose matmul ended before the probe's wake-up and run (a loaded
// host) is tried again with a longer one: 3 rounds at most, a bound, not a
// timing. A lane that runs the matmul itself fails every round.
namespace {
void ProbeWhileLongRuns(TestDevice& dev, TaskQueue& q0, TaskQueue& q1, const spyre_cb& probe,
                        const std::function<void()>& before) {
    spyre_cqe long_done{}, probe_done{};
    for (const int64_t n : {1024, 1536, 2048}) {
        const LongTask slow = PlaceLong(dev, n);
        const spyre_cb long_cb = TaskCb(1, slow.program, slow.args, slow.arg_count);
        for (int run = 0; run < 2; ++run) EXPECT_EQ(RunOne(q0, long_cb).status, SPYRE_ERR_NONE);
        before();
        const uint64_t batches = dev.fn().Read64(SPYRE_REG_CNT_TASK_DOORBELLS);
        EXPECT_EQ(q0.Submit(std::span(&long_cb, 1)), 1u);
        TakenAfter(dev, batches);  // the lane has it
        probe_done = RunOne(q1, probe);
        EXPECT_EQ(q0.Wait(std::span(&long_done, 1), 1, kBlocking), 1u);
        if (End(probe_done) < End(long_done)) break;
    }
    EXPECT_EQ(long_done.status, SPYRE_ERR_NONE);
    EXPECT_EQ(probe_done.status, SPYRE_ERR_NONE);
    EXPECT_LT(End(probe_done), End(long_done)) << "queue 1's task waited for queue 0's long task to end";
}
}  // namespace

// A queue whose recent tasks were short gets a task of a program that ran
// long before: the lane leaves it to a worker and goes on serving the
// doorbells, so a short task on the other queue completes while it runs.
// Run on the lane, the long task held queue 1's doorbell until it ended.
TEST_F(TaskQueueTest, AProgramThatRanLongIsLeftToAWorkerAfterShortTasks) {
    TestDevice& dev = pf();
    TaskQueue q0(dev.fn(), 0), q1(dev.fn(), 1);
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {16, 16}, {16, 16}, DType::FP32);
    const uint64_t add_program = dev.Put(add.program);
    std::vector<AddTask> shorts;
    for (uint32_t i = 0; i < 64; ++i) shorts.push_back(PlaceAdd(dev, add, 500 + i));
    const AddTask probe = PlaceAdd(dev, add, 99);
    ProbeWhileLongRuns(dev, q0, q1, TaskCb(2, add_program, probe.args, 3), [&] {
        std::vector<spyre_cb> batch;
        for (size_t i = 0; i < shorts.size(); ++i) batch.push_back(TaskCb(100 + i, add_program, shorts[i].args, 3));
        for (const spyre_cqe& c : RunAll(q0, batch)) ASSERT_EQ(c.status, SPYRE_ERR_NONE);  // queue 0 looks short now
    });
    EXPECT_EQ(dev.ReadTensor(probe.addrs[2], add.outputs[0]), probe.expect);
    for (size_t i = 0; i < shorts.size(); ++i)
        ASSERT_EQ(dev.ReadTensor(shorts[i].addrs[2], add.outputs[0]), shorts[i].expect) << "short task " << i;
}

// A run of short tasks on the lane whose first task is of a program the
// card has not run lately (it may run long): the lane wakes one helper for
// the batch, which runs the short tasks behind it while it runs. Each
// round first makes queue 0 look short again (a long run makes it look
// long, and its tasks then go to the workers anyway); a round whose long
// task ended before the helper woke (a loaded host) is tried again with a
// longer one: 3 rounds at most. A lane that ran the batch alone made every
// short task wait for the long one.
TEST_F(TaskQueueTest, AProgramNotRunLatelyDoesNotHoldUpTheShortTasksBehindIt) {
    TestDevice& dev = pf();
    TaskQueue q0(dev.fn(), 0);
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {16, 16}, {16, 16}, DType::FP32);
    const uint64_t add_program = dev.Put(add.program);
    std::vector<AddTask> shorts;
    for (uint32_t i = 0; i < 32; ++i) shorts.push_back(PlaceAdd(dev, add, 700 + i));
    std::vector<spyre_cqe> done;
    for (const int64_t n : {768, 1536, 2048}) {
        // Queue 0 looks short once its last tasks ran short (a NOP the host
        // preempted on its core runs long): NOPs until the last 48 of a
        // batch each ran within a microsecond, 20 batches at most.
        for (int warm = 0; warm < 20; ++warm) {
            std::vector<spyre_cb> nops;
            for (uint32_t i = 0; i < 64; ++i) nops.push_back(NopCb(1000 + i));
            const std::vector<spyre_cqe> ran = RunAll(q0, nops);
            if (std::all_of(ran.end() - 48, ran.end(),
                            [](const spyre_cqe& c) { return spyre_task_result_run_ns(c.result) < 1000; }))
                break;
        }
        const LongTask slow = PlaceLong(dev, n);  // a program of its own: not run before
        std::vector<spyre_cb> batch{TaskCb(1, slow.program, slow.args, slow.arg_count)};
        for (size_t i = 0; i < shorts.size(); ++i) batch.push_back(TaskCb(100 + i, add_program, shorts[i].args, 3));
        done = RunAll(q0, batch);
        ASSERT_EQ(done.size(), batch.size());
        if (done.back().user_data == 1u) break;  // the long one completed last
    }
    uint64_t long_end = 0, last_short_end = 0;
    for (const spyre_cqe& c : done) {
        EXPECT_EQ(c.status, SPYRE_ERR_NONE) << c.user_data;
        if (c.user_data == 1u) long_end = End(c);
        else last_short_end = std::max(last_short_end, End(c));
    }
    EXPECT_LT(last_short_end, long_end) << "the short tasks waited for the long one ahead of them";
    for (size_t i = 0; i < shorts.size(); ++i)
        ASSERT_EQ(dev.ReadTensor(shorts[i].addrs[2], add.outputs[0]), shorts[i].expect) << "short task " << i;
}

// On a function of several queues the lane runs no long task itself, not
// even the lone one of a turn: a short task on queue 1 completes while
// queue 0's long task runs. The lane ran it before and served no doorbell
// until it ended.
TEST_F(TaskQueueTest, ALoneLongTaskLeavesTheLaneToTheOtherQueues) {
    TestDevice& dev = pf();
    TaskQueue q0(dev.fn(), 0), q1(dev.fn(), 1);
    const BuiltKernel add = KernelBuilder().Elementwise(ElementwiseOp::Add, {16, 16}, {16, 16}, DType::FP32);
    const AddTask probe = PlaceAdd(dev, add, 7);
    ProbeWhileLongRuns(dev, q0, q1, TaskCb(2, dev.Put(add.program), probe.args, 3), [] {});  // queue 0 runs long
    EXPECT_EQ(dev.ReadTensor(probe.addrs[2], add.outputs[0]), probe.expect);
}
