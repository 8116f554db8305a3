// SPDX-License-Identifier: Apache-2.0
// OpenBLAS's kernels for this CPU (spyre/common/openblas_kernels.hpp): the
// Prescott fallback of an OpenBLAS that does not know the CPU is replaced by
// the core the CPU supports, and the mock card's daemon, whose cores compute
// with OpenBLAS, runs with it.
#include "spyre/common/openblas_kernels.hpp"

#include <fstream>
#include <iterator>
#include <string>

#include "mock_fixture.hpp"

namespace spyre::test {
namespace {

TEST(OpenblasKernels, OnlyThePrescottFallbackIsReplaced) {
    using openblas::CoreToName;
    EXPECT_STREQ(CoreToName("Prescott", true, true), "SkylakeX");
    EXPECT_STREQ(CoreToName("Prescott", false, true), "Haswell");
    EXPECT_EQ(CoreToName("Prescott", false, false), nullptr);  // a CPU that is a Prescott, as far as BLAS goes
    // A core OpenBLAS recognised is its own choice.
    EXPECT_EQ(CoreToName("SkylakeX", true, true), nullptr);
    EXPECT_EQ(CoreToName("Haswell", true, true), nullptr);
    EXPECT_EQ(CoreToName("Zen", false, true), nullptr);
    EXPECT_EQ(CoreToName(nullptr, true, true), nullptr);
}

// The daemon's environment (as /proc shows it: what its last exec got)
// names the core exactly when OpenBLAS took this CPU for a Prescott.
TEST(OpenblasKernels, TheMockCardRunsWithTheKernelsOfThisCpu) {
    SPYRE_REQUIRE_FUSE();
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr)
        GTEST_SKIP() << "OPENBLAS_CORETYPE is set here, and the daemon keeps it";
    const char* expected = openblas::CoreForThisCpu();
    driver::MockDaemon daemon = driver::MockDaemon::Start({.cards = 1, .vfs = 0, .mem = "1G"});
    std::ifstream in("/proc/" + std::to_string(daemon.pid()) + "/environ", std::ios::binary);
    ASSERT_TRUE(in) << "cannot read the daemon's environment";
    const std::string environ((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const bool named = environ.find(std::string("OPENBLAS_CORETYPE=") + (expected ? expected : "")) != std::string::npos;
    // Started again by its own path: the process keeps its name for ps and pgrep.
    std::ifstream comm_file("/proc/" + std::to_string(daemon.pid()) + "/comm");
    std::string comm;
    std::getline(comm_file, comm);
    EXPECT_EQ(comm, driver::MockDaemon::FindExecutable().filename().string().substr(0, 15));
    if (expected != nullptr)
        EXPECT_TRUE(named) << "OpenBLAS takes this CPU for a " << openblas_get_corename()
                           << "; the daemon should run with OPENBLAS_CORETYPE=" << expected;
    else
        EXPECT_EQ(environ.find("OPENBLAS_CORETYPE="), std::string::npos) << "OpenBLAS chose " << openblas_get_corename();
}

}  // namespace
}  // namespace spyre::test
