// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "pci/pci_address.hpp"

namespace spyre::mockdev {
namespace {

TEST(MockdevPciAddress, PfAndVfNames) {
    EXPECT_EQ(FunctionAddress(0, 0).ToString(), "0000:01:00.0");
    EXPECT_EQ(FunctionAddress(0, 1).ToString(), "0000:01:00.1");
    EXPECT_EQ(FunctionAddress(0, 7).ToString(), "0000:01:00.7");
    EXPECT_EQ(FunctionAddress(0, 8).ToString(), "0000:01:01.0");
    EXPECT_EQ(FunctionAddress(0, 16).ToString(), "0000:01:02.0");
}

TEST(MockdevPciAddress, CardsAreBuses) {
    EXPECT_EQ(FunctionAddress(2, 0).ToString(), "0000:03:00.0");
    EXPECT_EQ(FunctionAddress(2, 8).ToString(), "0000:03:01.0");
    EXPECT_EQ(FunctionAddress(15, 0).ToString(), "0000:10:00.0");
    const PciAddress a = FunctionAddress(2, 9);
    EXPECT_EQ(a.bus, 0x03);
    EXPECT_EQ(a.device, 1);
    EXPECT_EQ(a.function, 1);
}

TEST(MockdevPciAddress, ParseRoundTrips) {
    for (unsigned card = 0; card < 16; ++card)
        for (unsigned fn = 0; fn <= 16; ++fn) {
            auto slot = ParseFunctionAddress(FunctionAddress(card, fn).ToString());
            ASSERT_TRUE(slot.has_value());
            EXPECT_EQ(slot->card, card);
            EXPECT_EQ(slot->fn, fn);
        }
}

TEST(MockdevPciAddress, ParseRejectsOtherSpellings) {
    for (const char* bad : {"", "0000:01:00", "0000:01:00.0x", "0000:00:00.0", "0001:01:00.0", "0000:01:00.8",
                            "0000:1:00.0", "0000:0A:00.0", " 0000:01:00.0", "0000:01:20.0x", "00000:01:00.0"})
        EXPECT_FALSE(ParseFunctionAddress(bad).has_value()) << bad;
}

}  // namespace
}  // namespace spyre::mockdev
