// SPDX-License-Identifier: Apache-2.0
// What every example program shares (examples/support/): the result check
// fails on a NaN or an infinity (a std::max fold kept the worst error
// before it, and `err > tol` is false for a NaN), and the command line's
// numbers are read strictly (atoll read "abc" as 0 and let "-4" and
// 99999999999 through).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "example_main.hpp"
#include "result_check.hpp"

using namespace spyre::support;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST(ResultCheck, ANaNOrAnInfinityAnywhereIsTheWorstError) {
    const std::vector<float> want = {1, 2, 3, 4};
    EXPECT_EQ(WorstRelativeError(want, want), 0.0);
    for (size_t at = 0; at < want.size(); ++at) {
        for (float bad : {kNaN, kInf, -kInf}) {
            std::vector<float> got = want;
            got[at] = bad;
            SCOPED_TRACE("element " + std::to_string(at) + " = " + std::to_string(bad));
            const double worst = WorstRelativeError(got, want);
            EXPECT_FALSE(worst <= 1e-4) << worst;
            EXPECT_FALSE(worst < 1e300) << worst;
            EXPECT_EQ(CountOff(got, want, 1e-4), 1u);
        }
    }
    // A NaN in the reference is no match either.
    EXPECT_FALSE(WorstRelativeError(std::vector<float>{1}, std::vector<float>{kNaN}) <= 1.0);
    EXPECT_FALSE(RelativeError(kNaN, kNaN) <= 1.0);
}

TEST(ResultCheck, TheErrorIsRelativeToTheLargerOfOneAndTheReference) {
    EXPECT_DOUBLE_EQ(RelativeError(1.5, 1.0), 0.5);
    EXPECT_DOUBLE_EQ(RelativeError(110.0, 100.0), 0.1);
    EXPECT_DOUBLE_EQ(RelativeError(0.25, 0.0), 0.25);
    const std::vector<float> want = {100, 0, 1}, got = {101, 0.5f, 1};
    EXPECT_DOUBLE_EQ(WorstRelativeError(got, want), 0.5);
    EXPECT_EQ(CountOff(got, want, 0.1), 1u);
    EXPECT_EQ(CountOff(got, want, 0.01), 1u);
    EXPECT_EQ(CountOff(got, want, 0.001), 2u);
}

TEST(ResultCheck, ResultsOfDifferentSizesNeverMatch) {
    const std::vector<float> want = {1, 2, 3}, shorter = {1, 2};
    EXPECT_FALSE(WorstRelativeError(shorter, want) <= 1.0);
    EXPECT_EQ(CountOff(shorter, want, 1.0), 1u);
    EXPECT_EQ(CountOff(want, shorter, 1.0), 1u);
}

TEST(ExampleArguments, AWholeDecimalIntegerInRangeIsRead) {
    EXPECT_EQ(ParseInteger("M", "1", 1, 10), 1);
    EXPECT_EQ(ParseInteger("M", "10", 1, 10), 10);
    EXPECT_EQ(ParseInteger("M", "007", 1, 10), 7);
    EXPECT_EQ(ParseInteger("M", "1048576", 1, kMaxDimension), kMaxDimension);
}

TEST(ExampleArguments, AnythingElseIsAUsageErrorNamingTheArgument) {
    for (const char* text : {"", "abc", "-4", "+4", " 4", "4 ", "4x", "0x10", "1e3", "4.0", "0", "11",
                             "99999999999", "99999999999999999999999"}) {
        SCOPED_TRACE(std::string("'") + text + "'");
        try {
            ParseInteger("NOPS_PER_MODE", text, 1, 10);
            ADD_FAILURE() << "accepted";
        } catch (const UsageError& e) {
            EXPECT_EQ(std::string(e.what()),
                      std::string("NOPS_PER_MODE: '") + text + "' is not an integer from 1 to 10");
        }
    }
}

TEST(ExampleArguments, TheTopLevelTurnsErrorsIntoExitCodes) {
    const char* usage = "prog [N]";
    EXPECT_EQ(RunExample("prog", usage, [] { return 0; }), 0);
    EXPECT_EQ(RunExample("prog", usage, [] { return 1; }), 1);
    testing::internal::CaptureStderr();
    EXPECT_EQ(RunExample("prog", usage, []() -> int { throw UsageError("N: 'x' is not an integer from 1 to 2"); }),
              kUsageExitCode);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "prog: N: 'x' is not an integer from 1 to 2\nusage: prog [N]\n");
    testing::internal::CaptureStderr();
    EXPECT_EQ(RunExample("prog", usage, []() -> int { throw std::length_error("vector"); }), 1);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "prog: vector\n");
    testing::internal::CaptureStderr();
    EXPECT_EQ(RunExample("prog", usage, []() -> int { throw std::bad_alloc(); }), 1);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("prog: the host cannot allocate memory this large"),
              std::string::npos);
}
