// SPDX-License-Identifier: Apache-2.0
// Two processes drive two VFs of one card at the same time.
#include <sys/wait.h>
#include <unistd.h>

#include "mock_fixture.hpp"

using namespace spyre::driver;
using spyre::test::MockDeviceTest;

namespace {

// Runs in a forked child: returns the exit code (0 = every completion right).
int DriveVf(const FunctionInfo& info, uint64_t tag_base, int count) {
    try {
        Function fn = Function::Open(info);
        CommandRing ring(fn);
        std::vector<spyre_cb> cbs(32);
        std::vector<Completion> done(32);
        uint64_t next = 0;
        while (next < uint64_t(count)) {
            for (auto& cb : cbs) cb = NopCb(tag_base + next++);
            ring.Submit(cbs);
            size_t got = 0;
            while (got < cbs.size()) got += ring.Wait(std::span(done).subspan(got), cbs.size() - got, {.mode = WaitMode::Adaptive});
            for (size_t i = 0; i < cbs.size(); ++i)
                if (!done[i].ok() || done[i].user_data != cbs[i].user_data) return 2;
        }
        return fn.Read64(SPYRE_REG_CNT_NOPS) == next ? 0 : 3;
    } catch (const spyre::Error& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
        return 1;
    }
}

}  // namespace

TEST_F(MockDeviceTest, TwoProcessesOnTwoVfsAtOnce) {
    const FunctionInfo vfs[2] = {Vf(1), Vf(2)};
    pid_t pids[2];
    for (int i = 0; i < 2; ++i) {
        pids[i] = ::fork();
        ASSERT_GE(pids[i], 0);
        if (pids[i] == 0) ::_exit(DriveVf(vfs[i], uint64_t(i + 1) << 40, 20000));
    }
    for (int i = 0; i < 2; ++i) {
        int status = 0;
        ASSERT_EQ(::waitpid(pids[i], &status, 0), pids[i]);
        EXPECT_TRUE(WIFEXITED(status)) << "child " << i << " status " << status;
        EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << i;
    }
    // Each VF counted only its own work (each child checked its own
    // CNT_NOPS while it held the VF); the PF saw none. The next owner of a
    // VF starts with fresh registers: nothing of the last owner's shows.
    for (const auto& vf : vfs) {
        std::string dump = spyre::driver::DumpRegisters(vf);
        size_t at = dump.find("\nCNT_NOPS ");
        ASSERT_NE(at, std::string::npos);
        std::string line = dump.substr(at + 1, dump.find('\n', at + 1) - at - 1);
        EXPECT_NE(line.find("0x0000000000000000  0"), std::string::npos) << line;
    }
    Function pf = Function::Open(Pf());
    EXPECT_EQ(pf.Read64(SPYRE_REG_CNT_NOPS), 0u);
}
