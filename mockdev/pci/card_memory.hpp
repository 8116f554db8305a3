// SPDX-License-Identifier: Apache-2.0
//
// The device memory of one card, one shared-memory object per function so
// that a function's region info can only ever name its own bytes: the PF's
// object spans the card, each enabled VF's object covers its slice. The
// daemon composes them in its own address space into one card-wide view
// (VF objects mapped over their slices of the PF's), which is what the device
// model addresses; a function's window is a piece of that view.
//
// Memory changes hands fresh: a new owner of a function gets a new, zeroed
// object (Renew), and VF objects are made anew on every SR-IOV change. A
// previous owner's stale mapping keeps only its own abandoned pages.
//
// Every object mapped into the view is guarded (shm_guard.hpp): a holder
// that shrinks its object loses its own bytes, not the daemon.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "execution/host_link.hpp"
#include "pci/shm_guard.hpp"
#include "pci/shm_object.hpp"
#include "spyre/uapi/spyre_pci.h"

namespace spyre::mockdev {

// Where VF `vf` (1-based) of `num_vfs` finds its memory in the card memory.
// With n VFs enabled the card memory is cut into n + 1 equal slices, rounded
// down to 2 MiB, and VF i owns slice i; slice 0 (and the rounding tail) is
// the PF's own memory. The PF still addresses the whole card through the
// device (CBs, trapped access), as a privileged function does.
struct MemorySlice {
    uint64_t base;
    uint64_t size;
};
MemorySlice VfMemorySlice(uint64_t card_mem_size, unsigned num_vfs, unsigned vf);
constexpr uint64_t kMemSliceAlign = 2ull << 20;

class CardMemory {
public:
    // `base_name` prefixes the objects' names (<base>f<fn>.mem.<random>).
    // Throws std::system_error.
    CardMemory(std::string base_name, uint64_t size);

    CardMemory(const CardMemory&) = delete;
    CardMemory& operator=(const CardMemory&) = delete;

    uint8_t* view() const { return view_.data(); }
    uint64_t size() const { return view_.size(); }
    // Orders the device's accesses to this memory as the host does.
    HostLink& host_link() { return host_link_; }

    // Replaces the VF layout: 0 removes every VF object (their memory is
    // gone); n > 0, from none, makes n fresh objects and scrubs the PF's
    // object under them. Throws std::system_error, leaving the layout as it was.
    void SetVfs(unsigned num_vfs);

    // Function `fn` (0 = PF, i = VF i) changes hands: its object is replaced
    // by a fresh, zeroed one. The PF sees the whole card, so renewing it also
    // renews every VF slice that nobody holds (SetHeld): what the PF's owner
    // left there goes with it. Throws std::system_error.
    void Renew(unsigned fn);
    // Whether VF `fn` has a holder: a held VF's slice is its holder's, and
    // Renew(0) leaves it alone.
    void SetHeld(unsigned fn, bool held);

    // What function `fn` may map: its own object, from offset 0, and how many
    // bytes of it are its own memory (for the PF: slice 0 while VFs exist).
    std::string ObjectName(unsigned fn) const;
    uint64_t MappableSize(unsigned fn) const;
    // How often function `fn`'s object was sized back after its holder
    // shrank it (shm_guard.hpp), since the function was made.
    uint64_t Repairs(unsigned fn) const { return fn < repairs_.size() ? repairs_[fn].load() : 0; }
    // ShmGuard::CutBackGrowth of function `fn`'s object (0: the PF's).
    void CutBackGrowth(unsigned fn);

    // Reads card memory through the objects' files: holes read as zeros
    // without allocating pages. Bytes past the card read as zeros.
    void ReadAt(uint64_t card_offset, void* buf, size_t len) const;

private:
    struct Vf {
        MemorySlice slice;
        std::unique_ptr<ShmFile> file;
        std::unique_ptr<ShmGuard> guard;  // after file: unregistered before the file closes
        bool held = false;
    };
    std::unique_ptr<ShmFile> NewFile(unsigned fn, uint64_t size) const;
    Vf NewVf(unsigned fn, MemorySlice slice);  // its object made, guarded, not mapped yet
    void RenewVf(unsigned fn);  // with mutex_ held
    // The PF's own pieces of the view: everything outside the VF slices.
    std::vector<MemorySlice> PfPieces() const;  // with mutex_ held

    const std::string base_name_;
    std::array<ShmRepairCount, SPYRE_SRIOV_TOTAL_VFS + 1> repairs_{};  // before the guards that count in it
    AddressRange view_;
    HostLink host_link_;
    mutable std::mutex mutex_;  // guards pf_, vfs_
    std::unique_ptr<ShmFile> pf_;
    // The PF's object over the whole view; a fault in a VF's slice checks
    // the VF's object as well (the handler repairs every object there).
    ShmGuard pf_guard_;
    std::vector<Vf> vfs_;
};

}  // namespace spyre::mockdev
