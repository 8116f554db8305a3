// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/mock_daemon.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "spyre/common/log.hpp"
#include "spyre/error.hpp"
#include "spyre/mock/spyre_mock.h"

namespace fs = std::filesystem;
using namespace std::chrono;

#ifndef SPYRE_MOCKDEV_BUILD_PATH
#define SPYRE_MOCKDEV_BUILD_PATH ""
#endif
#ifndef SPYRE_MOCKDEV_INSTALL_PATH
#define SPYRE_MOCKDEV_INSTALL_PATH ""
#endif

extern char** environ;

namespace spyre::driver {

namespace {

constexpr int kReadyFd = 3;     // the fd number the daemon writes "ready" to
constexpr int kSpawnerFd = 4;   // its end of the pipe this process holds open (--exit-with-fd)
constexpr int kAboveChildFds = 10;  // where the child parks the two before it places them

bool IsExecutable(const fs::path& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p); }

std::string UniquePrefix() {
    static std::atomic<unsigned> counter{0};
    return "spyre-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
           std::to_string(steady_clock::now().time_since_epoch().count() % 100000);
}

bool IsMountPoint(const fs::path& dir) {
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    const std::string needle = " " + dir.string() + " ";
    while (std::getline(in, line))
        if (line.find(needle) != std::string::npos) return true;
    return false;
}

void ForceUnmount(const fs::path& dir) {
    if (!IsMountPoint(dir)) return;
    if (::umount2(dir.c_str(), MNT_DETACH) == 0) return;
    // Not root: ask the setuid helper.
    pid_t pid = -1;
    const char* argv[] = {"fusermount3", "-u", "-z", dir.c_str(), nullptr};
    if (::posix_spawnp(&pid, "fusermount3", nullptr, nullptr, const_cast<char**>(argv), environ) == 0) {
        int status = 0;
        ::waitpid(pid, &status, 0);
    }
}

// What a daemon that did not clean up left: its owner file, its object
// directory (<prefix>.d) with the objects in it.
void RemoveShm(const std::string& prefix) {
    if (prefix.empty()) return;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(SPYRE_MOCK_SHM_DIR, ec)) {
        std::string name = entry.path().filename().string();
        if (name.rfind(prefix + ".", 0) == 0) fs::remove_all(entry.path(), ec);
    }
}

// The daemon's end as waitpid would report it, seen without reaping it
// (WNOWAIT); nullopt while it runs; -1 if it was reaped elsewhere.
std::optional<int> EndedStatus(pid_t pid, bool block) {
    siginfo_t info{};
    for (;;) {
        if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG)) == 0) break;
        if (errno != EINTR) return -1;  // ECHILD: reaped already (SIGCHLD ignored)
    }
    if (info.si_pid == 0) return std::nullopt;
    if (info.si_code == CLD_EXITED) return (info.si_status & 0xff) << 8;
    return (info.si_status & 0x7f) | (info.si_code == CLD_DUMPED ? 0x80 : 0);
}

// Reaping releases the daemon's task, and with it the kernel drops its /proc
// entries. Under mpirun that was seen to spin inside wait4
// (shrink_dcache_parent) for a minute, and to end only when the job's other
// rank exited, while that rank waited at the final barrier for this one.
// So the caller goes on once the daemon has ended, and a thread of its own
// reaps it.
void ReapAside(pid_t pid) {
    auto reap = [pid] {
        while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
    };
    try {
        std::thread(reap).detach();
    } catch (const std::system_error&) {
        reap();  // no thread to spare: reap here
    }
}

}  // namespace

fs::path MockDaemon::FindExecutable() {
    if (const char* env = std::getenv("SPYRE_MOCKDEV"); env && *env) {
        if (!IsExecutable(env))
            throw Error(ErrorKind::NotFound, std::string("SPYRE_MOCKDEV=") + env + " is not an executable file");
        return env;
    }
    std::error_code ec;
    fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec && IsExecutable(self.parent_path() / "spyre-mockdev")) return self.parent_path() / "spyre-mockdev";
    if (IsExecutable(SPYRE_MOCKDEV_BUILD_PATH)) return SPYRE_MOCKDEV_BUILD_PATH;
    if (IsExecutable(SPYRE_MOCKDEV_INSTALL_PATH)) return SPYRE_MOCKDEV_INSTALL_PATH;
    if (const char* path = std::getenv("PATH")) {
        std::string p(path);
        size_t start = 0;
        while (start <= p.size()) {
            size_t end = p.find(':', start);
            if (end == std::string::npos) end = p.size();
            fs::path candidate = fs::path(p.substr(start, end - start)) / "spyre-mockdev";
            if (IsExecutable(candidate)) return candidate;
            start = end + 1;
        }
    }
    throw Error(ErrorKind::NotFound, "spyre-mockdev not found (set SPYRE_MOCKDEV to its path, or install spyre)");
}

namespace {
// A private daemon logs what the library would: SPYRE_LOG_LEVEL, else warn
// (the daemon's own default, info, would be noise inside an app).
std::string DaemonLogLevel() {
    const auto level = log::LevelFromEnvironment();
    return level ? log::Name(*level) : "warn";
}
// Where a private daemon's threads run (docs/running.md).
std::string MockCpus() {
    const char* cpus = std::getenv("SPYRE_MOCK_CPUS");
    return cpus && *cpus ? cpus : "all";
}

}  // namespace

MockDaemon MockDaemon::Start(MockOptions options) {
    // 0 gave the daemon no time at all, and read as a lost device.
    if (options.start_timeout <= milliseconds(0))
        throw Error(ErrorKind::InvalidArgument, "MockOptions::start_timeout is " +
                                                    std::to_string(options.start_timeout.count()) +
                                                    " ms: the daemon's start needs a positive bound (default 15000 ms)");
    // The daemon's options are its command line: a NUL would end an
    // argument there, and the rest be dropped without a word (found
    // probing from outside: mem "64M\0..." made a 64 MiB card).
    std::vector<std::string> texts = {options.mem, options.log_level, options.shm_prefix, options.mount.native()};
    texts.insert(texts.end(), options.extra_args.begin(), options.extra_args.end());
    for (const std::string& text : texts)
        if (const size_t nul = text.find('\0'); nul != std::string::npos)
            throw Error(ErrorKind::InvalidArgument,
                        "MockOptions: '" + text.substr(0, nul) + "...' holds a NUL byte (a daemon option cannot)");
    fs::path exe = FindExecutable();
    MockDaemon d;
    d.shm_prefix_ = options.shm_prefix.empty() ? UniquePrefix() : options.shm_prefix;
    if (options.mount.empty()) {
        const char* tmp = std::getenv("TMPDIR");
        std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/spyre-mock-XXXXXX";
        if (!::mkdtemp(templ.data())) throw SystemError("cannot create a mount directory from " + templ);
        d.mount_ = templ;
        d.own_mount_dir_ = true;
    } else {
        d.mount_ = fs::absolute(options.mount);
    }

    const std::string cpus = MockCpus();
    std::vector<std::string> args = {exe.string(),
                                     "--mount", d.mount_.string(),
                                     "--cards", std::to_string(options.cards),
                                     "--vfs", std::to_string(options.vfs),
                                     "--mem", options.mem,
                                     "--shm-prefix", d.shm_prefix_,
                                     "--log-level", options.log_level.empty() ? DaemonLogLevel() : options.log_level,
                                     "--foreground",
                                     "--ready-fd", std::to_string(kReadyFd),
                                     "--exit-with-fd", std::to_string(kSpawnerFd),
                                     // The card's cores are not this process's: a rank that mpirun
                                     // bound to one core would have its card compute on that core
                                     // too. SPYRE_MOCK_CPUS, then extra_args (the last --cpus
                                     // counts), may say otherwise.
                                     "--cpus", cpus};
    if (d.own_mount_dir_) args.push_back("--remove-mount-dir");  // it goes even if this process is killed
    args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) {
        d.Cleanup();
        throw SystemError("cannot create the readiness pipe for spyre-mockdev");
    }
    // The daemon's lifeline: this process keeps the write end (close on
    // exec: no program it starts holds it) until Stop, and when the process
    // ends, killed or not, the daemon reads end of file and stops. A
    // parent-death signal would follow the thread that forked instead, and a
    // mock opened on a thread that then exits would die with it.
    int spawner[2];
    if (::pipe2(spawner, O_CLOEXEC) != 0) {
        ::close(pipefd[0]);
        ::close(pipefd[1]);
        d.Cleanup();
        throw SystemError("cannot create the lifeline pipe for spyre-mockdev");
    }
    // vfork, not fork: fork copies the page tables and write-protects every
    // private page of this process (copy on write), so each host page the
    // app writes afterwards (a device-to-host copy's destination) takes a
    // fault, measured as 0.02x memcpy for the first 64 MiB copy after the
    // mock started. The child below only makes system calls before exec.
    pid_t pid = ::vfork();
    if (pid < 0) {
        int e = errno;
        ::close(pipefd[0]);
        ::close(pipefd[1]);
        ::close(spawner[0]);
        ::close(spawner[1]);
        d.Cleanup();
        errno = e;
        throw SystemError("cannot start (vfork) spyre-mockdev");
    }
    if (pid == 0) {
        // Child: async-signal-safe calls only until exec.
        ::setpgid(0, 0);  // its own group: teardown kills it whole
        // Parked above the target numbers first: a pipe end may sit on one.
        const int ready = ::fcntl(pipefd[1], F_DUPFD, kAboveChildFds);
        const int lifeline = ::fcntl(spawner[0], F_DUPFD, kAboveChildFds);
        if (ready < 0 || lifeline < 0) ::_exit(127);
        ::dup2(ready, kReadyFd);  // dup2 clears O_CLOEXEC on the copy
        ::dup2(lifeline, kSpawnerFd);
        // Nothing else of this process reaches the daemon (an app's pipe or
        // socket would stay open there for the mock's life).
        ::close_range(kSpawnerFd + 1, ~0U, CLOSE_RANGE_CLOEXEC);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    ::setpgid(pid, pid);  // also from the parent, so the group exists before we might signal it
    ::close(pipefd[1]);
    ::close(spawner[0]);
    d.pid_ = pid;
    d.started_by_ = ::getpid();
    d.lifeline_ = spawner[1];

    // Wait for "ready", for EOF (the daemon exited) or for the deadline.
    std::string got;
    bool closed = false;  // EOF: the daemon is exiting (or exec'd without our fd)
    auto deadline = steady_clock::now() + options.start_timeout;
    while (got.find('\n') == std::string::npos) {
        int left = static_cast<int>(duration_cast<milliseconds>(deadline - steady_clock::now()).count());
        if (left <= 0) break;
        pollfd p{pipefd[0], POLLIN, 0};
        int r = ::poll(&p, 1, left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        char buf[64];
        ssize_t n = ::read(pipefd[0], buf, sizeof buf);
        closed = n == 0;
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
    }
    ::close(pipefd[0]);
    if (got.rfind("ready", 0) != 0) {
        // The pipe closes before the exit is complete: give a closed one a moment.
        std::optional<int> ended = EndedStatus(pid, false);  // Stop below reaps it
        for (auto until = steady_clock::now() + milliseconds(2000); closed && !ended && steady_clock::now() < until;) {
            std::this_thread::sleep_for(milliseconds(2));
            ended = EndedStatus(pid, false);
        }
        const bool exited = ended && *ended != -1 && WIFEXITED(*ended);
        const bool killed = ended && *ended != -1 && WIFSIGNALED(*ended);
        // Said as it ended: one killed by a signal was said to have timed
        // out, within milliseconds of its start (found probing).
        std::string why = exited ? "exited with code " + std::to_string(WEXITSTATUS(*ended)) + " (see its message above)"
                          : killed ? "was killed by signal " + std::to_string(WTERMSIG(*ended)) + " (" +
                                         ::strsignal(WTERMSIG(*ended)) + ") before it became ready"
                          : ended || closed ? std::string("ended before it became ready")
                                            : "did not become ready within " + std::to_string(options.start_timeout.count()) + " ms";
        const std::string mount = d.mount_.string();
        if (exited) {
            // A daemon that exited by itself cleaned up what it made. What
            // it refused (a busy mount point, a prefix in use) is another
            // daemon's or another user's: leave it alone.
            d.shm_prefix_.clear();
            if (!d.own_mount_dir_) d.mount_.clear();
        }
        d.Stop(milliseconds(1000));
        // Options it refused are the caller's to fix, not a lost device.
        if (exited && WEXITSTATUS(*ended) == SPYRE_MOCK_EXIT_USAGE)
            throw Error(ErrorKind::InvalidArgument,
                        "spyre-mockdev refused its options (cards " + std::to_string(options.cards) + ", vfs " +
                            std::to_string(options.vfs) + ", mem '" + options.mem + "', cpus '" + cpus +
                            "'" + (options.extra_args.empty() ? "" : ", more options") + "): " + why,
                        ErrorContext{.device = mount});
        // Still starting when the bound ran out: a wait that timed out, not
        // a device that went away.
        throw Error(ended || closed ? ErrorKind::DeviceLost : ErrorKind::Timeout, "spyre-mockdev " + why,
                    ErrorContext{.device = mount});
    }
    return d;
}

MockDaemon::MockDaemon(MockDaemon&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), started_by_(o.started_by_), lifeline_(std::exchange(o.lifeline_, -1)), mount_(std::move(o.mount_)),
      shm_prefix_(std::move(o.shm_prefix_)), own_mount_dir_(std::exchange(o.own_mount_dir_, false)) {
    o.mount_.clear();
    o.shm_prefix_.clear();
}

MockDaemon& MockDaemon::operator=(MockDaemon&& o) noexcept {
    if (this != &o) {
        Stop();
        pid_ = std::exchange(o.pid_, -1);
        started_by_ = o.started_by_;
        lifeline_ = std::exchange(o.lifeline_, -1);
        mount_ = std::move(o.mount_);
        shm_prefix_ = std::move(o.shm_prefix_);
        own_mount_dir_ = std::exchange(o.own_mount_dir_, false);
        o.mount_.clear();
        o.shm_prefix_.clear();
    }
    return *this;
}

MockDaemon::~MockDaemon() { Stop(); }

void MockDaemon::Signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
}

int MockDaemon::Stop(milliseconds grace) {
    int status = -1;
    if (pid_ > 0 && ::getpid() != started_by_) {
        // A forked child's copy: its parent's devices live on this daemon
        // (a child dropping its inherited Host unmounted the parent's mock).
        pid_ = -1;
        if (lifeline_ >= 0) ::close(std::exchange(lifeline_, -1));
        mount_.clear();
        shm_prefix_.clear();
        own_mount_dir_ = false;
        return status;
    }
    if (pid_ > 0) {
        ::kill(-pid_, SIGCONT);  // a stopped daemon cannot handle SIGTERM
        ::kill(-pid_, SIGTERM);
        const auto deadline = steady_clock::now() + grace;
        std::optional<int> ended = EndedStatus(pid_, false);
        while (!ended && steady_clock::now() < deadline) {
            std::this_thread::sleep_for(milliseconds(5));
            ended = EndedStatus(pid_, false);
        }
        if (!ended) {
            ::kill(-pid_, SIGKILL);
            ended = EndedStatus(pid_, true);
        }
        status = *ended;
        if (status != -1) ReapAside(pid_);
        pid_ = -1;
    }
    if (lifeline_ >= 0) ::close(std::exchange(lifeline_, -1));
    Cleanup();
    return status;
}

void MockDaemon::Cleanup() {
    if (!mount_.empty()) ForceUnmount(mount_);
    RemoveShm(shm_prefix_);
    if (own_mount_dir_ && !mount_.empty()) {
        std::error_code ec;
        fs::remove(mount_, ec);
        own_mount_dir_ = false;
    }
}

}  // namespace spyre::driver
