// SPDX-License-Identifier: Apache-2.0
// Device-side copies and semaphores, the watchdog, and a device that stays
// responsive (reset, shutdown) while a long program runs.
#include <atomic>
#include <chrono>
#include <thread>

#include "execution_support.hpp"
#include "spyre/plan/program_image.hpp"

using namespace spyre;
using namespace spyre::driver;
using namespace std::chrono_literals;
using spyre::test::ExecutionTest;
using spyre::test::TestDevice;
using spyre::test::WatchdogTest;

namespace {

using Clock = std::chrono::steady_clock;

std::atomic_ref<uint64_t> Word(TestDevice& dev, uint64_t addr) {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(dev.At(addr, 8)));
}

// A matmul program that runs for seconds: the same 2048^3 matmul many times.
uint64_t LoadLongProgram(TestDevice& dev, uint64_t& size) {
    const BuiltKernel k = KernelBuilder().Matmul(2048, 2048, 2048, DType::FP32);
    std::vector<uint64_t> addrs;
    for (const KernelTensor& t : k.inputs) addrs.push_back(dev.Alloc(t.bytes));
    addrs.push_back(dev.Alloc(k.outputs[0].bytes));
    ProgramImage image = ProgramImage::Decode(k.Bind(addrs));
    image.ops.assign(400, image.ops[0]);
    const std::vector<uint8_t> program = image.Encode();
    size = program.size();
    return dev.Put(program);
}

// Submits the long program without waiting, and lets it get going.
void StartLongProgram(TestDevice& dev) {
    uint64_t size = 0;
    const uint64_t program = LoadLongProgram(dev, size);
    dev.ring().Submit(std::array{test::LaunchCb(program, size, 1)});
    std::this_thread::sleep_for(200ms);
    EXPECT_TRUE(dev.fn().Read32(SPYRE_REG_STATUS) & SPYRE_STATUS_BUSY);
}

void ExpectRuns(TestDevice& dev) {
    const BuiltKernel k = KernelBuilder().Fill({8}, 1.0, DType::FP32);
    const uint64_t y = dev.Alloc(k.outputs[0].bytes);
    EXPECT_TRUE(dev.LaunchProgram(k.Bind(std::array{y})).ok());
    EXPECT_EQ(dev.ReadTensor(y, k.outputs[0]), std::vector<double>(8, 1.0));
}

}  // namespace

TEST_F(ExecutionTest, CopyHasMemmoveSemantics) {
    const uint64_t size = 40ull << 20;  // several of the device's copy chunks
    const uint64_t a = pf().Alloc(size + 8192);
    uint8_t* p = pf().At(a, size + 8192);
    auto pattern = [](uint64_t i) { return uint8_t(i * 2654435761u >> 13); };
    auto fill = [&] {
        for (uint64_t i = 0; i < size + 8192; ++i) p[i] = pattern(i);
    };
    fill();
    const uint64_t b = pf().Alloc(size);
    Completion c = pf().Run(test::CopyCb(a, b, size));
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c.result, size);
    EXPECT_EQ(std::memcmp(pf().At(b, size), p, size), 0);
    // Overlapping, forwards and backwards.
    c = pf().Run(test::CopyCb(a, a + 4097, size));
    ASSERT_TRUE(c.ok());
    for (uint64_t i = 0; i < size; i += 4099) ASSERT_EQ(p[4097 + i], pattern(i)) << i;
    fill();
    c = pf().Run(test::CopyCb(a + 4097, a, size));
    ASSERT_TRUE(c.ok());
    for (uint64_t i = 0; i < size; i += 4099) ASSERT_EQ(p[i], pattern(i + 4097)) << i;
    EXPECT_TRUE(pf().Run(test::CopyCb(a, b, 0)).ok());
    EXPECT_EQ(pf().fn().Read64(SPYRE_REG_CNT_COPIES), 4u);
    EXPECT_EQ(pf().fn().Read64(SPYRE_REG_CNT_COPY_BYTES), 3 * size);
}

TEST_F(ExecutionTest, SemaphoresWriteAndWait) {
    const uint64_t sem = pf().Alloc(8);
    Completion c = pf().Run(test::SemWriteCb(sem, 42));
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(Word(pf(), sem).load(), 42u);
    c = pf().Run(test::SemWaitCb(sem, 42, 0));
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c.result, 42u);

    // The host releases a waiting device.
    std::thread host([&] {
        std::this_thread::sleep_for(50ms);
        Word(pf(), sem).store(7, std::memory_order_release);
    });
    const auto start = Clock::now();
    c = pf().Run(test::SemWaitCb(sem, 7, 5'000'000'000));
    host.join();
    EXPECT_TRUE(c.ok()) << spyre_error_name(c.status);
    EXPECT_EQ(c.result, 7u);
    EXPECT_GE(Clock::now() - start, 50ms);
}

TEST_F(ExecutionTest, SemWaitTimesOutWithWatchdogAndTheRingGoesOn) {
    const uint64_t sem = pf().Alloc(8);
    Word(pf(), sem).store(3);
    const auto start = Clock::now();
    const auto done = pf().Run(std::array{test::SemWaitCb(sem, 4, 20'000'000), NopCb(0)});
    EXPECT_EQ(done[0].status, SPYRE_ERR_WATCHDOG);
    EXPECT_EQ(done[0].result, 3u);  // the value seen
    EXPECT_EQ(pf().fn().Read64(SPYRE_REG_ERR_ADDR), sem);
    EXPECT_TRUE(done[1].ok());
    EXPECT_GE(Clock::now() - start, 20ms);
    EXPECT_LT(Clock::now() - start, 2s);
}

TEST_F(ExecutionTest, SemaphoreCbsAreValidated) {
    const uint64_t sem = pf().Alloc(16);
    EXPECT_EQ(pf().Run(test::SemWriteCb(sem + 4, 1)).status, SPYRE_ERR_MISALIGNED);
    EXPECT_EQ(pf().Run(test::SemWaitCb(sem + 4, 1, 1000)).status, SPYRE_ERR_MISALIGNED);
    EXPECT_EQ(pf().Run(test::SemWriteCb(pf().mem_size() - 4, 1)).status, SPYRE_ERR_MISALIGNED);
    EXPECT_EQ(pf().Run(test::SemWriteCb(pf().mem_size(), 1)).status, SPYRE_ERR_ADDR_RANGE);
    spyre_cb timeout_on_write = test::SemWriteCb(sem, 1);
    timeout_on_write.u.sem.timeout_ns = 5;
    EXPECT_EQ(pf().Run(timeout_on_write).status, SPYRE_ERR_RESERVED_NONZERO);
}

TEST_F(ExecutionTest, ThePfSignalsAVfThroughItsWindow) {
    TestDevice vf1(Vf(1));
    const uint64_t sem = vf1.Alloc(8);
    const uint64_t vf1_base = vf1.fn().Read64(SPYRE_REG_MEM_BASE);
    vf1.ring().Submit(std::array{test::SemWaitCb(sem, 99, 5'000'000'000, 1)});
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(pf().Run(test::SemWriteCb(vf1_base + sem, 99)).ok());  // the same word, seen from the PF
    Completion c;
    vf1.ring().Wait({&c, 1}, 1, {.mode = WaitMode::Blocking});
    EXPECT_TRUE(c.ok()) << spyre_error_name(c.status);
    EXPECT_EQ(c.result, 99u);
}

TEST_F(WatchdogTest, ALongProgramEndsWithWatchdogAndTheDeviceGoesOn) {
    EXPECT_EQ(pf().fn().Read32(SPYRE_REG_WATCHDOG_MS), 300u);
    uint64_t size = 0;
    const uint64_t program = LoadLongProgram(pf(), size);
    const auto start = Clock::now();
    const Completion c = pf().Run(test::LaunchCb(program, size));
    const auto took = Clock::now() - start;
    EXPECT_EQ(c.status, SPYRE_ERR_WATCHDOG) << spyre_error_name(c.status);
    EXPECT_EQ(pf().fn().Read64(SPYRE_REG_ERR_ADDR), program);
    EXPECT_GE(took, 300ms);
    EXPECT_LT(took, 3s) << "the watchdog overshot by more than a few chunks";
    // A semaphore wait without its own timeout is bounded by the watchdog too.
    const uint64_t sem = pf().Alloc(8);
    EXPECT_EQ(pf().Run(test::SemWaitCb(sem, 1, 0)).status, SPYRE_ERR_WATCHDOG);
    ExpectRuns(pf());
}

TEST_F(ExecutionTest, AResetStopsALongProgram) {
    StartLongProgram(pf());
    const auto start = Clock::now();
    pf().Reset();
    EXPECT_LT(Clock::now() - start, 2s);
    ExpectRuns(pf());
}

TEST_F(ExecutionTest, ShutdownStopsALongProgram) {
    StartLongProgram(pf());
    const auto start = Clock::now();
    const int status = daemon().Stop(std::chrono::milliseconds(10000));
    EXPECT_LT(Clock::now() - start, 3s);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}
