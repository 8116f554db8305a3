// SPDX-License-Identifier: Apache-2.0
// Card-wide policy belongs to the daemon and the PF: a VF cannot lift the
// watchdog through its mapped registers, and functions share the compute
// cores fairly (one flooding function does not starve another, and the
// watchdog counts a program's or task's run, not its wait for the cores).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "execution_support.hpp"
#include "reference.hpp"
#include "spyre/driver/task_queue.hpp"
#include "spyre/plan/program_image.hpp"

using namespace spyre;
using namespace spyre::driver;
using namespace std::chrono_literals;
using spyre::test::ExecutionTest;
using spyre::test::TestDevice;

namespace {

uint64_t MonotonicNs() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

using CardPolicyTest = spyre::test::WatchdogTest;

// The same on two cores, so "one task per core" is a known number.
class CardSharingTest : public spyre::test::WatchdogTest {
protected:
    MockOptions Options() const override {
        MockOptions o = WatchdogTest::Options();
        o.extra_args.insert(o.extra_args.end(), {"--cores", "2"});
        return o;
    }
    static constexpr size_t kCores = 2;
};

// A program of `repeats` n^3 fp32 matmuls (512^3: a few ms each on the card).
std::pair<uint64_t, uint64_t> LoadMatmulProgram(TestDevice& dev, size_t repeats, int64_t n = 512) {
    const BuiltKernel k = KernelBuilder().Matmul(n, n, n, DType::FP32);
    std::vector<uint64_t> addrs;
    for (const KernelTensor& t : k.inputs) addrs.push_back(dev.Alloc(t.bytes));
    addrs.push_back(dev.Alloc(k.outputs[0].bytes));
    ProgramImage image = ProgramImage::Decode(k.Bind(addrs));
    image.ops.assign(repeats, image.ops[0]);
    const std::vector<uint8_t> program = image.Encode();
    return {dev.Put(program), program.size()};
}

// A task program of `repeats` 512^3 fp32 matmuls reading A and B and writing
// its own C: seconds on one core, so the 300 ms watchdog cuts every one.
struct LongTasks {
    uint64_t program = 0;
    uint64_t a = 0, b = 0;
    uint64_t c_bytes = 0;
};

LongTasks LoadLongTaskProgram(TestDevice& dev, size_t repeats) {
    const BuiltKernel k = KernelBuilder().Matmul(512, 512, 512, DType::FP32);
    ProgramImage image = ProgramImage::Decode(k.program);
    image.ops.assign(repeats, image.ops[0]);
    LongTasks t;
    t.program = dev.Put(image.Encode());
    t.a = dev.Alloc(k.inputs[0].bytes);
    t.b = dev.Alloc(k.inputs[1].bytes);
    t.c_bytes = k.outputs[0].bytes;
    return t;
}

std::vector<spyre_cb> LongTaskFlood(TestDevice& dev, size_t n, uint64_t first_id) {
    const LongTasks t = LoadLongTaskProgram(dev, 2000);
    std::vector<spyre_cb> tasks;
    for (size_t i = 0; i < n; ++i) {
        const std::array<uint64_t, 3> args{t.a, t.b, dev.Alloc(t.c_bytes)};
        const uint64_t table = dev.Put({reinterpret_cast<const uint8_t*>(args.data()), sizeof args});
        tasks.push_back(TaskCb(first_id + i, t.program, table, 3));
    }
    return tasks;
}

// Submits VF 1's flood of `n` LAUNCHes longer than the watchdog (16 2048^3
// matmuls, about 275 GFLOP), each holding the card for the whole bound, and
// returns once one holds it. The program is small, so the next LAUNCH asks
// for the card microseconds after the last ended.
void StartLaunchFlood(TestDevice& dev, size_t n) {
    const auto [program, size] = LoadMatmulProgram(dev, 16, 2048);
    std::vector<spyre_cb> cbs;
    for (size_t i = 0; i < n; ++i) cbs.push_back(test::LaunchCb(program, size, i + 1));
    dev.ring().Submit(cbs);
    while (!(dev.fn().Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_BUSY)) std::this_thread::yield();
}

// What the measuring function runs: a FILL of `elements` fp32 values, one
// output each, so every result can be checked.
struct Fills {
    BuiltKernel kernel;
    std::vector<uint64_t> outputs;
    std::vector<uint64_t> programs;  // bound to their output (LAUNCH)
};

Fills PlaceFills(TestDevice& dev, int64_t elements, size_t n) {
    Fills f{KernelBuilder().Fill({elements}, 3.0, DType::FP32), {}, {}};
    for (size_t i = 0; i < n; ++i) {
        f.outputs.push_back(dev.Alloc(f.kernel.outputs[0].bytes));
        f.programs.push_back(dev.Put(f.kernel.Bind(std::array{f.outputs.back()})));
    }
    return f;
}

void ExpectFilled(TestDevice& dev, const Fills& f) {
    const std::vector<double> want(size_t(test::Numel(f.kernel.outputs[0].shape)), 3.0);
    for (uint64_t y : f.outputs) EXPECT_EQ(dev.ReadTensor(y, f.kernel.outputs[0]), want);
}

// How often the measuring function asks, and how many times.
constexpr auto kAskEvery = 100ms;
constexpr size_t kAsks = 6;

// One LAUNCH or task of the measuring function: when the host asked, when
// the device says its wait ended (a LAUNCH's completion, a task's start),
// and how it ended.
struct Measured {
    uint64_t asked = 0;
    uint64_t waited_until = 0;
    uint16_t status = 0;
};

// Submits LAUNCH i of `fills` every kAskEvery without waiting for the earlier
// ones (the ring queues them, as an app's small launches would be), then
// waits for all.
std::vector<Measured> LaunchEvery(TestDevice& dev, const Fills& fills) {
    std::vector<Measured> m(fills.programs.size());
    for (size_t i = 0; i < m.size(); ++i) {
        if (i) std::this_thread::sleep_for(kAskEvery);
        m[i].asked = MonotonicNs();
        const spyre_cb cb = test::LaunchCb(fills.programs[i], 0, 100 + i);
        dev.ring().Submit(std::span(&cb, 1));
    }
    std::vector<Completion> done(m.size());
    for (size_t got = 0; got < done.size();) got += dev.ring().Wait(std::span(done).subspan(got), done.size() - got);
    for (size_t i = 0; i < m.size(); ++i) m[i] = {m[i].asked, done[i].timestamp_ns, done[i].status};  // ring order
    return m;
}

// The same with tasks on queue 0 of `q`.
std::vector<Measured> TaskEvery(TestDevice& dev, TaskQueue& q, const Fills& fills) {
    const uint64_t program = dev.Put(fills.kernel.program);
    std::vector<Measured> m(fills.outputs.size());
    for (size_t i = 0; i < m.size(); ++i) {
        if (i) std::this_thread::sleep_for(kAskEvery);
        const uint64_t table = dev.Put({reinterpret_cast<const uint8_t*>(&fills.outputs[i]), sizeof(uint64_t)});
        m[i].asked = MonotonicNs();
        const spyre_cb d = TaskCb(i, program, table, 1);
        EXPECT_EQ(q.Submit(std::span(&d, 1)), 1u);
    }
    std::vector<spyre_cqe> done(m.size());
    for (size_t got = 0; got < done.size();)
        got += q.Wait(std::span(done).subspan(got), done.size() - got, {.mode = WaitMode::Blocking});
    for (const spyre_cqe& c : done)
        m.at(c.user_data) = {m.at(c.user_data).asked, c.timestamp_ns - spyre_task_result_run_ns(c.result), c.status};
    return m;
}

// The flooding function's LAUNCH completions: each ran the whole watchdog
// period. Their completion times.
std::vector<uint64_t> FloodEnds(CommandRing& ring, size_t n) {
    std::vector<Completion> done(n);
    for (size_t got = 0; got < n;) got += ring.Wait(std::span(done).subspan(got), n - got);
    std::vector<uint64_t> ends;
    for (const Completion& c : done) {
        EXPECT_STREQ(spyre_error_name(c.status), "WATCHDOG");
        ends.push_back(c.timestamp_ns);
    }
    return ends;
}

// The flooding function's task completions, likewise: their start times
// (`starts`) or end times.
std::vector<uint64_t> FloodTasks(TaskQueue& q, size_t n, bool starts) {
    std::vector<spyre_cqe> done(n);
    for (size_t got = 0; got < n;)
        got += q.Wait(std::span(done).subspan(got), n - got, {.mode = WaitMode::Blocking});
    std::vector<uint64_t> stamps;
    for (const spyre_cqe& c : done) {
        EXPECT_STREQ(spyre_error_name(c.status), "WATCHDOG");
        stamps.push_back(starts ? c.timestamp_ns - spyre_task_result_run_ns(c.result) : c.timestamp_ns);
    }
    return stamps;
}

// Every one of `mine` succeeded, and each waited while at most `most` of
// the flood's `stamps` (device timestamps) passed. Its wait begins when it
// was asked, or when its predecessor's ended (a function's ring runs its CBs
// in order, and its tasks of one queue start in order).
void ExpectBoundedWaits(const std::vector<Measured>& mine, const std::vector<uint64_t>& stamps, size_t most) {
    uint64_t previous = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
        EXPECT_EQ(mine[i].status, SPYRE_ERR_NONE) << i << ": " << spyre_error_name(mine[i].status);
        const uint64_t from = std::max(mine[i].asked, previous);
        const auto passed = std::count_if(stamps.begin(), stamps.end(),
                                          [&](uint64_t t) { return t > from && t <= mine[i].waited_until; });
        EXPECT_LE(size_t(passed), most) << i << " waited while " << passed << " of the flood's went by";
        previous = mine[i].waited_until;
    }
}

// Starts a flood of 10 LAUNCHes on `flooder` and runs `measure` (VF 2's
// LAUNCHes or tasks) meanwhile: each of those succeeds after waiting for at
// most 2 of the flood's programs (the one running, and one that may have
// taken the card just then), and all were served while the flood ran.
template <typename Measure>
void ExpectServedAmidALaunchFlood(TestDevice& flooder, Measure&& measure) {
    StartLaunchFlood(flooder, 10);
    const std::vector<Measured> mine = measure();
    const std::vector<uint64_t> theirs = FloodEnds(flooder.ring(), 10);
    ExpectBoundedWaits(mine, theirs, 2);
    EXPECT_LT(mine.back().waited_until, *std::max_element(theirs.begin(), theirs.end()));
}

}  // namespace

// The executor's bound comes from the card's policy: a store to the VF's
// mapped WATCHDOG_MS changes only what the VF reads back there (and a trapped
// one not even that); a semaphore wait that never completes still ends at
// the daemon's 300 ms.
TEST_F(CardPolicyTest, AVfCannotLiftTheWatchdogThroughItsMapping) {
    TestDevice vf(Vf(1));
    auto* mapped = reinterpret_cast<uint32_t*>(vf.fn().bar0() + SPYRE_REG_WATCHDOG_MS);
    std::atomic_ref<uint32_t>(*mapped).store(0xFFFFFFFFu);
    vf.fn().WriteTrapped32(SPYRE_REG_WATCHDOG_MS, 0xFFFFFFFFu);  // ignored: read-only for a VF
    EXPECT_EQ(vf.fn().ReadTrapped32(SPYRE_REG_WATCHDOG_MS), 300u);

    const uint64_t sem = vf.Alloc(8);
    std::atomic_ref<uint32_t>(*mapped).store(0xFFFFFFFFu);
    const auto start = std::chrono::steady_clock::now();
    const Completion c = vf.Run(test::SemWaitCb(sem, 1, 60'000'000'000ull));  // asks for a minute
    EXPECT_EQ(c.status, SPYRE_ERR_WATCHDOG) << spyre_error_name(c.status);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);  // not the minute it asked for
}

// The PF sets the card's watchdog through a trapped write; every function
// of the card runs under it.
TEST_F(CardPolicyTest, ThePfSetsTheCardWatchdog) {
    pf().fn().WriteTrapped32(SPYRE_REG_WATCHDOG_MS, 150);
    TestDevice vf(Vf(2));
    EXPECT_EQ(vf.fn().ReadTrapped32(SPYRE_REG_WATCHDOG_MS), 150u);
    const uint64_t sem = vf.Alloc(8);
    const Completion c = vf.Run(test::SemWaitCb(sem, 1, 60'000'000'000ull));
    EXPECT_EQ(c.status, SPYRE_ERR_WATCHDOG);
    pf().fn().WriteTrapped32(SPYRE_REG_WATCHDOG_MS, 0);  // 0 would switch it off: refused
    EXPECT_EQ(pf().fn().ReadTrapped32(SPYRE_REG_WATCHDOG_MS), 150u);
}

// The mapped mirror follows the card's policy at once, on the PF and on a
// VF already held, with no trapped read to refresh it (it kept the old
// value until one: found probing from outside).
TEST_F(CardPolicyTest, EveryMappedWatchdogRegisterShowsTheBoundInForce) {
    TestDevice vf(Vf(1));
    auto mapped = [](TestDevice& d) {
        return std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(d.fn().bar0() + SPYRE_REG_WATCHDOG_MS)).load();
    };
    EXPECT_EQ(mapped(vf), 300u);
    pf().fn().WriteTrapped32(SPYRE_REG_WATCHDOG_MS, 1234);
    EXPECT_EQ(mapped(pf()), 1234u);
    EXPECT_EQ(mapped(vf), 1234u);
    pf().fn().WriteTrapped32(SPYRE_REG_WATCHDOG_MS, 0);  // refused: nothing changes
    EXPECT_EQ(mapped(vf), 1234u);
}

// VF 1 floods the card with long programs; VF 2 asks for the card once.
// Turns are FIFO, so VF 2 waits for at most the program VF 1 is running
// (plus one that may have asked before VF 2's doorbell was served), not for
// VF 1's whole queue. Counted from device timestamps, not timed.
TEST_F(CardPolicyTest, AFloodingFunctionDoesNotStarveAnother) {
    TestDevice flooder(Vf(1));
    TestDevice victim(Vf(2));
    const auto [program, size] = LoadMatmulProgram(flooder, 2);
    constexpr size_t kFlood = 24;
    std::vector<spyre_cb> cbs;
    for (size_t i = 0; i < kFlood; ++i) cbs.push_back(test::LaunchCb(program, size, i + 1));
    flooder.ring().Submit(cbs);
    // Once VF 1 holds the card, VF 2 asks.
    while (!(flooder.fn().Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_BUSY)) std::this_thread::yield();
    const BuiltKernel fill = KernelBuilder().Fill({8}, 2.0, DType::FP32);
    const uint64_t y = victim.Alloc(fill.outputs[0].bytes);
    const uint64_t asked = MonotonicNs();
    const Completion mine = victim.LaunchProgram(fill.Bind(std::array{y}));
    ASSERT_TRUE(mine.ok()) << spyre_error_name(mine.status);
    EXPECT_EQ(victim.ReadTensor(y, fill.outputs[0]), std::vector<double>(8, 2.0));

    std::vector<Completion> done(kFlood);
    size_t got = 0;
    while (got < kFlood) got += flooder.ring().Wait(std::span(done).subspan(got), kFlood - got);
    size_t finished_while_waiting = 0;
    for (const Completion& c : done) {
        EXPECT_TRUE(c.ok()) << spyre_error_name(c.status);
        if (c.timestamp_ns > asked && c.timestamp_ns < mine.timestamp_ns) ++finished_while_waiting;
    }
    EXPECT_LE(finished_while_waiting, 2u) << "VF 2 waited behind " << finished_while_waiting << " of VF 1's "
                                          << kFlood << " programs";
    // And VF 2 did not simply come last.
    EXPECT_LT(mine.timestamp_ns, std::max_element(done.begin(), done.end(), [](auto& a, auto& b) {
                                     return a.timestamp_ns < b.timestamp_ns;
                                 })->timestamp_ns);
}

// VF 1 runs programs longer than the watchdog back to back; VF 2 asks for
// the card with a small LAUNCH every 100 ms, without waiting for its earlier
// ones. Each of VF 2's LAUNCHes waits for the program VF 1 is running (FIFO
// turns), up to a whole watchdog period: that wait is the arbitration's and
// must not eat the LAUNCH's own watchdog. None fails, and each waited for at
// most two of VF 1's programs (the one running, and one that may have asked
// just before), counted from device timestamps.
TEST_F(CardSharingTest, ALaunchWaitingForTheCardKeepsItsWholeWatchdog) {
    TestDevice flooder(Vf(1)), measured(Vf(2));
    const Fills fills = PlaceFills(measured, 8, kAsks);
    ExpectServedAmidALaunchFlood(flooder, [&] { return LaunchEvery(measured, fills); });
    ExpectFilled(measured, fills);
}

// VF 1 keeps both cores busy with tasks longer than the watchdog; VF 2 asks
// for the card every 100 ms with a LAUNCH of four chunks, which needs the
// workers. A LAUNCH has the cores once the tasks running on them have ended
// (no task starts meanwhile), and its watchdog runs from then. None fails,
// and each waited for at most the tasks running on the two cores when it
// asked and two that may have started just then.
TEST_F(CardSharingTest, ALaunchWaitingForRunningTasksKeepsItsWholeWatchdog) {
    TestDevice flooder(Vf(1)), measured(Vf(2));
    TaskQueue q(flooder.fn(), 0);
    const std::vector<spyre_cb> flood = LongTaskFlood(flooder, 16, 1);
    const Fills fills = PlaceFills(measured, 4 << 16, kAsks);
    ASSERT_EQ(q.Submit(flood), flood.size());
    const std::vector<Measured> mine = LaunchEvery(measured, fills);
    ExpectBoundedWaits(mine, FloodTasks(q, flood.size(), false), 2 * kCores);
    ExpectFilled(measured, fills);
}

// VF 1 runs programs longer than the watchdog back to back; VF 2 submits a
// small task every 100 ms. When a program ends, the cores first take the
// tasks that waited for it, so each of VF 2's tasks, once next in its queue,
// starts after at most the program running and one that may have taken the
// card just then; its watchdog runs from its start.
TEST_F(CardSharingTest, ATaskWaitingForTheCardKeepsItsWholeWatchdog) {
    TestDevice flooder(Vf(1)), measured(Vf(2));
    TaskQueue q(measured.fn(), 0);
    const Fills fills = PlaceFills(measured, 8, kAsks);
    ExpectServedAmidALaunchFlood(flooder, [&] { return TaskEvery(measured, q, fills); });
    ExpectFilled(measured, fills);
}

// VF 1 floods both cores with tasks longer than the watchdog; VF 2 submits a
// small task every 100 ms. Idle cores take the functions' tasks in turn, so
// each of VF 2's tasks, once next in its queue, starts after at most one of
// VF 1's per core, and its watchdog runs from its start. One more may start
// while the task is on its way: `asked` is read on the host before the
// submit, and on a loaded host the queue's lane sees the doorbell later
// (this failed once so under a parallel test run). An unfair turn would
// make it wait for the flood's 16.
TEST_F(CardSharingTest, ATaskWaitingForACoreKeepsItsWholeWatchdog) {
    TestDevice flooder(Vf(1)), measured(Vf(2));
    TaskQueue qa(flooder.fn(), 0), qb(measured.fn(), 0);
    const std::vector<spyre_cb> flood = LongTaskFlood(flooder, 16, 1);
    const Fills fills = PlaceFills(measured, 8, kAsks);
    ASSERT_EQ(qa.Submit(flood), flood.size());
    const std::vector<Measured> mine = TaskEvery(measured, qb, fills);
    ExpectBoundedWaits(mine, FloodTasks(qa, flood.size(), true), kCores + 1);
    ExpectFilled(measured, fills);
}
