// SPDX-License-Identifier: Apache-2.0
// Integration fixtures: each test gets its own spyre-mockdev (private mount
// point and shm prefix, own process group, killed and cleaned on teardown).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

// The tests work at every tier: the driver's too (apps include it themselves).
#include "spyre/driver/command_ring.hpp"
#include "spyre/driver/config_space.hpp"
#include "spyre/driver/device_environment.hpp"
#include "spyre/driver/discovery.hpp"
#include "spyre/driver/dma_queue.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/driver/mock_daemon.hpp"
#include "spyre/driver/register_dump.hpp"
#include "spyre/driver/task_queue.hpp"
#include "spyre/spyre.hpp"

namespace spyre::test {

// Runs `body` in a child process (one that holds no device node of the
// parent's) and returns its exit code (255 if it died).
inline int InChild(const std::function<int()>& body) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(body());
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

// Retries driver::Function::Open while the daemon has not yet seen a dead
// holder's close.
inline std::optional<driver::Function> OpenWhenFree(const driver::FunctionInfo& info) {
    for (int i = 0; i < 500; ++i) {
        try {
            return driver::Function::Open(info);
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::Busy) throw;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }
    return std::nullopt;
}

// Why FUSE cannot be used here, or empty when it can.
std::string FuseUnavailableReason();

// Skips the test where /dev/fuse is unusable, but fails instead when
// SPYRE_REQUIRE_FUSE=1 (CI), so a skip never hides a broken CI.
#define SPYRE_REQUIRE_FUSE()                                                                 \
    do {                                                                                     \
        std::string why_ = ::spyre::test::FuseUnavailableReason();                           \
        if (!why_.empty()) {                                                                 \
            if (::spyre::test::FuseRequired()) FAIL() << why_ << " (SPYRE_REQUIRE_FUSE=1)";  \
            GTEST_SKIP() << why_;                                                            \
        }                                                                                    \
    } while (0)

bool FuseRequired();

class MockDeviceTest : public ::testing::Test {
protected:
    // Small sparse memory keeps tests cheap; subclasses may change it.
    virtual driver::MockOptions Options() const { return {.cards = 1, .vfs = 2, .mem = "4G"}; }

    void SetUp() override;
    void TearDown() override;

    driver::MockDaemon& daemon() { return *daemon_; }
    const driver::DeviceRoot& root() const { return *root_; }
    driver::FunctionInfo Pf(int card = 0) const;
    driver::FunctionInfo Vf(int index, int card = 0) const;

private:
    std::optional<driver::MockDaemon> daemon_;
    std::optional<driver::DeviceRoot> root_;
};

// Checks that `statement` throws spyre::Error of `kind` whose what() contains
// `text`.
#define EXPECT_SPYRE_ERROR(statement, error_kind, text)                                          \
    do {                                                                                         \
        try {                                                                                    \
            statement;                                                                           \
            ADD_FAILURE() << "expected spyre::Error(" #error_kind ") from " #statement;          \
        } catch (const ::spyre::Error& e_) {                                                     \
            EXPECT_EQ(e_.kind(), ::spyre::ErrorKind::error_kind) << e_.what();                   \
            EXPECT_NE(std::string(e_.what()).find(text), std::string::npos) << e_.what();        \
        }                                                                                        \
    } while (0)

struct CommandResult {
    int exit_code = -1;
    std::string output;  // stdout and stderr together
};

// Runs a shell command, capturing its output and exit code.
CommandResult RunCommand(const std::string& command);

// The path of a built tool passed by meson in an environment variable.
std::string ToolPath(const char* env_var);

// True when dir is in this process's mount table.
bool IsMounted(const std::string& dir);

// Entries of /dev/shm starting with "<prefix>.", and those in the daemon's
// object directory /dev/shm/<prefix>.d.
int CountShmObjects(const std::string& prefix);

// Where the object the mock transport names `name` ("<prefix>.d/<object>") is.
std::string ShmPath(const std::string& name);

// Blocks until process `pid` (a child that is not reaped yet, such as a
// killed daemon) has exited, for at most `limit`; false if it has not.
bool WaitForExit(pid_t pid, std::chrono::milliseconds limit = std::chrono::seconds(30));

// Sends SIGCONT to a daemon when the scope ends: a test that stops its
// daemon (SIGSTOP) lets it go on whatever fails, so the fixture can stop it.
class ResumeAtScopeEnd {
public:
    explicit ResumeAtScopeEnd(driver::MockDaemon& daemon) : daemon_(daemon) {}
    ~ResumeAtScopeEnd() { daemon_.Signal(SIGCONT); }
    ResumeAtScopeEnd(const ResumeAtScopeEnd&) = delete;
    ResumeAtScopeEnd& operator=(const ResumeAtScopeEnd&) = delete;

private:
    driver::MockDaemon& daemon_;
};

// An environment variable set for a scope, then restored (or unset).
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value);
    ~ScopedEnv();
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string name_;
    std::optional<std::string> old_;
};

// Looks for up to `limit` until process `pid` is stopped by a signal ('T'
// in /proc/PID/stat): a SIGSTOP is delivered after kill() returns. False
// if it has not stopped.
bool WaitUntilStopped(pid_t pid, std::chrono::milliseconds limit = std::chrono::seconds(5));

// Fails the test binary instead of letting it hang: unless the watchdog is
// destroyed within `limit`, it prints what did not finish and exits the
// process with status 1 (meson reports the test as failed).
class Watchdog {
public:
    Watchdog(std::chrono::seconds limit, std::string what);
    ~Watchdog();
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

}  // namespace spyre::test
