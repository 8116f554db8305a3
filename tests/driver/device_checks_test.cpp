// SPDX-License-Identifier: Apache-2.0
// The driver's checks of what the device hands it (driver/device_checks.hpp):
// the mock's real answers pass; each hostile variant is a ProtocolError (or
// Unsupported for an unmappable region) before the driver uses it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "device_checks.hpp"

namespace spyre::driver::checks {
namespace {

spyre_region_info Bar4Info() {
    spyre_region_info ri{};
    ri.argsz = sizeof ri;
    ri.flags = SPYRE_REGION_INFO_FLAG_READ | SPYRE_REGION_INFO_FLAG_WRITE | SPYRE_REGION_INFO_FLAG_MMAP;
    ri.index = SPYRE_REGION_BAR4;
    ri.size = SPYRE_BAR4_SIZE;
    ri.offset = SPYRE_REGION_OFFSET(SPYRE_REGION_BAR4);
    return ri;
}

spyre_mock_region_shm Bar4Shm() {
    spyre_mock_region_shm m{};
    m.argsz = sizeof m;
    m.index = SPYRE_REGION_BAR4;
    std::strcpy(m.shm_name, "spyre-test.d/ring");
    m.mmap_size = SPYRE_BAR4_SIZE;
    return m;
}

RingRegisters DefaultGeometry() {
    return {.db_offset = SPYRE_DEFAULT_DB_OFFSET, .sq_offset = SPYRE_DEFAULT_SQ_OFFSET, .cq_offset = SPYRE_DEFAULT_CQ_OFFSET,
            .sq_entries = SPYRE_DEFAULT_SQ_ENTRIES, .cq_entries = SPYRE_DEFAULT_CQ_ENTRIES, .cb_size = 64, .cqe_size = 32};
}

ErrorKind KindOf(auto&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.kind();
    }
    return ErrorKind::Internal;  // "no error"
}

TEST(RegionInfoCheck, TheMocksAnswerPasses) {
    const MappableRegion r = CheckMockRegion(Bar4Info(), Bar4Shm(), SPYRE_REGION_BAR4, {});
    EXPECT_EQ(r.shm_name, "spyre-test.d/ring");
    EXPECT_EQ(r.mmap_size, SPYRE_BAR4_SIZE);
    EXPECT_NO_THROW(CheckRegionInfo(Bar4Info(), SPYRE_REGION_BAR4, {}));
}

TEST(RegionInfoCheck, HostileAnswersAreRefused) {
    auto kind = [](auto mutate, uint32_t index = SPYRE_REGION_BAR4) {
        spyre_region_info ri = Bar4Info();
        spyre_mock_region_shm m = Bar4Shm();
        mutate(ri, m);
        return KindOf([&] { CheckMockRegion(ri, m, index, {}); });
    };
    EXPECT_EQ(kind([](auto&, auto&) {}, SPYRE_REGION_BAR0), ErrorKind::ProtocolError) << "answer for another region";
    EXPECT_EQ(kind([](auto&, auto& m) { m.index = SPYRE_REGION_BAR0; }), ErrorKind::ProtocolError)
        << "shared memory of another region";
    EXPECT_EQ(kind([](auto& ri, auto&) { ri.flags = SPYRE_REGION_INFO_FLAG_READ; }), ErrorKind::Unsupported);
    EXPECT_EQ(kind([](auto&, auto& m) { m.shm_name[0] = '\0'; }), ErrorKind::Unsupported);
    EXPECT_EQ(kind([](auto&, auto& m) { std::memset(m.shm_name, 'x', sizeof m.shm_name); }), ErrorKind::ProtocolError)
        << "name without its NUL";
    // A name must be DIR/OBJECT under /dev/shm and stay there.
    for (const char* name : {"/a/../b", "relative", "/spyre-test-ring", "/abs/ring", "a/b/c", "a//b", "/a", "a/",
                             "../ring", "a/..", "./ring", "a/.", "..", "/"})
        EXPECT_EQ(kind([name](auto&, auto& m) { std::strcpy(m.shm_name, name); }), ErrorKind::ProtocolError) << name;
    EXPECT_EQ(kind([](auto&, auto& m) { std::strcpy(m.shm_name, "a/..b"); }), ErrorKind::Internal) << "a plain name";
    EXPECT_EQ(kind([](auto&, auto& m) { m.shm_offset = 100; }), ErrorKind::ProtocolError) << "unaligned offset";
    EXPECT_EQ(kind([](auto& ri, auto& m) { m.mmap_size = ri.size + 4096; }), ErrorKind::ProtocolError)
        << "window past the region";
    EXPECT_EQ(kind([](auto& ri, auto& m) {
                  ri.size = ~0ull;
                  m.mmap_size = 1ull << 62;
                  m.shm_offset = 1ull << 62;
              }),
              ErrorKind::ProtocolError)
        << "offset + size past a file offset";
}

TEST(RingGeometryCheck, TheDefaultGeometryPassesOnlyInsideTheMapping) {
    EXPECT_NO_THROW(CheckRingGeometry(DefaultGeometry(), SPYRE_BAR4_SIZE, {}));
    // A device that maps less BAR4 than the contract's 32 MiB cannot point the rings past it.
    EXPECT_EQ(KindOf([] { CheckRingGeometry(DefaultGeometry(), 1u << 20, {}); }), ErrorKind::ProtocolError);
}

TEST(RingGeometryCheck, HostileGeometryIsRefused) {
    auto kind = [](auto mutate) {
        RingRegisters g = DefaultGeometry();
        mutate(g);
        return KindOf([&] { CheckRingGeometry(g, SPYRE_BAR4_SIZE, {}); });
    };
    EXPECT_EQ(kind([](auto& g) { g.cb_size = 128; }), ErrorKind::ProtocolError);
    EXPECT_EQ(kind([](auto& g) { g.sq_entries = 3000; }), ErrorKind::ProtocolError);
    EXPECT_EQ(kind([](auto& g) { g.cq_entries = g.sq_entries / 2; }), ErrorKind::ProtocolError);
    EXPECT_EQ(kind([](auto& g) { g.db_offset = SPYRE_BAR4_SIZE; }), ErrorKind::ProtocolError);
    EXPECT_EQ(kind([](auto& g) { g.db_offset = 64; }), ErrorKind::ProtocolError) << "unaligned doorbell page";
    EXPECT_EQ(kind([](auto& g) { g.sq_offset = 0xffffffc0u; }), ErrorKind::ProtocolError);
    EXPECT_EQ(kind([](auto& g) { g.cq_offset = g.sq_offset; }), ErrorKind::ProtocolError) << "SQ and CQ overlap";
    EXPECT_EQ(kind([](auto& g) { g.sq_offset = 0; }), ErrorKind::ProtocolError) << "SQ over the doorbell page";
}

TEST(DoorbellOffsetCheck, PageInsideTheMapping) {
    EXPECT_TRUE(DoorbellOffsetOk(0, 4096));
    EXPECT_TRUE(DoorbellOffsetOk(4096, 8192));
    EXPECT_FALSE(DoorbellOffsetOk(4096, 4096 + 4095));
    EXPECT_FALSE(DoorbellOffsetOk(0xfffff000u, 4096));
    EXPECT_FALSE(DoorbellOffsetOk(8, 1u << 20));
}

TEST(CompletionCheck, InRingOrder) {
    spyre_cqe e{};
    e.sq_pos = 7;
    EXPECT_NO_THROW(CheckCompletion(e, 0, 7, {}));
    EXPECT_EQ(KindOf([&] { CheckCompletion(e, 0, 8, {}); }), ErrorKind::ProtocolError);
}

// Function::Open asks this of the version the device publishes: a device of
// another major version (2.x: tasks were spyre_task_desc) is refused.
TEST(ContractVersionCheck, OnlyThisMajorVersion) {
    EXPECT_NO_THROW(CheckContractVersion(SPYRE_VERSION, {}));
    EXPECT_NO_THROW(CheckContractVersion((SPYRE_VERSION_MAJOR << 16) | 9u, {}));  // a later minor adds, never changes
    try {
        CheckContractVersion(2u << 16, ErrorContext{.device = "0000:3b:00.0"});
        ADD_FAILURE() << "a 2.0 device was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::ProtocolError);
        EXPECT_NE(std::string(e.what()).find("device speaks contract 2.0, this driver 3.x"), std::string::npos)
            << e.what();
        EXPECT_EQ(e.context().reg, "VERSION");
        EXPECT_EQ(e.context().device, "0000:3b:00.0");
    }
    EXPECT_EQ(KindOf([] { CheckContractVersion(4u << 16, {}); }), ErrorKind::ProtocolError);
    EXPECT_EQ(KindOf([] { CheckContractVersion(0, {}); }), ErrorKind::ProtocolError);
}

// Task queues take CBs and post CQEs (3.0): the old descriptor sizes were
// 64/32 too, so only the registers' meaning changed; other sizes are refused.
TEST(TaskGeometryCheck, EntriesAreCbsAndCqes) {
    const TaskRegisters good{.rings = {.db_offset = SPYRE_DEFAULT_TQ_DB_OFFSET, .sq_offset = SPYRE_DEFAULT_TQ_OFFSET,
                                       .cq_offset = SPYRE_DEFAULT_TQ_CQ_OFFSET, .sq_entries = SPYRE_DEFAULT_TQ_SQ_ENTRIES,
                                       .cq_entries = SPYRE_DEFAULT_TQ_CQ_ENTRIES, .cb_size = sizeof(spyre_cb),
                                       .cqe_size = sizeof(spyre_cqe)},
                             .queues = 2,
                             .stride = SPYRE_DEFAULT_TQ_STRIDE};
    EXPECT_NO_THROW(CheckTaskGeometry(good, SPYRE_BAR4_SIZE, {}));
    TaskRegisters r = good;
    r.rings.cqe_size = 64;
    EXPECT_EQ(KindOf([&] { CheckTaskGeometry(r, SPYRE_BAR4_SIZE, {}); }), ErrorKind::ProtocolError);
    r = good;
    r.rings.cb_size = 32;
    EXPECT_EQ(KindOf([&] { CheckTaskGeometry(r, SPYRE_BAR4_SIZE, {}); }), ErrorKind::ProtocolError);
}

}  // namespace
}  // namespace spyre::driver::checks
