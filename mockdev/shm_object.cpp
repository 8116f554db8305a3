// SPDX-License-Identifier: Apache-2.0
#include "shm_object.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

ShmObject::ShmObject(std::string name, uint64_t size) : name_(std::move(name)), size_(size), shm_(CreateObject(name_)) {
    try {
        shm_.truncate(bip::offset_t(size_));
        region_ = bip::mapped_region(shm_, bip::read_write);
    } catch (const bip::interprocess_exception& e) {
        bip::shared_memory_object::remove(name_.c_str());  // roll back the half-made object
        Rethrow(e, "size or map shared memory /" + name_);
    }
}

ShmObject::~ShmObject() { Unlink(); }

void ShmObject::Unlink() {
    if (unlinked_) return;
    bip::shared_memory_object::remove(name_.c_str());
    unlinked_ = true;
}

size_t ShmObject::ReadAt(uint64_t offset, void* buf, size_t len) const {
    if (offset >= size_) return 0;
    len = size_t(std::min<uint64_t>(len, size_ - offset));
    size_t done = 0;
    while (done < len) {
        ssize_t n = ::pread(shm_.get_mapping_handle().handle, static_cast<uint8_t*>(buf) + done, len - done,
                            off_t(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += size_t(n);
    }
    if (done < len) std::memcpy(static_cast<uint8_t*>(buf) + done, data() + offset + done, len - done);
    return len;
}

void ShmObject::Zero(uint64_t offset, uint64_t len) {
    if (offset >= size_) return;
    len = std::min(len, size_ - offset);
    if (::fallocate(shm_.get_mapping_handle().handle, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(offset),
                    off_t(len)) != 0)
        std::memset(data() + offset, 0, len);  // file systems without hole punching
}

}  // namespace spyre::mockdev
