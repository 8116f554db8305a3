// SPDX-License-Identifier: Apache-2.0
// SpyreAllocator: device memory for tensors and program binaries (seeds 000
// and 001), in PF or VF mode.
//
// Both modes first reserve memory regions from the device (the BAR0 region
// table): PF mode one region as large as the device grants, VF mode a pool of
// `vf_regions` large regions. By default the VF pool adapts to the VF's
// memory: 12 GiB regions, else 8 GiB, else 4 GiB, else one region of all the
// device can grant the VF (REGION_LARGEST). Explicit sizes are tried in order and never adapted: when none
// fits, OutOfMemory names the pool asked for and the memory that exists.
// Blocks are then carved from the regions, 128-byte aligned. The first
// block of function memory (device address 0, kNullGuard bytes) is never
// handed out: an operand at address 0 is one nothing bound, never a buffer.
// Capacity is what can be handed out (the regions less that block):
//
//   placement  best fit: the smallest free block that holds the request
//              (lowest region, then lowest address on ties), which keeps
//              large free blocks whole for large tensors;
//   freeing    immediate coalescing with both free neighbours;
//   cost       O(log n) per allocate and free (ordered maps by size and by
//              address).
//
// Thread-safe. Freed or foreign handles are detected, never silently used.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "spyre/memory/device_handle.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

namespace driver {
class Function;
}

enum class AllocatorMode { PF, VF };

struct AllocatorOptions {
    AllocatorMode mode = AllocatorMode::PF;
    // VF mode: how many regions to reserve, and the sizes to try in order
    // (the last size may give fewer regions). Empty: the default, which
    // adapts to the VF's memory (12, 8, 4 GiB, then what the VF has).
    uint32_t vf_regions = 8;
    std::vector<uint64_t> vf_region_sizes = {};
    // PF mode: the most to reserve (0 = all the device grants), rounded down
    // to whole 2 MiB regions; at least 2 MiB (InvalidArgument below).
    uint64_t pf_pool_limit = 0;
};

struct RegionStats {
    uint32_t region_id = 0;
    uint64_t device_base = 0;  // function-relative device address
    uint64_t capacity = 0;
    uint64_t in_use = 0;
};

struct AllocatorStats {
    uint64_t capacity = 0;
    uint64_t bytes_in_use = 0;
    uint64_t bytes_free = 0;
    uint64_t largest_free_block = 0;
    uint64_t peak_bytes_in_use = 0;
    uint64_t live_allocations = 0;
    uint64_t allocations = 0;  // Allocate calls that succeeded so far (what a cache saves shows here)
    std::vector<RegionStats> regions;
    std::string reservation;  // how the pool was reserved, including any fallback
};

class DeviceBuffer;
class SPYRE_INTERNAL DeviceCore;
namespace detail {
class SPYRE_INTERNAL SchedulerCore;
}

class SpyreAllocator {
public:
    static constexpr uint64_t kAlignment = 128;
    // Held back at function-relative address 0 (see the top of this file).
    static constexpr uint64_t kNullGuard = kAlignment;

    // Reserves the pool from the device. The function must outlive the
    // allocator; the regions go back to the device on destruction.
    SpyreAllocator(driver::Function& function, AllocatorOptions options = {});
    ~SpyreAllocator();
    SpyreAllocator(const SpyreAllocator&) = delete;
    SpyreAllocator& operator=(const SpyreAllocator&) = delete;

    AllocatorMode mode() const noexcept { return options_.mode; }
    // The function this allocator's memory (and every handle it hands out) belongs to.
    const DeviceId& device() const noexcept { return device_; }

    // Throws InvalidArgument for size 0 or a size beyond the pool's capacity,
    // OutOfMemory (naming the request and the largest free block) otherwise.
    DeviceAllocation Allocate(uint64_t size);
    // Throws InvalidArgument for a handle in free memory (a double free, or
    // one never handed out), any other handle this allocator did not hand
    // out, or a block a DeviceBuffer (or tensor) owns: that one goes
    // when its owner does, and a Free before would let the allocator hand
    // the block out while the owner still uses, and later frees, it.
    // The allocator of a Device first waits for the copies (DMAEngine) and
    // stream work queued so far, as cudaFree does: none of them lands in
    // the block once it is handed out again. Meanwhile a copy or launch
    // naming the block is refused (InvalidArgument, "being freed"), and so
    // is a second Free of it.
    void Free(const DeviceHandle& handle);

    // The allocation holding [handle, handle + size); throws InvalidArgument
    // if the range is not inside one live allocation of this allocator.
    DeviceAllocation Lookup(const DeviceHandle& handle, uint64_t size) const;
    // Function-relative device address of a checked range (what CBs, programs
    // and the DMA engine use).
    uint64_t DeviceAddress(const DeviceHandle& handle, uint64_t size) const;

    AllocatorStats Stats() const;

private:
    // DeviceBuffer's blocks: only FreeOwned gives them back, and only the
    // buffer's owners call it (the device, once the work queued into the
    // block is done).
    friend class DeviceBuffer;
    friend class DeviceCore;
    friend class DMAEngine;
    friend class detail::SchedulerCore;
    DeviceAllocation AllocateOwned(uint64_t size);
    // Keeps the block `handle` starts for the runtime's own program images
    // (a loaded plan's, a Program's, a tiling variant's), once their upload
    // is queued: DeviceAddressToWrite refuses it from then on.
    SPYRE_INTERNAL void KeepForPrograms(const DeviceHandle& handle);
    // DeviceAddress of a range a copy or a launch's tensor may write: also
    // InvalidArgument in a block kept for programs (a hand-made handle
    // there overwrote a loaded plan's program, which every later launch of
    // it, and of its cached reload, then failed).
    SPYRE_INTERNAL uint64_t DeviceAddressToWrite(const DeviceHandle& handle, uint64_t size) const;
    void FreeOwned(const DeviceHandle& handle);
    // Marks DeviceBuffer blocks whose free began (Used::freeing), before the
    // device waits for the work queued into them.
    SPYRE_INTERNAL void BeginFreeOwned(std::span<const DeviceAllocation> blocks) noexcept;
    // What Free waits for, outside the lock, before the block can be handed
    // out again (set by the Device); empty: nothing.
    void SetFreeFence(std::function<void()> fence) { free_fence_ = std::move(fence); }
    std::function<void()> free_fence_;

    struct Region {
        uint32_t device_index;  // entry in the device's region table
        uint64_t device_base;   // function-relative address of the region
        uint64_t size;
        uint64_t in_use = 0;
        std::map<uint64_t, uint64_t> free_by_offset;  // offset -> size
        struct Used {
            uint64_t rounded;    // what the block occupies
            uint64_t requested;  // what the caller may touch
            bool owned = false;  // by a DeviceBuffer: FreeOwned only
            // Its free began (it waits for the work queued into it): no
            // copy or launch may name it from then on.
            bool freeing = false;
            bool programs = false;  // KeepForPrograms
        };
        std::map<uint64_t, Used> used_by_offset;
    };
    // (size, region, offset): the best-fit index over every region.
    using FreeKey = std::tuple<uint64_t, uint32_t, uint64_t>;

    void ReservePf();
    void ReserveVf();
    // Asks the device for one region; returns its table index or -1.
    int GrantRegion(uint64_t size);
    void ReleaseRegions() noexcept;
    DeviceAllocation Allocate(uint64_t size, bool owned);
    void Free(const DeviceHandle& handle, bool owner);
    // The live block `handle` starts, in its region (mutex_ held); throws
    // as Free says, and for a FreeOwned (`owner`) of a block no buffer owns.
    SPYRE_INTERNAL std::pair<uint32_t, std::map<uint64_t, Region::Used>::iterator> LiveBlockLocked(
        const DeviceHandle& handle, bool owner);
    void AddFree(uint32_t region, uint64_t offset, uint64_t size);
    void RemoveFree(uint32_t region, uint64_t offset, uint64_t size);
    // Region (our index) and offset of a handle; throws for foreign handles.
    std::pair<uint32_t, uint64_t> Locate(const DeviceHandle& handle) const;
    // The live allocation holding [handle, handle + size) (mutex_ held);
    // throws InvalidArgument as Lookup does.
    struct Found {
        uint32_t region;
        uint64_t start;           // the allocation's offset in the region
        uint64_t length;          // its requested size
        uint64_t device_address;  // function-relative address of `handle`
        bool programs;            // kept for programs (KeepForPrograms)
    };
    Found FindLocked(const DeviceHandle& handle, uint64_t size) const;
    DeviceHandle MakeHandle(uint32_t region, uint64_t offset) const;
    uint64_t LargestFreeLocked() const;
    // InvalidArgument in a child forked since the allocator was made: its
    // blocks are the parent's device memory, which the parent still uses
    // (a child kept a reference across fork() and overwrote the parent's
    // live block; found probing from outside). A load and a compare.
    // `what` names the object the call was on ("DMA engine" for its copies).
    void CheckSameProcess(const char* call, const char* what = "allocator") const;
    // While a trace records: the bytes in use as a counter (mutex_ held).
    void TraceInUse();

    uint32_t trace_track_ = 0;  // the counter's track in the running trace
    uint64_t trace_recording_ = 0;
    driver::Function& fn_;
    const AllocatorOptions options_;
    const DeviceId device_;
    // MEM_BASE, read once: a PF handle's physical address is MEM_BASE plus
    // the function-relative address (fixed while the function is open).
    const uint64_t mem_base_;
    mutable std::mutex mutex_;
    std::vector<Region> regions_;
    std::set<FreeKey> free_by_size_;
    uint64_t capacity_ = 0;
    uint64_t in_use_ = 0;
    uint64_t peak_ = 0;
    uint64_t live_ = 0;
    uint64_t allocations_ = 0;
    std::string reservation_;
    const uint64_t fork_generation_;  // detail::ForkGeneration() when made
    const int made_by_;               // getpid() when made
};

}  // namespace spyre
SPYRE_API_END
