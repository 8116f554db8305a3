// SPDX-License-Identifier: Apache-2.0
// Device copies kept between runs never change a result: whatever way the
// caller writes host memory between two runs on one Worker (floats(), a
// pointer from data() kept since before the first run, memory a tensor
// wraps, a task's output written afterwards), the next run computes with
// the new bytes, checked against the CPU; what did not change is still not
// uploaded again. An embedded mock of 2 cards x 2 VFs (worker_fixture.hpp).
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "l3_chip_functions.hpp"
#include "worker_fixture.hpp"
#include "spyre/host.hpp"

using namespace spyre;
using namespace spyre::l3;

namespace {

// f = a + b on Worker device `device`, without a SubWorker.
HostProgram AddOn(size_t device) {
    return {"add_on", 2, {{{kTile, kTile}}}, [device](HostGraph& g, std::span<const HostTensor> x) {
                g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.device = device});
            }};
}

// Every element of `got` against the CPU's a + b.
void ExpectSum(const HostTensor& got, const HostTensor& a, const HostTensor& b, const std::string& what) {
    auto f = got.floats(), x = a.floats(), y = b.floats();
    for (size_t i = 0; i < f.size(); ++i)
        if (f[i] != x[i] + y[i]) {
            ADD_FAILURE() << what << ": element " << i << " is " << f[i] << ", the CPU's a + b is " << x[i] + y[i];
            return;
        }
}

}  // namespace

// Seed 003's dependency program with a = 2, b = 4 (f = 6), then b = 3
// written through floats(): the same Worker computes f = 5. Placement sends
// the second run to the device that holds a and b, so it is the device copy
// of b that must not be trusted. a did not change: it is not uploaded again.
TEST_F(WorkerTest, AWriteThroughFloatsIsSeenByTheNextRun) {
    HostProgram p{"l3_dependency", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])});
                      g.Sub("check", [](std::span<const HostTensor> t) {  // the seed's verify, against the CPU
                          for (size_t i = 0; i < t[2].floats().size(); ++i)
                              if (t[2].floats()[i] != t[0].floats()[i] + t[1].floats()[i])
                                  throw std::runtime_error("f[" + std::to_string(i) + "] = " + std::to_string(t[2].floats()[i]));
                      }, {In(x[0]), In(x[1]), In(x[2])});
                  }};
    HostTensor a = HostTensor::Full({kTile, kTile}, 2.0f), b = HostTensor::Full({kTile, kTile}, 4.0f);
    HostTensor f = HostTensor::Zeros({kTile, kTile});
    worker_->Run(p, {a, b, f});
    ExpectSum(f, a, b, "f, first run");
    const auto before = AllStats();

    for (float& x : b.floats()) x = 3.0f;
    EXPECT_NO_THROW(worker_->Run(p, {a, b, f}));
    for (float x : f.floats()) ASSERT_EQ(x, 5.0f);
    const auto after = AllStats();
    uint64_t uploaded = 0, reused = 0;
    for (size_t d = 0; d < after.size(); ++d) {
        uploaded += after[d].moved.bytes_uploaded - before[d].moved.bytes_uploaded;
        reused += after[d].moved.bytes_reused - before[d].moved.bytes_reused;
    }
    EXPECT_EQ(uploaded, kTileBytes) << "b again";
    EXPECT_EQ(reused, kTileBytes) << "a, unchanged";
}

// A pointer from data() taken before the first run and kept: one element
// written through it between the runs is seen.
TEST_F(WorkerTest, APointerKeptSinceBeforeTheFirstRunIsSeen) {
    HostTensor a = HostTensor::Full({kTile, kTile}, 1.0f), b = HostTensor::Full({kTile, kTile}, 4.0f);
    auto* raw = static_cast<float*>(a.data());
    raw[7] = 0.5f;
    auto outs = worker_->Run(AddOn(0), {a, b});
    ExpectSum(outs[0], a, b, "first run");
    raw[kTile * kTile - 1] = 10.0f;  // the last element alone
    outs = worker_->Run(AddOn(0), {a, b});
    EXPECT_EQ(outs[0].floats()[kTile * kTile - 1], 14.0f);
    ExpectSum(outs[0], a, b, "second run");
}

// Memory a tensor wraps (HostTensor::Wrap, as Python wraps numpy arrays),
// written by its owner between the runs.
TEST_F(WorkerTest, WrappedMemoryWrittenByItsOwnerIsSeen) {
    auto memory = std::make_shared<std::vector<float>>(size_t(kTile * kTile), 2.0f);
    HostTensor a = HostTensor::Wrap(memory->data(), {kTile, kTile}, DType::FP32, memory);
    HostTensor b = HostTensor::Full({kTile, kTile}, 0.25f);
    auto outs = worker_->Run(AddOn(1), {a, b});
    ExpectSum(outs[0], a, b, "first run");
    for (size_t i = 0; i < memory->size(); ++i) (*memory)[i] = float(i % 100);
    outs = worker_->Run(AddOn(1), {a, b});
    ExpectSum(outs[0], a, b, "second run");
}

// A task's output copied back (f = a + b on device 2: its device copy holds
// f), then written by the caller, then read by a task on the same device:
// g = f - b sees the caller's f, not the device's.
TEST_F(WorkerTest, AnOutputWrittenByTheCallerIsSeenByTheNextReader) {
    HostTensor a = HostTensor::Full({kTile, kTile}, 1.0f), b = HostTensor::Full({kTile, kTile}, 2.0f);
    HostTensor f = HostTensor::Zeros({kTile, kTile});
    worker_->Run(AddOn(2), {a, b, f});
    ExpectSum(f, a, b, "f");
    for (float& x : f.floats()) x = 10.0f;
    HostProgram sub{"sub_on", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                        g.Chip("chip_sub", {In(x[0]), In(x[1]), Out(x[2])}, {.device = 2});
                    }};
    auto outs = worker_->Run(sub, {f, b});
    for (float x : outs[0].floats()) ASSERT_EQ(x, 8.0f) << "10 - 2";
}

// A chip task that writes its output's device copy and then faults leaves
// that copy unknown: the host range still holds what it held before, and
// the next reader on the device uploads it rather than trust the copy.
TEST_F(WorkerTest, ACopyAFailedTaskWroteIsNotReused) {
    HostTensor a = HostTensor::Full({kTile, kTile}, 1.0f), b = HostTensor::Full({kTile, kTile}, 2.0f);
    HostTensor f = HostTensor::Zeros({kTile, kTile});
    worker_->Run(AddOn(3), {a, b, f});  // f = 3 on the host and in device 3's copy
    worker_->RegisterChipFunction("scribble_then_fault", [](ChipContext& ctx) {
        TaskParam p[] = {{PARAM_INPUT, ctx.args[0], kTileBytes, {}},
                         {PARAM_INPUT, ctx.args[0], kTileBytes, {}},
                         {PARAM_OUTPUT, ctx.args[1], kTileBytes, {}}};
        ctx.orch.Submit(KERNEL_SUB, WORKER_VECTOR, p);  // f's copy = 0
        ChipFault(ctx);
    });
    HostProgram fault{"fault", 1, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                          g.Chip("scribble_then_fault", {In(x[0]), InOut(x[1])}, {.device = 3});
                      }};
    EXPECT_THROW(worker_->Run(fault, {a, f}), HostRunError);
    for (float x : f.floats()) ASSERT_EQ(x, 3.0f) << "not copied back";
    HostProgram sub{"sub_on", 2, {{{kTile, kTile}}}, [](HostGraph& g, std::span<const HostTensor> x) {
                        g.Chip("chip_sub", {In(x[0]), In(x[1]), Out(x[2])}, {.device = 3});
                    }};
    auto outs = worker_->Run(sub, {f, b});
    for (float x : outs[0].floats()) ASSERT_EQ(x, 1.0f) << "3 - 2";
}

// Within one run, a kept copy that a call of the run checked is read by the
// run's calls submitted before that check without hashing the host bytes
// again (what the program wrote before submitting them, the check saw; a
// write after their submission races with a task in flight): b, read by
// four tasks on device 0 in the second run, all submitted while a SubWorker
// holds b, is hashed once, and never uploaded again.
TEST_F(WorkerTest, ACopyOneRunCheckedIsNotCheckedAgainForCallsSubmittedBefore) {
    HostProgram four{"four_readers", 1, {}, [](HostGraph& g, std::span<const HostTensor> x) {
                         auto submitted = std::make_shared<std::promise<void>>();
                         g.Sub("hold", [all = submitted->get_future().share()](auto) { all.wait(); }, {InOut(x[0])});
                         for (int i = 0; i < 4; ++i) g.Chip("chip_empty", {In(x[0])}, {.device = 0});
                         submitted->set_value();
                     }};
    HostTensor b = HostTensor::Full({kTile, kTile}, 2.0f);
    worker_->Run(four, {b});  // the first upload: hashed while the device runs, not a check
    const Worker::DeviceStats before = worker_->Stats(0);
    worker_->Run(four, {b});
    const Worker::DeviceStats after = worker_->Stats(0);
    EXPECT_EQ(after.moved.bytes_checked - before.moved.bytes_checked, kTileBytes) << "one check for the run";
    EXPECT_EQ(after.moved.bytes_uploaded, before.moved.bytes_uploaded);
    EXPECT_EQ(after.moved.bytes_reused - before.moved.bytes_reused, 4 * kTileBytes);
}

// What the host orchestration function writes between two chip tasks of
// its run, after the first ended (a SubWorker tells it), is what the second
// reads: its device copy of t, read by the first, is checked again. Both in
// a run whose copies are new and in one whose copies are kept, and with an
// intermediate the function refills before each reader. The second reader
// used to compute with the first's bytes.
TEST_F(WorkerTest, AWriteByTheOrchestrationFunctionBetweenTwoReadersIsSeen) {
    HostTensor t = HostTensor::Full({kTile, kTile}, 1.0f), b = HostTensor::Full({kTile, kTile}, 3.0f);
    HostTensor o1 = HostTensor::Zeros({kTile, kTile}), o2 = HostTensor::Zeros({kTile, kTile});
    for (int run = 0; run < 2; ++run) {
        for (float& x : t.floats()) x = 1.0f;
        worker_->Run(HostProgram{"write_between", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                                     g.Chip("chip_add", {In(t), In(b), Out(o1)}, {.device = 0});
                                     auto ended = std::make_shared<std::promise<void>>();
                                     g.Sub("tell", [ended](auto) { ended->set_value(); }, {In(o1)});
                                     ended->get_future().wait();
                                     t.floats()[kTile + 1] = 50.0f;
                                     g.Chip("chip_add", {In(t), In(b), Out(o2)}, {.device = 0});
                                 }},
                     {});
        ExpectSum(o1, HostTensor::Full({kTile, kTile}, 1.0f), b, "run " + std::to_string(run) + ", the first reader");
        ExpectSum(o2, t, b, "run " + std::to_string(run) + ", the reader after the write");
    }
    std::vector<float> got;
    worker_->Run(HostProgram{"refill", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                                 HostTensor scratch = g.CreateTensor({kTile, kTile});
                                 for (int i = 0; i < 3; ++i) {
                                     for (float& x : scratch.floats()) x = float(i);
                                     HostTensor out = g.CreateTensor({kTile, kTile});
                                     g.Chip("chip_add", {In(scratch), In(b), Out(out)}, {.device = 0});
                                     auto seen = std::make_shared<std::promise<float>>();
                                     g.Sub("read", [seen](std::span<const HostTensor> o) { seen->set_value(o[0].floats()[7]); },
                                           {In(out)});
                                     got.push_back(seen->get_future().get());
                                 }
                             }},
                 {});
    EXPECT_EQ(got, (std::vector<float>{3.0f, 4.0f, 5.0f}));
}

// What a task of the run writes between two readers on one device is seen
// by the second, whoever writes it: a SubWorker on the host, or a chip task
// on another device (its output copied back). Each is checked against the
// CPU, in the first run (copies new) and in a second (copies kept).
TEST_F(WorkerTest, AWriteByATaskOfTheRunIsSeenByTheRunsNextReader) {
    worker_->RegisterSubWorker("add_one", [](std::span<const HostTensor> t) {
        for (float& x : t[0].floats()) x += 1.0f;
    });
    HostProgram p{"reread", 2, {{{kTile, kTile}}, {{kTile, kTile}}, {{kTile, kTile}}},
                  [](HostGraph& g, std::span<const HostTensor> x) {
                      // x: a, b, then outputs f1 = a + b, f2 = a + (b + 1), f3 = a + (a + a)
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[2])}, {.device = 0});
                      g.Sub("add_one", {InOut(x[1])});
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[3])}, {.device = 0});
                      g.Chip("chip_add", {In(x[0]), In(x[0]), Out(x[1])}, {.device = 1});
                      g.Chip("chip_add", {In(x[0]), In(x[1]), Out(x[4])}, {.device = 0});
                  }};
    HostTensor a = HostTensor::Full({kTile, kTile}, 1.0f), b = HostTensor::Full({kTile, kTile}, 2.0f);
    for (int run = 0; run < 2; ++run) {
        for (float& x : b.floats()) x = 2.0f;  // between runs
        const std::vector<HostTensor> outs = worker_->Run(p, {a, b});
        ASSERT_EQ(outs.size(), 3u);
        for (float x : outs[0].floats()) ASSERT_EQ(x, 3.0f) << "run " << run << ": 1 + 2";
        for (float x : outs[1].floats()) ASSERT_EQ(x, 4.0f) << "run " << run << ": 1 + (2 + 1), the SubWorker's b";
        for (float x : outs[2].floats()) ASSERT_EQ(x, 3.0f) << "run " << run << ": 1 + (1 + 1), device 1's b";
    }
}

// A chip function that writes part of its Out leaves zeros in the rest,
// the same on a device that kept a copy of the tensor from an earlier run
// as on one that makes a new copy: the kept copy held the first run's 3s,
// which came back over the 11s a SubWorker wrote in between (found probing
// from outside).
TEST_F(WorkerTest, TheBytesAnOutputLeavesAreZerosOnAKeptCopyAsOnANewOne) {
    worker_->RegisterChipFunction("fill_3", [](ChipContext& ctx) {
        auto* out = static_cast<float*>(ctx.args[0]);
        for (size_t i = 0; i < ctx.bytes[0] / sizeof(float); ++i) out[i] = 3.0f;
    });
    worker_->RegisterChipFunction("first_half_7", [](ChipContext& ctx) {
        auto* out = static_cast<float*>(ctx.args[0]);
        for (size_t i = 0; i < ctx.bytes[0] / sizeof(float) / 2; ++i) out[i] = 7.0f;
    });
    worker_->RegisterSubWorker("fill_11", [](std::span<const HostTensor> t) {
        for (float& x : t[0].floats()) x = 11.0f;
    });
    for (size_t device = 0; device < 2; ++device) {
        const std::string where = "device " + std::to_string(device);
        HostTensor z = HostTensor::Zeros({kTile, kTile});
        const HostProgram keep{"keep", 1, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                                   g.Chip("fill_3", {Out(x[0])}, {.device = device});
                               }};
        worker_->Run(keep, {z});
        for (float x : z.floats()) ASSERT_EQ(x, 3.0f) << where;
        for (size_t on : {device, 1 - device}) {  // over the kept copy, then on a device without one
            const HostProgram partial{"partial", 1, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                                          g.Sub("fill_11", {Out(x[0])});
                                          g.Chip("first_half_7", {Out(x[0])}, {.device = on});
                                      }};
            worker_->Run(partial, {z});
            const auto zv = z.floats();
            for (size_t i = 0; i < zv.size(); ++i)
                ASSERT_EQ(zv[i], i < zv.size() / 2 ? 7.0f : 0.0f)
                    << where << " kept a copy, partial Out on device " << on << ", element " << i;
        }
    }
}
