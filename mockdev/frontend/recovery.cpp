// SPDX-License-Identifier: Apache-2.0
#include "frontend/recovery.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "log.hpp"
#include "pci/shm_object.hpp"
#include "spyre/mock/spyre_mock.h"

namespace spyre::mockdev {

namespace {

constexpr const char* kShmDir = SPYRE_MOCK_SHM_DIR;
constexpr const char* kOurFsType = "fuse.spyre";  // fuse_fs.cpp mounts with subtype=spyre
// How long a claim waits out a lock on the owner file before it calls the
// prefix in use (PrefixClaim::Take).
constexpr auto kClaimPatience = std::chrono::milliseconds(500);

// mountinfo escapes blanks and backslashes as \ooo.
std::string Unescape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 3 < s.size()) {
            out += char(std::strtol(s.substr(i + 1, 3).c_str(), nullptr, 8));
            i += 3;
        } else {
            out += s[i];
        }
    }
    return out;
}

// The file system type of the mount at `path`, or "" if none is there.
std::string MountType(const std::string& path) {
    std::ifstream info("/proc/self/mountinfo");
    std::string line, type;
    while (std::getline(info, line)) {
        std::istringstream fields(line);
        std::string id, parent, devno, root, point;
        fields >> id >> parent >> devno >> root >> point;
        if (Unescape(point) != path) continue;
        std::string word;
        while (fields >> word && word != "-") {
        }
        fields >> type;  // the last mount at a path is the one on top
    }
    return type;
}

std::string OwnerPath(const std::string& prefix) { return std::string(kShmDir) + "/" + prefix + ".owner"; }

std::vector<std::string> ObjectsOf(const std::string& prefix) {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(kShmDir)) {
        const std::string lead = prefix + ".";
        while (dirent* e = ::readdir(d))
            if (std::strncmp(e->d_name, lead.c_str(), lead.size()) == 0) names.emplace_back(e->d_name);
        ::closedir(d);
    }
    return names;
}

// Whether the open file `fd` can be an owner file of a daemon of ours: a
// regular file of this user. /dev/shm is writable by every user, and a
// root daemon that trusted a name there would write (the claim) or delete
// (the sweep) on behalf of whoever planted it.
bool OursToTrust(int fd) {
    struct stat st {};
    return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid();
}

// Whether /dev/shm/`name` is an entry of this user (not followed if a link).
bool EntryIsOurs(const std::string& name) {
    struct stat st {};
    const std::string path = std::string(kShmDir) + "/" + name;
    return ::lstat(path.c_str(), &st) == 0 && st.st_uid == ::geteuid();
}

// True if the owner file names a daemon and its flock is free. The lock
// decides: the kernel drops it when the daemon exits, before its parent
// reaps it, while its pid still answers kill(pid, 0) as a zombie (or, once
// reused, as some other process). Another user's file, or a link, is
// never a dead owner of ours.
bool OwnerIsDead(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    if (!OursToTrust(fd)) {
        ::close(fd);
        return false;
    }
    bool dead = false;
    if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
        char buf[32] = {};
        const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
        // No pid yet: a daemon between creating and locking the file.
        dead = n > 0 && std::strtol(buf, nullptr, 10) > 0;
        ::flock(fd, LOCK_UN);
    }
    ::close(fd);
    return dead;
}

}  // namespace

bool RecoverStaleMount(const std::string& mount) {
    struct stat st {};
    if (::stat(mount.c_str(), &st) == 0 || errno != ENOTCONN) return false;
    if (MountType(mount) != kOurFsType) return false;
    if (::umount2(mount.c_str(), MNT_DETACH) != 0) {
        // Not root: fusermount3 may detach the user's own mounts.
        const std::string cmd = "fusermount3 -u -z '" + mount + "' 2>/dev/null";
        if (std::system(cmd.c_str()) != 0) return false;
    }
    LOG_WARN("mount point %s was left mounted by a spyre-mockdev that died: detached it", mount.c_str());
    return ::stat(mount.c_str(), &st) == 0;
}

PrefixState InspectPrefix(const std::string& prefix) {
    const auto names = ObjectsOf(prefix);
    if (names.empty()) return PrefixState::Free;
    const std::string owner = OwnerPath(prefix);
    if (::access(owner.c_str(), F_OK) != 0) return PrefixState::Foreign;
    return OwnerIsDead(owner) ? PrefixState::Stale : PrefixState::Live;
}

std::optional<PrefixClaim> PrefixClaim::Take(const std::string& prefix) {
    const std::string path = OwnerPath(prefix);
    // Never through a link, and only a file of our own: whoever can write
    // /dev/shm could otherwise have this daemon truncate a file it names.
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0) {
        LOG_ERROR("cannot create %s: %s%s", path.c_str(), std::strerror(errno),
                  errno == ELOOP ? " (it is a symbolic link: remove it by hand)" : "");
        return std::nullopt;
    }
    if (!OursToTrust(fd)) {
        LOG_ERROR("shared-memory prefix %s is in use: %s is not a file of this user (remove it by hand)",
                  prefix.c_str(), path.c_str());
        ::close(fd);
        return std::nullopt;
    }
    // A daemon starting beside this one (two ranks of an MPI job) may be
    // looking at this file in its sweep (OwnerIsDead's shared lock, held for
    // one read): that ends within microseconds, while an owner's lock lasts
    // as long as the owner. Refused only if the lock stays taken.
    const auto give_up = std::chrono::steady_clock::now() + kClaimPatience;
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() >= give_up) {
            LOG_ERROR("shared-memory prefix %s is in use by a running spyre-mockdev", prefix.c_str());
            ::close(fd);
            return std::nullopt;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    char old[32] = {};
    const bool had_owner = ::pread(fd, old, sizeof old - 1, 0) > 0;
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
        LOG_ERROR("cannot write %s: %s", path.c_str(), std::strerror(errno));
        ::close(fd);
        return std::nullopt;
    }
    PrefixClaim claim(path, fd);
    // Everything else under the prefix is a dead owner's: ours now to remove.
    unsigned removed = 0;
    for (const std::string& name : ObjectsOf(prefix)) {
        if (name == prefix + ".owner") continue;
        if (!had_owner || !EntryIsOurs(name)) {
            LOG_ERROR("shared-memory prefix %s is in use: /dev/shm/%s %s (remove it by hand)", prefix.c_str(),
                      name.c_str(), had_owner ? "belongs to another user" : "has no spyre-mockdev owner");
            return std::nullopt;
        }
        removed += RemoveShmEntry(name);  // its object directory (<prefix>.d) with what is in it
    }
    if (removed)
        LOG_WARN("removed %u shared-memory object(s) that a dead spyre-mockdev (pid %ld) left under prefix %s",
                 removed, std::strtol(old, nullptr, 10), prefix.c_str());
    return claim;
}

unsigned SweepDeadPrefixes() {
    std::vector<std::string> dead;
    if (DIR* d = ::opendir(kShmDir)) {
        constexpr std::string_view kSuffix = ".owner";
        while (dirent* e = ::readdir(d)) {
            const std::string_view name(e->d_name);
            if (name.size() > kSuffix.size() && name.substr(name.size() - kSuffix.size()) == kSuffix &&
                OwnerIsDead(std::string(kShmDir) + "/" + e->d_name))
                dead.emplace_back(name.substr(0, name.size() - kSuffix.size()));
        }
        ::closedir(d);
    }
    unsigned removed = 0;
    for (const std::string& prefix : dead) {
        for (const std::string& name : ObjectsOf(prefix))
            if (name != prefix + ".owner" && EntryIsOurs(name)) removed += RemoveShmEntry(name);
        ::unlink(OwnerPath(prefix).c_str());  // last: it marks the rest as ours to remove
    }
    if (removed) LOG_INFO("removed %u shared-memory object(s) left by dead spyre-mockdev daemons", removed);
    return removed;
}

PrefixClaim::PrefixClaim(PrefixClaim&& o) noexcept : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)) {}

PrefixClaim::~PrefixClaim() {
    if (fd_ < 0) return;
    ::unlink(path_.c_str());
    ::close(fd_);
}

}  // namespace spyre::mockdev
