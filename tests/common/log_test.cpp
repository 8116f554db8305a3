// SPDX-License-Identifier: Apache-2.0
// The one logger (spyre/common/log.hpp): levels by name, the level from
// SPYRE_LOG_LEVEL (meson runs this test with it set to "debug"), a program's
// own default and override, and the lines it writes to stderr.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "spyre/common/log.hpp"

using namespace spyre;

namespace {

// Runs `fn` with stderr redirected into a pipe; returns what it wrote.
template <typename Fn>
std::string CaptureStderr(Fn fn) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    const int saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fds[1]);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
    close(fds[0]);
    return out;
}

}  // namespace

TEST(Log, LevelsByName) {
    for (log::Level l : {log::Level::Error, log::Level::Warn, log::Level::Info, log::Level::Debug})
        EXPECT_EQ(log::ParseLevel(log::Name(l)), l);
    EXPECT_EQ(log::ParseLevel("warning"), log::Level::Warn);
    EXPECT_EQ(log::ParseLevel("verbose"), std::nullopt);
    EXPECT_EQ(log::ParseLevel(""), std::nullopt);
}

// Runs first in this process: nothing has read the level yet.
TEST(Log, TheEnvironmentSetsTheLevelOverTheProgramsDefault) {
    ASSERT_STREQ(std::getenv("SPYRE_LOG_LEVEL"), "debug") << "meson sets SPYRE_LOG_LEVEL=debug for this test";
    log::SetProgram("log_test", log::Level::Error);  // a default only: the environment wins
    EXPECT_EQ(log::CurrentLevel(), log::Level::Debug);
    EXPECT_TRUE(log::Enabled(log::Level::Debug));
}

TEST(Log, OneLinePerMessageWithTheProgramAndTheLevel) {
    log::SetProgram("log_test", log::Level::Warn);
    log::SetLevel(log::Level::Info);
    const std::string out = CaptureStderr([] {
        SPYRE_LOG_ERROR("disk %s is %d%% full", "sda", 93);
        SPYRE_LOG_WARN("careful");
        SPYRE_LOG_INFO("opened %s", "0000:01:00.1");
        SPYRE_LOG_DEBUG("not shown at info");
    });
    EXPECT_EQ(out,
              "log_test: error: disk sda is 93% full\n"
              "log_test: warning: careful\n"
              "log_test: opened 0000:01:00.1\n");
}

TEST(Log, SetLevelSilencesWhatIsBelowIt) {
    log::SetProgram("log_test", log::Level::Warn);
    log::SetLevel(log::Level::Error);
    const std::string out = CaptureStderr([] {
        SPYRE_LOG_WARN("hidden");
        SPYRE_LOG_ERROR("shown");
    });
    EXPECT_EQ(out, "log_test: error: shown\n");
}

TEST(Log, ALongMessageIsCutButStillOneLine) {
    log::SetProgram("log_test", log::Level::Warn);
    log::SetLevel(log::Level::Warn);
    const std::string big(5000, 'x');
    const std::string out = CaptureStderr([&] { SPYRE_LOG_WARN("%s", big.c_str()); });
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(out.back(), '\n');
    EXPECT_EQ(out.find('\n'), out.size() - 1);
    EXPECT_LT(out.size(), 1025u);
}

TEST(Log, WritingKeepsErrno) {
    log::SetLevel(log::Level::Warn);
    CaptureStderr([] {
        errno = ENOSPC;
        SPYRE_LOG_WARN("after a failed call");
        EXPECT_EQ(errno, ENOSPC);
    });
}

// A SPYRE_LOG_LEVEL that names no level was ignored without a word
// ("DEBUG" logged at the default): the first read says so, once.
TEST(Log, ALevelThatNamesNoneIsSaidOnce) {
    const int saved = log::detail::g_level.load();
    ASSERT_EQ(setenv("SPYRE_LOG_LEVEL", "DEBUG", 1), 0);
    log::SetProgram("log_test", log::Level::Warn);
    log::detail::g_level.store(log::detail::kUnset);
    const std::string out = CaptureStderr([] {
        EXPECT_EQ(log::CurrentLevel(), log::Level::Warn);
        EXPECT_EQ(log::CurrentLevel(), log::Level::Warn);
    });
    EXPECT_EQ(out,
              "log_test: warning: SPYRE_LOG_LEVEL=\"DEBUG\" is none of error, warn, info, debug: logging at warn\n");
    ASSERT_EQ(setenv("SPYRE_LOG_LEVEL", "debug", 1), 0);
    log::detail::g_level.store(saved);
}
