// SPDX-License-Identifier: Apache-2.0
// spyre-mockdev start-up errors, clean shutdown, and what a driver sees when
// the daemon dies or shuts down under a waiting thread.
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include "mock_fixture.hpp"

namespace fs = std::filesystem;
using namespace spyre::driver;
using namespace std::chrono;
using spyre::test::MockDeviceTest;
using spyre::test::RunCommand;

namespace {

std::string Mockdev() { return spyre::test::ToolPath("SPYRE_MOCKDEV"); }

struct TempDir {
    fs::path path;
    TempDir() {
        char t[] = "/tmp/spyre-lifecycle-XXXXXX";
        path = ::mkdtemp(t);
    }
    // A shared-memory prefix as unique as the directory: a pid alone is reused,
    // and objects a crashed earlier run left under it would be counted here.
    std::string UniquePrefix(const std::string& stem) const {
        return stem + "-" + path.filename().string().substr(sizeof("spyre-lifecycle-") - 1);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

// Waits up to `limit` for pred() to hold.
template <typename Pred>
bool Eventually(Pred pred, milliseconds limit = milliseconds(5000)) {
    auto end = steady_clock::now() + limit;
    while (steady_clock::now() < end) {
        if (pred()) return true;
        std::this_thread::sleep_for(milliseconds(10));
    }
    return pred();
}

}  // namespace

TEST(MockdevStartup, RejectsBadArgumentsWithUsageExitCode) {
    auto r = RunCommand(Mockdev() + " --cards 0 --mount /tmp");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    r = RunCommand(Mockdev());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--mount is required"), std::string::npos) << r.output;
    // An unknown option is named, with or without --mount (without, it was
    // "--mount is required"); fd ranges read as numbers a person can read;
    // empty values given are refused, not taken as the default.
    const struct {
        std::string args;
        const char* says;
    } bad[] = {
        {"--bogus", "--bogus"},
        {"--version", "--version"},
        {"--mount /tmp --ready-fd -5", "not in range 0 to 2147483647"},
        {"--mount /tmp --exit-with-fd -1", "not in range 0 to 2147483647"},
        // Range read the text as a double: 1.5 was "not in range", 0x2 passed.
        {"--mount /tmp --ready-fd 1.5", "'1.5' is not a whole decimal number"},
        {"--mount /tmp --cards 0x2", "'0x2' is not a whole decimal number"},
        {"--mount /tmp --cores ''", "'' is not a whole decimal number"},
        {"--mount /tmp --cards +1", "'+1' is not a whole decimal number"},
        {"--mount /tmp --ready-fd -0", "'-0' is not a whole decimal number"},
        {"--mount ''", "--mount: the mount point is an empty path"},
        {"--mount /tmp --shm-prefix ''", "--shm-prefix: '' must be 1-32 characters"},
    };
    for (const auto& [args, says] : bad) {
        r = RunCommand(Mockdev() + " " + args);
        EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
        EXPECT_NE(r.output.find(says), std::string::npos) << args << ": " << r.output;
        EXPECT_EQ(r.output.find("--mount is required"), std::string::npos) << args << ": " << r.output;
    }
}

TEST(MockdevStartup, RefusesNonEmptyMountPoint) {
    TempDir dir;
    std::ofstream(dir.path / "something") << "x";
    auto r = RunCommand(Mockdev() + " --mount " + dir.path.string() + " --shm-prefix spyre-test-nonempty");
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find("not empty"), std::string::npos) << r.output;
    EXPECT_EQ(spyre::test::CountShmObjects("spyre-test-nonempty"), 0);
    EXPECT_TRUE(fs::exists(dir.path / "something"));  // touched nothing
}

TEST(MockdevStartup, RefusesMissingMountPoint) {
    auto r = RunCommand(Mockdev() + " --mount /nonexistent/spyre-mount");
    EXPECT_EQ(r.exit_code, 3) << r.output;
}

TEST_F(MockDeviceTest, RefusesBusyMountPointAndPrefixInUse) {
    // The fixture's mount is live: mounting over it is refused.
    auto busy = RunCommand(Mockdev() + " --mount " + daemon().mount().string() + " --shm-prefix spyre-test-busy");
    EXPECT_EQ(busy.exit_code, 3) << busy.output;
    EXPECT_EQ(spyre::test::CountShmObjects("spyre-test-busy"), 0);

    TempDir dir;
    auto clash = RunCommand(Mockdev() + " --mount " + dir.path.string() + " --shm-prefix " + daemon().shm_prefix());
    EXPECT_EQ(clash.exit_code, 4) << clash.output;
    EXPECT_NE(clash.output.find(daemon().shm_prefix()), std::string::npos) << clash.output;
    EXPECT_FALSE(spyre::test::IsMounted(dir.path.string()));
    // The running daemon is unharmed.
    Function fn = Function::Open(Pf());
    EXPECT_EQ(fn.Read32(SPYRE_REG_MAGIC), SPYRE_MAGIC);
}

TEST(MockdevShutdown, BackgroundModeMountsThenSigtermCleansUp) {
    SPYRE_REQUIRE_FUSE();
    TempDir dir;
    const std::string prefix = dir.UniquePrefix("spyre-test-bg");
    auto r = RunCommand(Mockdev() + " --mount " + dir.path.string() + " --shm-prefix " + prefix + " --vfs 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;  // returns once the mount is live
    EXPECT_TRUE(spyre::test::IsMounted(dir.path.string()));
    EXPECT_GT(spyre::test::CountShmObjects(prefix), 0);
    DeviceRoot root(dir.path);
    ASSERT_EQ(root.Functions().size(), 2u);
    pid_t pid;
    {
        Function fn = Function::Open(root.Find("0"));
        pid = fn.device_info().daemon_pid;
    }
    ASSERT_EQ(::kill(pid, SIGTERM), 0);
    EXPECT_TRUE(Eventually([&] { return !spyre::test::IsMounted(dir.path.string()); }));
    EXPECT_TRUE(Eventually([&] { return spyre::test::CountShmObjects(prefix) == 0; }));
    EXPECT_TRUE(Eventually([&] { return ::kill(pid, 0) != 0; }));
}

// Stop reports how the daemon ended, cleans up, and the daemon is reaped
// (by a thread of Stop's own, so no zombie outlives it for long).
TEST(MockdevShutdown, StopReportsTheEndAndTheDaemonIsReaped) {
    SPYRE_REQUIRE_FUSE();
    MockDaemon daemon = MockDaemon::Start({.vfs = 0, .mem = "64M"});
    const pid_t pid = daemon.pid();
    const fs::path mount = daemon.mount();
    const std::string prefix = daemon.shm_prefix();
    ASSERT_GT(pid, 0);
    const int status = daemon.Stop();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_FALSE(daemon.running());
    EXPECT_FALSE(spyre::test::IsMounted(mount.string()));
    EXPECT_EQ(spyre::test::CountShmObjects(prefix), 0);
    // A zombie still answers kill(pid, 0); a reaped pid does not.
    EXPECT_TRUE(Eventually([&] { return ::kill(pid, 0) != 0 && errno == ESRCH; }));
    EXPECT_EQ(daemon.Stop(), -1);  // once only
}

// A thread the daemon did not start (OpenBLAS starts its own before main)
// has the stop signals unblocked, so SIGTERM may land there. Before, the
// handler there set libfuse's exit flag without waking the loop, and the
// daemon went on serving until SIGKILL; a stop right after start-up lost
// the same wake-up against the loop's own check of the flag.
TEST(MockdevShutdown, ASigtermTakenByAnyThreadStopsTheDaemon) {
    SPYRE_REQUIRE_FUSE();
    MockDaemon daemon = MockDaemon::Start({.vfs = 0, .mem = "64M"});
    const pid_t pid = daemon.pid();
    const fs::path mount = daemon.mount();
    pid_t taker = 0;
    for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
        const pid_t tid = std::stoi(task.path().filename().string());
        std::ifstream status(task.path() / "status");
        for (std::string line; std::getline(status, line);) {
            if (line.rfind("SigBlk:", 0) != 0) continue;
            const unsigned long long blocked = std::stoull(line.substr(7), nullptr, 16);
            if (tid != pid && !(blocked & (1ull << (SIGTERM - 1)))) taker = tid;
        }
        if (taker) break;
    }
    if (!taker) GTEST_SKIP() << "every thread but the main one blocks SIGTERM here";
    ASSERT_EQ(::syscall(SYS_tgkill, pid, taker, SIGTERM), 0);
    EXPECT_TRUE(Eventually([&] { return !spyre::test::IsMounted(mount.string()); }))
        << "SIGTERM on thread " << taker << " did not stop the daemon";
    const int status = daemon.Stop();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// Stopped at once after it came up, many times: each stop ends it cleanly.
TEST(MockdevShutdown, ASigtermRightAfterStartUpStopsTheDaemon) {
    SPYRE_REQUIRE_FUSE();
    for (int round = 0; round < 20; ++round) {
        MockDaemon daemon = MockDaemon::Start({.vfs = 0, .mem = "64M"});
        const int status = daemon.Stop();
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round << ": " << status;
    }
}

TEST(MockdevShutdown, StopReportsADaemonKilledBeforeIt) {
    SPYRE_REQUIRE_FUSE();
    MockDaemon daemon = MockDaemon::Start({.vfs = 0, .mem = "64M"});
    const pid_t pid = daemon.pid();
    daemon.Signal(SIGKILL);
    const int status = daemon.Stop();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    EXPECT_TRUE(Eventually([&] { return ::kill(pid, 0) != 0 && errno == ESRCH; }));
}

// An app killed outright (no destructor runs) with a private daemon: the
// daemon, told by the end of its lifeline pipe (--exit-with-fd), unmounts,
// removes its shared memory and the mount directory made for it (that
// directory used to stay behind, one per killed app).
TEST(MockdevShutdown, AnAppKilledOutrightLeavesNothingOfItsPrivateDaemon) {
    SPYRE_REQUIRE_FUSE();
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t app = ::fork();
    ASSERT_GE(app, 0);
    if (app == 0) {  // the app: starts its daemon, says where, waits to be killed
        ::close(fds[0]);
        try {
            MockDaemon daemon = MockDaemon::Start({.vfs = 0, .mem = "64M"});
            const std::string said = std::to_string(daemon.pid()) + " " + daemon.shm_prefix() + " " +
                                     daemon.mount().string() + "\n";
            if (::write(fds[1], said.data(), said.size()) != ssize_t(said.size())) ::_exit(1);
            for (;;) ::pause();
        } catch (...) {
            ::_exit(1);
        }
    }
    ::close(fds[1]);
    std::string said;
    char buf[512];
    for (ssize_t n; said.find('\n') == std::string::npos && (n = ::read(fds[0], buf, sizeof buf)) > 0;) said.append(buf, size_t(n));
    ::close(fds[0]);
    ASSERT_EQ(::kill(app, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(app, &status, 0), app);
    std::istringstream in(said);
    pid_t daemon_pid = -1;
    std::string prefix, mount;
    ASSERT_TRUE(in >> daemon_pid >> prefix >> mount) << "the app said '" << said << "'";
    EXPECT_TRUE(Eventually([&] { return ::kill(daemon_pid, 0) != 0; })) << "the daemon outlived its app";
    EXPECT_FALSE(spyre::test::IsMounted(mount));
    EXPECT_EQ(spyre::test::CountShmObjects(prefix), 0);
    EXPECT_TRUE(Eventually([&] { return !fs::exists(mount); })) << mount << " stayed behind";
}

// A private daemon lives as long as its process, not as long as the thread
// that started it: it used to get its parent-death signal when that thread
// ended, and every later call on the Device was DeviceLost. Nothing else
// of the process reaches it either: a pipe the app leaves open on exec is
// not held by the daemon.
TEST(MockdevShutdown, APrivateDaemonStartedOnAThreadThatEndsLivesOnAndHoldsNoAppFile) {
    SPYRE_REQUIRE_FUSE();
    int app_pipe[2];
    ASSERT_EQ(::pipe(app_pipe), 0);  // not close-on-exec
    std::optional<MockDaemon> daemon;
    std::thread([&] { daemon.emplace(MockDaemon::Start({.vfs = 0, .mem = "64M"})); }).join();
    ASSERT_TRUE(daemon);
    ::usleep(300 * 1000);  // a parent-death signal came within a few ms of the thread's end
    EXPECT_EQ(::kill(daemon->pid(), 0), 0) << "the daemon ended with the thread that started it";
    EXPECT_TRUE(spyre::test::IsMounted(daemon->mount().string()));
    ::close(app_pipe[1]);
    ::fcntl(app_pipe[0], F_SETFL, O_NONBLOCK);
    char byte = 0;
    EXPECT_EQ(::read(app_pipe[0], &byte, 1), 0) << "the daemon holds the app's pipe open (no end of file)";
    ::close(app_pipe[0]);
    EXPECT_EQ(daemon->Stop(), 0);
}

// --cpus: anything but inherit, all or a list of this machine's CPUs is
// refused before the daemon touches anything.
TEST(MockdevStartup, ABadCpusListIsRefusedWithUsageExitCode) {
    TempDir dir;
    for (const char* bad : {"x", "1-0", "0,", "''", "0-", "99999", "2,a"}) {
        auto r = RunCommand(Mockdev() + " --mount " + dir.path.string() + " --cpus " + bad);
        EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
        EXPECT_NE(r.output.find("--cpus"), std::string::npos) << bad << ": " << r.output;
        EXPECT_FALSE(spyre::test::IsMounted(dir.path.string()));
    }
    auto r = RunCommand(Mockdev() + " --mount " + dir.path.string() + " --cpus 99999");
    EXPECT_NE(r.output.find("this machine has CPUs 0-"), std::string::npos) << r.output;
}

namespace {

// The CPUs every thread of process `pid` may run on, when they all agree.
std::optional<cpu_set_t> ThreadsAffinity(pid_t pid) {
    std::optional<cpu_set_t> common;
    DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
    if (!d) return std::nullopt;
    while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        cpu_set_t set;
        if (::sched_getaffinity(std::atoi(e->d_name), sizeof set, &set) != 0) continue;  // ended meanwhile
        if (common && !CPU_EQUAL(&set, &*common)) {
            ::closedir(d);
            return std::nullopt;
        }
        common = set;
    }
    ::closedir(d);
    return common;
}

std::string ListOf(const cpu_set_t& set) {
    std::string out;
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) out += (out.empty() ? "" : ",") + std::to_string(c);
    return out;
}

}  // namespace

// A program's private daemon is its card, not part of the program: bound
// where the starting thread was bound (mpirun binds each rank to one
// core), the card's cores, lane and the program's own threads all took
// turns on that core while the others idled. It runs on every CPU now;
// extra_args' --cpus still binds it as asked.
TEST(MockdevStartup, APrivateDaemonIsNotBoundWhereItsStarterIs) {
    SPYRE_REQUIRE_FUSE();
    cpu_set_t mine;
    ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
    if (CPU_COUNT(&mine) < 2) GTEST_SKIP() << "this process may run on one CPU only";
    int first = 0, second = 0;
    while (!CPU_ISSET(first, &mine)) ++first;
    for (second = first + 1; !CPU_ISSET(second, &mine);) ++second;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    cpu_set_t other;
    CPU_ZERO(&other);
    CPU_SET(second, &other);
    std::optional<MockDaemon> freed, kept, listed, kept_by_env;
    ASSERT_EQ(::unsetenv("SPYRE_MOCK_CPUS"), 0);
    std::thread([&] {
        // This thread only: the daemon inherits its starting thread's binding.
        ASSERT_EQ(::pthread_setaffinity_np(::pthread_self(), sizeof one, &one), 0);
        freed.emplace(MockDaemon::Start({.vfs = 1, .mem = "64M"}));
        kept.emplace(MockDaemon::Start({.vfs = 0, .mem = "64M", .extra_args = {"--cpus", "inherit"}}));
        listed.emplace(MockDaemon::Start({.vfs = 0, .mem = "64M", .extra_args = {"--cpus", std::to_string(second)}}));
        ::setenv("SPYRE_MOCK_CPUS", "inherit", 1);
        kept_by_env.emplace(MockDaemon::Start({.vfs = 0, .mem = "64M"}));
        ::setenv("SPYRE_MOCK_CPUS", "0-", 1);  // refused by the daemon: the start says why
        try {
            MockDaemon bad = MockDaemon::Start({.vfs = 0, .mem = "64M"});
            ADD_FAILURE() << "SPYRE_MOCK_CPUS=0- started a daemon";
        } catch (const spyre::Error& e) {
            EXPECT_EQ(e.kind(), spyre::ErrorKind::InvalidArgument) << e.what();
            EXPECT_NE(std::string(e.what()).find("cpus '0-'"), std::string::npos) << e.what();
        }
        ::unsetenv("SPYRE_MOCK_CPUS");
    }).join();
    ASSERT_TRUE(freed && kept && listed && kept_by_env);

    const std::optional<cpu_set_t> f = ThreadsAffinity(freed->pid());
    ASSERT_TRUE(f) << "the daemon's threads are bound differently";
    cpu_set_t missing;
    CPU_XOR(&missing, &mine, &*f);
    CPU_AND(&missing, &missing, &mine);
    EXPECT_EQ(CPU_COUNT(&missing), 0) << "the private daemon runs on CPUs " << ListOf(*f) << ", not on all of "
                                      << ListOf(mine);
    const std::optional<cpu_set_t> k = ThreadsAffinity(kept->pid());
    ASSERT_TRUE(k);
    EXPECT_TRUE(CPU_EQUAL(&*k, &one)) << "--cpus inherit: " << ListOf(*k);
    const std::optional<cpu_set_t> l = ThreadsAffinity(listed->pid());
    ASSERT_TRUE(l);
    EXPECT_TRUE(CPU_EQUAL(&*l, &other)) << "--cpus " << second << ": " << ListOf(*l);
    const std::optional<cpu_set_t> e = ThreadsAffinity(kept_by_env->pid());
    ASSERT_TRUE(e);
    EXPECT_TRUE(CPU_EQUAL(&*e, &one)) << "SPYRE_MOCK_CPUS=inherit: " << ListOf(*e);
    // Each serves its card.
    for (MockDaemon* d : {&*freed, &*kept, &*listed, &*kept_by_env}) {
        Function fn = Function::Open(DeviceRoot(d->mount()).Functions().front());
        EXPECT_EQ(fn.Read32(SPYRE_REG_MAGIC), SPYRE_MAGIC);
    }
}

// A daemon that ends before it is ready: Start says how it ended, at once.
// One killed by a signal was reported as "did not become ready within
// 15000 ms" although Start returned within milliseconds (found probing).
TEST(MockdevShutdown, StartReportsADaemonThatEndsBeforeItIsReady) {
    const char* was = std::getenv("SPYRE_MOCKDEV");
    const std::string saved = was ? was : "";
    for (const auto& [body, said] : {std::pair<std::string, std::string>{"exit 3", "exited with code 3"},
                                     {"kill -KILL $$", "was killed by signal 9 (Killed) before it became ready"},
                                     {"kill -TERM $$", "was killed by signal 15 (Terminated) before it became ready"}}) {
        SCOPED_TRACE(body);
        TempDir dir;
        const fs::path fake = dir.path / "spyre-mockdev";
        {
            std::ofstream script(fake);
            script << "#!/bin/sh\n" << body << "\n";
        }
        fs::permissions(fake, fs::perms::owner_all);
        ::setenv("SPYRE_MOCKDEV", fake.c_str(), 1);
        try {
            MockDaemon::Start({.vfs = 0, .mem = "64M", .mount = dir.path / "mnt"});
            ADD_FAILURE() << "Start returned for a daemon that ended";
        } catch (const spyre::Error& e) {
            EXPECT_EQ(e.kind(), spyre::ErrorKind::DeviceLost);
            EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
        }
    }
    if (was) ::setenv("SPYRE_MOCKDEV", saved.c_str(), 1);
    else ::unsetenv("SPYRE_MOCKDEV");
}

TEST_F(MockDeviceTest, FusermountUnmountEndsTheDaemonCleanly) {
    const std::string prefix = daemon().shm_prefix();
    ASSERT_GT(spyre::test::CountShmObjects(prefix), 0);
    auto r = RunCommand("fusermount3 -u " + daemon().mount().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(Eventually([&] { return spyre::test::CountShmObjects(prefix) == 0; }));
    int status = 0;
    EXPECT_TRUE(Eventually([&] { return ::waitpid(daemon().pid(), &status, WNOHANG) == daemon().pid(); }));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

class DaemonDeathTest : public MockDeviceTest, public ::testing::WithParamInterface<WaitMode> {};

// The ring is disabled so the NOP stays pending; then the daemon dies.
TEST_P(DaemonDeathTest, KilledDaemonEndsAWaitWithDeviceLostWithinASecond) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    fn.Write32(SPYRE_REG_CONTROL, 0);
    ring.Submit(std::array{NopCb(1)});
    std::thread killer([&] {
        std::this_thread::sleep_for(milliseconds(100));
        daemon().Signal(SIGKILL);
    });
    const auto t0 = steady_clock::now();
    Completion c;
    EXPECT_SPYRE_ERROR(ring.Wait({&c, 1}, 1, {.mode = GetParam(), .timeout = seconds(20)}), DeviceLost, "gone");
    killer.join();
    EXPECT_LT(steady_clock::now() - t0, milliseconds(100) + seconds(1));
    EXPECT_SPYRE_ERROR(ring.Submit(std::array{NopCb(2)}), DeviceLost, "0000:01:00.0");
}

TEST_P(DaemonDeathTest, DaemonShutdownEndsAWaitWithDeviceLost) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    fn.Write32(SPYRE_REG_CONTROL, 0);
    ring.Submit(std::array{NopCb(1)});
    std::thread stopper([&] {
        std::this_thread::sleep_for(milliseconds(100));
        daemon().Signal(SIGTERM);
    });
    Completion c;
    const auto t0 = steady_clock::now();
    EXPECT_SPYRE_ERROR(ring.Wait({&c, 1}, 1, {.mode = GetParam(), .timeout = seconds(20)}), DeviceLost, "gone");
    stopper.join();
    EXPECT_LT(steady_clock::now() - t0, milliseconds(100) + seconds(1));
}

TEST_P(DaemonDeathTest, WaitTimesOutWhenTheDeviceNeverAnswers) {
    Function fn = Function::Open(Pf());
    CommandRing ring(fn);
    fn.Write32(SPYRE_REG_CONTROL, 0);
    ring.Submit(std::array{NopCb(1)});
    Completion c;
    EXPECT_SPYRE_ERROR(ring.Wait({&c, 1}, 1, {.mode = GetParam(), .timeout = milliseconds(300)}), Timeout,
                       "1 CBs in flight");
    fn.Write32(SPYRE_REG_CONTROL, SPYRE_CONTROL_RING_ENABLE);  // and the CB completes once enabled
    ring.Wait({&c, 1}, 1, {.mode = GetParam()});
    EXPECT_TRUE(c.ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, DaemonDeathTest, ::testing::Values(WaitMode::Poll, WaitMode::Adaptive, WaitMode::Blocking),
                         [](const auto& info) { return std::string(ToString(info.param)); });

// A daemon killed with SIGKILL leaves a dead FUSE mount and its shared-memory
// objects; starting again on the same mount point and prefix recovers both by
// itself, and the objects of the dead daemon are gone.
TEST(MockdevRecovery, RestartAfterKillRecoversTheMountAndThePrefix) {
    SPYRE_REQUIRE_FUSE();
    TempDir dir;
    const std::string prefix = dir.UniquePrefix("spyre-test-kill9");
    const std::string start = Mockdev() + " --mount " + dir.path.string() + " --shm-prefix " + prefix + " --vfs 1";
    auto first = RunCommand(start);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    pid_t pid;
    {
        DeviceRoot root(dir.path);
        Function fn = Function::Open(root.Find("0"));
        pid = fn.device_info().daemon_pid;
    }
    const int objects = spyre::test::CountShmObjects(prefix);
    ASSERT_GT(objects, 0);
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    ASSERT_TRUE(Eventually([&] { return ::kill(pid, 0) != 0; }));
    // What it left: a mount that answers ENOTCONN, and its objects.
    struct stat st {};
    EXPECT_NE(::stat(dir.path.c_str(), &st), 0);
    EXPECT_EQ(errno, ENOTCONN);
    // Its objects, unless a daemon that another test started meanwhile is
    // sweeping them: every daemon removes dead daemons' prefixes when it
    // starts, one object at a time (seen in parallel TSan runs: 0 left, and
    // 1 of 7 in the middle of a sweep). Never more than it had.
    const int left = spyre::test::CountShmObjects(prefix);
    EXPECT_LE(left, objects) << left << " of " << objects << " objects left";

    auto second = RunCommand(start);
    ASSERT_EQ(second.exit_code, 0) << second.output;
    EXPECT_NE(second.output.find("detached"), std::string::npos) << second.output;
    DeviceRoot root(dir.path);
    ASSERT_EQ(root.Functions().size(), 2u);
    pid_t pid2;
    {
        Function fn = Function::Open(root.Find("1"));
        EXPECT_EQ(fn.Read32(SPYRE_REG_MAGIC), SPYRE_MAGIC);
        pid2 = fn.device_info().daemon_pid;
    }
    EXPECT_NE(pid2, pid);
    // Only the new daemon's objects are there: as many as the first had.
    EXPECT_EQ(spyre::test::CountShmObjects(prefix), objects);
    ASSERT_EQ(::kill(pid2, SIGTERM), 0);
    EXPECT_TRUE(Eventually([&] { return spyre::test::CountShmObjects(prefix) == 0; }));
    EXPECT_TRUE(Eventually([&] { return !spyre::test::IsMounted(dir.path.string()); }));
}

// A supervisor restarts a daemon killed with SIGKILL before it reaps it: the
// dead daemon is a zombie, which still answers kill(pid, 0), but its lock on
// the owner file went when it died. The restart recovers all the same.
TEST(MockdevRecovery, RestartRecoversWhileTheKilledDaemonIsAZombie) {
    SPYRE_REQUIRE_FUSE();
    TempDir dir;
    const std::string prefix = dir.UniquePrefix("spyre-test-zombie");
    const std::string mockdev = Mockdev();
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(ready[0]);
        const std::string fd = std::to_string(ready[1]);
        ::execl(mockdev.c_str(), "spyre-mockdev", "--mount", dir.path.c_str(), "--foreground", "--mem", "64M",
                "--shm-prefix", prefix.c_str(), "--ready-fd", fd.c_str(), nullptr);
        ::_exit(127);
    }
    ::close(ready[1]);
    char buf[16];
    const bool up = ::read(ready[0], buf, sizeof buf) > 0;
    ::close(ready[0]);
    ::kill(pid, SIGKILL);
    ASSERT_TRUE(up);
    auto state = [&] {  // /proc/PID/stat field 3, after the name's ')'
        std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
        std::string line;
        std::getline(stat, line);
        const size_t at = line.rfind(')');
        return at == std::string::npos || at + 2 >= line.size() ? '?' : line[at + 2];
    };
    // Dead but for the reaping: a zombie whose other threads have exited too
    // (the leader shows Z while they still close its files).
    auto threads = [&] {
        size_t n = 0;
        std::error_code ec;
        for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec);
             !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
            ++n;
        return n;
    };
    EXPECT_TRUE(Eventually([&] { return state() == 'Z' && threads() <= 1; }));

    auto again = RunCommand(mockdev + " --mount " + dir.path.string() + " --shm-prefix " + prefix + " --mem 64M");
    EXPECT_EQ(state(), 'Z');  // still unreaped while it restarted
    ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
    if (again.exit_code != 0) RunCommand("fusermount3 -u -z " + dir.path.string());
    ASSERT_EQ(again.exit_code, 0) << again.output;
    pid_t pid2;
    {
        DeviceRoot root(dir.path);
        Function fn = Function::Open(root.Find("0"));
        pid2 = fn.device_info().daemon_pid;
    }
    EXPECT_NE(pid2, pid);
    ASSERT_EQ(::kill(pid2, SIGTERM), 0);
    EXPECT_TRUE(Eventually([&] { return spyre::test::CountShmObjects(prefix) == 0; }));
    EXPECT_TRUE(Eventually([&] { return !spyre::test::IsMounted(dir.path.string()); }));
}

// Another daemon's sweep of dead prefixes (two ranks of an MPI job start
// their mocks at once) takes a shared lock on each owner file for a look.
// A daemon claiming its prefix meanwhile, a dead owner's here, waits that
// look out instead of calling the prefix in use and exiting (CI, 29 Nov: a
// level-4 job hung after its rank 0's mock did).
TEST(MockdevStartup, AClaimWaitsOutAnotherDaemonsLookAtTheOwnerFile) {
    TempDir dir;
    fs::create_directory(dir.path / "mnt");
    const std::string prefix = dir.UniquePrefix("spyre-look");
    const pid_t dead = ::fork();  // a pid that has exited: the owner file's owner
    if (dead == 0) ::_exit(0);
    ASSERT_GT(dead, 0);
    ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
    const std::string owner = "/dev/shm/" + prefix + ".owner";
    const int fd = ::open(owner.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    const std::string pid = std::to_string(dead) + "\n";
    ASSERT_EQ(::write(fd, pid.data(), pid.size()), ssize_t(pid.size()));
    ASSERT_EQ(::flock(fd, LOCK_SH), 0);  // as the sweep's look holds it, but for 200 ms
    std::thread look_ends([fd] {
        std::this_thread::sleep_for(milliseconds(200));
        ::flock(fd, LOCK_UN);
        ::close(fd);
    });
    std::optional<MockDaemon> daemon;
    try {
        daemon.emplace(MockDaemon::Start({.vfs = 0, .mem = "64M", .mount = dir.path / "mnt", .shm_prefix = prefix}));
    } catch (const spyre::Error& e) {
        ADD_FAILURE() << e.what();
    }
    look_ends.join();
    ASSERT_TRUE(daemon);
    EXPECT_GT(spyre::test::CountShmObjects(prefix), 1);  // the owner file and the card's objects
}

// A live daemon's objects are never taken over, even under a prefix that a
// new daemon asks for on a different mount point.
TEST_F(MockDeviceTest, ALiveDaemonsPrefixIsNeverReclaimed) {
    const int objects = spyre::test::CountShmObjects(daemon().shm_prefix());
    TempDir dir;
    auto clash = RunCommand(Mockdev() + " --mount " + dir.path.string() + " --shm-prefix " + daemon().shm_prefix());
    EXPECT_EQ(clash.exit_code, 4) << clash.output;
    EXPECT_NE(clash.output.find("running spyre-mockdev"), std::string::npos) << clash.output;
    EXPECT_EQ(spyre::test::CountShmObjects(daemon().shm_prefix()), objects);
    Function fn = Function::Open(Pf());
    EXPECT_EQ(fn.Read32(SPYRE_REG_MAGIC), SPYRE_MAGIC);
}

// /dev/shm is every user's. A name another user made there under a prefix's
// owner file (a link to a file of root's, or a file of theirs) is never
// written through by a daemon claiming the prefix, which is refused, and
// never taken for a dead daemon's by another daemon's sweep, which would
// remove, as root, every entry of any user under that name.
class PlantedOwnerTest : public ::testing::Test {
protected:
    static constexpr uid_t kNobody = 65534;
    void SetUp() override {
        if (::geteuid() != 0) GTEST_SKIP() << "planting as another user needs root";
    }
    // /dev/shm/`name`, made by `make`, then handed to user nobody.
    static std::string Plant(const std::string& name, const std::function<bool(const std::string&)>& make) {
        const std::string path = "/dev/shm/" + name;
        EXPECT_TRUE(make(path)) << path;
        EXPECT_EQ(::lchown(path.c_str(), kNobody, kNobody), 0) << path;
        return path;
    }
    static bool WriteFile(const std::string& path, const std::string& text) {
        std::ofstream f(path);
        f << text;
        return bool(f);
    }
    static std::string ReadFile(const std::string& path) {
        std::ifstream f(path);
        return std::string(std::istreambuf_iterator<char>(f), {});
    }
    static std::string DeadPid() {
        const pid_t dead = ::fork();
        if (dead == 0) ::_exit(0);
        ::waitpid(dead, nullptr, 0);
        return std::to_string(dead) + "\n";
    }
    // Starts a daemon on prefix `prefix`: its exit code when it is refused, 0 when it runs.
    static int StartOn(const TempDir& dir, const std::string& prefix) {
        fs::create_directories(dir.path / "mnt");
        try {
            MockDaemon daemon =
                MockDaemon::Start({.vfs = 0, .mem = "64M", .mount = dir.path / "mnt", .shm_prefix = prefix});
            return 0;
        } catch (const spyre::Error& e) {
            const std::string what = e.what();
            const size_t at = what.find("exited with code ");
            return at == std::string::npos ? -1 : std::atoi(what.c_str() + at + 17);
        }
    }
};

TEST_F(PlantedOwnerTest, AnOwnerFileThatIsALinkIsNotWrittenThrough) {
    TempDir dir;
    const std::string prefix = dir.UniquePrefix("spyre-link");
    const fs::path victim = dir.path / "victim";
    const std::string text = "7 precious\n";  // starts as a dead owner's pid would
    ASSERT_TRUE(WriteFile(victim, text));
    const std::string owner =
        Plant(prefix + ".owner", [&](const std::string& p) { return ::symlink(victim.c_str(), p.c_str()) == 0; });
    EXPECT_EQ(StartOn(dir, prefix), 4);  // the prefix is in use
    EXPECT_EQ(ReadFile(victim), text);
    ::unlink(owner.c_str());
}

TEST_F(PlantedOwnerTest, AnOwnerFileOfAnotherUserIsNotTaken) {
    TempDir dir;
    const std::string prefix = dir.UniquePrefix("spyre-theirs");
    const std::string text = DeadPid();
    const std::string owner = Plant(prefix + ".owner", [&](const std::string& p) { return WriteFile(p, text); });
    EXPECT_EQ(StartOn(dir, prefix), 4);
    EXPECT_EQ(ReadFile(owner), text);
    ::unlink(owner.c_str());
}

TEST_F(PlantedOwnerTest, TheSweepLeavesAnotherUsersDeadLookingPrefixAlone) {
    TempDir dir;
    const std::string theirs = dir.UniquePrefix("spyre-sweep");
    const std::string owner = Plant(theirs + ".owner", [&](const std::string& p) { return WriteFile(p, DeadPid()); });
    const std::string object = Plant(theirs + ".data", [&](const std::string& p) { return WriteFile(p, "theirs"); });
    EXPECT_EQ(StartOn(dir, dir.UniquePrefix("spyre-sweeper")), 0);  // sweeps dead prefixes as it starts
    EXPECT_EQ(ReadFile(object), "theirs");
    EXPECT_TRUE(fs::exists(owner));
    ::unlink(object.c_str());
    ::unlink(owner.c_str());
}

// A start that the daemon refuses (its prefix or its mount point is a live
// daemon's) leaves that daemon whole: the refused start used to clean up
// after itself by removing every object under the prefix, and by unmounting
// the mount point, it had asked for.
TEST_F(MockDeviceTest, ARefusedStartLeavesTheLiveDaemonItClashedWithWhole) {
    const int objects = spyre::test::CountShmObjects(daemon().shm_prefix());
    TempDir dir;
    fs::create_directory(dir.path / "mnt");
    const auto refused_with = [](const MockOptions& options) -> std::string {
        try {
            MockDaemon clash = MockDaemon::Start(options);
        } catch (const spyre::Error& e) {
            return e.what();
        }
        return "started";
    };
    EXPECT_NE(refused_with({.vfs = 0, .mem = "64M", .mount = dir.path / "mnt", .shm_prefix = daemon().shm_prefix()})
                  .find("exited with code 4"),
              std::string::npos);
    EXPECT_NE(refused_with({.vfs = 0, .mem = "64M", .mount = daemon().mount()}).find("exited with code 3"),
              std::string::npos);
    EXPECT_EQ(spyre::test::CountShmObjects(daemon().shm_prefix()), objects);
    EXPECT_TRUE(spyre::test::IsMounted(daemon().mount().string()));
    Function fn = Function::Open(Pf());
    EXPECT_EQ(fn.Read32(SPYRE_REG_MAGIC), SPYRE_MAGIC);
}
