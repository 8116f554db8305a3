// SPDX-License-Identifier: Apache-2.0
#include "trace/trace_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "spyre/error.hpp"

namespace spyre::trace::detail {

namespace {

std::string Directory(const std::string& path) {
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

// A regular file (or none yet) that is no symlink, in a directory we may write.
bool WriteBeside(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return false;
    return ::access(Directory(path).c_str(), W_OK) == 0;
}

bool IsFifo(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

// The file being written, for UndoUnfinished: a signal handler may read
// these (written before `g_open` says which kind, cleared before closing).
enum Unfinished : int { kNone, kBeside, kInPlace };
std::atomic<int> g_open{kNone};
char g_beside[4096];
int g_in_place_fd = -1;

void Register(const std::string& written, bool beside, bool regular, int fd) {
    if (beside && written.size() < sizeof g_beside) {
        std::memcpy(g_beside, written.c_str(), written.size() + 1);
        g_open.store(kBeside);
    } else if (regular) {
        g_in_place_fd = fd;
        g_open.store(kInPlace);
    }
}

[[noreturn]] void Fail(ErrorKind kind, const std::string& what) {
    throw Error(kind, what + ": " + std::strerror(errno));
}

}  // namespace

void TraceFile::Check(const std::string& path) {
    if (IsFifo(path)) return;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) Fail(ErrorKind::InvalidArgument, "trace file " + path + " cannot be created");
    ::close(fd);
}

TraceFile::TraceFile(std::string path) : path_(std::move(path)) {
    beside_ = WriteBeside(path_);
    written_ = beside_ ? path_ + ".tmp." + std::to_string(::getpid()) : path_;
    // Non-blocking: a pipe with no reader fails (ENXIO) instead of waiting
    // for one at exit, past SIGTERM.
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (beside_ ? O_TRUNC : 0);
    const int fd = ::open(written_.c_str(), flags, 0644);
    if (fd < 0)
        Fail(ErrorKind::IoError, "trace file " + written_ + " cannot be written" +
                                     (errno == ENXIO ? std::string(" (a pipe no process reads)") : std::string()));
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct stat st {};
    // The file renamed over keeps its mode (a 0600 trace stays private).
    if (beside_ && ::stat(path_.c_str(), &st) == 0) ::fchmod(fd, st.st_mode & 07777);
    regular_ = !beside_ && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (regular_) {
        ::flock(fd, LOCK_EX);  // another process writing the same path finishes first
        if (::ftruncate(fd, 0) != 0) {
            const int e = errno;
            ::close(fd);
            errno = e;
            Fail(ErrorKind::IoError, "trace file " + path_ + " cannot be emptied");
        }
    }
    out_ = ::fdopen(fd, "w");
    if (!out_) {
        ::close(fd);
        Fail(ErrorKind::IoError, "trace file " + written_ + " cannot be written");
    }
    Register(written_, beside_, regular_, fd);
}

void TraceFile::UndoUnfinished() noexcept {
    const int open = g_open.exchange(kNone);
    if (open == kBeside) ::unlink(g_beside);
    if (open == kInPlace) (void)::ftruncate(g_in_place_fd, 0);
}

void TraceFile::Commit() {
    g_open.store(kNone);
    const bool written = std::fflush(out_) == 0 && !std::ferror(out_);
    const int e = errno;
    if (written && beside_ && std::rename(written_.c_str(), path_.c_str()) == 0) {
        std::fclose(out_);
        out_ = nullptr;
        return;
    }
    if (written && !beside_ && std::fclose(std::exchange(out_, nullptr)) == 0) return;
    errno = e;
    const std::string why = written ? std::string(": ") + std::strerror(errno) : std::string();
    throw Error(ErrorKind::IoError, "trace file " + path_ + " could not be written completely" + why);
}

TraceFile::~TraceFile() {
    if (!out_) return;
    g_open.store(kNone);
    if (beside_) {
        std::fclose(out_);
        std::remove(written_.c_str());
        return;
    }
    if (regular_) ::ftruncate(::fileno(out_), 0);  // no half file
    std::fclose(out_);
}

}  // namespace spyre::trace::detail
