// SPDX-License-Identifier: Apache-2.0
// The hardware contract: layout facts both sides rely on, checked at run time
// too (the headers static_assert the sizes), plus ring index math.
#include <gtest/gtest.h>

#include <linux/vfio.h>

#include <cstddef>
#include <set>
#include <string>
#include <type_traits>

#include "spyre/mock/spyre_mock.h"
#include "spyre/uapi/spyre.h"
#include "spyre/uapi/spyre_regdesc.hpp"
#include "spyre/uapi/spyre_stats.h"

using namespace spyre::uapi;

TEST(Contract, IdentityMatchesTheRealCard) {
    EXPECT_EQ(SPYRE_PCI_VENDOR_IBM, 0x1014u);
    EXPECT_EQ(SPYRE_PCI_DEVICE_PF, 0x06a7u);
    EXPECT_EQ(SPYRE_PCI_DEVICE_VF, 0x06a8u);
    EXPECT_EQ(SPYRE_PCI_CLASS_CODE >> 16, 0x12u);  // processing accelerator
    EXPECT_EQ(SPYRE_BAR0_SIZE, 4ull << 20);
    EXPECT_EQ(SPYRE_BAR2_SIZE, 2ull << 30);
    EXPECT_EQ(SPYRE_BAR4_SIZE, 32ull << 20);
}

TEST(Contract, RegistersAreAlignedUniqueAndDoNotOverlap) {
    std::set<uint32_t> names_seen;
    std::vector<std::pair<uint32_t, uint32_t>> spans;
    for (const auto& r : kRegisters) {
        EXPECT_TRUE(r.width == 4 || r.width == 8) << r.name;
        EXPECT_EQ(r.offset % r.width, 0u) << r.name << " is misaligned";
        EXPECT_LE(r.offset + r.width, SPYRE_REG_FILE_SIZE) << r.name;
        spans.emplace_back(r.offset, r.offset + r.width);
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first) << "overlap at " << spans[i].first;
    EXPECT_EQ(FindRegister("STATUS")->offset, SPYRE_REG_STATUS);
    EXPECT_EQ(FindRegister("NOT_A_REGISTER"), nullptr);
}

// The stats attributes name every 64-bit counter register once, and nothing else.
TEST(Contract, StatsCountersAreTheCounterRegisters) {
    std::set<std::string> names;
    std::set<uint32_t> regs;
    for (const auto& c : spyre_stats_counters) {
        EXPECT_TRUE(names.insert(c.name).second) << c.name << " named twice";
        EXPECT_TRUE(regs.insert(c.reg).second) << c.name << " reads a register already named";
        const RegDesc* r = nullptr;
        for (const auto& d : kRegisters)
            if (d.offset == c.reg) r = &d;
        ASSERT_NE(r, nullptr) << c.name;
        EXPECT_EQ(std::string(r->name).rfind("CNT_", 0), 0u) << c.name << " reads " << r->name;
        EXPECT_EQ(r->width, 8u) << c.name;
    }
    for (const auto& d : kRegisters) {
        if (std::string(d.name).rfind("CNT_", 0) == 0) {
            EXPECT_EQ(regs.count(d.offset), 1u) << d.name << " has no stats name";
        }
    }
    EXPECT_STREQ(SPYRE_STATS_JSON_SCHEMA, "spyre-stats");
    EXPECT_EQ(SPYRE_STATS_JSON_VERSION, 1);
}

TEST(Contract, CbAndCqeLayout) {
    EXPECT_EQ(sizeof(spyre_cb), 64u);
    EXPECT_EQ(sizeof(spyre_cqe), 32u);
    EXPECT_EQ(offsetof(spyre_cb, u.copy.size), 0x20u);
    EXPECT_EQ(offsetof(spyre_cb, u.sem.timeout_ns), 0x20u);
    EXPECT_EQ(offsetof(spyre_cqe, status), 0x1Cu);
    // The default rings fit between their published offsets.
    EXPECT_LE(SPYRE_DEFAULT_SQ_OFFSET + SPYRE_DEFAULT_SQ_ENTRIES * sizeof(spyre_cb), SPYRE_DEFAULT_CQ_OFFSET);
}

// The phase byte is the CQE's last, and flips every lap of the CQ, also
// across the u32 wrap of positions; a zeroed (reset) CQ never shows lap 0's.
TEST(Contract, CqePhaseFlipsEveryLap) {
    EXPECT_EQ(offsetof(spyre_cqe, phase), 31u);
    EXPECT_EQ(spyre_cqe_phase(0, 4096), 1u);
    EXPECT_EQ(spyre_cqe_phase(4095, 4096), 1u);
    EXPECT_EQ(spyre_cqe_phase(4096, 4096), 0u);
    EXPECT_EQ(spyre_cqe_phase(8192, 4096), 1u);
    EXPECT_EQ(spyre_cqe_phase(0xFFFFFFFFu, 4096), 0u);
    EXPECT_EQ(spyre_cqe_phase(0xFFFFFFFFu + 1u, 4096), 1u);  // the lap after the wrap
    EXPECT_EQ(spyre_cqe_phase(1, 1), 0u);
}

TEST(Contract, DoorbellWordsSitOnSeparateCacheLines) {
    std::set<uint32_t> lines;
    for (const auto& w : kDoorbellWords) EXPECT_TRUE(lines.insert(w.offset / 64).second) << w.name;
    EXPECT_EQ(sizeof(spyre_doorbell_page), 4096u);
}

TEST(Contract, IoctlsEncodeDirectionAndSize) {
    EXPECT_EQ(_IOC_SIZE(SPYRE_IOC_GET_INFO), sizeof(spyre_device_info));
    EXPECT_EQ(_IOC_DIR(SPYRE_IOC_GET_INFO), unsigned(_IOC_READ));
    EXPECT_EQ(_IOC_SIZE(SPYRE_IOC_GET_REGION_INFO), sizeof(spyre_region_info));
    EXPECT_EQ(_IOC_DIR(SPYRE_IOC_GET_REGION_INFO), unsigned(_IOC_READ | _IOC_WRITE));
    EXPECT_EQ(_IOC_DIR(SPYRE_IOC_RESET), unsigned(_IOC_WRITE));
    EXPECT_EQ(_IOC_TYPE(SPYRE_IOC_RESET), unsigned(';'));  // VFIO's type
    EXPECT_EQ(_IOC_SIZE(SPYRE_IOC_RELEASE), sizeof(spyre_release_req));
    EXPECT_EQ(_IOC_DIR(SPYRE_IOC_RELEASE), unsigned(_IOC_WRITE));
    EXPECT_EQ(SPYRE_REGION_OFFSET(SPYRE_REGION_BAR4), 4ull << 40);
    // The mock transport's own command shares no type with the contract's.
    EXPECT_EQ(_IOC_SIZE(SPYRE_MOCK_IOC_REGION_SHM), sizeof(spyre_mock_region_shm));
    EXPECT_EQ(_IOC_DIR(SPYRE_MOCK_IOC_REGION_SHM), unsigned(_IOC_READ | _IOC_WRITE));
    EXPECT_NE(_IOC_TYPE(SPYRE_MOCK_IOC_REGION_SHM), _IOC_TYPE(SPYRE_IOC_GET_REGION_INFO));
}

// Region info is vfio_region_info, field for field: a driver on vfio-pci
// and one on the mock read the same struct.
TEST(Contract, RegionInfoIsVfios) {
    EXPECT_EQ(sizeof(spyre_region_info), sizeof(vfio_region_info));
    EXPECT_EQ(offsetof(spyre_region_info, flags), offsetof(vfio_region_info, flags));
    EXPECT_EQ(offsetof(spyre_region_info, index), offsetof(vfio_region_info, index));
    EXPECT_EQ(offsetof(spyre_region_info, cap_offset), offsetof(vfio_region_info, cap_offset));
    EXPECT_EQ(offsetof(spyre_region_info, size), offsetof(vfio_region_info, size));
    EXPECT_EQ(offsetof(spyre_region_info, offset), offsetof(vfio_region_info, offset));
    EXPECT_EQ(SPYRE_REGION_INFO_FLAG_MMAP, unsigned(VFIO_REGION_INFO_FLAG_MMAP));
    EXPECT_EQ(SPYRE_VERSION_MAJOR, 3u);  // 2.0 dropped the shared-memory fields from region info; 3.0 task CBs
}

// Contract 3.0: a task is a control block and completes with a CQE; the task
// queues' entry sizes are a CB's and a CQE's.
TEST(Contract, ATaskIsAControlBlock) {
    static_assert(SPYRE_OP_TASK == 0x40u);
    static_assert(SPYRE_ERR_WRONG_QUEUE == 0x08u);
    static_assert(sizeof(spyre_cb_task) == 48 && sizeof(spyre_cb_task) == sizeof(spyre_cb::u));
    static_assert(offsetof(spyre_cb, u.task) == 0x10);
    static_assert(offsetof(spyre_cb, u.task.program_addr) == 0x10);
    static_assert(offsetof(spyre_cb, u.task.args_addr) == 0x18);
    static_assert(offsetof(spyre_cb, u.task.program_size) == 0x20);
    static_assert(offsetof(spyre_cb, u.task.arg_count) == 0x24);
    static_assert(offsetof(spyre_cb, u.task.after_count) == 0x28);
    static_assert(offsetof(spyre_cb, u.task.after) == 0x2C);
    static_assert(sizeof(spyre_cb_task::after) == 4 * SPYRE_TASK_MAX_AFTER);
    static_assert(offsetof(spyre_cb, u.task.reserved) == 0x3C);
    static_assert(sizeof(spyre_cb_task::reserved) == 4);
    static_assert(std::is_same_v<decltype(spyre_cb_task::program_size), uint32_t>);
    static_assert(std::is_same_v<decltype(spyre_cb_task::arg_count), uint32_t>);
    static_assert(SPYRE_DEFAULT_TQ_CQ_OFFSET >= SPYRE_DEFAULT_TQ_SQ_ENTRIES * sizeof(spyre_cb));
    // The after list fills the CB's last three payload words (3.1), the
    // reserved word last.
    spyre_cb cb{};
    cb.u.task.after_count = 1;
    cb.u.task.after[0] = 7;
    cb.u.task.reserved = 3;
    EXPECT_EQ(cb.u.args[3], 1u | (7ull << 32));
    EXPECT_EQ(cb.u.args[5], 3ull << 32);
    EXPECT_STREQ(spyre_error_name(SPYRE_ERR_BAD_DEPENDENCY), "BAD_DEPENDENCY");
    EXPECT_STREQ(spyre_error_name(SPYRE_ERR_DEPENDENCY_FAILED), "DEPENDENCY_FAILED");
    EXPECT_STREQ(spyre_error_name(SPYRE_ERR_WRONG_QUEUE), "WRONG_QUEUE");
    EXPECT_STREQ(spyre::uapi::OpcodeName(SPYRE_OP_TASK), "TASK");
}

// A task CQE's result: the run time above the core, saturating.
TEST(Contract, TaskResultPacksRunTimeAndCore) {
    const uint64_t r = spyre_task_result(123456789, 13);
    EXPECT_EQ(r, (123456789ull << 16) | 13u);
    EXPECT_EQ(spyre_task_result_core(r), 13u);
    EXPECT_EQ(spyre_task_result_run_ns(r), 123456789u);
    EXPECT_EQ(spyre_task_result_run_ns(spyre_task_result(SPYRE_TASK_RUN_NS_MAX, 0xFFFF)), SPYRE_TASK_RUN_NS_MAX);
    EXPECT_EQ(spyre_task_result_core(spyre_task_result(SPYRE_TASK_RUN_NS_MAX, 0xFFFF)), 0xFFFFu);
    EXPECT_EQ(spyre_task_result_run_ns(spyre_task_result(1ull << 48, 2)), SPYRE_TASK_RUN_NS_MAX);
    EXPECT_EQ(spyre_task_result_run_ns(spyre_task_result(~0ull, 2)), SPYRE_TASK_RUN_NS_MAX);
    EXPECT_EQ(spyre_task_result_core(spyre_task_result(~0ull, 2)), 2u);
    EXPECT_EQ(SPYRE_TASK_RUN_NS_MAX, (1ull << 48) - 1);
}

TEST(Contract, ErrorNamesAreDistinct) {
    std::set<std::string> names;
    for (uint32_t code : {SPYRE_ERR_NONE, SPYRE_ERR_INVALID_OPCODE, SPYRE_ERR_UNSUPPORTED, SPYRE_ERR_RESERVED_NONZERO,
                          SPYRE_ERR_BAD_SLOT_COUNT, SPYRE_ERR_ADDR_RANGE, SPYRE_ERR_MISALIGNED, SPYRE_ERR_RING_OVERFLOW,
                          SPYRE_ERR_WRONG_QUEUE,
                          SPYRE_ERR_PROGRAM_MAGIC, SPYRE_ERR_PROGRAM_VERSION, SPYRE_ERR_PROGRAM_CHECKSUM,
                          SPYRE_ERR_PROGRAM_FORMAT, SPYRE_ERR_UNKNOWN_OP, SPYRE_ERR_SHAPE, SPYRE_ERR_RELOCATION,
                          SPYRE_ERR_WATCHDOG, SPYRE_ERR_ABORTED, SPYRE_ERR_CANCELED, SPYRE_ERR_INTERNAL})
        EXPECT_TRUE(names.insert(spyre_error_name(code)).second) << code;
    EXPECT_STREQ(spyre_error_name(0xEEEE), "UNKNOWN");
}

TEST(RingMath, SlotsWrapWithThePowerOfTwo) {
    EXPECT_EQ(spyre_ring_slot(0, 4096), 0u);
    EXPECT_EQ(spyre_ring_slot(4097, 4096), 1u);
    EXPECT_EQ(spyre_ring_slot(0xFFFFFFFFu, 4096), 4095u);
}

TEST(RingMath, UsedAndFreeSurviveCounterWraparound) {
    const uint32_t head = 0xFFFFFFF0u, tail = 0x10u;  // tail wrapped past 2^32
    EXPECT_EQ(spyre_ring_used(head, tail), 0x20u);
    EXPECT_EQ(spyre_ring_free(head, tail, 64), 32u);
    EXPECT_TRUE(spyre_ring_valid(head, tail, 64));
    EXPECT_FALSE(spyre_ring_valid(head, tail, 16));  // more in flight than the ring holds
    EXPECT_TRUE(spyre_ring_valid(7, 7, 16));
    EXPECT_FALSE(spyre_ring_valid(8, 7, 16));  // tail behind head is garbage
}

TEST(RegisterDump, DecodesFieldsFromASnapshot) {
    std::vector<uint8_t> regs(SPYRE_REG_FILE_SIZE), db(4096);
    auto put32 = [&](uint32_t off, uint32_t v) { std::memcpy(regs.data() + off, &v, 4); };
    put32(SPYRE_REG_MAGIC, SPYRE_MAGIC);
    put32(SPYRE_REG_VERSION, SPYRE_VERSION);
    put32(SPYRE_REG_PCI_ID, SPYRE_PCI_VENDOR_IBM | (SPYRE_PCI_DEVICE_VF << 16));
    put32(SPYRE_REG_FUNC_ID, SPYRE_FUNC_ID_IS_VF | (2u << SPYRE_FUNC_ID_CARD_SHIFT) | 3u);
    put32(SPYRE_REG_STATUS, SPYRE_STATUS_READY | SPYRE_STATUS_ERROR);
    put32(SPYRE_REG_ERR_CODE, SPYRE_ERR_RESERVED_NONZERO);
    put32(SPYRE_REG_ERR_OPCODE, SPYRE_OP_NOP);
    uint32_t gone = SPYRE_DEVSTATE_GONE;
    std::memcpy(db.data() + SPYRE_DB_DEVICE_STATE, &gone, 4);
    std::string text = FormatRegisterDump(regs, db);
    EXPECT_NE(text.find("\"SPYR\" ok"), std::string::npos) << text;
    EXPECT_NE(text.find("vendor 0x1014 device 0x06a8"), std::string::npos);
    EXPECT_NE(text.find("card 2 VF 3"), std::string::npos);
    EXPECT_NE(text.find("READY ERROR"), std::string::npos);
    EXPECT_NE(text.find("RESERVED_NONZERO"), std::string::npos);
    EXPECT_NE(text.find("GONE"), std::string::npos);
    // Every register and doorbell word appears once, by name.
    for (const auto& r : kRegisters) EXPECT_NE(text.find(std::string("\n") + r.name + " "), std::string::npos) << r.name;
    for (const auto& r : kDoorbellWords) EXPECT_NE(text.find(std::string("\n") + r.name + " "), std::string::npos) << r.name;
    // The columns line up: every row's offset starts where the header's
    // "off" does (names longer than the name column pushed them right: an
    // outside probe).
    const size_t off_column = text.find(" off ") + 1;
    size_t rows = 0;
    for (size_t at = text.find('\n') + 1; at < text.size(); at = text.find('\n', at) + 1) {
        if (text[at] == '#') continue;
        EXPECT_EQ(text.compare(at + off_column, 2, "0x"), 0) << text.substr(at, text.find('\n', at) - at);
        ++rows;
    }
    EXPECT_EQ(rows, std::size(kRegisters) + std::size(kDoorbellWords));
}
