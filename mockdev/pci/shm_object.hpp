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
// They live in a directory of the daemon's own, /dev/shm/<prefix>.d
// (ShmDirectory), mode 0710 with the device nodes' group: that group may
// open an object whose name the device told it, but not list the names,
// and nobody else may create anything there. Names end in 64 random bits
// (NewShmFile), so a name is not guessed either: it is the holder's
// capability, handed out only by the ioctl on the held node.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "pci/shm_guard.hpp"

namespace spyre::mockdev {

class ShmFile {
public:
    // Creates SPYRE_MOCK_SHM_DIR/`name` exclusively, mode 0660, and sizes
    // it with ftruncate only (sparse: pages cost nothing until touched).
    // Throws std::system_error (EEXIST if the name is taken).
    ShmFile(std::string name, uint64_t size);
    ~ShmFile();

    ShmFile(const ShmFile&) = delete;
    ShmFile& operator=(const ShmFile&) = delete;

    // Relative to SPYRE_MOCK_SHM_DIR: the name the driver is told.
    const std::string& name() const { return name_; }
    uint64_t size() const { return size_; }
    int fd() const { return fd_; }

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
    std::string path() const;

    std::string name_;
    uint64_t size_;
    int fd_ = -1;
    bool unlinked_ = false;
};

// The directory `<prefix>.d` (ShmDirName) under SPYRE_MOCK_SHM_DIR that a
// daemon's objects live in: created exclusively (EEXIST: someone else's,
// or a dead daemon's the prefix claim did not remove), mode 0710, group the
// daemon's effective group (that of its device nodes), whatever the umask.
// Removed, with anything left in it, on destruction. Throws std::system_error.
class ShmDirectory {
public:
    explicit ShmDirectory(const std::string& prefix);
    ~ShmDirectory();
    ShmDirectory(const ShmDirectory&) = delete;
    ShmDirectory& operator=(const ShmDirectory&) = delete;

    const std::string& name() const { return name_; }

private:
    std::string name_;
};

std::string ShmDirName(const std::string& prefix);

// Removes SPYRE_MOCK_SHM_DIR/`name`: an object, or a directory and the
// objects in it. Returns how many objects went.
unsigned RemoveShmEntry(const std::string& name);

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
// random name if that one is taken (a few times). Throws std::system_error
// (ENAMETOOLONG if the name does not fit the mock transport's field).
std::unique_ptr<ShmFile> NewShmFile(const std::string& base_name, uint64_t size);

class ShmObject {
public:
    // Creates an object under `base_name` (NewShmFile) and maps it; a
    // holder's shrinking of it is undone and counted in `repairs`
    // (shm_guard.hpp), which must outlive this object.
    ShmObject(std::string base_name, uint64_t size, ShmRepairCount& repairs);

    std::string name() const;  // the current object's (ShmFile::name)
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
    // ShmGuard::CutBackGrowth of the current object.
    void CutBackGrowth() noexcept { guard_.CutBackGrowth(); }

private:
    std::string base_name_;
    AddressRange range_;
    mutable std::mutex mutex_;  // guards file_: a hand-over may race a holder's requests
    std::unique_ptr<ShmFile> file_;
    ShmGuard guard_;  // after file_: unregistered before the file closes
};

}  // namespace spyre::mockdev
