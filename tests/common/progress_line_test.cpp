// SPDX-License-Identifier: Apache-2.0
// The terminal progress line (spyre/common/progress_line.hpp): nothing at
// all into a pipe or with CI set; on a pseudo-terminal, "\r"-redrawn lines
// ending at 100% and one newline.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "spyre/common/progress_line.hpp"

namespace {

// What is readable on `fd` now (non-blocking).
std::string Drain(int fd) {
    std::string out;
    char buf[4096];
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0 || !(p.revents & POLLIN)) break;
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) break;
        out.append(buf, size_t(n));
    }
    return out;
}

void Feed(spyre::ProgressLine& line, uint64_t total) {
    const spyre::ProgressCallback cb = line.Callback();
    if (!cb) return;  // inactive: the operation would not even call it
    for (uint64_t i = 0; i <= total; ++i) cb({"copy to device", i, total, "bytes"});
}

class EnvGuard {
public:
    EnvGuard() {
        if (const char* ci = std::getenv("CI")) saved_ = ci, had_ = true;
    }
    ~EnvGuard() {
        if (had_) setenv("CI", saved_.c_str(), 1);
        else unsetenv("CI");
    }

private:
    std::string saved_;
    bool had_ = false;
};

}  // namespace

TEST(ProgressLine, PrintsNothingIntoAPipe) {
    EnvGuard env;
    unsetenv("CI");
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    {
        spyre::ProgressLine line(fds[1]);
        EXPECT_FALSE(line.active());
        EXPECT_FALSE(bool(line.Callback()));
        line.Update({"copy", 5, 10, "bytes"});  // called anyway: still nothing
        Feed(line, 1000);
    }
    close(fds[1]);
    EXPECT_EQ(Drain(fds[0]), "");
    close(fds[0]);
}

TEST(ProgressLine, DrawsOnATerminalAndEndsTheLine) {
    EnvGuard env;
    unsetenv("CI");
    int master = -1, slave = -1;
    if (openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) GTEST_SKIP() << "no pseudo-terminal here";
    {
        spyre::ProgressLine line(slave);
        ASSERT_TRUE(line.active());
        Feed(line, 1000);  // throttled: the first and the last draw at least
    }
    const std::string out = Drain(master);
    close(slave);
    close(master);
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(out.front(), '\r') << out;
    EXPECT_NE(out.find("copy to device: 0/1000 bytes (0%)"), std::string::npos) << out;
    EXPECT_NE(out.find("copy to device: 1000/1000 bytes (100%)"), std::string::npos) << out;
    // One line, ended once (the terminal turns "\n" into "\r\n").
    EXPECT_EQ(out.find('\n'), out.size() - 1) << out;
    EXPECT_LT(out.size(), 400u) << "drawn on every call, not throttled: " << out.size() << " bytes";
}

TEST(ProgressLine, PrintsNothingOnATerminalUnderCi) {
    EnvGuard env;
    setenv("CI", "true", 1);
    int master = -1, slave = -1;
    if (openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) GTEST_SKIP() << "no pseudo-terminal here";
    {
        spyre::ProgressLine line(slave);
        EXPECT_FALSE(line.active());
        Feed(line, 100);
        line.Finish();
    }
    EXPECT_EQ(Drain(master), "");
    close(slave);
    close(master);
}
