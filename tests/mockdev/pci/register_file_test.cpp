// SPDX-License-Identifier: Apache-2.0
// The BAR0 register file: a read of any range (a register dump through the
// trapped resource0 file, a 2-byte peek) loads every register with one atomic
// access of its own width, so a 64-bit counter the device is updating never
// reads torn, and bytes land where they belong.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "pci/register_file.hpp"

namespace spyre::mockdev {
namespace {

struct alignas(64) Bar0 {
    uint8_t bytes[SPYRE_REG_FILE_SIZE] = {};
};

uint32_t AnyWideRegister() {
    for (const auto& r : uapi::kRegisters)
        if (r.width == 8) return r.offset;
    ADD_FAILURE() << "the contract declares no 64-bit register";
    return 0;
}

TEST(RegisterFile, ReadSpanCopiesBytesOfAnyRange) {
    Bar0 bar;
    for (size_t i = 0; i < sizeof bar.bytes; ++i) bar.bytes[i] = uint8_t(i * 7 + 3);
    RegisterFile regs(bar.bytes);
    for (uint32_t offset : {0u, 1u, 3u, 5u, 8u, 13u, 64u, 4000u})
        for (size_t len : {size_t(1), size_t(2), size_t(7), size_t(8), size_t(9), size_t(31)}) {
            if (offset + len > sizeof bar.bytes) continue;
            std::vector<uint8_t> out(len, 0xee);
            regs.ReadSpan(offset, out.data(), len);
            EXPECT_EQ(0, std::memcmp(out.data(), bar.bytes + offset, len)) << offset << "+" << len;
        }
}

// Before the fix a read that did not start at the register (or was not
// exactly 8 bytes long) loaded it as two 32-bit words.
TEST(RegisterFile, BulkReadNeverTearsA64BitRegister) {
    Bar0 bar;
    RegisterFile regs(bar.bytes);
    const uint32_t reg = AnyWideRegister();
    // Every store changes both halves: a torn read shows a value never stored.
    constexpr uint64_t kLow = 0x00000000ffffffffull, kHigh = 0x0000000100000000ull;
    regs.Store64(reg, kLow);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> stores{0};
    std::thread writer([&] {
        for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
            regs.Store64(reg, (i & 1) ? kHigh : kLow);
            stores.store(i + 1, std::memory_order_relaxed);
        }
    });
    struct Cut {
        uint32_t offset;
        size_t len;
    };
    // The whole file (a dump), a range starting inside the word before, and
    // one 4-byte-aligned read that covers the register.
    // The whole file only now and then: it is 1,024 loads (slow under TSan).
    const Cut cuts[] = {{reg - 4, 16}, {reg - 4, 12}, {0, SPYRE_REG_FILE_SIZE}};
    uint64_t torn = 0, reads = 0;
    std::vector<uint8_t> out(SPYRE_REG_FILE_SIZE);
    // Reads go on until both sides have done a good amount of work at once
    // (on a loaded machine the writer may start late), within a cap.
    for (int round = 0; round < 20'000'000 && (reads < 1'000'000 || stores.load(std::memory_order_relaxed) < 1'000'000);
         ++round) {
        const Cut& c = cuts[round % 256 == 255 ? 2 : round % 2];
        regs.ReadSpan(c.offset, out.data(), c.len);
        uint64_t v;
        std::memcpy(&v, out.data() + (reg - c.offset), 8);
        torn += v != kLow && v != kHigh;
        ++reads;
    }
    stop = true;
    writer.join();
    EXPECT_EQ(torn, 0u) << "of " << reads << " reads";
}

}  // namespace
}  // namespace spyre::mockdev
