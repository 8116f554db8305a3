// SPDX-License-Identifier: Apache-2.0
//
// POSIX shared-memory objects that spyre-mockdev creates and hands to drivers
// by name. Every mappable device region lives in one of these, one set per
// function, so a function's region info never names another function's bytes.
//
// ShmFile is the object itself (created exclusively, sized sparse, unlinked
// on destruction); ShmObject is a ShmFile the daemon maps whole and can
// Renew: a fresh, zeroed object under a new name at the same daemon address,
// so the device model's pointers stay valid while every mapping a previous
// owner kept now shows only the old, abandoned pages.
//
// Names end in 64 random bits (NewShmFile): /dev/shm is writable by every
// user, and a name anyone can predict can be created first by anyone, which
// made the daemon fail the next hand-over and remove the function.
#pragma once

#include <boost/interprocess/shared_memory_object.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "pci/shm_guard.hpp"

namespace spyre::mockdev {

class ShmFile {
public:
    // Creates `name` (an shm_open name without the leading '/') exclusively
    // and sizes it with ftruncate only (sparse: pages cost nothing until
    // touched). Throws std::system_error (EEXIST if the name is taken).
    ShmFile(std::string name, uint64_t size);
    ~ShmFile();

    ShmFile(const ShmFile&) = delete;
    ShmFile& operator=(const ShmFile&) = delete;

    const std::string& name() const { return name_; }
    std::string shm_open_name() const { return "/" + name_; }
    uint64_t size() const { return size_; }
    int fd() const;

    // Maps [offset, offset + len) of the object at `addr`, replacing whatever
    // was mapped there (MAP_FIXED). Throws std::system_error.
    void MapAt(void* addr, uint64_t offset, uint64_t len) const;

    // Removes the name now; mappings stay valid. Idempotent.
    void Unlink();

    // Reads through the file rather than a mapping: holes read as zeros
    // without allocating tmpfs pages (dumping a sparse 2 GiB BAR stays free).
    size_t ReadAt(uint64_t offset, void* buf, size_t len) const;

    // Returns [offset, offset + len) to zeros by punching a hole, which frees
    // the pages instead of dirtying them. Returns false if the file system
    // cannot punch holes (the caller then clears through a mapping).
    bool PunchHole(uint64_t offset, uint64_t len);

private:
    std::string name_;
    uint64_t size_;
    boost::interprocess::shared_memory_object shm_;
    bool unlinked_ = false;
};

// An anonymous reservation of address space (PROT_NONE) that ShmFiles are
// mapped into; unmapped whole on destruction.
class AddressRange {
public:
    explicit AddressRange(uint64_t size);  // throws std::system_error
    ~AddressRange();
    AddressRange(const AddressRange&) = delete;
    AddressRange& operator=(const AddressRange&) = delete;

    uint8_t* data() const { return base_; }
    uint64_t size() const { return size_; }

private:
    uint8_t* base_ = nullptr;
    uint64_t size_ = 0;
};

// A fresh object named `<base_name>.<16 random hex digits>`, under another
// random name if that one is taken (a few times). Throws std::system_error.
std::unique_ptr<ShmFile> NewShmFile(const std::string& base_name, uint64_t size);

class ShmObject {
public:
    // Creates an object under `base_name` (NewShmFile) and maps it; a
    // holder's shrinking of it is undone and counted in `repairs`
    // (shm_guard.hpp), which must outlive this object.
    ShmObject(std::string base_name, uint64_t size, ShmRepairCount& repairs);

    std::string shm_open_name() const;
    uint8_t* data() const { return range_.data(); }
    uint64_t size() const { return range_.size(); }

    // A new owner takes the region: a fresh zeroed object, under a new
    // name, replaces the old one at the same address; the old name is
    // unlinked. Throws std::system_error (the old object then stays).
    void Renew();
    // Removes the current name (mappings stay valid until destruction).
    void Unlink();

    size_t ReadAt(uint64_t offset, void* buf, size_t len) const;
    // Zeros [offset, offset + len), freeing the pages where it can.
    void Zero(uint64_t offset, uint64_t len);

private:
    std::string base_name_;
    AddressRange range_;
    mutable std::mutex mutex_;  // guards file_: a hand-over may race a holder's requests
    std::unique_ptr<ShmFile> file_;
    ShmGuard guard_;  // after file_: unregistered before the file closes
};

}  // namespace spyre::mockdev
