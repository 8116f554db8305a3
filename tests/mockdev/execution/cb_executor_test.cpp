// SPDX-License-Identifier: Apache-2.0
// Each class of malformed CB gets its own error code; a NOP succeeds;
// COPY_INLINE writes its payload.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "execution/cb_executor.hpp"
#include "spyre/uapi/spyre_regs.h"

namespace spyre::mockdev {
namespace {

class CbExecutorTest : public ::testing::Test {
protected:
    static spyre_cb Nop() {
        spyre_cb cb{};
        cb.opcode = SPYRE_OP_NOP;
        cb.slots = 1;
        cb.user_data = 42;
        return cb;
    }
    uint64_t Counter(uint32_t off) const {
        uint64_t v;
        std::memcpy(&v, bar0_.data() + off, sizeof v);
        return v;
    }
    uint64_t Nops() const { return Counter(SPYRE_REG_CNT_NOPS); }

    // A COPY_INLINE CB for `size` bytes at `dst`, and a payload of its slots
    // filled with a pattern.
    static spyre_cb Inline(uint64_t dst, uint64_t size) {
        spyre_cb cb = Nop();
        cb.opcode = SPYRE_OP_COPY_INLINE;
        cb.slots = uint16_t(SPYRE_CB_INLINE_SLOTS(size));
        cb.u.copy.dst_addr = dst;
        cb.u.copy.size = size;
        return cb;
    }
    static std::vector<uint8_t> Payload(const spyre_cb& cb) {
        std::vector<uint8_t> p(size_t(cb.slots - 1) * SPYRE_CB_SLOT_BYTES);
        for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t(i * 7 + 3);
        return p;
    }

    alignas(8) std::array<uint8_t, SPYRE_REG_FILE_SIZE> bar0_{};
    alignas(8) std::array<uint8_t, 4096> memory_{};
    RegisterFile regs_{bar0_.data()};
    CardCores compute_{1};
    std::atomic<uint32_t> watchdog_ms_{10000};
    CbExecutor exec_{regs_, watchdog_ms_, DeviceMemory(memory_.data(), memory_.size()), compute_};
};

TEST_F(CbExecutorTest, NopSucceeds) {
    const CbOutcome out = exec_.Execute(Nop());
    EXPECT_EQ(out.status, SPYRE_ERR_NONE);
    EXPECT_EQ(out.result, 0u);
    EXPECT_EQ(Nops(), 1u);
}

TEST_F(CbExecutorTest, ZeroedSlotIsInvalidOpcode) {
    EXPECT_EQ(exec_.Execute(spyre_cb{}).status, SPYRE_ERR_INVALID_OPCODE);
}

TEST_F(CbExecutorTest, UnknownOpcodes) {
    for (unsigned op : {0x00u, 0x02u, 0x0Fu, 0x12u, 0x22u, 0x32u, 0x77u, 0xFFu}) {
        spyre_cb cb = Nop();
        cb.opcode = uint8_t(op);
        EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_INVALID_OPCODE) << op;
    }
}

TEST_F(CbExecutorTest, InvalidOpcodeWinsOverOtherFaults) {
    spyre_cb cb = Nop();
    cb.opcode = 0x77;
    cb.flags = 0x80;
    cb.slots = 0;
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_INVALID_OPCODE);
}

TEST_F(CbExecutorTest, ReservedFlagsMustBeZero) {
    for (unsigned bit = 0; bit < 8; ++bit) {
        if (SPYRE_CB_F_DEFINED & (1u << bit)) continue;
        spyre_cb cb = Nop();
        cb.flags = uint8_t(1u << bit);
        EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_RESERVED_NONZERO) << bit;
        cb.flags |= SPYRE_CB_F_LINK;
        EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_RESERVED_NONZERO) << bit;
    }
}

// LINK is defined: the executor runs the CB (the ring lane acts on the flag).
TEST_F(CbExecutorTest, LinkFlagIsAccepted) {
    spyre_cb cb = Nop();
    cb.flags = SPYRE_CB_F_LINK;
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_NONE);
    EXPECT_EQ(Nops(), 1u);
}

TEST_F(CbExecutorTest, RingStreamOnlyWithItsFlagAndInRange) {
    spyre_cb cb = Nop();
    cb.stream = 1;  // no F_STREAM: the word must be 0
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_RESERVED_NONZERO);
    cb = Nop();
    cb.flags = SPYRE_CB_F_STREAM_RESTART;  // RESTART alone
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_RESERVED_NONZERO);
    cb = Nop();
    cb.flags = SPYRE_CB_F_STREAM;
    cb.stream = SPYRE_RING_STREAMS;
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_RESERVED_NONZERO);
    EXPECT_EQ(Nops(), 0u);
    cb.stream = SPYRE_RING_STREAMS - 1;
    cb.flags = SPYRE_CB_F_STREAM | SPYRE_CB_F_STREAM_RESTART | SPYRE_CB_F_LINK;
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_NONE);
    EXPECT_EQ(Nops(), 1u);
}

TEST_F(CbExecutorTest, SlotCountMustBeOne) {
    for (unsigned slots : {0u, 2u, SPYRE_CB_MAX_SLOTS, 0xFFFFu}) {
        spyre_cb cb = Nop();
        cb.slots = uint16_t(slots);
        EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_BAD_SLOT_COUNT) << slots;
    }
    // Even with a payload that matches the slot count: only COPY_INLINE has one.
    for (unsigned slots : {2u, SPYRE_CB_MAX_SLOTS}) {
        spyre_cb cb = Nop();
        cb.slots = uint16_t(slots);
        EXPECT_EQ(exec_.Execute(cb, Payload(cb)).status, SPYRE_ERR_BAD_SLOT_COUNT) << slots;
    }
    EXPECT_EQ(Nops(), 0u);
}

TEST_F(CbExecutorTest, PayloadMustMatchTheSlotCount) {
    const std::vector<uint8_t> extra(SPYRE_CB_SLOT_BYTES);
    EXPECT_EQ(exec_.Execute(Nop(), extra).status, SPYRE_ERR_BAD_SLOT_COUNT);
    spyre_cb cb = Inline(0, 100);  // 3 slots: 128 payload bytes
    EXPECT_EQ(exec_.Execute(cb, std::vector<uint8_t>(64)).status, SPYRE_ERR_BAD_SLOT_COUNT);
    EXPECT_EQ(exec_.Execute(cb, std::vector<uint8_t>(192)).status, SPYRE_ERR_BAD_SLOT_COUNT);
    EXPECT_EQ(exec_.Execute(cb, std::vector<uint8_t>(128)).status, SPYRE_ERR_NONE);
}

TEST_F(CbExecutorTest, NopArgumentsMustBeZero) {
    for (unsigned i = 0; i < 6; ++i) {
        spyre_cb cb = Nop();
        cb.u.args[i] = 1ull << 63;
        EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_RESERVED_NONZERO) << i;
    }
    EXPECT_EQ(Nops(), 0u) << "failed NOPs are not counted as NOPs";
}

TEST_F(CbExecutorTest, LaunchWithExtraSlotsIsBadSlotCount) {
    spyre_cb cb = Nop();
    cb.opcode = SPYRE_OP_LAUNCH;
    cb.slots = 3;
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_BAD_SLOT_COUNT);
    EXPECT_EQ(exec_.Execute(cb, std::vector<uint8_t>(128)).status, SPYRE_ERR_BAD_SLOT_COUNT);
}

TEST_F(CbExecutorTest, CopyInlineWritesItsPayload) {
    for (uint64_t size : std::initializer_list<uint64_t>{1, 63, 64, 65, 1000, SPYRE_CB_INLINE_MAX_BYTES}) {
        SCOPED_TRACE(size);
        memory_.fill(0xEE);
        const uint64_t dst = memory_.size() - size;  // ends exactly at the window's end
        const spyre_cb cb = Inline(dst, size);
        const std::vector<uint8_t> payload = Payload(cb);
        const CbOutcome out = exec_.Execute(cb, payload);
        ASSERT_EQ(out.status, SPYRE_ERR_NONE) << spyre_error_name(out.status);
        EXPECT_EQ(out.result, size);
        EXPECT_EQ(std::memcmp(memory_.data() + dst, payload.data(), size), 0);
        // Bytes before it are untouched (the padding in the last slot is not copied).
        EXPECT_EQ(memory_[dst - 1], 0xEE);
    }
    EXPECT_EQ(Counter(SPYRE_REG_CNT_COPIES), 6u);
    EXPECT_EQ(Counter(SPYRE_REG_CNT_COPY_BYTES), 1 + 63 + 64 + 65 + 1000 + SPYRE_CB_INLINE_MAX_BYTES);
}

// COPY is memmove on device memory at any distance between the ranges:
// overlapping either way, and apart by the 1-31 bytes (mod 4 KiB) that
// take the copy free of the aliasing stall.
TEST_F(CbExecutorTest, CopyMovesBytesLikeMemmoveAtAnyDistance) {
    struct Case {
        uint64_t src, dst, size;
    };
    const Case cases[] = {{0, 1, 2000},    {1, 0, 2000},    {0, 16, 16},      {100, 116, 1500}, {116, 100, 1500},
                          {0, 2048, 2048}, {2048, 0, 2048}, {8, 4000, 96},    {0, 31, 3000},    {31, 0, 3000},
                          {64, 2000, 300}, {0, 0, 4096}};
    uint64_t copies = 0;
    for (const Case& c : cases) {
        SCOPED_TRACE("src " + std::to_string(c.src) + " dst " + std::to_string(c.dst) + " size " +
                     std::to_string(c.size));
        for (size_t i = 0; i < memory_.size(); ++i) memory_[i] = uint8_t(i * 13 + 5);
        std::array<uint8_t, 4096> expect = memory_;
        std::memmove(expect.data() + c.dst, expect.data() + c.src, c.size);
        spyre_cb cb = Nop();
        cb.opcode = SPYRE_OP_COPY;
        cb.u.copy.src_addr = c.src;
        cb.u.copy.dst_addr = c.dst;
        cb.u.copy.size = c.size;
        const CbOutcome out = exec_.Execute(cb);
        ASSERT_EQ(out.status, SPYRE_ERR_NONE) << spyre_error_name(out.status);
        EXPECT_EQ(out.result, c.size);
        ++copies;
        ASSERT_EQ(memory_, expect);
    }
    EXPECT_EQ(Counter(SPYRE_REG_CNT_COPIES), copies);
}

TEST_F(CbExecutorTest, CopyInlineSizeMustFitItsSlots) {
    // Size 0 and sizes past the maximum have no valid slot count.
    for (uint64_t size : std::initializer_list<uint64_t>{0, SPYRE_CB_INLINE_MAX_BYTES + 1, 1ull << 40}) {
        spyre_cb cb = Inline(0, 1);
        cb.u.copy.size = size;
        EXPECT_EQ(exec_.Execute(cb, Payload(cb)).status, SPYRE_ERR_BAD_SLOT_COUNT) << size;
    }
    // 65 bytes take 3 slots, not 2 or 4.
    for (uint16_t slots : {uint16_t(1), uint16_t(2), uint16_t(4)}) {
        spyre_cb cb = Inline(0, 65);
        cb.slots = slots;
        EXPECT_EQ(exec_.Execute(cb, Payload(cb)).status, SPYRE_ERR_BAD_SLOT_COUNT) << slots;
    }
    EXPECT_EQ(Counter(SPYRE_REG_CNT_COPIES), 0u);
}

TEST_F(CbExecutorTest, CopyInlineOutOfRangeReportsTheDestination) {
    memory_.fill(0);
    for (uint64_t dst : std::initializer_list<uint64_t>{memory_.size() - 99, memory_.size(), ~0ull - 10}) {
        const spyre_cb cb = Inline(dst, 100);
        const CbOutcome out = exec_.Execute(cb, Payload(cb));
        EXPECT_EQ(out.status, SPYRE_ERR_ADDR_RANGE) << dst;
        EXPECT_EQ(out.fault_addr, dst);
    }
    EXPECT_EQ(std::count(memory_.begin(), memory_.end(), 0), std::ptrdiff_t(memory_.size())) << "nothing written";
    EXPECT_EQ(Counter(SPYRE_REG_CNT_COPIES), 0u);
}

TEST_F(CbExecutorTest, CopyInlineSourceAndReservedWordsMustBeZero) {
    spyre_cb cb = Inline(0, 8);
    cb.u.copy.src_addr = 64;
    EXPECT_EQ(exec_.Execute(cb, Payload(cb)).status, SPYRE_ERR_RESERVED_NONZERO);
    for (unsigned i = 3; i < 6; ++i) {
        spyre_cb r = Inline(0, 8);
        r.u.args[i] = 1;
        EXPECT_EQ(exec_.Execute(r, Payload(r)).status, SPYRE_ERR_RESERVED_NONZERO) << i;
    }
}

// A TASK runs on a task queue only: the ring's executor refuses it before
// it looks at anything else, and a valid one too.
TEST_F(CbExecutorTest, TaskIsTheWrongQueue) {
    spyre_cb task = Nop();
    task.opcode = SPYRE_OP_TASK;
    task.u.task.program_addr = 64;
    EXPECT_EQ(exec_.Execute(task).status, SPYRE_ERR_WRONG_QUEUE);
    task.flags = 0x80;  // a reserved flag as well: the queue is checked first
    task.slots = 0;
    EXPECT_EQ(exec_.Execute(task).status, SPYRE_ERR_WRONG_QUEUE);
    EXPECT_EQ(Nops(), 0u);
}

TEST_F(CbExecutorTest, EveryContractOpcodeIsExecuted) {
    // No opcode answers UNSUPPORTED any more: COPY_INLINE runs.
    const spyre_cb cb = Inline(0, 4);
    EXPECT_EQ(exec_.Execute(cb, Payload(cb)).status, SPYRE_ERR_NONE);
    EXPECT_STREQ(spyre_error_name(SPYRE_ERR_CANCELED), "CANCELED");
}

}  // namespace
}  // namespace spyre::mockdev
