// SPDX-License-Identifier: Apache-2.0
// SpyreAllocator against a real device: region reservation (with fallback),
// alignment, coalescing, exhaustion, bad handles, a randomized stress checked
// against a reference model, and concurrent use.
#include <csignal>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "mock_fixture.hpp"
#include "spyre/device/device.hpp"

using namespace spyre;
using namespace spyre::driver;
using spyre::test::MockDeviceTest;

namespace {

constexpr uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

AllocatorOptions SmallVf(uint32_t regions = 4) {
    return {.mode = AllocatorMode::VF, .vf_regions = regions, .vf_region_sizes = {256 * kMiB, 128 * kMiB}};
}

// Checks the live allocations do not overlap and respect the alignment.
void ExpectDisjointAndAligned(const std::map<std::pair<uint32_t, uint64_t>, uint64_t>& live) {
    uint64_t prev_end = 0;
    uint32_t prev_region = UINT32_MAX;
    for (const auto& [key, size] : live) {
        const auto [region, offset] = key;
        EXPECT_EQ(offset % SpyreAllocator::kAlignment, 0u);
        if (region == prev_region) {
            EXPECT_GE(offset, prev_end) << "overlap in region " << region;
        }
        prev_region = region;
        prev_end = offset + size;
    }
}

std::pair<uint32_t, uint64_t> Key(const DeviceHandle& h) {
    return h.is_vf() ? std::pair{h.vf().region_id, h.vf().vf_offset} : std::pair{0u, h.pf().physical_address};
}

}  // namespace

TEST_F(MockDeviceTest, PfModeReservesItsMemoryAndAligns) {
    Function fn = Function::Open(Pf());
    SpyreAllocator alloc(fn, {.mode = AllocatorMode::PF, .pf_pool_limit = kGiB});
    auto s = alloc.Stats();
    EXPECT_EQ(s.capacity, kGiB - SpyreAllocator::kNullGuard);  // address 0 held back
    ASSERT_EQ(s.regions.size(), 1u);
    EXPECT_EQ(fn.Read32(SPYRE_REG_REGION_COUNT), 1u);  // the device knows what it granted
    auto a = alloc.Allocate(1);
    auto b = alloc.Allocate(1000);
    EXPECT_TRUE(a.handle.is_pf());
    EXPECT_EQ(a.size, 1u);  // size beside the handle, as requested
    EXPECT_EQ(a.handle.pf().physical_address % 128, 0u);
    EXPECT_EQ(b.handle.pf().physical_address - a.handle.pf().physical_address, 128u);
    EXPECT_EQ(alloc.Stats().bytes_in_use, 128u + 1024u);
    alloc.Free(a.handle);
    alloc.Free(b.handle);
    EXPECT_EQ(alloc.Stats().largest_free_block, kGiB - SpyreAllocator::kNullGuard);
    EXPECT_EQ(alloc.Stats().peak_bytes_in_use, 1152u);
}

// A pf_pool_limit under one region (2 MiB) reserved nothing and read as a
// device granting no memory (OutOfMemory); a mode past PF and VF reserved
// as a VF. Both are InvalidArgument naming the option, and nothing is left
// reserved: the smallest limit works afterwards.
TEST_F(MockDeviceTest, APoolLimitUnderOneRegionOrAnUnknownModeIsRefused) {
    Function fn = Function::Open(Pf());
    for (uint64_t limit : {uint64_t(1), uint64_t(4096), 2 * kMiB - 1})
        EXPECT_SPYRE_ERROR(SpyreAllocator(fn, {.mode = AllocatorMode::PF, .pf_pool_limit = limit}), InvalidArgument,
                           "AllocatorOptions::pf_pool_limit is " + std::to_string(limit) +
                               " bytes: at least 2097152 (2 MiB, one region), or 0 for all the device grants");
    EXPECT_SPYRE_ERROR(SpyreAllocator(fn, {.mode = static_cast<AllocatorMode>(9)}), InvalidArgument,
                       "allocator mode 9 is none of PF, VF");
    EXPECT_EQ(fn.Read32(SPYRE_REG_REGION_COUNT), 0u);
    SpyreAllocator alloc(fn, {.mode = AllocatorMode::PF, .pf_pool_limit = 2 * kMiB});
    EXPECT_EQ(alloc.Stats().capacity, 2 * kMiB - SpyreAllocator::kNullGuard);
    EXPECT_NO_THROW(alloc.Allocate(kMiB));
}

// Device address 0 held a buffer (the first a device handed out), so a
// program operand left at 0 could not be told from one bound to it
// (docs/execution_plan.md). No block is handed out there, in either mode,
// and capacity counts what can be handed out.
TEST_F(MockDeviceTest, NoBlockIsHandedOutAtDeviceAddressZero) {
    Function pf = Function::Open(Pf());
    Function vf = Function::Open(Vf(1));
    SpyreAllocator pf_pool(pf, {.mode = AllocatorMode::PF, .pf_pool_limit = 2 * kMiB});
    SpyreAllocator vf_pool(vf, SmallVf(2));
    for (SpyreAllocator* alloc : {&pf_pool, &vf_pool}) {
        const AllocatorStats s = alloc->Stats();
        uint64_t regions = 0, at_zero = 0;
        for (const RegionStats& r : s.regions) {
            regions += r.capacity + (r.device_base == 0 ? SpyreAllocator::kNullGuard : 0);
            at_zero += r.device_base == 0;
        }
        ASSERT_EQ(at_zero, 1u) << s.reservation;
        EXPECT_EQ(s.capacity, regions - SpyreAllocator::kNullGuard) << s.reservation;
        std::vector<DeviceAllocation> blocks;
        for (const RegionStats& r : s.regions) blocks.push_back(alloc->Allocate(r.capacity));  // every byte there is
        EXPECT_EQ(alloc->Stats().bytes_free, 0u);
        uint64_t lowest = UINT64_MAX;
        for (const DeviceAllocation& b : blocks) lowest = std::min(lowest, alloc->DeviceAddress(b.handle, b.size));
        EXPECT_EQ(lowest, SpyreAllocator::kNullGuard);
        EXPECT_SPYRE_ERROR(alloc->Allocate(1), OutOfMemory, "no free block for 1 bytes");
        for (const DeviceAllocation& b : blocks) alloc->Free(b.handle);
        EXPECT_EQ(alloc->Stats().largest_free_block, s.largest_free_block);
    }
}

TEST_F(MockDeviceTest, RegionsGoBackToTheDevice) {
    Function fn = Function::Open(Vf(1));
    {
        SpyreAllocator alloc(fn, SmallVf());
        EXPECT_EQ(fn.Read32(SPYRE_REG_REGION_COUNT), 4u);
    }
    EXPECT_EQ(fn.Read32(SPYRE_REG_REGION_COUNT), 0u);
}

TEST_F(MockDeviceTest, VfModeFallsBackToSmallerRegionsAndSaysSo) {
    // The fixture's 4 GiB card with 2 VFs gives each VF 1.33 GiB.
    Function fn = Function::Open(Vf(1));
    SpyreAllocator alloc(fn, {.mode = AllocatorMode::VF, .vf_regions = 8,
                              .vf_region_sizes = {1 * kGiB, 256 * kMiB, 128 * kMiB}});
    auto s = alloc.Stats();
    EXPECT_EQ(s.regions.size(), 8u);
    EXPECT_EQ(s.capacity, 8 * 128 * kMiB - SpyreAllocator::kNullGuard);
    EXPECT_NE(s.reservation.find("fell back"), std::string::npos) << s.reservation;
    EXPECT_NE(s.reservation.find("8 x 128 MiB"), std::string::npos) << s.reservation;
    auto h = alloc.Allocate(100);
    EXPECT_TRUE(h.handle.is_vf());
    EXPECT_LT(h.handle.vf().region_id, SPYRE_REGION_MAX_ENTRIES);
}

TEST_F(MockDeviceTest, VfModeRespectsTheRegionTableLimit) {
    Function fn = Function::Open(Vf(1));
    EXPECT_SPYRE_ERROR(SpyreAllocator(fn, SmallVf(17)), InvalidArgument, "1 to 16 regions");
    EXPECT_SPYRE_ERROR(SpyreAllocator(fn, {.mode = AllocatorMode::VF, .vf_region_sizes = {3 * kMiB}}),
                       InvalidArgument, "multiple of 2 MiB");
    // A multiple of 2 MiB past what REGION_ARG's 32-bit MiB count names was
    // called "not a positive multiple of 2 MiB".
    for (const uint64_t size : {1ull << 52, (1ull << 52) + 2 * kMiB})
        EXPECT_SPYRE_ERROR(SpyreAllocator(fn, {.mode = AllocatorMode::VF, .vf_regions = 1, .vf_region_sizes = {size}}),
                           InvalidArgument,
                           "VF region size " + std::to_string(size) +
                               " is past the largest region the device's region table can name (4503599625273344 "
                               "bytes)");
}

// A card far smaller than the default VF pool (8 x 12 GiB, falling back to
// 8 and 4 GiB regions): 256 MiB in three slices gives each VF under 100 MiB.
class SmallCardTest : public MockDeviceTest {
protected:
    driver::MockOptions Options() const override { return {.cards = 1, .vfs = 2, .mem = "256M"}; }
    void SetUp() override {
        MockDeviceTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) return;
        ::setenv("SPYRE_DEV_ROOT", daemon().mount().c_str(), 1);
        ::unsetenv("FLEX_DEVICE");
        ::unsetenv("SPYRE_DEVICES");
        Function fn = Function::Open(Vf(1));
        mem_size_ = fn.device_info().mem_size;
        grantable_ = fn.Read64(SPYRE_REG_REGION_GRANTABLE);
    }
    uint64_t mem_size_ = 0, grantable_ = 0;
};

TEST_F(SmallCardTest, DefaultOptionsOpenAVfSmallerThanTheDefaultPool) {
    ASSERT_LT(grantable_, 4 * kGiB);
    ASSERT_GE(grantable_, 64 * kMiB);
    Device dev = Device::Open({.function = Vf(1).pci_address});
    const AllocatorStats s = dev.allocator().Stats();
    EXPECT_EQ(s.capacity, grantable_ - SpyreAllocator::kNullGuard) << s.reservation;  // all of it, in one region
    EXPECT_LE(s.capacity, mem_size_) << s.reservation;
    EXPECT_NE(s.reservation.find("sized to the " + std::to_string(grantable_ >> 20) + " MiB"), std::string::npos)
        << s.reservation;
    // The pool is usable: half of it in one block, copied there and back.
    const uint64_t size = s.capacity / 2 / 4096 * 4096;
    DeviceAllocation block = dev.allocator().Allocate(size);
    std::vector<uint8_t> in(size), out(size, 0);
    std::mt19937_64 rng(13);
    for (auto& b : in) b = uint8_t(rng());
    dev.default_stream().CopyToDevice(in.data(), block.handle, size);
    dev.default_stream().CopyFromDevice(out.data(), block.handle, size);
    dev.default_stream().Synchronize();
    EXPECT_TRUE(in == out);
    dev.allocator().Free(block.handle);
}

TEST_F(SmallCardTest, ADefaultVfAllocatorUsesTheVfsMemory) {
    Function fn = Function::Open(Vf(2));
    SpyreAllocator alloc(fn, {.mode = AllocatorMode::VF});
    const AllocatorStats s = alloc.Stats();
    EXPECT_EQ(s.capacity, grantable_ - SpyreAllocator::kNullGuard) << s.reservation;
    EXPECT_EQ(alloc.Allocate(s.capacity).size, s.capacity);  // the whole VF in one block (less address 0's)
}

// A VF between the default's first size (12 GiB) and its whole-VF region:
// 128 GiB in five slices gives each VF 25.6 GiB, one region of all of it.
// That is the default adapting, not a fallback: before, the reservation
// said "fell back: 8 x 12 GiB do not fit" and warned on stderr.
class MidVfCardTest : public MockDeviceTest {
protected:
    driver::MockOptions Options() const override { return {.cards = 1, .vfs = 4, .mem = "128G"}; }
};

TEST_F(MidVfCardTest, TheDefaultSizesAVfOfOver12GiBWithoutAWarning) {
    Function fn = Function::Open(Vf(1));
    const uint64_t grantable = fn.Read64(SPYRE_REG_REGION_GRANTABLE);
    ASSERT_GT(grantable, 12 * kGiB);
    SpyreAllocator alloc(fn, {.mode = AllocatorMode::VF});
    const AllocatorStats s = alloc.Stats();
    EXPECT_EQ(s.capacity, grantable / SPYRE_REGION_ALIGN * SPYRE_REGION_ALIGN - SpyreAllocator::kNullGuard)
        << s.reservation;
    EXPECT_EQ(s.reservation.find("fell back"), std::string::npos) << s.reservation;
    EXPECT_NE(s.reservation.find("sized to the"), std::string::npos) << s.reservation;
}

TEST_F(SmallCardTest, AnImpossibleExplicitPoolSaysWhatWasAskedAndWhatExists) {
    DeviceOptions options{.function = Vf(1).pci_address};
    options.allocator.vf_regions = 2;
    options.allocator.vf_region_sizes = {1 * kGiB};
    const std::string exists = std::to_string(grantable_ >> 20) + " MiB";
    try {
        Device dev = Device::Open(options);
        FAIL() << "a pool of 2 x 1 GiB on a VF of " << exists;
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
        EXPECT_NE(std::string(e.what()).find("2 x 1 GiB"), std::string::npos) << e.what();  // asked
        EXPECT_NE(std::string(e.what()).find(exists), std::string::npos) << e.what();       // exists
    }
    // An explicit size that fits is honoured as asked.
    options.allocator.vf_region_sizes = {16 * kMiB};
    Device dev = Device::Open(options);
    EXPECT_EQ(dev.allocator().Stats().reservation, "VF: 2 x 16 MiB");
}

TEST_F(MockDeviceTest, ExhaustionAndBadRequestsAreTypedErrors) {
    Function fn = Function::Open(Vf(2));
    SpyreAllocator alloc(fn, SmallVf(2));  // 2 x 256 MiB
    EXPECT_SPYRE_ERROR(alloc.Allocate(0), InvalidArgument, "0 bytes");
    EXPECT_SPYRE_ERROR(alloc.Allocate(1ull << 50), InvalidArgument, "pool holds");
    auto big1 = alloc.Allocate(200 * kMiB);
    auto big2 = alloc.Allocate(200 * kMiB);
    // 112 MiB remain, in two blocks of 56 MiB: a 100 MiB request cannot fit.
    EXPECT_SPYRE_ERROR(alloc.Allocate(100 * kMiB), OutOfMemory, "largest free block 58720256");
    alloc.Free(big1.handle);
    EXPECT_SPYRE_ERROR(alloc.Free(big1.handle), InvalidArgument, "lies in free memory of this allocator: freed already");
    // Never handed out: said to be a double free before.
    const VFDeviceHandle never{big2.handle.vf().region_id, big2.handle.vf().vf_offset + 200 * kMiB + 4096};
    EXPECT_SPYRE_ERROR(alloc.Free(never), InvalidArgument, "lies in free memory of this allocator: freed already (a double free) or never allocated");
    EXPECT_SPYRE_ERROR(alloc.Free(PFDeviceHandle{0}), InvalidArgument, "does not belong to this VF allocator");
    EXPECT_SPYRE_ERROR(alloc.Free(VFDeviceHandle{9, 0}), InvalidArgument, "not in any region");
    auto inner = big2.handle.Offset(128, 64, big2);
    EXPECT_SPYRE_ERROR(alloc.Free(inner), InvalidArgument, "not the start of a live allocation");
    EXPECT_NO_THROW(alloc.Allocate(100 * kMiB));
}

TEST_F(MockDeviceTest, HandleOffsetsStayInsideTheirAllocation) {
    Function fn = Function::Open(Vf(1));
    SpyreAllocator alloc(fn, SmallVf(1));
    auto a = alloc.Allocate(4096);
    DeviceHandle tile = a.handle.Offset(1024, 1024, a);
    EXPECT_EQ(tile.vf().vf_offset, a.handle.vf().vf_offset + 1024);
    EXPECT_EQ(alloc.Lookup(tile, 1024).handle, a.handle);
    EXPECT_SPYRE_ERROR(a.handle.Offset(4000, 200, a), InvalidArgument, "runs outside");
    EXPECT_SPYRE_ERROR(tile.Offset(3072, 1, a), InvalidArgument, "runs outside");
    // It said "not inside a live allocation", as for a freed block.
    EXPECT_SPYRE_ERROR(alloc.Lookup(tile, 4096), InvalidArgument,
                       "range of 4096 bytes at " + tile.ToString() + " runs past the end of its allocation of 4096 bytes at " +
                           a.handle.ToString() + " (3072 bytes from " + tile.ToString() + " to its end)");
    EXPECT_SPYRE_ERROR(a.handle.pf(), InvalidArgument, "not a PF handle");
}

TEST_F(MockDeviceTest, FreedNeighboursCoalesce) {
    Function fn = Function::Open(Pf());
    SpyreAllocator alloc(fn, {.mode = AllocatorMode::PF, .pf_pool_limit = 64 * kMiB});
    std::vector<DeviceAllocation> blocks;
    // The first block leaves room for the bytes held back at address 0.
    for (int i = 0; i < 8; ++i) blocks.push_back(alloc.Allocate(8 * kMiB - (i == 0 ? SpyreAllocator::kNullGuard : 0)));
    EXPECT_EQ(alloc.Stats().largest_free_block, 0u);
    for (int i : {1, 3, 2}) alloc.Free(blocks[i].handle);  // 1 and 3 first, then the middle joins them
    EXPECT_EQ(alloc.Stats().largest_free_block, 24 * kMiB);
    auto joined = alloc.Allocate(24 * kMiB);
    EXPECT_EQ(joined.handle, blocks[1].handle);
}

TEST_F(MockDeviceTest, RandomizedStressAgreesWithAReferenceModel) {
    Function fn = Function::Open(Vf(1));
    SpyreAllocator alloc(fn, SmallVf(3));
    std::mt19937_64 rng(1234);
    std::map<std::pair<uint32_t, uint64_t>, uint64_t> live;  // reference: key -> rounded size
    std::vector<DeviceHandle> handles;
    uint64_t in_use = 0;
    for (int step = 0; step < 20000; ++step) {
        if (handles.empty() || rng() % 100 < 55) {
            // Mixed tensor sizes: mostly small, some large.
            const uint64_t size = rng() % 10 == 0 ? 1 + rng() % (16 * kMiB) : 1 + rng() % 65536;
            try {
                auto a = alloc.Allocate(size);
                const uint64_t rounded = (size + 127) / 128 * 128;
                ASSERT_TRUE(live.emplace(Key(a.handle), rounded).second);
                handles.push_back(a.handle);
                in_use += rounded;
            } catch (const Error& e) {
                ASSERT_EQ(e.kind(), ErrorKind::OutOfMemory) << e.what();
                ASSERT_LT(alloc.Stats().largest_free_block, size);  // it really did not fit
            }
        } else {
            const size_t i = rng() % handles.size();
            alloc.Free(handles[i]);
            in_use -= live.at(Key(handles[i]));
            live.erase(Key(handles[i]));
            handles[i] = handles.back();
            handles.pop_back();
        }
        if (step % 1000 == 0) ExpectDisjointAndAligned(live);
        ASSERT_EQ(alloc.Stats().bytes_in_use, in_use);
    }
    ExpectDisjointAndAligned(live);
    for (const auto& h : handles) alloc.Free(h);
    auto s = alloc.Stats();
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.largest_free_block, 256 * kMiB);  // everything coalesced back
    for (const auto& r : s.regions) EXPECT_EQ(r.in_use, 0u);
}

TEST_F(MockDeviceTest, ConcurrentThreadsNeverShareBytes) {
    Function fn = Function::Open(Pf());
    SpyreAllocator alloc(fn, {.mode = AllocatorMode::PF, .pf_pool_limit = 512 * kMiB});
    std::mutex m;
    std::map<uint64_t, uint64_t> live;  // address -> size, across threads
    std::atomic<int> overlaps{0};
    auto worker = [&](int seed) {
        std::mt19937 rng(seed);
        std::vector<DeviceAllocation> mine;
        for (int i = 0; i < 5000; ++i) {
            if (mine.empty() || rng() % 2) {
                auto a = alloc.Allocate(1 + rng() % 100000);
                std::lock_guard lock(m);
                const uint64_t addr = a.handle.pf().physical_address;
                auto next = live.lower_bound(addr);
                if (next != live.end() && next->first < addr + a.size) ++overlaps;
                if (next != live.begin() && std::prev(next)->first + std::prev(next)->second > addr) ++overlaps;
                live.emplace(addr, a.size);
                mine.push_back(a);
            } else {
                const auto a = mine.back();
                mine.pop_back();
                {
                    std::lock_guard lock(m);
                    live.erase(a.handle.pf().physical_address);
                }
                alloc.Free(a.handle);
            }
        }
        for (const auto& a : mine) {
            {
                std::lock_guard lock(m);
                live.erase(a.handle.pf().physical_address);
            }
            alloc.Free(a.handle);
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
    for (auto& t : threads) t.join();
    EXPECT_EQ(overlaps.load(), 0);
    EXPECT_EQ(alloc.Stats().bytes_in_use, 0u);
    EXPECT_EQ(alloc.Stats().largest_free_block, 512 * kMiB - SpyreAllocator::kNullGuard);
}

class BigCardTest : public MockDeviceTest {
protected:
    driver::MockOptions Options() const override { return {.cards = 1, .vfs = 1, .mem = "256G"}; }
};

// The default pool (8 x 12 GiB = 96 GiB) on a machine with far less RAM:
// device memory is sparse, only touched bytes cost memory.
TEST_F(BigCardTest, DefaultVfPoolOf96GiBWorksBecauseMemoryIsSparse) {
    Function fn = Function::Open(Vf(1));
    SpyreAllocator alloc(fn, {.mode = AllocatorMode::VF});
    auto s = alloc.Stats();
    EXPECT_EQ(s.regions.size(), 8u);
    EXPECT_EQ(s.capacity, 96 * kGiB - SpyreAllocator::kNullGuard);
    EXPECT_EQ(s.reservation, "VF: 8 x 12 GiB");
    DmaQueue queue(fn);
    DMAEngine dma(alloc, queue);
    // Touch the last bytes of the pool.
    std::vector<DeviceAllocation> blocks;
    for (const RegionStats& r : s.regions) blocks.push_back(alloc.Allocate(r.capacity));
    const uint64_t magic = 0x5350595245ull;
    for (const auto& b : blocks) dma.Wait(dma.CopyToDevice(&magic, b.handle.Offset(b.size - 8, 8, b), 8));
    for (const auto& b : blocks) {
        uint64_t back = 0;
        dma.Wait(dma.CopyFromDevice(&back, b.handle.Offset(b.size - 8, 8, b), 8));
        EXPECT_EQ(back, magic);
    }
}

// An allocator destroyed after its daemon stopped: each region's FREE is a
// trapped command the stopped daemon never answers. It gives up after the
// heartbeat's bound, counts the function as lost (what is left is freed by
// the hand-over), and the function then closes at once.
TEST_F(MockDeviceTest, AnAllocatorOfAStoppedDaemonIsDestroyedWithinTheHeartbeatBound) {
    spyre::test::ScopedEnv bound("SPYRE_HEARTBEAT_TIMEOUT_MS", "500");
    const spyre::test::ResumeAtScopeEnd go_on(daemon());
    std::optional<Function> fn;
    fn.emplace(Function::Open(Vf(1)));
    std::optional<SpyreAllocator> alloc;
    alloc.emplace(*fn, SmallVf(2));
    ASSERT_EQ(alloc->Stats().regions.size(), 2u);
    daemon().Signal(SIGSTOP);
    ASSERT_TRUE(spyre::test::WaitUntilStopped(daemon().pid())) << "the daemon did not stop";
    auto destroyed = std::async(std::launch::async, [&] {
        alloc.reset();
        const bool lost = fn->lost();
        fn.reset();
        return lost;
    });
    const bool ended = destroyed.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    daemon().Signal(SIGCONT);
    ASSERT_TRUE(ended) << "destroying an allocator waits for its stopped daemon";
    EXPECT_TRUE(destroyed.get()) << "a function given up on does not count as lost";
}
