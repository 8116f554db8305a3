// SPDX-License-Identifier: Apache-2.0
#include "pci/shm_object.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "spyre/mock/spyre_mock.h"

namespace spyre::mockdev {

namespace {

// Drivers of the same group map the objects read-write, like the device
// node (0660); they may enter the directory, not list it (0710).
constexpr mode_t kObjectMode = 0660;
constexpr mode_t kDirectoryMode = 0710;

std::string ShmPath(const std::string& name) { return std::string(SPYRE_MOCK_SHM_DIR) + "/" + name; }

[[noreturn]] void Throw(int err, const std::string& what) { throw std::system_error(err, std::generic_category(), what); }

}  // namespace

std::string ShmDirName(const std::string& prefix) { return prefix + ".d"; }

unsigned RemoveShmEntry(const std::string& name) {
    const std::string path = ShmPath(name);
    if (::unlink(path.c_str()) == 0) return 1;
    if (errno != EISDIR) return 0;
    unsigned removed = 0;
    // Opened without following a link: a directory swapped for a link to
    // another one since the unlink must not have that one emptied.
    const int dir_fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir_fd < 0) return 0;
    if (DIR* d = ::fdopendir(dir_fd)) {
        while (dirent* e = ::readdir(d))
            if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0 &&
                ::unlinkat(::dirfd(d), e->d_name, 0) == 0)
                ++removed;
        ::closedir(d);
    } else {
        ::close(dir_fd);
    }
    ::rmdir(path.c_str());
    return removed;
}

ShmDirectory::ShmDirectory(const std::string& prefix) : name_(ShmDirName(prefix)) {
    const std::string path = ShmPath(name_);
    if (::mkdir(path.c_str(), kDirectoryMode) != 0) Throw(errno, "create directory " + path);
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const bool ok = fd >= 0 && ::fchown(fd, uid_t(-1), ::getegid()) == 0 && ::fchmod(fd, kDirectoryMode) == 0;
    const int err = errno;
    if (fd >= 0) ::close(fd);
    if (!ok) {
        ::rmdir(path.c_str());
        Throw(err, "set up directory " + path);
    }
}

ShmDirectory::~ShmDirectory() { RemoveShmEntry(name_); }  // empty by now, unless a teardown failed

std::unique_ptr<ShmFile> NewShmFile(const std::string& base_name, uint64_t size) {
    constexpr int kAttempts = 8;  // a taken name is a 2^-64 clash: try another
    for (int attempt = 1;; ++attempt) {
        uint64_t random = 0;
        if (::getrandom(&random, sizeof random, 0) != ssize_t(sizeof random)) Throw(errno ? errno : EIO, "getrandom");
        char suffix[20];
        std::snprintf(suffix, sizeof suffix, ".%016llx", static_cast<unsigned long long>(random));
        const std::string name = base_name + suffix;
        if (name.size() >= SPYRE_MOCK_SHM_NAME_MAX) Throw(ENAMETOOLONG, "shared memory " + name);
        try {
            return std::make_unique<ShmFile>(name, size);
        } catch (const std::system_error& e) {
            if (e.code().value() != EEXIST || attempt == kAttempts) throw;
        }
    }
}

ShmFile::ShmFile(std::string name, uint64_t size) : name_(std::move(name)), size_(size) {
    fd_ = ::open(path().c_str(), O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, kObjectMode);
    if (fd_ < 0) Throw(errno, "create shared memory " + path());
    if (::fchmod(fd_, kObjectMode) != 0 || ::ftruncate(fd_, off_t(size_)) != 0) {  // fchmod: whatever the umask
        const int err = errno;
        ::unlink(path().c_str());  // roll back the half-made object
        ::close(fd_);
        Throw(err, "set up shared memory " + path());
    }
}

ShmFile::~ShmFile() {
    Unlink();
    ::close(fd_);
}

std::string ShmFile::path() const { return ShmPath(name_); }

void ShmFile::MapAt(void* addr, uint64_t offset, uint64_t len) const {
    if (len == 0) return;
    void* p = ::mmap(addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd(), off_t(offset));
    if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "map shared memory " + path());
}

void ShmFile::Unlink() {
    if (unlinked_) return;
    ::unlink(path().c_str());
    unlinked_ = true;
}

size_t ShmFile::ReadAt(uint64_t offset, void* buf, size_t len) const {
    if (offset >= size_) return 0;
    len = size_t(std::min<uint64_t>(len, size_ - offset));
    size_t done = 0;
    while (done < len) {
        ssize_t n = ::pread(fd(), static_cast<uint8_t*>(buf) + done, len - done, off_t(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += size_t(n);
    }
    std::memset(static_cast<uint8_t*>(buf) + done, 0, len - done);  // a short read can only be a hole at the end
    return len;
}

bool ShmFile::PunchHole(uint64_t offset, uint64_t len) {
    if (offset >= size_) return true;
    len = std::min(len, size_ - offset);
    return ::fallocate(fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(offset), off_t(len)) == 0;
}

AddressRange::AddressRange(uint64_t size) : size_(size) {
    void* p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "reserve address space");
    base_ = static_cast<uint8_t*>(p);
}

AddressRange::~AddressRange() {
    if (base_) ::munmap(base_, size_);
}

ShmObject::ShmObject(std::string base_name, uint64_t size, ShmRepairCount& repairs)
    : base_name_(std::move(base_name)),
      range_(size),
      file_(NewShmFile(base_name_, size)),
      guard_(range_.data(), size, repairs) {
    file_->MapAt(range_.data(), 0, size);
    guard_.Watch(*file_);
}

std::string ShmObject::name() const {
    std::lock_guard lock(mutex_);
    return file_->name();
}

void ShmObject::Unlink() {
    std::lock_guard lock(mutex_);
    file_->Unlink();
}

size_t ShmObject::ReadAt(uint64_t offset, void* buf, size_t len) const {
    std::lock_guard lock(mutex_);
    return file_->ReadAt(offset, buf, len);
}

void ShmObject::Renew() {
    std::lock_guard lock(mutex_);
    auto fresh = NewShmFile(base_name_, range_.size());
    fresh->MapAt(range_.data(), 0, range_.size());  // atomically replaces the old pages at the same address
    guard_.Watch(*fresh);  // before the old file closes
    file_ = std::move(fresh);  // the old name goes; its pages live on only in stale mappings
}

void ShmObject::Zero(uint64_t offset, uint64_t len) {
    if (offset >= size()) return;
    len = std::min(len, size() - offset);
    std::lock_guard lock(mutex_);
    if (!file_->PunchHole(offset, len)) std::memset(data() + offset, 0, len);  // no hole punching here
}

}  // namespace spyre::mockdev
