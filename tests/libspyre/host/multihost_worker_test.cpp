// SPDX-License-Identifier: Apache-2.0
// Level 4 without mpirun: MultiHostWorker over InProcessTransport, each rank a
// thread with its own embedded mock card (the MPI runs are in the mpi suite:
// spyre-l4-examples under mpirun). Chip tasks placed on another rank's
// device run there and come back byte for byte; a fault there, and a rank
// that falls silent, fail the run with errors naming the rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <thread>

#include "l3_chip_functions.hpp"
#include "mock_fixture.hpp"
#include "pair_gate.hpp"
#include "spyre/compiler/plan_writer.hpp"
#include "spyre/host.hpp"
#include "spyre/host/in_process_transport.hpp"

using namespace spyre;
using namespace spyre::l3;

namespace {

Host OwnCard(const std::vector<std::string>& mock_args = {}, const std::string& memory = "1G") {
    HostOptions o = HostOptions::EmbeddedMock(1, 1, memory);
    o.embedded_mock.extra_args = mock_args;
    return Host::Open(o);
}

HostTensor Iota(float scale, float offset, int64_t rows = kTile, int64_t cols = kTile) {
    HostTensor t = HostTensor::Zeros({rows, cols});
    auto v = t.floats();
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(int(i % 997)) * scale + offset;
    return t;
}

// Runs two "paired_sub" chip tasks, on devices `first` and `second`, and
// checks that each wrote a - b, element for element.
void RunTwoPairedSubs(Worker& w, size_t first, size_t second) {
    const HostTensor a = Iota(0.5f, 1.0f), b = Iota(-0.25f, 2.0f);
    HostTensor d1 = HostTensor::Zeros({kTile, kTile}), d2 = HostTensor::Zeros({kTile, kTile});
    const HostProgram p{"paired", 2, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                            g.Chip("paired_sub", {In(x[0]), In(x[1]), Out(d1)}, {.device = first});
                            g.Chip("paired_sub", {In(x[0]), In(x[1]), Out(d2)}, {.device = second});
                        }};
    w.Run(p, {a, b});
    auto av = a.floats(), bv = b.floats();
    for (size_t i = 0; i < av.size(); ++i) {
        ASSERT_EQ(d1.floats()[i], av[i] - bv[i]) << "element " << i;
        ASSERT_EQ(d2.floats()[i], av[i] - bv[i]) << "element " << i;
    }
}

std::atomic<int> held_started{0};
std::atomic<bool> held_release{false};

// Counts itself in, then holds its device until released (20 s at most).
void RegisterHeldSub(Worker& w) {
    w.RegisterChipFunction("held_sub", [](ChipContext& ctx) {
        held_started.fetch_add(1);
        for (int i = 0; i < 4000 && !held_release.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ChipSub(ctx);
    });
}

// Releases the held calls when a test ends, however it ends.
struct ReleaseHeldAtEnd {
    ReleaseHeldAtEnd() { held_release = false; }
    ~ReleaseHeldAtEnd() { held_release = true; }
};

// Ranks 1..n-1 serve from threads; the test body is rank 0.
class MultiHostTest : public ::testing::Test {
protected:
    // Every rank opens `devices` of its card (1: its VF) and registers seed
    // 003's chip functions plus what `also` registers (SPMD).
    void Start(int ranks, std::chrono::milliseconds bound = std::chrono::milliseconds(5000), std::vector<int> devices = {1},
               std::function<void(Worker&)> also = {}) {
        fabric_ = host::InProcessFabric::Create(ranks, {.heartbeat_interval = std::chrono::milliseconds(100),
                                                        .silence_bound = bound});
        for (int r = 1; r < ranks; ++r)
            servers_.push_back(std::async(std::launch::async, [this, devices, also, t = fabric_->Take(r)]() mutable -> std::string {
                try {
                    Host host = OwnCard(mock_args_, mock_memory_);
                    MultiHostWorker w(*t, host, {.device_ids = devices});
                    RegisterChipFunctions(w.worker());
                    if (also) also(w.worker());
                    w.Serve();
                    return "served";
                } catch (const Error& e) {
                    return std::string("error: ") + e.what();
                }
            }));
        rank0_ = fabric_->Take(0);
        host_.emplace(OwnCard(mock_args_, mock_memory_));
        worker_.emplace(*rank0_, *host_, DistributedConfig{.device_ids = devices, .num_sub_workers = 1}, reply_timeout_);
        RegisterChipFunctions(worker_->worker());
        if (also) also(worker_->worker());
    }
    void TearDown() override {
        worker_.reset();  // releases the servers
        for (auto& s : servers_) {
            ASSERT_EQ(s.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "a serving rank hangs";
            results_.push_back(s.get());
        }
    }
    Worker& w() { return worker_->worker(); }
    // chip_add of a and b on rank 1's device (device 1) gives a + b: the
    // rank serves on after whatever the test did to it.
    void ExpectAnAddOnRank1(const HostTensor& a, const HostTensor& b, int run = 0) {
        static const HostProgram add{"l4_add", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> t) {
                                         g.Chip("chip_add", {In(t[0]), In(t[1]), Out(t[2])}, {.device = 1});
                                     }};
        HostTensor f = HostTensor::Zeros({kTile, kTile});
        ASSERT_NO_THROW(w().Run(add, {a, b, f})) << "run " << run;
        auto av = a.floats(), bv = b.floats(), fv = f.floats();
        for (size_t i = 0; i < fv.size(); ++i) ASSERT_EQ(fv[i], av[i] + bv[i]) << "run " << run << ", element " << i;
    }

    std::shared_ptr<host::InProcessFabric> fabric_;
    std::unique_ptr<host::InProcessTransport> rank0_;
    std::optional<Host> host_;
    std::optional<MultiHostWorker> worker_;
    std::vector<std::future<std::string>> servers_;
    std::vector<std::string> results_;
    std::vector<std::string> mock_args_;  // every rank's card
    std::string mock_memory_ = "1G";      // every rank's card
    std::chrono::milliseconds reply_timeout_ = std::chrono::minutes(10);  // rank 0's
};

// Chip tasks on two devices of one remote rank are in flight at once: the
// chip function on each waits for the other (10 s at most) before it runs
// chip_sub; one call at a time per rank would time out.
TEST_F(MultiHostTest, CallsToTwoDevicesOfOneRankRunAtOnce) {
    static std::atomic<int> arrived{0};
    arrived = 0;
    Start(2, std::chrono::milliseconds(5000), {0, 1}, [](Worker& w) {
        w.RegisterChipFunction("paired_sub", [](ChipContext& ctx) {
            WaitForPartner(arrived, "chip call");
            ChipSub(ctx);
        });
    });
    ASSERT_EQ(w().device_count(), 4u);  // the PF and VF of rank 0, then of rank 1
    RunTwoPairedSubs(w(), 2, 3);
    EXPECT_EQ(w().Stats(2).chip_tasks, 1u);
    EXPECT_EQ(w().Stats(3).chip_tasks, 1u);
}

// A remote device with room for two chip tasks (a card of 16 cores has 2
// task queues per VF) takes two calls at once: rank 0 learns its room from
// rank 1's description and keeps two calls in flight to it. The chip
// function on each waits for the other (10 s at most); one call at a time
// per remote device would time out.
TEST_F(MultiHostTest, TwoCallsToOneRemoteDeviceWithRoomRunAtOnce) {
    static std::atomic<int> arrived{0};
    arrived = 0;
    mock_args_ = {"--cores", "16"};
    Start(2, std::chrono::milliseconds(5000), {1}, [](Worker& w) {
        w.RegisterChipFunction("paired_sub", [](ChipContext& ctx) {
            WaitForPartner(arrived, "chip call");
            ChipSub(ctx);
        });
    });
    ASSERT_EQ(w().device_count(), 2u);  // rank 0's VF, then rank 1's
    ASSERT_EQ(w().ChipTasksAtOnce(0), 2u);
    EXPECT_EQ(w().ChipTasksAtOnce(1), 2u) << "rank 1's VF runs two chip tasks at once";
    RunTwoPairedSubs(w(), 1, 1);
    EXPECT_EQ(w().Stats(1).chip_tasks, 2u);
}

// What the serving device's allocator saw during an "echo_allocator" call.
struct Seen {
    uint64_t allocations, bytes_in_use;
};
// "echo_allocator": copies its input to its output, then appends a Seen.
void RegisterEchoAllocator(Worker& w) {
    w.RegisterChipFunction("echo_allocator", [](ChipContext& ctx) {
        auto* out = static_cast<uint8_t*>(ctx.args[1]);
        std::memcpy(out, ctx.args[0], ctx.bytes[0]);
        const AllocatorStats stats = ctx.device.allocator().Stats();
        const Seen seen{stats.allocations, stats.bytes_in_use};
        std::memcpy(out + ctx.bytes[0], &seen, sizeof seen);
    });
}
struct Echoed {
    bool same;  // the output began with the input, byte for byte
    Seen seen;
};
// One run of an "echo_allocator" task named "echo" over a new [1 x cols]
// tensor (a new storage each call, as rank 1 sees it too) on device 1.
Echoed EchoOnDevice1(Worker& w, int64_t cols, float offset) {
    const HostTensor in = Iota(0.5f, offset, 1, cols);
    HostTensor out = HostTensor::Zeros({1, cols + int64_t(sizeof(Seen) / sizeof(float))});
    const HostProgram p{"echo", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                            g.Chip("echo_allocator", {In(in), Out(out)}, {.name = "echo", .device = 1});
                        }};
    w.Run(p, {});
    Echoed e{std::memcmp(out.data(), in.data(), in.bytes()) == 0, {}};
    std::memcpy(&e.seen, static_cast<const uint8_t*>(out.data()) + in.bytes(), sizeof e.seen);
    return e;
}

// A served call's tensors are its message's buffers, new with every call:
// the serving rank moves them through the same device memory each time
// rather than allocating (and later dropping) device copies per call; a
// scratch copy past the size a slot keeps is given back after its call.
// The chip function reports the serving device's allocator beside an echo
// of its input, so the data still round-trips byte for byte.
TEST_F(MultiHostTest, ServedCallsReuseTheirDeviceMemory) {
    Start(2, std::chrono::milliseconds(5000), {1}, RegisterEchoAllocator);
    auto echo = [&](int64_t cols, float offset) {
        const Echoed e = EchoOnDevice1(w(), cols, offset);
        EXPECT_TRUE(e.same) << "the echo of " << cols << " floats differs";
        return e.seen;
    };
    constexpr int64_t kCols = 1024;
    std::vector<Seen> small;
    for (int call = 0; call < 6; ++call) small.push_back(echo(kCols, float(call)));
    for (size_t call = 2; call < small.size(); ++call) {
        EXPECT_EQ(small[call].allocations, small[1].allocations) << "call " << call << " allocated device memory anew";
        EXPECT_EQ(small[call].bytes_in_use, small[1].bytes_in_use) << "call " << call;
    }
    // 20 MiB each way, over the 16 MiB a slot keeps: held during the call,
    // given back after it.
    const Seen big = echo(5 << 20, 1.0f);
    EXPECT_GE(big.bytes_in_use, small[1].bytes_in_use + (39ull << 20));  // the small copies gave way to the big
    const Seen after = echo(kCols, 2.0f);
    EXPECT_LE(after.bytes_in_use, small[1].bytes_in_use + 2 * kCols * sizeof(float) + 4096)
        << "the big call's scratch copies were kept";
}

// A served plan call reads and writes its tensors through scratch copies a
// larger call left bigger than they are: the result is exact, twice.
TEST_F(MultiHostTest, AServedPlanRunsOnScratchCopiesLargerThanItsTensors) {
    Start(2, std::chrono::milliseconds(5000), {1}, [](Worker& w) {
        RegisterEchoAllocator(w);
        const KernelBuilder kb;
        w.RegisterChipPlan("plan_add", CompilerOutputFromKernel("add", kb.Elementwise(ElementwiseOp::Add, {kTile, kTile},
                                                                                      {kTile, kTile}, DType::FP32)));
    });
    const HostTensor big = Iota(0.5f, 1.0f, 1, 4 * kTile * kTile);
    HostTensor echoed = HostTensor::Zeros({1, 4 * kTile * kTile + int64_t(sizeof(Seen) / sizeof(float))});
    const HostTensor a = Iota(1.0f, 3.0f), b = Iota(-0.5f, 2.0f);
    for (int round = 0; round < 2; ++round) {
        HostTensor f = HostTensor::Zeros({kTile, kTile});
        const HostProgram p{"big then plan", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                                g.Chip("echo_allocator", {In(big), Out(echoed)}, {.device = 1});
                                g.Chip("plan_add", {In(a), In(b), Out(f)}, {.device = 1});
                            }};
        w().Run(p, {});
        ASSERT_EQ(std::memcmp(echoed.data(), big.data(), big.bytes()), 0) << "round " << round;
        for (size_t i = 0; i < f.floats().size(); ++i)
            ASSERT_EQ(f.floats()[i], a.floats()[i] + b.floats()[i]) << "round " << round << ", element " << i;
    }
}

// Served calls past the serving device's memory fail with the kind and
// the message of the allocator there, naming the remote device, and the
// next call runs on it: an argument larger than the whole pool
// (InvalidArgument), and two that fit one at a time but not together
// (OutOfMemory, the first one's copy given back).
TEST_F(MultiHostTest, ServedCallsPastTheDevicesMemoryFailAndTheNextRuns) {
    mock_memory_ = "256M";  // the VF's pool: 128 MiB, less the 128 bytes at address 0
    Start(2, std::chrono::milliseconds(5000), {1}, RegisterEchoAllocator);
    const struct {
        int64_t mib;
        ErrorKind kind;
        const char* says;
    } cases[] = {{200, ErrorKind::InvalidArgument, "cannot allocate 209715200 bytes: the pool holds 134217600"},
                 {80, ErrorKind::OutOfMemory, ""}};
    for (const auto& c : cases) {
        try {
            EchoOnDevice1(w(), c.mib << 18, 1.0f);  // c.mib MiB in, as much out
            ADD_FAILURE() << "a call of " << c.mib << " MiB each way ran on a 128 MiB pool";
        } catch (const HostRunError& e) {
            ASSERT_EQ(e.failures().size(), 1u) << e.what();
            EXPECT_EQ(e.failures()[0].kind, c.kind) << e.what();
            EXPECT_NE(e.failures()[0].device.find("rank 1"), std::string::npos) << e.failures()[0].device;
            EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
        }
        EXPECT_TRUE(EchoOnDevice1(w(), 1024, 2.0f).same)
            << "the next call on the same remote device, after " << c.mib << " MiB";
    }
}

TEST_F(MultiHostTest, DevicesOfEveryRankAreTheWorkersDevices) {
    Start(3);
    ASSERT_EQ(w().device_count(), 3u);
    EXPECT_EQ(w().DescribeDevice(0).find("rank"), std::string::npos) << w().DescribeDevice(0);
    EXPECT_NE(w().DescribeDevice(1).find("rank 1 (inproc-1)"), std::string::npos) << w().DescribeDevice(1);
    EXPECT_NE(w().DescribeDevice(2).find("rank 2 (inproc-2)"), std::string::npos) << w().DescribeDevice(2);
}

// Seed 003's parallel pattern with chip add on rank 1 and chip sub on rank 2.
TEST_F(MultiHostTest, ParallelReduceAcrossRanksIsExact) {
    Start(3);
    const HostTensor a = Iota(0.5f, -3.0f), b = Iota(0.25f, 7.0f);
    HostTensor f = HostTensor::Zeros({kTile, kTile});
    const HostProgram p{"l4_parallel_reduce", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                            HostTensor s = g.CreateTensor({kTile, kTile}), d = g.CreateTensor({kTile, kTile});
                            g.Chip("chip_add", {In(x[0]), In(x[1]), Out(s)}, {.device = 1});
                            g.Chip("chip_sub", {In(x[0]), In(x[1]), Out(d)}, {.device = 2});
                            g.Sub("reduce",
                                  [](std::span<const HostTensor> t) {
                                      auto s = t[0].floats(), d = t[1].floats(), f = t[2].floats();
                                      for (size_t i = 0; i < f.size(); ++i) f[i] = s[i] + d[i];
                                  },
                                  {In(s), In(d), Out(x[2])});
                        }};
    w().Run(p, {a, b, f});
    auto av = a.floats(), fv = f.floats();
    for (size_t i = 0; i < fv.size(); ++i) ASSERT_EQ(fv[i], 2 * av[i]) << "element " << i;
    EXPECT_EQ(w().Stats(1).chip_tasks, 1u);
    EXPECT_EQ(w().Stats(2).chip_tasks, 1u);
    EXPECT_EQ(w().Stats(1).moved.bytes_uploaded, 2 * kTileBytes);
    EXPECT_EQ(w().Stats(1).moved.bytes_downloaded, kTileBytes);
}

// InOut arguments go there and come back: a chain of adds into one tensor,
// alternating ranks.
TEST_F(MultiHostTest, InOutArgumentsTravelBothWays) {
    Start(2);
    const HostTensor one = HostTensor::Full({kTile, kTile}, 1.0f);
    HostTensor acc = HostTensor::Full({kTile, kTile}, 5.0f);
    const HostProgram p{"l4_chain", 2, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                            for (size_t k = 0; k < 4; ++k) {
                                HostTensor tmp = g.CreateTensor({kTile, kTile});
                                g.Chip("chip_add", {In(x[0]), In(x[1]), Out(tmp)}, {.device = k % 2});
                                g.Sub("copy_back",
                                      [](std::span<const HostTensor> t) {
                                          std::memcpy(t[1].data(), t[0].data(), t[0].bytes());
                                      },
                                      {In(tmp), InOut(x[0])});
                            }
                        }};
    w().Run(p, {acc, one});
    for (float v : acc.floats()) ASSERT_EQ(v, 9.0f);
}

// An in-place call (In(x) with Out(x) or InOut(x) of the same bytes) whose
// function reads elements it already wrote: on another rank's device each
// argument is a copy of its own, so the In argument holds x as the call
// began. On this rank's device the two shared one copy, and the same
// reversal gave a mirrored first half instead (placement decided the
// answer). Both devices, both written kinds: the reversal, element for
// element.
TEST_F(MultiHostTest, AnInPlaceCallReadsItsInputAsItWasOnEveryPlacement) {
    auto reverse = [](ChipContext& ctx) {  // out[i] = in[n - 1 - i], in order
        const auto* in = static_cast<const float*>(ctx.args[0]);
        auto* out = static_cast<float*>(ctx.args[1]);
        const size_t n = ctx.bytes[0] / sizeof(float);
        for (size_t i = 0; i < n; ++i) out[i] = in[n - 1 - i];
    };
    Start(2, std::chrono::milliseconds(5000), {1}, [&](Worker& w) { w.RegisterChipFunction("reverse", reverse); });
    for (const Access written : {Access::Out, Access::InOut}) {
        for (size_t device = 0; device < 2; ++device) {
            const HostTensor x = Iota(1.0f, 0.0f, 4, kTile);
            const std::vector<float> before(x.floats().begin(), x.floats().end());
            const HostProgram p{"in_place", 1, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                                    g.Chip("reverse", {In(t[0]), TensorArg{t[0], written}}, {.device = device});
                                }};
            w().Run(p, {x});
            const auto now = x.floats();
            for (size_t i = 0; i < before.size(); ++i)
                ASSERT_EQ(now[i], before[before.size() - 1 - i])
                    << "device " << device << " (" << w().DescribeDevice(device) << "), "
                    << (written == Access::Out ? "Out" : "InOut") << ", element " << i;
        }
    }
}

// An in-place call's written argument reaches the chip function with the
// access the task gave it, on every placement: another rank's device saw
// an in-place Out as InOut, so a function that asks (ctx.access) answered
// otherwise there (found probing from outside). Its first half (written)
// and second half (left: the In's bytes) come back the same too.
TEST_F(MultiHostTest, AnInPlaceOutIsAnOutToTheFunctionOnEveryPlacement) {
    auto tag = [](ChipContext& ctx) {  // out[i] = in[i] + 1000 if it is told Out, + 2000 if InOut, first half
        const auto* in = static_cast<const float*>(ctx.args[0]);
        auto* out = static_cast<float*>(ctx.args[1]);
        const float add = ctx.access.at(1) == Access::Out ? 1000.0f : ctx.access.at(1) == Access::InOut ? 2000.0f : 0.0f;
        for (size_t i = 0; i < ctx.bytes[0] / sizeof(float) / 2; ++i) out[i] = in[i] + add;
    };
    Start(2, std::chrono::milliseconds(5000), {1}, [&](Worker& w) { w.RegisterChipFunction("tag", tag); });
    for (const Access written : {Access::Out, Access::InOut}) {
        for (size_t device = 0; device < 2; ++device) {
            const HostTensor x = Iota(1.0f, 0.0f, 4, kTile);
            const std::vector<float> before(x.floats().begin(), x.floats().end());
            const HostProgram p{"in_place", 1, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                                    g.Chip("tag", {In(t[0]), TensorArg{t[0], written}}, {.device = device});
                                }};
            w().Run(p, {x});
            const float add = written == Access::Out ? 1000.0f : 2000.0f;
            const auto now = x.floats();
            for (size_t i = 0; i < before.size(); ++i)
                ASSERT_EQ(now[i], i < before.size() / 2 ? before[i] + add : before[i])
                    << "device " << device << " (" << w().DescribeDevice(device) << "), "
                    << (written == Access::Out ? "Out" : "InOut") << ", element " << i;
        }
    }
}

// A chip function that writes only the first half of its output, after a
// call that left other bytes (-123) in device memory: the half it leaves
// comes back as zeros from a plain Out, and as the input's bytes from an
// in-place Out, on this rank's device and on another's. Another rank's
// device gave back the earlier call's -123 in both cases (its copies are
// new each call, over memory a freed copy held: found probing from outside).
TEST_F(MultiHostTest, TheBytesAnOutputLeavesComeBackTheSameOnEveryPlacement) {
    auto fill = [](ChipContext& ctx) {
        auto* out = static_cast<float*>(ctx.args[0]);
        for (size_t i = 0; i < ctx.bytes[0] / sizeof(float); ++i) out[i] = -123.0f;
    };
    auto half = [](ChipContext& ctx) {  // out[i] = in[i] + 100 (or 7 without an input) for the first half
        const bool in_place = ctx.args.size() == 2;
        const auto* in = static_cast<const float*>(ctx.args[0]);
        auto* out = static_cast<float*>(ctx.args[in_place ? 1 : 0]);
        const size_t n = ctx.bytes[0] / sizeof(float);
        for (size_t i = 0; i < n / 2; ++i) out[i] = in_place ? in[i] + 100.0f : 7.0f;
    };
    Start(2, std::chrono::milliseconds(5000), {1}, [&](Worker& w) {
        w.RegisterChipFunction("fill", fill);
        w.RegisterChipFunction("half", half);
    });
    for (size_t device = 0; device < 2; ++device) {
        const std::string where = "device " + std::to_string(device) + " (" + w().DescribeDevice(device) + ")";
        const HostProgram stale{"stale", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                                    for (int k = 0; k < 2; ++k)
                                        g.Chip("fill", {Out(g.CreateTensor({kTile, kTile}))}, {.device = device});
                                }};
        w().Run(stale, {});
        const HostTensor y = HostTensor::Full({kTile, kTile}, 5.0f);
        const HostProgram plain{"plain", 1, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                                    g.Chip("half", {Out(t[0])}, {.device = device});
                                }};
        w().Run(plain, {y});
        const auto yv = y.floats();
        for (size_t i = 0; i < yv.size(); ++i)
            ASSERT_EQ(yv[i], i < yv.size() / 2 ? 7.0f : 0.0f) << where << ", plain Out, element " << i;
        w().Run(stale, {});
        const HostTensor x = Iota(1.0f, 0.0f, kTile, kTile);
        const std::vector<float> before(x.floats().begin(), x.floats().end());
        const HostProgram in_place{"in_place", 1, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                                       g.Chip("half", {In(t[0]), Out(t[0])}, {.device = device});
                                   }};
        w().Run(in_place, {x});
        const auto xv = x.floats();
        for (size_t i = 0; i < xv.size(); ++i)
            ASSERT_EQ(xv[i], i < xv.size() / 2 ? before[i] + 100.0f : before[i]) << where << ", in-place Out, element " << i;
    }
}

// Six row blocks over three ranks' devices: placement weighs rank 0's queue
// against shipping a block's inputs, so rank 0 takes more than its share,
// but every rank takes some.
TEST_F(MultiHostTest, RowParallelMatmulOverAllRanksMatchesTheCpu) {
    Start(3);
    const int64_t m = 6 * 64, k = 128, n = 128;
    const HostTensor a = Iota(0.01f, -1.0f, m, k), b = Iota(0.02f, 0.5f, k, n);
    HostTensor c = HostTensor::Zeros({m, n});
    w().Run(RowParallelMatmul(m, n, 6), {a, b, c});
    auto av = a.floats(), bv = b.floats(), cv = c.floats();
    // Each error against the scale of its terms (sum |a||b|): float32 sums
    // of 128 terms that cancel may be off by k * eps of that scale, far more
    // than of their result, and how far depends on the host BLAS's kernel.
    double worst = 0;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double ref = 0, scale = 0;
            for (int64_t x = 0; x < k; ++x) {
                const double term = double(av[size_t(i * k + x)]) * double(bv[size_t(x * n + j)]);
                ref += term;
                scale += std::abs(term);
            }
            worst = std::max(worst, std::abs(ref - double(cv[size_t(i * n + j)])) / std::max(1.0, scale));
        }
    EXPECT_LT(worst, double(k) * std::numeric_limits<float>::epsilon());
    uint64_t total = 0;
    for (size_t d = 0; d < 3; ++d) {
        EXPECT_GE(w().Stats(d).chip_tasks, 1u) << "device " << d;
        total += w().Stats(d).chip_tasks;
    }
    EXPECT_EQ(total, 6u);
}

TEST_F(MultiHostTest, AFaultOnAnotherRankNamesItAndTheWorkerGoesOn) {
    Start(2);
    HostTensor x = HostTensor::Zeros({kTile, kTile});
    const HostTensor sent = Iota(1.0f, 0.0f);
    const HostProgram bad{"l4_fault", 2, {}, [](HostGraph& g, std::span<const HostTensor> a) {
                              g.Chip("chip_fault", {In(a[1]), Out(a[0])}, {.name = "faulty", .device = 1});
                              g.Sub("after", [](std::span<const HostTensor>) {}, {In(a[0])});
                          }};
    const uint64_t uploaded = w().Stats(1).moved.bytes_uploaded;
    try {
        w().Run(bad, {x, sent});
        FAIL() << "the fault was not reported";
    } catch (const HostRunError& e) {
        ASSERT_EQ(e.failures().size(), 1u);
        const TaskFailureInfo& f = e.failures()[0];
        EXPECT_EQ(f.task, "faulty");
        EXPECT_NE(f.device.find("rank 1"), std::string::npos) << f.device;
        EXPECT_EQ(f.kind, ErrorKind::DeviceError) << e.what();
        EXPECT_NE(f.device_code, 0u) << e.what();
        EXPECT_NE(f.cause.find("rank 1"), std::string::npos) << f.cause;
        ASSERT_EQ(e.skipped().size(), 1u);
    }
    // What the failed call sent counts (it said 0: found probing).
    EXPECT_EQ(w().Stats(1).moved.bytes_uploaded - uploaded, sent.bytes());
    // The same worker runs the next program on the same remote device.
    ExpectAnAddOnRank1(Iota(1.0f, 0.0f), Iota(2.0f, 1.0f));
}

// A chip call past the reply bound fails its task with Timeout; the rank
// is healthy and its late reply is dropped, so the next runs on it succeed.
// Before, the late reply reached the next call's wait, and every later run
// on rank 1 failed with ProtocolError "rank 1 replied to call N, which it
// was never sent" (each call taking the previous one's reply).
TEST_F(MultiHostTest, ACallPastTheReplyBoundTimesOutAndLaterCallsToTheRankSucceed) {
    ReleaseHeldAtEnd release_at_end;
    reply_timeout_ = std::chrono::milliseconds(1000);
    Start(2, std::chrono::milliseconds(5000), {1}, RegisterHeldSub);
    const HostTensor a = Iota(1.0f, 0.0f), b = Iota(2.0f, 1.0f);
    HostTensor d = HostTensor::Zeros({kTile, kTile});
    const HostProgram held{"held", 3, {}, [](HostGraph& g, std::span<const HostTensor> t) {
                               g.Chip("held_sub", {In(t[0]), In(t[1]), Out(t[2])}, {.name = "held", .device = 1});
                           }};
    try {
        w().Run(held, {a, b, d});
        FAIL() << "the call past the reply bound did not time out";
    } catch (const HostRunError& e) {
        ASSERT_EQ(e.failures().size(), 1u) << e.what();
        EXPECT_EQ(e.failures()[0].task, "held");
        EXPECT_EQ(e.failures()[0].kind, ErrorKind::Timeout) << e.what();
    }
    held_release = true;  // its reply now comes, after the call gave up on it
    for (int run = 0; run < 3; ++run) ExpectAnAddOnRank1(a, b, run);
}

// A call that timed out still runs on its device of the serving rank, and
// rank 0 may send that device another call meanwhile. Neither may hold up
// the rank's other devices: each device's calls have threads of their own.
// Before, the rank's call threads were one pool as large as its devices'
// rooms, so the second call to the busy device took the last thread (to
// wait there for the device) and a call to the idle device timed out
// (outside probe). The timeout names the reply bound: the transport's own
// message named what was left of it ("within 101 ms").
TEST_F(MultiHostTest, ACallStillRunningOnOneDeviceDoesNotHoldUpAnotherOfItsRank) {
    ReleaseHeldAtEnd release_at_end;
    reply_timeout_ = std::chrono::milliseconds(2000);
    Start(2, std::chrono::milliseconds(5000), {0, 1}, RegisterHeldSub);
    ASSERT_EQ(w().device_count(), 4u);  // rank 1's PF and VF are devices 2 and 3
    const HostTensor a = Iota(1.0f, 0.0f), b = Iota(2.0f, 1.0f);
    auto on = [](const char* function, size_t device) {
        return HostProgram{"on", 2, {{{kTile, kTile}}}, [=](HostGraph& g, std::span<const HostTensor> t) {
                               g.Chip(function, {In(t[0]), In(t[1]), Out(t[2])}, {.device = device});
                           }};
    };
    const HostProgram held = on("held_sub", 2), add_on_busy = on("chip_add", 2), add_on_idle = on("chip_add", 3);
    try {
        w().Run(held, {a, b});
        FAIL() << "the held call did not time out";
    } catch (const HostRunError& e) {
        EXPECT_EQ(e.failures()[0].kind, ErrorKind::Timeout) << e.what();
        EXPECT_NE(e.failures()[0].cause.find("sent no reply to call"), std::string::npos) << e.what();
        EXPECT_NE(e.failures()[0].cause.find("within 2000 ms"), std::string::npos) << e.what();
    }
    // Another call to the busy device: it waits there for the held one.
    RunHandle behind = w().Submit(add_on_busy, {a, b});
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // sent, and taken by rank 1
    HostTensor sum;
    ASSERT_NO_THROW(sum = w().Run(add_on_idle, {a, b}).at(0)) << "the idle device waited for the busy one";
    auto av = a.floats(), bv = b.floats(), sv = sum.floats();
    for (size_t i = 0; i < sv.size(); ++i) ASSERT_EQ(sv[i], av[i] + bv[i]) << "element " << i;
    EXPECT_THROW(behind.Wait(), HostRunError);  // it, too, waited past the bound
    held_release = true;
    // Both devices serve on once the held call ends.
    for (const HostProgram* p : {&add_on_busy, &add_on_idle}) {
        HostTensor f;
        ASSERT_NO_THROW(f = w().Run(*p, {a, b}).at(0));
        for (size_t i = 0; i < sv.size(); ++i) ASSERT_EQ(f.floats()[i], av[i] + bv[i]) << "element " << i;
    }
}

// Calls that timed out still run on their remote devices (both of rank 1's
// here); until their late replies come, placement counts each as a reply
// bound of work there. Before, the devices looked idle, unpinned tasks
// went behind the held calls and timed out while rank 0's devices idled
// (outside probe: 24 adds failed).
TEST_F(MultiHostTest, UnpinnedTasksAvoidADeviceStillRunningACallThatTimedOut) {
    ReleaseHeldAtEnd release_at_end;
    reply_timeout_ = std::chrono::milliseconds(1500);
    Start(2, std::chrono::milliseconds(5000), {0, 1}, RegisterHeldSub);
    ASSERT_EQ(w().device_count(), 4u);
    const HostTensor a = Iota(1.0f, 0.0f), b = Iota(2.0f, 1.0f);
    HostTensor h2 = HostTensor::Zeros({kTile, kTile}), h3 = HostTensor::Zeros({kTile, kTile});
    const HostProgram held{"held", 2, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                               g.Chip("held_sub", {In(t[0]), In(t[1]), Out(h2)}, {.device = 2});
                               g.Chip("held_sub", {In(t[0]), In(t[1]), Out(h3)}, {.device = 3});
                           }};
    EXPECT_THROW(w().Run(held, {a, b}), HostRunError);
    std::vector<HostTensor> sums;
    for (int i = 0; i < 24; ++i) sums.push_back(HostTensor::Zeros({kTile, kTile}));
    const HostProgram adds{"adds", 2, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                               for (HostTensor& s : sums) g.Chip("chip_add", {In(t[0]), In(t[1]), Out(s)});
                           }};
    RunHandle run = w().Submit(adds, {a, b});
    ASSERT_NO_THROW(run.Wait()) << "a task went behind the held call";
    for (const TaskRecord& r : run.Report()) {
        EXPECT_NE(r.device, w().DescribeDevice(2)) << r.name;
        EXPECT_NE(r.device, w().DescribeDevice(3)) << r.name;
    }
    auto av = a.floats(), bv = b.floats();
    for (const HostTensor& s : sums)
        for (size_t i = 0; i < av.size(); ++i) ASSERT_EQ(s.floats()[i], av[i] + bv[i]) << "element " << i;
    // Once the held calls end, their late replies are read and the devices
    // take work again. Before, nothing read them while placement avoided
    // the rank: both counted busy for good (an outside probe: 96 of 96
    // adds on rank 0).
    held_release = true;
    bool used_again = false;
    for (int round = 0; round < 40 && !used_again; ++round) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        RunHandle again = w().Submit(adds, {a, b});
        ASSERT_NO_THROW(again.Wait());
        for (const TaskRecord& r : again.Report())
            used_again |= r.device == w().DescribeDevice(2) || r.device == w().DescribeDevice(3);
    }
    EXPECT_TRUE(used_again) << "rank 1's devices took no unpinned task in 40 runs after their held calls ended";
}

// A chip function that throws something other than a std::exception on the
// serving rank fails its task as it would on rank 0 (TaskFailed, "an
// exception that is not a std::exception"), naming rank and task, and the
// rank goes on serving. Before, it escaped rank 1's call thread
// (std::terminate): the whole process died.
TEST_F(MultiHostTest, AChipFunctionThrowingANonStdExceptionOnAnotherRankFailsItsTask) {
    mock_args_ = {"--cores", "16"};  // room 2: rank 1 answers calls on threads of their own
    Start(2, std::chrono::milliseconds(5000), {1}, [](Worker& w) {
        w.RegisterChipFunction("throw_int", [](ChipContext&) { throw 42; });
    });
    const HostTensor a = Iota(1.0f, 0.0f), b = Iota(2.0f, 1.0f);
    HostTensor x = HostTensor::Zeros({kTile, kTile});
    const HostProgram bad{"l4_throw_int", 2, {}, [](HostGraph& g, std::span<const HostTensor> t) {
                              g.Chip("throw_int", {In(t[0]), Out(t[1])}, {.name = "thrower", .device = 1});
                          }};
    try {
        w().Run(bad, {a, x});
        FAIL() << "the throw was not reported";
    } catch (const HostRunError& e) {
        ASSERT_EQ(e.failures().size(), 1u) << e.what();
        const TaskFailureInfo& f = e.failures()[0];
        EXPECT_EQ(f.task, "thrower");
        EXPECT_EQ(f.kind, ErrorKind::TaskFailed) << e.what();
        EXPECT_NE(f.device.find("rank 1"), std::string::npos) << f.device;
        EXPECT_NE(f.cause.find("rank 1"), std::string::npos) << f.cause;
        EXPECT_NE(f.cause.find("'thrower'"), std::string::npos) << f.cause;
        EXPECT_NE(f.cause.find("an exception that is not a std::exception: the int 42"), std::string::npos) << f.cause;
    }
    ExpectAnAddOnRank1(a, b);
}

// ~MultiHostWorker while a run is in flight (its RunHandle outlives the
// worker): the run finishes, then the serving ranks are released. Before,
// Shutdown went out first, and the run's second task on rank 1 failed with
// DeviceLost ("left the run: its transport shut down").
TEST_F(MultiHostTest, DestroyingTheWorkerLetsARunInFlightFinishFirst) {
    static std::atomic<bool> started{false};
    started = false;
    reply_timeout_ = std::chrono::milliseconds(10000);  // a call nobody answers fails the test, not hangs it
    Start(2, std::chrono::milliseconds(5000), {1}, [](Worker& w) {
        w.RegisterChipFunction("slow_sub", [](ChipContext& ctx) {
            started = true;
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            ChipSub(ctx);
        });
    });
    const HostTensor a = Iota(1.0f, 0.0f), b = Iota(2.0f, 1.0f);
    HostTensor d = HostTensor::Zeros({kTile, kTile}), f = HostTensor::Zeros({kTile, kTile});
    const HostProgram p{"in_flight", 4, {}, [](HostGraph& g, std::span<const HostTensor> t) {
                            g.Chip("slow_sub", {In(t[0]), In(t[1]), Out(t[2])}, {.name = "slow", .device = 1});
                            g.Chip("chip_add", {In(t[2]), In(t[1]), Out(t[3])}, {.name = "after slow", .device = 1});
                        }};
    RunHandle h = w().Submit(p, {a, b, d, f});
    for (int i = 0; i < 2000 && !started.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(started.load()) << "the slow task never started on rank 1";
    worker_.reset();
    ASSERT_NO_THROW(h.Wait());
    auto av = a.floats(), bv = b.floats(), fv = f.floats();
    for (size_t i = 0; i < fv.size(); ++i) ASSERT_EQ(fv[i], (av[i] - bv[i]) + bv[i]) << "element " << i;
}

TEST_F(MultiHostTest, ASilentRankFailsItsTasksNamingItInsteadOfHanging) {
    Start(2, std::chrono::milliseconds(1000));
    fabric_->Stop(1);
    HostTensor f = HostTensor::Zeros({kTile, kTile});
    const HostTensor a = Iota(1.0f, 0.0f);
    const HostProgram p{"l4_lost", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> t) {
                            g.Chip("chip_add", {In(t[0]), In(t[1]), Out(t[2])}, {.name = "on the lost rank", .device = 1});
                        }};
    try {
        w().Run(p, {a, a, f});
        FAIL() << "the lost rank was not reported";
    } catch (const HostRunError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::DeviceLost) << e.what();
        EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    }
    // Tasks placed freely go to the live devices: the lost rank's took some
    // of every later run, which failed with this rank's device idle (found
    // probing from outside). Six at once outweigh a remote call's cost.
    constexpr int kTasks = 6;
    const HostProgram spread{"l4_after_the_loss", 2, {}, [&](HostGraph& g, std::span<const HostTensor> t) {
                                 for (int i = 0; i < kTasks; ++i)
                                     g.Chip("chip_add", {In(t[0]), In(t[1]), Out(g.CreateTensor({kTile, kTile}))});
                             }};
    for (int run = 0; run < 5; ++run) {
        RunHandle h = w().Submit(spread, {a, a});
        ASSERT_NO_THROW(h.Wait()) << "run " << run;
        for (const TaskRecord& r : h.Report()) EXPECT_EQ(r.device, w().DescribeDevice(0)) << r.name;
    }
    // Rank 1 is still serving (stopped, not dead): rank 0 falls silent too,
    // so that it stops, as a rank whose controller is lost must.
    worker_.reset();
    fabric_->Stop(0);
    ASSERT_EQ(servers_[0].wait_for(std::chrono::seconds(30)), std::future_status::ready) << "rank 1 hangs";
    const std::string r = servers_[0].get();
    servers_.clear();
    EXPECT_NE(r.find("rank 0"), std::string::npos) << r;
}

// Four chip tasks held on rank 1 (two devices with room for two each), all
// in flight; then rank 1 goes (`lose`: falls silent, or sends a malformed
// frame). Every one of the four must fail with a typed error naming rank 1,
// none may hang.
// Returns how many failed with each kind.
std::map<ErrorKind, int> FailFourCallsInFlight(Worker& w, std::atomic<int>& started, std::atomic<bool>& release,
                                              const std::function<void()>& lose) {
    std::map<ErrorKind, int> kinds;
    EXPECT_EQ(w.device_count(), 4u);
    EXPECT_GE(w.ChipTasksAtOnce(2), 2u);
    EXPECT_GE(w.ChipTasksAtOnce(3), 2u);
    const HostTensor a = Iota(1.0f, 0.0f);
    std::vector<HostTensor> outs;
    for (int i = 0; i < 4; ++i) outs.push_back(HostTensor::Zeros({kTile, kTile}));
    const HostProgram p{"held", 1, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                            for (size_t i = 0; i < 4; ++i)
                                g.Chip("held_sub", {In(x[0]), In(x[0]), Out(outs[i])},
                                       {.name = "held " + std::to_string(i), .device = 2 + i % 2});
                        }};
    auto run = std::async(std::launch::async, [&] { w.Run(p, {a}); });
    for (int i = 0; i < 2000 && started.load() < 4; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(started.load(), 4) << "the four calls were not in flight at once on rank 1";
    lose();
    if (run.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
        ADD_FAILURE() << "rank 0 hangs on the lost calls";
        release = true;
        return kinds;
    }
    try {
        run.get();
        ADD_FAILURE() << "the lost calls were not reported";
    } catch (const HostRunError& e) {
        EXPECT_EQ(e.failures().size(), 4u) << e.what();
        for (const TaskFailureInfo& f : e.failures()) {
            ++kinds[f.kind];
            EXPECT_NE(f.cause.find("rank 1"), std::string::npos) << f.cause;
            EXPECT_NE(f.device.find("rank 1"), std::string::npos) << f.device;
        }
    }
    release = true;
    return kinds;
}

TEST_F(MultiHostTest, ARankLostWithSeveralCallsInFlightFailsEveryOne) {
    held_started = 0;
    held_release = false;
    mock_args_ = {"--cores", "16"};
    Start(2, std::chrono::milliseconds(1000), {0, 1}, RegisterHeldSub);
    const auto kinds = FailFourCallsInFlight(w(), held_started, held_release, [&] { fabric_->Stop(1); });
    EXPECT_EQ(kinds, (std::map<ErrorKind, int>{{ErrorKind::DeviceLost, 4}}));
    worker_.reset();
    fabric_->Stop(0);
    ASSERT_EQ(servers_[0].wait_for(std::chrono::seconds(30)), std::future_status::ready) << "rank 1 hangs";
    servers_.clear();
}

// A malformed frame from the serving rank: the call whose wait read it fails
// with ProtocolError, and the rank is cut off, so the others fail with
// DeviceLost.
TEST_F(MultiHostTest, AMalformedFrameWithSeveralCallsInFlightFailsEveryOne) {
    held_started = 0;
    held_release = false;
    mock_args_ = {"--cores", "16"};
    Start(2, std::chrono::milliseconds(1000), {0, 1}, RegisterHeldSub);
    const std::vector<uint8_t> garbage = {'J', 'U', 'N', 'K', 1, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    const auto kinds = FailFourCallsInFlight(w(), held_started, held_release, [&] { fabric_->InjectFrame(1, 0, garbage, {}); });
    EXPECT_EQ(kinds, (std::map<ErrorKind, int>{{ErrorKind::ProtocolError, 1}, {ErrorKind::DeviceLost, 3}}));
    worker_.reset();
    fabric_->Stop(0);
    ASSERT_EQ(servers_[0].wait_for(std::chrono::seconds(30)), std::future_status::ready) << "rank 1 hangs";
    servers_.clear();
}

}  // namespace

// Rank 0 runs the programs: Serve there is refused. A device id another
// rank does not have fails the constructor with NotFound naming the rank
// (rank 0 has 3 functions, rank 1 only 2); rank 1 then sees its controller
// go and stops serving instead of waiting forever.
TEST(MultiHostErrors, ServeOnRankZeroAndADeviceAnotherRankLacks) {
    SPYRE_REQUIRE_FUSE();
    auto fabric = host::InProcessFabric::Create(2, {.heartbeat_interval = std::chrono::milliseconds(100),
                                                    .silence_bound = std::chrono::milliseconds(2000)});
    auto server = std::async(std::launch::async, [t = fabric->Take(1)]() mutable -> std::string {
        try {
            Host host = OwnCard();
            MultiHostWorker w(*t, host, {.device_ids = {1}});
            w.Serve();
            return "served";
        } catch (const Error& e) {
            return std::string("error: ") + e.what();
        }
    });
    {
        auto rank0 = fabric->Take(0);
        Host host = Host::Open(HostOptions::EmbeddedMock(1, 2, "1G"));
        EXPECT_SPYRE_ERROR(MultiHostWorker(*rank0, host, {.device_ids = {2}}), NotFound,
                           "DistributedConfig: device_ids[0] is 2, but rank 1 (inproc-1) has 2 function(s)");
        // Rank 1 opened device 1 (its VF) alone: rank 0 naming others was
        // taken, and each call ran on a device rank 0 named differently, or
        // failed NotFound (outside probe).
        EXPECT_SPYRE_ERROR(MultiHostWorker(*rank0, host, {.device_ids = {0}}), InvalidArgument,
                           "DistributedConfig: device_ids[0] is 0, 0000:01:00.0 on rank 1 (inproc-1), but that rank "
                           "serves 0000:01:00.1 as its device 0: every rank must open the same device_ids, in the same "
                           "order");
        EXPECT_SPYRE_ERROR(MultiHostWorker(*rank0, host, {.device_ids = {1, 0}}), InvalidArgument,
                           "DistributedConfig: rank 0's device_ids name 2 device(s), but rank 1 (inproc-1) serves 1: "
                           "every rank must open the same device_ids");
        MultiHostWorker ok(*rank0, host, {.device_ids = {1}});
        EXPECT_SPYRE_ERROR(ok.Serve(), InvalidArgument, "MultiHostWorker::Serve: rank 0 runs the programs, it does not serve");
        EXPECT_EQ(ok.worker().device_count(), 2u);
    }  // ok's destructor tells rank 1 to stop
    ASSERT_EQ(server.wait_for(std::chrono::seconds(30)), std::future_status::ready) << "rank 1 hangs";
    EXPECT_EQ(server.get(), "served");
}

// A rank that never serves (alive, but it does not build its
// MultiHostWorker) fails rank 0's constructor with a Timeout that says
// what did not come: the rank's description of its devices. It said "sent
// no reply to call 1", and a lost rank "chip call 'describe' (function
// '')", for a request no program made (found probing from outside).
TEST(MultiHostErrors, ARankThatNeverDescribesItsDevicesIsNamedForIt) {
    SPYRE_REQUIRE_FUSE();
    auto fabric = host::InProcessFabric::Create(2, {.heartbeat_interval = std::chrono::milliseconds(100),
                                                    .silence_bound = std::chrono::milliseconds(2000)});
    auto rank1 = fabric->Take(1);  // alive (its heartbeats go), never serving
    auto rank0 = fabric->Take(0);
    Host host = Host::Open(HostOptions::EmbeddedMock(1, 2, "1G"));
    EXPECT_SPYRE_ERROR(MultiHostWorker(*rank0, host, {.device_ids = {1}}, std::chrono::milliseconds(300)), Timeout,
                       "rank 1 did not describe its devices within 300 ms (is it serving?");
}
