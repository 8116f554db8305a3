// SPDX-License-Identifier: Apache-2.0
#include "pci/shm_object.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include <boost/interprocess/exceptions.hpp>

namespace spyre::mockdev {

namespace bip = boost::interprocess;

namespace {

// Drivers of the same group map these objects read-write, like the device node (0660).
bip::permissions ObjectPermissions() { return bip::permissions(0660); }

[[noreturn]] void Rethrow(const bip::interprocess_exception& e, const std::string& what) {
    int err = e.get_native_error();
    if (e.get_error_code() == bip::already_exists_error) err = EEXIST;
    throw std::system_error(err ? err : EIO, std::generic_category(), what);
}

bip::shared_memory_object CreateObject(const std::string& name) {
    try {
        return bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write, ObjectPermissions());
    } catch (const bip::interprocess_exception& e) {
        Rethrow(e, "create shared memory /" + name);
    }
}

}  // namespace

std::unique_ptr<ShmFile> NewShmFile(const std::string& base_name, uint64_t size) {
    constexpr int kAttempts = 8;  // a taken name is a squatter's guess or a 2^-64 clash: try another
    for (int attempt = 1;; ++attempt) {
        uint64_t random = 0;
        if (::getrandom(&random, sizeof random, 0) != ssize_t(sizeof random))
            throw std::system_error(errno ? errno : EIO, std::generic_category(), "getrandom");
        char suffix[20];
        std::snprintf(suffix, sizeof suffix, ".%016llx", static_cast<unsigned long long>(random));
        try {
            return std::make_unique<ShmFile>(base_name + suffix, size);
        } catch (const std::system_error& e) {
            if (e.code().value() != EEXIST || attempt == kAttempts) throw;
        }
    }
}

ShmFile::ShmFile(std::string name, uint64_t size) : name_(std::move(name)), size_(size), shm_(CreateObject(name_)) {
    try {
        shm_.truncate(bip::offset_t(size_));
    } catch (const bip::interprocess_exception& e) {
        bip::shared_memory_object::remove(name_.c_str());  // roll back the half-made object
        Rethrow(e, "size shared memory /" + name_);
    }
}

ShmFile::~ShmFile() { Unlink(); }

int ShmFile::fd() const { return shm_.get_mapping_handle().handle; }

void ShmFile::MapAt(void* addr, uint64_t offset, uint64_t len) const {
    if (len == 0) return;
    void* p = ::mmap(addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd(), off_t(offset));
    if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "map shared memory /" + name_);
}

void ShmFile::Unlink() {
    if (unlinked_) return;
    bip::shared_memory_object::remove(name_.c_str());
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

std::string ShmObject::shm_open_name() const {
    std::lock_guard lock(mutex_);
    return file_->shm_open_name();
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
