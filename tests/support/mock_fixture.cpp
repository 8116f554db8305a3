// SPDX-License-Identifier: Apache-2.0
#include "mock_fixture.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace spyre::test {

std::string FuseUnavailableReason() {
    int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd < 0) return std::string("/dev/fuse is not usable: ") + std::strerror(errno);
    ::close(fd);
    return {};
}

bool FuseRequired() {
    const char* v = std::getenv("SPYRE_REQUIRE_FUSE");
    return v && std::string(v) == "1";
}

void MockDeviceTest::SetUp() {
    SPYRE_REQUIRE_FUSE();
    daemon_.emplace(driver::MockDaemon::Start(Options()));
    root_.emplace(daemon_->mount());
}

void MockDeviceTest::TearDown() {
    root_.reset();
    daemon_.reset();  // SIGTERM the group, unmount, remove shm and the mount dir
}

driver::FunctionInfo MockDeviceTest::Pf(int card) const {
    char addr[32];
    std::snprintf(addr, sizeof addr, "0000:%02x:00.0", SPYRE_PCI_FIRST_BUS + card);
    return root_->Find(addr);
}

driver::FunctionInfo MockDeviceTest::Vf(int index, int card) const {
    const unsigned devfn = SPYRE_SRIOV_FIRST_VF_OFFSET + (index - 1) * SPYRE_SRIOV_VF_STRIDE;
    char addr[32];
    std::snprintf(addr, sizeof addr, "0000:%02x:%02x.%u", SPYRE_PCI_FIRST_BUS + card, devfn >> 3, devfn & 7);
    return root_->Find(addr);
}

CommandResult RunCommand(const std::string& command) {
    CommandResult r;
    FILE* p = ::popen((command + " 2>&1").c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
    int status = ::pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
}

std::string ToolPath(const char* env_var) {
    const char* v = std::getenv(env_var);
    if (!v || !*v) throw std::runtime_error(std::string(env_var) + " is not set (run the tests through meson test)");
    return v;
}

bool IsMounted(const std::string& dir) {
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    while (std::getline(in, line))
        if (line.find(" " + dir + " ") != std::string::npos) return true;
    return false;
}

int CountShmObjects(const std::string& prefix) {
    int n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
        if (e.path().filename().string().rfind(prefix + ".", 0) == 0) ++n;
    std::filesystem::directory_iterator objects(ShmPath(prefix + ".d"), ec);  // the end if there is none
    n += int(std::distance(objects, std::filesystem::directory_iterator()));
    return n;
}

std::string ShmPath(const std::string& name) { return "/dev/shm/" + name; }

bool WaitForExit(pid_t pid, std::chrono::milliseconds limit) {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd < 0) return errno == ESRCH;  // already reaped
    pollfd p{pidfd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(limit.count()));  // readable once the process has exited
    ::close(pidfd);
    return ready == 1;
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
}

ScopedEnv::~ScopedEnv() {
    if (old_)
        ::setenv(name_.c_str(), old_->c_str(), 1);
    else
        ::unsetenv(name_.c_str());
}

// Every thread of `pid`, not only its first: a FUSE thread still running
// after the first stopped could read a request the test means to go unread.
bool WaitUntilStopped(pid_t pid, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    auto stopped = [](const std::filesystem::path& stat_file) {
        std::ifstream stat(stat_file);
        const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
        const size_t paren = text.rfind(')');  // the name in parentheses may hold anything
        return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'T';
    };
    do {
        bool all = true, any = false;
        std::error_code ec;
        for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
            any = true;
            if (!stopped(task.path() / "stat")) {
                all = false;
                break;
            }
        }
        if (any && all && !ec) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (std::chrono::steady_clock::now() < until);
    return false;
}

Watchdog::Watchdog(std::chrono::seconds limit, std::string what) {
    thread_ = std::thread([this, limit, what = std::move(what)] {
        std::unique_lock lock(mu_);
        if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
        std::fprintf(stderr, "watchdog: %s did not finish within %lld s; failing the test binary\n", what.c_str(),
                     static_cast<long long>(limit.count()));
        std::fflush(stderr);
        std::_Exit(1);
    });
}

Watchdog::~Watchdog() {
    {
        std::lock_guard lock(mu_);
        done_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

}  // namespace spyre::test
