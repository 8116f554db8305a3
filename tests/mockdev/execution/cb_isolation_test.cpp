// SPDX-License-Identifier: Apache-2.0
// A VF cannot reach another function's memory through a control block: the
// device checks every CB address against the submitting function's memory.
#include "mock_fixture.hpp"
#include "spyre/uapi/spyre_regdesc.hpp"

using namespace spyre;
using namespace spyre::driver;
using spyre::test::MockDeviceTest;

namespace {

Completion RunCb(CommandRing& ring, const spyre_cb& cb) {
    ring.Submit(std::array{cb});
    Completion c;
    ring.Wait({&c, 1}, 1, {.mode = WaitMode::Blocking});
    return c;
}


}  // namespace

TEST_F(MockDeviceTest, VfCannotReachAnotherVfThroughCbs) {
    Function a = Function::Open(Vf(1));
    Function b = Function::Open(Vf(2));
    const AllocatorOptions one{.mode = AllocatorMode::VF, .vf_regions = 1, .vf_region_sizes = {64ull << 20}};
    SpyreAllocator alloc_a(a, one), alloc_b(b, one);
    DmaQueue qa(a), qb(b);
    DMAEngine dma_a(alloc_a, qa), dma_b(alloc_b, qb);
    CommandRing ring_a(a), ring_b(b);

    auto secret = alloc_b.Allocate(4096);
    std::vector<uint8_t> pattern(4096, 0x5B);
    dma_b.Wait(dma_b.CopyToDevice(pattern.data(), secret.handle, 4096));
    const uint64_t mine = alloc_a.DeviceAddress(alloc_a.Allocate(4096).handle, 4096);
    // Where B's secret would be if A's addresses reached the card memory.
    const uint64_t b_from_a = b.Read64(SPYRE_REG_MEM_BASE) - a.Read64(SPYRE_REG_MEM_BASE) +
                              alloc_b.DeviceAddress(secret.handle, 4096);

    // Reading B's bytes into A's block, and writing over B's bytes, both fail.
    for (const spyre_cb& cb : {CopyCb(b_from_a, mine, 4096), CopyCb(mine, b_from_a, 4096), SemWriteCb(b_from_a, 1)}) {
        const Completion c = RunCb(ring_a, cb);
        EXPECT_EQ(c.status, SPYRE_ERR_ADDR_RANGE) << spyre::uapi::OpcodeName(c.opcode);
        EXPECT_EQ(a.Read32(SPYRE_REG_ERR_CODE), SPYRE_ERR_ADDR_RANGE);
        EXPECT_EQ(a.Read64(SPYRE_REG_ERR_ADDR), b_from_a);  // the address that was refused
        a.Write32(SPYRE_REG_ERR_CLEAR, 1);
    }
    // A range that wraps around 2^64 is no way in either.
    EXPECT_EQ(RunCb(ring_a, CopyCb(mine, ~0ull - 100, 4096)).status, SPYRE_ERR_ADDR_RANGE);

    // B's bytes are untouched and B never saw an error.
    std::vector<uint8_t> still(4096);
    dma_b.Wait(dma_b.CopyFromDevice(still.data(), secret.handle, 4096));
    EXPECT_EQ(still, pattern);
    EXPECT_EQ(b.Read32(SPYRE_REG_ERR_CODE), 0u);
    // A keeps working: a copy inside its own memory succeeds.
    const uint64_t other = alloc_a.DeviceAddress(alloc_a.Allocate(4096).handle, 4096);
    EXPECT_EQ(RunCb(ring_a, CopyCb(mine, other, 4096)).status, SPYRE_ERR_NONE);
    EXPECT_EQ(RunCb(ring_b, NopCb(1)).status, SPYRE_ERR_NONE);
}
