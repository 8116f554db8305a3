// SPDX-License-Identifier: Apache-2.0
// Placement weighs moving a task's bytes against the queues (placement.hpp),
// on a Worker over an embedded mock of 2 cards x 2 VFs: a chain over one
// tensor stays on the device holding its copy while the others are as busy,
// and leaves it when that device is busy with a long task and another is
// idle. Results against the CPU.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "l3_chip_functions.hpp"
#include "worker_fixture.hpp"
#include "spyre/host.hpp"

using namespace spyre;
using namespace spyre::l3;

namespace {

HostTensor Counting(float offset) {
    HostTensor t = HostTensor::Zeros({kTile, kTile});
    auto v = t.floats();
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 251) + offset;
    return t;
}

std::vector<uint64_t> TasksSince(Worker& w, const std::vector<uint64_t>& before) {
    std::vector<uint64_t> d;
    for (size_t i = 0; i < w.device_count(); ++i) d.push_back(w.Stats(i).chip_tasks - before[i]);
    return d;
}

std::vector<uint64_t> Tasks(Worker& w) { return TasksSince(w, std::vector<uint64_t>(w.device_count(), 0)); }

// Holds its device for 20 ms and computes nothing: a long task.
void RegisterSlow(Worker& w) {
    w.RegisterChipFunction("slow", [](ChipContext&) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
}

}  // namespace

// (a) Eight adds in a chain, each reading the previous one's output and b,
// with every device idle: the chain stays on the device that holds its
// tensor (and b), so after the first task nothing is uploaded again.
TEST_F(WorkerTest, AChainOverOneTensorStaysOnTheDeviceHoldingIt) {
    const HostTensor a = Counting(1.0f), b = Counting(0.5f);
    HostTensor out = HostTensor::Zeros({kTile, kTile});
    const HostProgram chain{"chain", 2, {}, [&](HostGraph& g, std::span<const HostTensor> x) {
                                HostTensor t = x[0];
                                for (int k = 0; k < 8; ++k) {
                                    HostTensor next = k == 7 ? out : g.CreateTensor({kTile, kTile});
                                    g.Chip("chip_add", {In(t), In(x[1]), Out(next)}, {.name = "link " + std::to_string(k)});
                                    t = next;
                                }
                            }};
    const auto before = Tasks(*worker_);
    worker_->Run(chain, {a, b});
    auto av = a.floats(), bv = b.floats(), ov = out.floats();
    for (size_t i = 0; i < ov.size(); ++i) ASSERT_EQ(ov[i], av[i] + 8 * bv[i]) << "element " << i;
    const auto ran = TasksSince(*worker_, before);
    size_t used = 0;
    for (size_t d = 0; d < ran.size(); ++d)
        if (ran[d] != 0) {
            ++used;
            EXPECT_EQ(ran[d], 8u) << "the whole chain on " << worker_->DescribeDevice(d);
        }
    EXPECT_EQ(used, 1u);
}

// (b) t = a + b is current on device 0. Device 0 then runs a long task
// (learnt: it held the device 20 ms); in the next run it runs another, and
// the add over t placed beside it goes to an idle device: its queue there
// (one 20 ms-class task) costs more than moving t and b (128 KiB).
TEST_F(WorkerTest, ABusyHolderLosesTheNextTaskToAnIdleDevice) {
    RegisterSlow(*worker_);
    const HostTensor a = Counting(1.0f), b = Counting(0.5f), z = HostTensor::Zeros({4});
    HostTensor t = HostTensor::Zeros({kTile, kTile}), u = HostTensor::Zeros({kTile, kTile});
    const HostProgram first{"first", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                                g.Chip("chip_add", {In(a), In(b), Out(t)}, {.name = "t = a + b", .device = 0});
                                g.Chip("slow", {In(z)}, {.name = "slow 1", .device = 0});
                            }};
    worker_->Run(first, {});
    const auto before = Tasks(*worker_);
    const HostProgram second{"second", 0, {}, [&](HostGraph& g, std::span<const HostTensor>) {
                                 g.Chip("slow", {In(z)}, {.name = "slow 2", .device = 0});
                                 g.Chip("chip_add", {In(t), In(b), Out(u)}, {.name = "u = t + b"});
                             }};
    worker_->Run(second, {});
    auto av = a.floats(), bv = b.floats(), uv = u.floats();
    for (size_t i = 0; i < uv.size(); ++i) ASSERT_EQ(uv[i], av[i] + 2 * bv[i]) << "element " << i;
    const auto ran = TasksSince(*worker_, before);
    EXPECT_EQ(ran[0], 1u) << "device 0 ran only the slow task; the add moved";
    uint64_t elsewhere = 0;
    for (size_t d = 1; d < ran.size(); ++d) elsewhere += ran[d];
    EXPECT_EQ(elsewhere, 1u);
}
