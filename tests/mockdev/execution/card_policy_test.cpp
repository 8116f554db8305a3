// SPDX-License-Identifier: Apache-2.0
// Card-wide policy belongs to the daemon and the PF: a VF cannot lift the
// watchdog through its mapped registers, and functions share the compute
// cores fairly (one flooding function does not starve another).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "execution_support.hpp"
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

// A program of `repeats` 512^3 fp32 matmuls: tens of milliseconds on the card.
std::pair<uint64_t, uint64_t> LoadMatmulProgram(TestDevice& dev, size_t repeats) {
    const BuiltKernel k = KernelBuilder().Matmul(512, 512, 512, DType::FP32);
    std::vector<uint64_t> addrs;
    for (const KernelTensor& t : k.inputs) addrs.push_back(dev.Alloc(t.bytes));
    addrs.push_back(dev.Alloc(k.outputs[0].bytes));
    ProgramImage image = ProgramImage::Decode(k.Bind(addrs));
    image.ops.assign(repeats, image.ops[0]);
    const std::vector<uint8_t> program = image.Encode();
    return {dev.Put(program), program.size()};
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
