// SPDX-License-Identifier: Apache-2.0
//
// One POSIX shared-memory object that spyre-mockdev creates, maps and
// eventually unlinks (RAII over Boost.Interprocess). Mappable device regions
// are handed to drivers by name, so every region lives in one of these.
#pragma once

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace spyre::mockdev {

class ShmObject {
public:
    // Creates `name` (an shm_open name without the leading '/') exclusively,
    // sizes it with ftruncate only (sparse: pages cost nothing until touched)
    // and maps it. Throws std::system_error (EEXIST if the name is taken).
    ShmObject(std::string name, uint64_t size);
    ~ShmObject();

    ShmObject(const ShmObject&) = delete;
    ShmObject& operator=(const ShmObject&) = delete;

    const std::string& name() const { return name_; }
    std::string shm_open_name() const { return "/" + name_; }
    uint8_t* data() const { return static_cast<uint8_t*>(region_.get_address()); }
    uint64_t size() const { return size_; }

    // Removes the name now; the mapping stays valid until destruction. Idempotent.
    void Unlink();

    // Reads through the file rather than the mapping: holes read as zeros
    // without allocating tmpfs pages (dumping a sparse 2 GiB BAR stays free).
    size_t ReadAt(uint64_t offset, void* buf, size_t len) const;

    // Returns [offset, offset + len) to zeros by punching a hole, which frees
    // the pages instead of dirtying them.
    void Zero(uint64_t offset, uint64_t len);

private:
    std::string name_;
    uint64_t size_;
    boost::interprocess::shared_memory_object shm_;
    boost::interprocess::mapped_region region_;
    bool unlinked_ = false;
};

}  // namespace spyre::mockdev
