// SPDX-License-Identifier: Apache-2.0
// Each class of malformed CB gets its own error code; a NOP succeeds.
#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "cb_executor.hpp"
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
    uint64_t Nops() const {
        uint64_t v;
        std::memcpy(&v, bar0_.data() + SPYRE_REG_CNT_NOPS, sizeof v);
        return v;
    }

    alignas(8) std::array<uint8_t, SPYRE_REG_FILE_SIZE> bar0_{};
    alignas(8) std::array<uint8_t, 4096> memory_{};
    RegisterFile regs_{bar0_.data()};
    ComputeEngine compute_{1};
    CbExecutor exec_{regs_, DeviceMemory(memory_.data(), memory_.size()), compute_};
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
    cb.flags = 1;
    cb.slots = 0;
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_INVALID_OPCODE);
}

TEST_F(CbExecutorTest, FlagsMustBeZero) {
    spyre_cb cb = Nop();
    cb.flags = 0x80;
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_RESERVED_NONZERO);
}

TEST_F(CbExecutorTest, Reserved0MustBeZero) {
    spyre_cb cb = Nop();
    cb.reserved0 = 1;
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_RESERVED_NONZERO);
}

TEST_F(CbExecutorTest, SlotCountMustBeOne) {
    for (unsigned slots : {0u, 2u, SPYRE_CB_MAX_SLOTS, 0xFFFFu}) {
        spyre_cb cb = Nop();
        cb.slots = uint16_t(slots);
        EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_BAD_SLOT_COUNT) << slots;
    }
}

TEST_F(CbExecutorTest, NopArgumentsMustBeZero) {
    for (unsigned i = 0; i < 6; ++i) {
        spyre_cb cb = Nop();
        cb.u.args[i] = 1ull << 63;
        EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_RESERVED_NONZERO) << i;
    }
    EXPECT_EQ(Nops(), 0u) << "failed NOPs are not counted as NOPs";
}

TEST_F(CbExecutorTest, KnownButUnexecutedOpcodesAreUnsupported) {
    spyre_cb cb = Nop();
    cb.opcode = SPYRE_OP_COPY_INLINE;
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_UNSUPPORTED);
}

TEST_F(CbExecutorTest, HeaderFaultsComeBeforeUnsupported) {
    spyre_cb cb = Nop();
    cb.opcode = SPYRE_OP_LAUNCH;
    cb.slots = 3;
    EXPECT_EQ(exec_.Execute(cb).status, SPYRE_ERR_BAD_SLOT_COUNT);
}

}  // namespace
}  // namespace spyre::mockdev
