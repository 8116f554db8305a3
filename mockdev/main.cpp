// SPDX-License-Identifier: Apache-2.0
//
// spyre-mockdev: command line, start-up checks and daemonizing. Everything
// that can fail is checked before anything is created; the daemon forks
// before any thread exists and reports start-up success or its exit code to
// the waiting parent through a pipe.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "pci/card.hpp"
#include "pci/shm_object.hpp"
#include "frontend/fuse_fs.hpp"
#include "log.hpp"
#include "options.hpp"
#include "frontend/recovery.hpp"
#include "frontend/stop_signals.hpp"
#include "spyre/uapi/spyre_pci.h"
#include "spyre/common/openblas_kernels.hpp"

using namespace spyre::mockdev;

namespace {

constexpr const char* kExitCodesHelp =
    "Exit codes:\n"
    "  0  stopped cleanly (SIGTERM, SIGINT, SIGHUP or fusermount3 -u), or the daemon is up\n"
    "  1  internal error\n"
    "  2  usage error\n"
    "  3  mount point problem: missing, not a directory, not empty, already a mount point,\n"
    "     or a stale FUSE mount of another file system (a dead spyre-mockdev's is detached)\n"
    "  4  shared-memory prefix in use by a running spyre-mockdev, or by objects of no\n"
    "     spyre-mockdev (a dead one's objects are removed)\n"
    "  5  FUSE mount failed (e.g. /dev/fuse missing)\n";

// Every card's memory is split into 2 MiB-aligned slices, one for the PF and
// one per VF: the smallest card memory still gives each of 16 VFs a slice.
constexpr uint64_t kMinMem = (SPYRE_SRIOV_TOTAL_VFS + 1) * kMemSliceAlign;
// Every card's memory is reserved as address space when the daemon starts
// (CardMemory's view): at most half of x86-64's 128 TiB user space for all
// cards. Past it the reservation failed, an internal error a launcher read
// as a lost device.
constexpr uint64_t kMaxTotalMem = uint64_t(64) << 40;

// "128G", "512M", "64k", "1073741824": binary suffixes K/M/G/T.
std::optional<uint64_t> ParseSize(const std::string& text) {
    if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
    size_t used = 0;
    unsigned long long value = 0;
    try {
        value = std::stoull(text, &used, 10);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    std::string suffix = text.substr(used);
    unsigned shift = 0;
    if (suffix.size() > 1) return std::nullopt;
    if (suffix.size() == 1) {
        switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
        case 'K': shift = 10; break;
        case 'M': shift = 20; break;
        case 'G': shift = 30; break;
        case 'T': shift = 40; break;
        default: return std::nullopt;
        }
    }
    if (shift && value > (ULLONG_MAX >> shift)) return std::nullopt;
    return uint64_t(value) << shift;
}

bool ValidPrefix(const std::string& p) {
    if (p.empty() || p.size() > kShmPrefixMax) return false;
    for (unsigned char c : p)
        if (!std::isalnum(c) && c != '.' && c != '_' && c != '-') return false;
    return true;
}

// The numeric options' first check: CLI11 checks an option's text before
// converting it, and Range reads that text as a double, so "1.5" was "not
// in range" and "0x2" passed. Decimal digits only; a '-' before a number
// other than zero passes on, so that the range check names a negative
// number ("+1" and "-0" are refused here).
const CLI::Validator kWholeNumber(
    [](std::string& text) -> std::string {
        const size_t digits = !text.empty() && text[0] == '-' ? 1 : 0;
        bool whole = text.size() > digits;
        bool zero = true;
        for (size_t i = digits; i < text.size(); ++i) {
            whole = whole && std::isdigit(static_cast<unsigned char>(text[i]));
            zero = zero && text[i] == '0';
        }
        return whole && !(digits && zero) ? std::string() : "'" + text + "' is not a whole decimal number";
    },
    "INT");

// Returns an exit code to stop with, or -1 to go on.
int ParseCommandLine(int argc, char** argv, Options& opt) {
    CLI::App app{"Mock Spyre PCIe device: serves the PCI functions of mock Spyre cards as a FUSE tree\n"
                 "(MOUNT/bus/pci/devices/<addr>/..., MOUNT/dev/spyre/<addr>) backed by shared memory."};
    app.name("spyre-mockdev");
    std::string mem = "128G";
    // --log-level, else SPYRE_LOG_LEVEL (the variable the library and the tools read), else info.
    const auto env_level = spyre::log::LevelFromEnvironment();
    std::string log_level = env_level ? spyre::log::Name(*env_level) : "info";
    // Checked after the parse, not by CLI11's required(): that check came
    // first and named --mount for any unknown option (--version, --bogus).
    CLI::Option* mount = app.add_option("--mount", opt.mount, "Mount point: an existing, empty directory (required)");
    app.add_option("--cards", opt.cards, "Number of cards (1-16)")->check(kWholeNumber)->check(CLI::Range(1, 16))->capture_default_str();
    app.add_option("--vfs", opt.vfs, "VFs enabled on each card at start (0-16)")
        ->check(kWholeNumber)
        ->check(CLI::Range(0, 16))
        ->capture_default_str();
    app.add_option("--mem", mem, "Device memory per card, suffixes K/M/G/T; sparse, costs nothing until touched")
        ->capture_default_str();
    CLI::Option* prefix = app.add_option("--shm-prefix", opt.shm_prefix,
                   "Shared-memory name prefix ([A-Za-z0-9._-], at most 32 chars; default spyre-<pid>)");
    app.add_flag("--foreground", opt.foreground,
                 "Stay in the foreground (no fork). In the background, messages after start-up reach stderr\n"
                 "only if it is a terminal or a file (a pipe is let go, so callers see EOF)");
    app.add_option("--log-level", log_level, "error, warn, info or debug (default: SPYRE_LOG_LEVEL, else info)")
        ->check(CLI::IsMember({"error", "warn", "info", "debug"}))
        ->capture_default_str();
    // CLI::Range, not NonNegativeNumber: its message printed DBL_MAX in 300 digits.
    const CLI::Range fd_range(0, std::numeric_limits<int>::max(), "a file descriptor");
    app.add_option("--ready-fd", opt.ready_fd, "Write \"ready\\n\" to this fd and close it once the mount is live")
        ->check(kWholeNumber)
        ->check(fd_range);
    app.add_option("--exit-with-fd", opt.exit_with_fd,
                   "Stop, as on SIGTERM, once this fd (a pipe's read end) reads end of file: a spawner keeps\n"
                   "the write end, so the daemon ends with the spawning process, whichever of its threads\n"
                   "started it (a parent-death signal would follow that thread)")
        ->check(kWholeNumber)
        ->check(fd_range);
    app.add_flag("--remove-mount-dir", opt.remove_mount_dir,
                 "Remove the (empty) mount directory after unmounting: one a spawner made for this daemon alone,\n"
                 "which then goes even when the spawner is killed first");
    app.add_option("--poll-us", opt.poll_us, "Microseconds the device polls its doorbell before it sleeps (at most: it stops polling while work comes seldom)")
        ->check(kWholeNumber)
        ->check(CLI::Range(0, 1000000))
        ->capture_default_str();
    app.add_option("--cores", opt.cores,
                   "Worker threads that execute programs, per card (1-32; default: the card's 32 cores or the\n"
                   "machine's hardware threads, whichever is fewer). NUM_CORES stays 32")
        ->check(kWholeNumber)
        ->check(CLI::Range(1, 32));
    app.add_option("--watchdog-ms", opt.watchdog_ms,
                   "Bound on one CB's run time (WATCHDOG_MS); a CB past it ends with WATCHDOG")
        ->check(kWholeNumber)
        ->check(CLI::Range(kWatchdogMsMin, kWatchdogMsMax))
        ->capture_default_str();
    std::string cpus = "inherit";
    app.add_option("--cpus", cpus,
                   "CPUs the card's threads may run on: inherit (as started: taskset, a cgroup), all (every CPU,\n"
                   "whatever the starter was bound to; what a program's private mock gets) or a list like 0-3,6.\n"
                   "Given twice, the last counts")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
        ->capture_default_str();
    app.footer(kExitCodesHelp);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
            app.exit(e);
            return kExitOk;
        }
        LOG_ERROR("%s (see --help)", e.what());
        return kExitUsage;
    }

    if (mount->count() == 0) {
        LOG_ERROR("--mount is required (see --help)");
        return kExitUsage;
    }
    if (opt.mount.empty()) {
        LOG_ERROR("--mount: the mount point is an empty path");
        return kExitUsage;
    }
    opt.log_level = *ParseLogLevel(log_level);
    auto size = ParseSize(mem);
    if (!size) {
        LOG_ERROR("--mem: '%s' is not a size (examples: 128G, 512M)", mem.c_str());
        return kExitUsage;
    }
    if (*size < kMinMem || *size % kMemSliceAlign != 0) {
        LOG_ERROR("--mem: %s must be a multiple of 2M and at least 34M (a 2 MiB slice for the PF and each of 16 VFs)",
                  mem.c_str());
        return kExitUsage;
    }
    if (*size > kMaxTotalMem / opt.cards) {
        LOG_ERROR("--mem: %s per card for %u card(s) is more than the 64T of address space all cards may take",
                  mem.c_str(), opt.cards);
        return kExitUsage;
    }
    opt.mem_size = *size;
    std::string why;
    const std::optional<CpuChoice> choice = ParseCpus(cpus, &why);
    if (!choice) {
        LOG_ERROR("--cpus: %s", why.c_str());
        return kExitUsage;
    }
    opt.cpus = *choice;
    // Given, even empty, it must be valid (an empty one took the default).
    if (prefix->count() != 0 && !ValidPrefix(opt.shm_prefix)) {
        LOG_ERROR("--shm-prefix: '%s' must be 1-32 characters from [A-Za-z0-9._-]", opt.shm_prefix.c_str());
        return kExitUsage;
    }
    for (const auto& [name, fd] : {std::pair{"--ready-fd", opt.ready_fd}, std::pair{"--exit-with-fd", opt.exit_with_fd}})
        if (fd >= 0 && ::fcntl(fd, F_GETFD) == -1) {
            LOG_ERROR("%s: %d is not an open file descriptor", name, fd);
            return kExitUsage;
        }
    return -1;
}

bool DirectoryIsEmpty(const std::string& dir, bool* empty) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return false;
    *empty = true;
    while (dirent* e = ::readdir(d)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
            *empty = false;
            break;
        }
    }
    ::closedir(d);
    return true;
}

// Exit code, or 0 with `mount` made canonical.
int CheckMountPoint(std::string& mount) {
    struct stat st {};
    // A killed spyre-mockdev's dead mount is detached; anything else is
    // checked below. One killed a moment ago may still be dying (its threads
    // closing the FUSE device, a stat answered from the cache meanwhile): a
    // mount that reads as dead later is looked at again, 2 s at most.
    int error = 0;
    for (int look = 0;; ++look) {
        RecoverStaleMount(mount);
        error = ::stat(mount.c_str(), &st) == 0 ? 0 : errno;
        if (error != ENOTCONN || look == 40) break;
        ::usleep(50 * 1000);
    }
    if (error != 0) {
        if (error == ENOTCONN) {
            LOG_ERROR("mount point %s is a stale FUSE mount: run fusermount3 -u %s", mount.c_str(), mount.c_str());
        } else {
            LOG_ERROR("mount point %s: %s", mount.c_str(), std::strerror(error));
        }
        return kExitMountPoint;
    }
    if (!S_ISDIR(st.st_mode)) {
        LOG_ERROR("mount point %s is not a directory", mount.c_str());
        return kExitMountPoint;
    }
    char* real = ::realpath(mount.c_str(), nullptr);
    if (!real) {
        LOG_ERROR("mount point %s: %s", mount.c_str(), std::strerror(errno));
        return kExitMountPoint;
    }
    mount = real;
    std::free(real);
    struct stat parent {};
    if (::stat((mount + "/..").c_str(), &parent) != 0 || parent.st_dev != st.st_dev || parent.st_ino == st.st_ino) {
        LOG_ERROR("mount point %s is already a mount point", mount.c_str());
        return kExitMountPoint;
    }
    bool empty = false;
    if (!DirectoryIsEmpty(mount, &empty)) {
        LOG_ERROR("mount point %s: %s", mount.c_str(), std::strerror(errno));
        return kExitMountPoint;
    }
    if (!empty) {
        LOG_ERROR("mount point %s is not empty", mount.c_str());
        return kExitMountPoint;
    }
    return kExitOk;
}

int CheckShmPrefix(const std::string& prefix) {
    switch (InspectPrefix(prefix)) {
    case PrefixState::Free:
    case PrefixState::Stale: return kExitOk;  // a dead owner's objects go when the prefix is claimed
    case PrefixState::Live:
        LOG_ERROR("shared-memory prefix %s is in use by a running spyre-mockdev", prefix.c_str());
        return kExitShmPrefixInUse;
    case PrefixState::Foreign: break;
    }
    LOG_ERROR("shared-memory prefix %s is in use: /dev/shm/%s.* exists but belongs to no spyre-mockdev "
              "(remove it by hand: rm -r /dev/shm/%s.*)",
              prefix.c_str(), prefix.c_str(), prefix.c_str());
    return kExitShmPrefixInUse;
}

// A daemon holding a caller's pipe keeps `$(...)`, popen() or `| tee`
// waiting for EOF forever. Once up, it lets go of a pipe or socket on stderr;
// a terminal or a log file keeps receiving its messages.
void ReleaseStderrPipe() {
    struct stat st {};
    if (::fstat(STDERR_FILENO, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) return;
    if (int null_fd = ::open("/dev/null", O_WRONLY); null_fd >= 0) {
        ::dup2(null_fd, STDERR_FILENO);
        ::close(null_fd);
    }
}

// Tells whoever waits how start-up went: the --ready-fd reader and, when
// daemonized, the parent (one status byte: 0 = up, else the exit code).
class StartupReport {
public:
    StartupReport(int parent_fd, int ready_fd) : parent_fd_(parent_fd), ready_fd_(ready_fd) {}
    ~StartupReport() { Finish(kExitInternal); }

    void Ready() {
        if (ready_fd_ >= 0) {
            static const char kReady[] = "ready\n";
            ssize_t ignored = ::write(ready_fd_, kReady, sizeof kReady - 1);
            (void)ignored;
            ::close(ready_fd_);
            ready_fd_ = -1;
        }
        if (parent_fd_ >= 0) ReleaseStderrPipe();
        Finish(kExitOk);
    }
    void Failed(int code) { Finish(code); }

private:
    void Finish(int code) {
        if (parent_fd_ < 0) return;
        const uint8_t byte = uint8_t(code);
        ssize_t ignored = ::write(parent_fd_, &byte, 1);
        (void)ignored;
        ::close(parent_fd_);
        parent_fd_ = -1;
    }

    int parent_fd_;
    int ready_fd_;
};

// --exit-with-fd: a thread that waits for the spawner's end of the pipe
// to close (the spawning process is gone, killed or not) and stops the
// daemon as SIGTERM would (the FUSE loop reads the signal).
void WatchSpawner(int fd) {
    std::thread([fd] {
        for (;;) {
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, -1) < 0 && errno == EINTR) continue;
            char byte;
            const ssize_t n = ::read(fd, &byte, 1);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n > 0) continue;  // nothing is written on it; ignore stray bytes
            LOG_INFO("the spawning process is gone: stopping");
            ::kill(::getpid(), SIGTERM);
            return;
        }
    }).detach();
}

// Creates the devices, mounts, serves until told to stop, tears down.
int Serve(Options opt, StartupReport& report) {
    // A stop signal during start-up waits in the pipe until the FUSE loop
    // reads it, so it still ends in a clean teardown.
    StopSignals stop_signals;

    auto fail = [&](int code) {
        report.Failed(code);
        return code;
    };
    if (opt.shm_prefix.empty()) {
        opt.shm_prefix = "spyre-" + std::to_string(::getpid());
        if (int rc = CheckShmPrefix(opt.shm_prefix); rc != kExitOk) return fail(rc);
    }

    std::optional<PrefixClaim> claim = PrefixClaim::Take(opt.shm_prefix);  // held until we exit
    if (!claim) return fail(kExitShmPrefixInUse);
    SweepDeadPrefixes();

    std::optional<ShmDirectory> shm_dir;  // the objects' directory, removed after the cards
    std::vector<std::unique_ptr<Card>> cards;
    try {
        shm_dir.emplace(opt.shm_prefix);  // EEXIST: another user's, under our prefix
        for (unsigned c = 0; c < opt.cards; ++c) {
            cards.push_back(std::make_unique<Card>(CardParams{c, opt.mem_size, opt.shm_prefix,
                                                              std::chrono::microseconds(opt.poll_us), opt.cores,
                                                              opt.watchdog_ms}));
            if (int rc = cards.back()->SetNumVfs(opt.vfs); rc != 0)  // it said why
                return fail(-rc == EEXIST ? kExitShmPrefixInUse : kExitInternal);
        }
    } catch (const std::system_error& e) {
        LOG_ERROR("%s", e.what());
        return fail(e.code().value() == EEXIST ? kExitShmPrefixInUse : kExitInternal);
    }

    FuseFs fs(cards, [&] {
        LOG_INFO("serving %u card(s) at %s (shm prefix %s, pid %d, CPUs %s)", opt.cards, opt.mount.c_str(),
                 opt.shm_prefix.c_str(), int(::getpid()), AllowedCpus().c_str());
        report.Ready();
    });
    if (!fs.Mount(opt.mount)) return fail(kExitFuseMount);
    for (auto& card : cards) card->Start();
    if (opt.exit_with_fd >= 0) WatchSpawner(opt.exit_with_fd);

    fs.Loop(stop_signals.fd());

    LOG_INFO("shutting down");
    for (auto& card : cards) card->Shutdown();
    fs.Unmount();
    cards.clear();
    if (opt.remove_mount_dir && ::rmdir(opt.mount.c_str()) != 0 && errno != ENOENT)
        LOG_WARN("cannot remove the mount directory %s: %s", opt.mount.c_str(), std::strerror(errno));
    return kExitOk;
}

int Daemonize(const Options& opt) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
        LOG_ERROR("pipe: %s", std::strerror(errno));
        return kExitInternal;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
        LOG_ERROR("fork: %s", std::strerror(errno));
        return kExitInternal;
    }
    if (pid > 0) {
        ::close(pipe_fds[1]);
        if (opt.ready_fd >= 0) ::close(opt.ready_fd);  // the daemon owns it now
        uint8_t code = 0;
        ssize_t n;
        do n = ::read(pipe_fds[0], &code, 1);
        while (n < 0 && errno == EINTR);
        if (n == 1) return code;
        LOG_ERROR("the daemon died during start-up");
        return kExitInternal;
    }
    ::close(pipe_fds[0]);
    ::setsid();
    if (::chdir("/") != 0) return kExitInternal;
    // stdout must not keep a caller's pipe open ($(spyre-mockdev ...) would
    // hang); stderr stays: it is the log.
    if (int null_fd = ::open("/dev/null", O_RDWR); null_fd >= 0) {
        ::dup2(null_fd, STDIN_FILENO);
        ::dup2(null_fd, STDOUT_FILENO);
        if (null_fd > STDERR_FILENO) ::close(null_fd);
    }
    StartupReport report(pipe_fds[1], opt.ready_fd);
    return Serve(opt, report);
}

}  // namespace

int main(int argc, char** argv) {
    spyre::openblas::RunAgainWithTheCpusKernels(argv);  // first: before OpenBLAS or any thread is used
    spyre::log::SetProgram("spyre-mockdev", LogLevel::Info);
    Options opt;
    if (int rc = ParseCommandLine(argc, argv, opt); rc >= 0) return rc;
    SetLogLevel(opt.log_level);
    // Before any thread starts: each inherits it.
    if (std::string why; !ApplyCpus(opt.cpus, &why)) {
        LOG_ERROR("--cpus: %s", why.c_str());
        return kExitUsage;
    }
    try {
        if (::access("/dev/fuse", R_OK | W_OK) != 0) {
            LOG_ERROR("/dev/fuse: %s (FUSE is not available here)", std::strerror(errno));
            return kExitFuseMount;
        }
        if (int rc = CheckMountPoint(opt.mount); rc != kExitOk) return rc;
        if (!opt.shm_prefix.empty())
            if (int rc = CheckShmPrefix(opt.shm_prefix); rc != kExitOk) return rc;
        if (!opt.foreground) return Daemonize(opt);
        StartupReport report(-1, opt.ready_fd);
        return Serve(opt, report);
    } catch (const std::exception& e) {
        LOG_ERROR("internal error: %s", e.what());
        return kExitInternal;
    }
}
