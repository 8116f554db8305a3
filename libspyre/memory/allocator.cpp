// SPDX-License-Identifier: Apache-2.0
#include "spyre/memory/allocator.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>

#include "forked.hpp"
#include "spyre/common/log.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/error.hpp"
#include "trace/recorder.hpp"

namespace spyre {

namespace {

constexpr uint64_t kGiB = 1ull << 30;

std::string Bytes(uint64_t n) {
    if (n && n % kGiB == 0) return std::to_string(n / kGiB) + " GiB";
    if (n && n % (1ull << 20) == 0) return std::to_string(n >> 20) + " MiB";
    return std::to_string(n) + " bytes";
}

}  // namespace

// ---- DeviceId, DeviceHandle -----------------------------------------------

std::string DeviceId::ToString() const {
    // spyre_pci.h: card c is bus FIRST_BUS + c; the PF is devfn 0, VF i
    // sits at FIRST_VF_OFFSET + (i - 1) * VF_STRIDE.
    const unsigned devfn = function == 0 ? 0u : SPYRE_SRIOV_FIRST_VF_OFFSET + (function - 1u) * SPYRE_SRIOV_VF_STRIDE;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%u", SPYRE_PCI_DOMAIN, SPYRE_PCI_FIRST_BUS + card, devfn >> 3,
                  devfn & 7);
    return buf;
}

uint32_t DeviceTreeNumber(const std::string& devices_dir, uint32_t daemon_pid) {
    // Never destroyed: a thread may open a device while the process exits.
    static auto* mu = new std::mutex;
    static auto* numbers = new std::map<std::pair<std::string, uint32_t>, uint32_t>;
    std::lock_guard lock(*mu);
    return numbers->try_emplace({devices_dir, daemon_pid}, uint32_t(numbers->size() + 1)).first->second;
}

void ThrowWrongDevice(const DeviceId& owner, const DeviceId& expected, const std::string& what, const char* user) {
    // Functions of two device trees (two private mocks) may share an address.
    const bool same_address = owner.card == expected.card && owner.function == expected.function;
    auto name = [&](const DeviceId& d) {
        return d.ToString() + (same_address ? " of device tree " + std::to_string(d.tree) : "");
    };
    throw Error(ErrorKind::WrongDevice, what + " belongs to " + name(owner) + ", " + user + " to " + name(expected));
}

const PFDeviceHandle& DeviceHandle::pf() const {
    if (!is_pf()) throw Error(ErrorKind::InvalidArgument, "handle " + ToString() + " is not a PF handle");
    return std::get<PFDeviceHandle>(value_);
}

const VFDeviceHandle& DeviceHandle::vf() const {
    if (!is_vf()) throw Error(ErrorKind::InvalidArgument, "handle " + ToString() + " is not a VF handle");
    return std::get<VFDeviceHandle>(value_);
}

DeviceHandle DeviceHandle::Offset(uint64_t bytes, uint64_t size, const DeviceAllocation& within) const {
    auto fail = [&](const std::string& why) {
        return Error(ErrorKind::InvalidArgument, "offset " + std::to_string(bytes) + " (+" + std::to_string(size) +
                                                     " bytes) from " + ToString() + " " + why + " of allocation " +
                                                     within.handle.ToString() + " (" + std::to_string(within.size) +
                                                     " bytes)");
    };
    if (is_pf() != within.handle.is_pf() || (is_vf() && vf().region_id != within.handle.vf().region_id))
        throw fail("is not inside");
    const uint64_t here = is_pf() ? pf().physical_address : vf().vf_offset;
    const uint64_t start = is_pf() ? within.handle.pf().physical_address : within.handle.vf().vf_offset;
    if (here < start || bytes > within.size || size > within.size - bytes || here - start > within.size - bytes - size)
        throw fail("runs outside");
    DeviceHandle moved = is_pf() ? DeviceHandle(PFDeviceHandle{here + bytes})
                                 : DeviceHandle(VFDeviceHandle{vf().region_id, here + bytes});
    moved.device_ = device_;  // same allocation, same device
    return moved;
}

std::string DeviceHandle::ToString() const {
    char buf[64];
    if (is_pf())
        std::snprintf(buf, sizeof buf, "pf:0x%llx", static_cast<unsigned long long>(pf().physical_address));
    else
        std::snprintf(buf, sizeof buf, "vf:region %u+0x%llx", vf().region_id, static_cast<unsigned long long>(vf().vf_offset));
    return buf;
}

// ---- Reservation ------------------------------------------------------------

namespace {

// What a region holds back from its start: device address 0 is never
// handed out, so a program operand that holds 0 is unbound, not a buffer
// (launch_binding.cpp refuses it).
uint64_t HeldBack(uint64_t device_base) { return device_base == 0 ? SpyreAllocator::kNullGuard : 0; }

}  // namespace

SpyreAllocator::SpyreAllocator(driver::Function& function, AllocatorOptions options)
    : fn_(function),
      options_(std::move(options)),
      device_{function.device_info().card_index, function.device_info().function_index,
              DeviceTreeNumber(function.info().sysfs_dir.parent_path().string(),
                               uint32_t(std::max(function.device_info().daemon_pid, 0)))},
      mem_base_(function.Read64(SPYRE_REG_MEM_BASE)),
      fork_generation_(detail::ForkGeneration()),
      made_by_(::getpid()) {
    // A mode past the named ones reserved as a VF.
    if (options_.mode != AllocatorMode::PF && options_.mode != AllocatorMode::VF)
        throw Error(ErrorKind::InvalidArgument, "allocator mode " + std::to_string(int(options_.mode)) +
                                                    " is none of PF, VF (AllocatorOptions::mode, DeviceOptions::allocator_mode)");
    // Less than one region reserved nothing, and read as a device that
    // grants no memory (OutOfMemory).
    if (options_.pf_pool_limit != 0 && options_.pf_pool_limit < SPYRE_REGION_ALIGN)
        throw Error(ErrorKind::InvalidArgument, "AllocatorOptions::pf_pool_limit is " +
                                                    std::to_string(options_.pf_pool_limit) + " bytes: at least " +
                                                    std::to_string(SPYRE_REGION_ALIGN) +
                                                    " (2 MiB, one region), or 0 for all the device grants");
    try {
        options_.mode == AllocatorMode::PF ? ReservePf() : ReserveVf();
    } catch (...) {
        ReleaseRegions();
        throw;
    }
    for (uint32_t r = 0; r < regions_.size(); ++r) {
        const uint64_t start = HeldBack(regions_[r].device_base);
        AddFree(r, start, regions_[r].size - start);
        capacity_ += regions_[r].size - start;
    }
}

SpyreAllocator::~SpyreAllocator() { ReleaseRegions(); }

void SpyreAllocator::CheckSameProcess(const char* call, const char* what) const {
    if (fork_generation_ != detail::ForkGeneration()) [[unlikely]]
        detail::MadeInProcess::Throw(made_by_, call, what,
                                     "the memory it reaches, of " + fn_.pci_address() +
                                         ", is the parent's live device memory",
                                     "open the device in the child once the parent has closed it");
}

int SpyreAllocator::GrantRegion(uint64_t size) {
    fn_.Write32(SPYRE_REG_REGION_ARG, static_cast<uint32_t>(size >> 20));
    fn_.Write32(SPYRE_REG_REGION_CMD, SPYRE_REGION_CMD_ALLOC);  // trapped: done when it returns
    if (fn_.Read32(SPYRE_REG_REGION_RESULT) != SPYRE_REGION_OK) return -1;
    const uint32_t index = fn_.Read32(SPYRE_REG_REGION_INDEX);
    regions_.push_back(Region{index, fn_.Read64(SPYRE_REG_REGION_BASE(index)), fn_.Read64(SPYRE_REG_REGION_SIZE(index))});
    return static_cast<int>(index);
}

void SpyreAllocator::ReleaseRegions() noexcept {
    try {
        // A device model that stopped would never answer the trapped
        // command; its hand-over frees what is left.
        if (!fn_.lost())
            for (const Region& r : regions_) {
                fn_.Write32(SPYRE_REG_REGION_ARG, r.device_index);
                if (!fn_.WriteTrapped32WhileServing(SPYRE_REG_REGION_CMD, SPYRE_REGION_CMD_FREE)) break;
            }
    } catch (const Error&) {
        // The device went away; its table went with it.
    }
    regions_.clear();
}

void SpyreAllocator::ReservePf() {
    uint64_t size = fn_.Read64(SPYRE_REG_REGION_LARGEST);
    if (options_.pf_pool_limit) size = std::min(size, options_.pf_pool_limit);
    size = size / SPYRE_REGION_ALIGN * SPYRE_REGION_ALIGN;
    if (size == 0 || GrantRegion(size) < 0)
        throw Error(ErrorKind::OutOfMemory, "the device grants no memory to this PF",
                    ErrorContext{.device = fn_.pci_address(), .reg = "REGION_LARGEST"});
    reservation_ = "PF: 1 region of " + Bytes(size);
}

void SpyreAllocator::ReserveVf() {
    const uint32_t max_regions = fn_.Read32(SPYRE_REG_REGION_MAX);
    if (options_.vf_regions == 0 || options_.vf_regions > max_regions)
        throw Error(ErrorKind::InvalidArgument, "VF mode needs 1 to " + std::to_string(max_regions) +
                                                    " regions (the device's region table), not " +
                                                    std::to_string(options_.vf_regions));
    const uint64_t grantable = fn_.Read64(SPYRE_REG_REGION_GRANTABLE);
    const uint64_t largest = fn_.Read64(SPYRE_REG_REGION_LARGEST);
    std::vector<uint64_t> sizes = options_.vf_region_sizes;
    const bool adapt = sizes.empty();
    if (adapt) {
        // The default: large regions where the VF has the memory for them,
        // else one region of all it can grant (the largest block possible).
        sizes = {12 * kGiB, 8 * kGiB, 4 * kGiB};
        sizes.push_back(std::max<uint64_t>(largest / SPYRE_REGION_ALIGN * SPYRE_REGION_ALIGN, SPYRE_REGION_ALIGN));
    }
    for (const uint64_t size : sizes) {
        if (size == 0 || size % SPYRE_REGION_ALIGN != 0)
            throw Error(ErrorKind::InvalidArgument, "VF region size " + std::to_string(size) +
                                                        " is not a positive multiple of 2 MiB");
        // REGION_ARG counts MiB in 32 bits.
        if ((size >> 20) > UINT32_MAX)
            throw Error(ErrorKind::InvalidArgument,
                        "VF region size " + std::to_string(size) + " is past the largest region the device's region "
                        "table can name (" + std::to_string((uint64_t(UINT32_MAX) << 20) / SPYRE_REGION_ALIGN * SPYRE_REGION_ALIGN) +
                        " bytes)");
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
        const uint64_t size = sizes[i];
        const bool last = i + 1 == sizes.size();
        while (regions_.size() < options_.vf_regions && GrantRegion(size) >= 0) {
        }
        if (regions_.size() == options_.vf_regions || (last && !regions_.empty())) {
            reservation_ = "VF: " + std::to_string(regions_.size()) + " x " + Bytes(size);
            const bool not_first = i > 0 || regions_.size() < options_.vf_regions;
            // The default adapts (a VF of 12-32 GiB gets one region of all of
            // it, larger than the first size): no fallback to warn about.
            if (adapt && not_first)
                reservation_ += " (sized to the " + Bytes(grantable) + " the device grants this VF)";
            else if (not_first) {
                reservation_ += " (fell back: " + std::to_string(options_.vf_regions) + " x " + Bytes(sizes[0]) +
                                " do not fit the " + Bytes(grantable) + " the device grants this VF)";
                SPYRE_LOG_WARN("%s: %s", fn_.pci_address().c_str(), reservation_.c_str());
            }
            return;
        }
        ReleaseRegions();  // not all of this size: try the next size from scratch
    }
    std::string asked;
    for (const uint64_t size : sizes)
        asked += (asked.empty() ? "" : ", then ") + std::to_string(options_.vf_regions) + " x " + Bytes(size);
    throw Error(ErrorKind::OutOfMemory,
                "VF pool of " + asked + " asked for, but the device grants this VF " + Bytes(grantable) +
                    " in all (largest region " + Bytes(largest) + ", function memory " +
                    Bytes(fn_.device_info().mem_size) + ")",
                ErrorContext{.device = fn_.pci_address(), .reg = "REGION_GRANTABLE"});
}

// ---- Blocks -------------------------------------------------------------------

void SpyreAllocator::AddFree(uint32_t region, uint64_t offset, uint64_t size) {
    regions_[region].free_by_offset.emplace(offset, size);
    free_by_size_.emplace(size, region, offset);
}

void SpyreAllocator::RemoveFree(uint32_t region, uint64_t offset, uint64_t size) {
    regions_[region].free_by_offset.erase(offset);
    free_by_size_.erase(FreeKey{size, region, offset});
}

DeviceHandle SpyreAllocator::MakeHandle(uint32_t region, uint64_t offset) const {
    const Region& r = regions_[region];
    if (options_.mode == AllocatorMode::PF)
        return DeviceHandle(PFDeviceHandle{mem_base_ + r.device_base + offset}, device_);
    return DeviceHandle(VFDeviceHandle{r.device_index, offset}, device_);
}

std::pair<uint32_t, uint64_t> SpyreAllocator::Locate(const DeviceHandle& handle) const {
    CheckSameDevice(handle.device(), device_, [&] { return "handle " + handle.ToString(); }, "this allocator");
    if (handle.is_pf() != (options_.mode == AllocatorMode::PF))
        throw Error(ErrorKind::InvalidArgument, "handle " + handle.ToString() + " does not belong to this " +
                                                    (options_.mode == AllocatorMode::PF ? "PF" : "VF") + " allocator",
                    ErrorContext{.device = fn_.pci_address()});
    for (uint32_t i = 0; i < regions_.size(); ++i) {
        const Region& r = regions_[i];
        if (handle.is_vf()) {
            if (r.device_index == handle.vf().region_id && handle.vf().vf_offset < r.size) return {i, handle.vf().vf_offset};
        } else {
            const uint64_t addr = handle.pf().physical_address - mem_base_;
            if (addr >= r.device_base && addr - r.device_base < r.size) return {i, addr - r.device_base};
        }
    }
    throw Error(ErrorKind::InvalidArgument, "handle " + handle.ToString() + " is not in any region of this allocator",
                ErrorContext{.device = fn_.pci_address()});
}

uint64_t SpyreAllocator::LargestFreeLocked() const {
    return free_by_size_.empty() ? 0 : std::get<0>(*free_by_size_.rbegin());
}

DeviceAllocation SpyreAllocator::Allocate(uint64_t size) {
    CheckSameProcess("SpyreAllocator::Allocate");
    return Allocate(size, false);
}
DeviceAllocation SpyreAllocator::AllocateOwned(uint64_t size) { return Allocate(size, true); }
void SpyreAllocator::Free(const DeviceHandle& handle) {
    CheckSameProcess("SpyreAllocator::Free");
    if (free_fence_) {
        {
            std::lock_guard lock(mutex_);
            auto [region, used] = LiveBlockLocked(handle, false);  // refused before any wait
            if (used->second.freeing)
                throw Error(ErrorKind::InvalidArgument, handle.ToString() + " is being freed already (a double free)",
                            ErrorContext{.device = fn_.pci_address()});
            // Copies submitted while the fence waits would land after it,
            // in the block's next owner (found probing from outside).
            used->second.freeing = true;
        }
        try {
            free_fence_();
        } catch (...) {
            std::lock_guard lock(mutex_);
            LiveBlockLocked(handle, false).second->second.freeing = false;  // stays live
            throw;
        }
    }
    Free(handle, false);
}

void SpyreAllocator::BeginFreeOwned(std::span<const DeviceAllocation> blocks) noexcept {
    std::lock_guard lock(mutex_);
    for (const DeviceAllocation& a : blocks) {
        try {
            LiveBlockLocked(a.handle, true).second->second.freeing = true;
        } catch (const Error&) {
            // Not live: FreeOwned says so, or the device went with it.
        }
    }
}
void SpyreAllocator::FreeOwned(const DeviceHandle& handle) { Free(handle, true); }

DeviceAllocation SpyreAllocator::Allocate(uint64_t size, bool owned) {
    if (size == 0)
        throw Error(ErrorKind::InvalidArgument, "cannot allocate 0 bytes", ErrorContext{.device = fn_.pci_address()});
    if (size > capacity_)
        throw Error(ErrorKind::InvalidArgument, "cannot allocate " + std::to_string(size) + " bytes: the pool holds " +
                                                    std::to_string(capacity_) + " bytes in all",
                    ErrorContext{.device = fn_.pci_address()});
    // Memory of a device that is gone would be handed out only to fail at
    // its first use (DeviceLost here, as at every other call).
    fn_.CheckAliveThrottled();
    const uint64_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
    std::lock_guard lock(mutex_);
    auto it = free_by_size_.lower_bound(FreeKey{rounded, 0, 0});
    if (it == free_by_size_.end())
        throw Error(ErrorKind::OutOfMemory, "no free block for " + std::to_string(size) + " bytes; largest free block " +
                                                std::to_string(LargestFreeLocked()) + " bytes, " +
                                                std::to_string(capacity_ - in_use_) + " bytes free in all",
                    ErrorContext{.device = fn_.pci_address()});
    const auto [block_size, region, offset] = *it;
    RemoveFree(region, offset, block_size);
    if (block_size > rounded) AddFree(region, offset + rounded, block_size - rounded);
    regions_[region].used_by_offset.emplace(offset, Region::Used{rounded, size, owned});
    regions_[region].in_use += rounded;
    in_use_ += rounded;
    if (trace::Enabled()) TraceInUse();
    peak_ = std::max(peak_, in_use_);
    ++live_;
    ++allocations_;
    return DeviceAllocation{MakeHandle(region, offset), size};
}

std::pair<uint32_t, std::map<uint64_t, SpyreAllocator::Region::Used>::iterator> SpyreAllocator::LiveBlockLocked(
    const DeviceHandle& handle, bool owner) {
    const auto [region, offset] = Locate(handle);
    Region& r = regions_[region];
    auto used = r.used_by_offset.find(offset);
    if (used == r.used_by_offset.end()) {
        auto free_block = r.free_by_offset.upper_bound(offset);
        const bool in_free = free_block != r.free_by_offset.begin() &&
                             std::prev(free_block)->first + std::prev(free_block)->second > offset;
        throw Error(ErrorKind::InvalidArgument,
                    // Free memory does not say whether it was ever handed out.
                    in_free ? handle.ToString() + " lies in free memory of this allocator: freed already (a double "
                                                  "free) or never allocated"
                            : handle.ToString() + " is not the start of a live allocation of this allocator",
                    ErrorContext{.device = fn_.pci_address()});
    }
    if (used->second.owned && !owner)
        throw Error(ErrorKind::InvalidArgument,
                    handle.ToString() + " belongs to a DeviceBuffer or tensor: it is freed when that goes (reset it), "
                                        "not by Allocator::Free",
                    ErrorContext{.device = fn_.pci_address()});
    if (owner && !used->second.owned)
        throw Error(ErrorKind::Internal, handle.ToString() + " is no DeviceBuffer's block: FreeOwned refuses it",
                    ErrorContext{.device = fn_.pci_address()});
    return {region, used};
}

void SpyreAllocator::Free(const DeviceHandle& handle, bool owner) {
    std::lock_guard lock(mutex_);
    const auto [region, used] = LiveBlockLocked(handle, owner);
    Region& r = regions_[region];
    uint64_t start = used->first, size = used->second.rounded;
    r.used_by_offset.erase(used);
    r.in_use -= size;
    in_use_ -= size;
    if (trace::Enabled()) TraceInUse();
    --live_;
    // Coalesce with the free neighbours on both sides.
    auto next = r.free_by_offset.lower_bound(start);
    if (next != r.free_by_offset.end() && next->first == start + size) {
        const uint64_t next_size = next->second;
        RemoveFree(region, next->first, next_size);
        size += next_size;
    }
    auto prev = r.free_by_offset.lower_bound(start);
    if (prev != r.free_by_offset.begin()) {
        --prev;
        if (prev->first + prev->second == start) {
            const uint64_t prev_start = prev->first, prev_size = prev->second;
            RemoveFree(region, prev_start, prev_size);
            start = prev_start;
            size += prev_size;
        }
    }
    AddFree(region, start, size);
}

SpyreAllocator::Found SpyreAllocator::FindLocked(const DeviceHandle& handle, uint64_t size) const {
    const auto [region, offset] = Locate(handle);
    const Region& r = regions_[region];
    auto it = r.used_by_offset.upper_bound(offset);
    if (it != r.used_by_offset.begin()) {
        --it;
        const uint64_t start = it->first, length = it->second.requested;
        if (offset - start <= length && size <= length - (offset - start)) {
            if (it->second.freeing)
                throw Error(ErrorKind::InvalidArgument,
                            "range of " + std::to_string(size) + " bytes at " + handle.ToString() +
                                " lies in an allocation being freed: work named after its free began would land "
                                "in its next owner",
                            ErrorContext{.device = fn_.pci_address()});
            return Found{region, start, length, r.device_base + offset, it->second.programs};
        }
        if (offset - start < length)  // starts inside one: says how much is left, not "no allocation"
            throw Error(ErrorKind::InvalidArgument,
                        "range of " + std::to_string(size) + " bytes at " + handle.ToString() +
                            " runs past the end of its allocation of " + std::to_string(length) + " bytes at " +
                            MakeHandle(region, start).ToString() + " (" + std::to_string(length - (offset - start)) +
                            " bytes from " + handle.ToString() + " to its end)",
                        ErrorContext{.device = fn_.pci_address()});
    }
    throw Error(ErrorKind::InvalidArgument, "range of " + std::to_string(size) + " bytes at " + handle.ToString() +
                                                " is not inside a live allocation",
                ErrorContext{.device = fn_.pci_address()});
}

DeviceAllocation SpyreAllocator::Lookup(const DeviceHandle& handle, uint64_t size) const {
    CheckSameProcess("SpyreAllocator::Lookup");
    std::lock_guard lock(mutex_);
    const Found f = FindLocked(handle, size);
    return DeviceAllocation{MakeHandle(f.region, f.start), f.length};
}

uint64_t SpyreAllocator::DeviceAddress(const DeviceHandle& handle, uint64_t size) const {
    CheckSameProcess("SpyreAllocator::DeviceAddress");
    std::lock_guard lock(mutex_);
    return FindLocked(handle, size).device_address;
}

uint64_t SpyreAllocator::DeviceAddressToWrite(const DeviceHandle& handle, uint64_t size) const {
    std::lock_guard lock(mutex_);
    const Found f = FindLocked(handle, size);
    if (f.programs)
        throw Error(ErrorKind::InvalidArgument,
                    "range of " + std::to_string(size) + " bytes at " + handle.ToString() +
                        " lies in memory the runtime keeps for a program image (a loaded plan's, a Program's, a "
                        "tiling variant's or a registered device kernel's): no copy or launch may write it",
                    ErrorContext{.device = fn_.pci_address()});
    return f.device_address;
}

void SpyreAllocator::KeepForPrograms(const DeviceHandle& handle) {
    std::lock_guard lock(mutex_);
    const auto [region, offset] = Locate(handle);
    auto used = regions_[region].used_by_offset.find(offset);
    if (used == regions_[region].used_by_offset.end())
        throw Error(ErrorKind::Internal, "KeepForPrograms: " + handle.ToString() + " starts no live block");
    used->second.programs = true;
}

void SpyreAllocator::TraceInUse() {
    const uint64_t recording = trace::detail::Recording();
    if (trace_recording_ != recording) {
        trace_track_ = trace::detail::NamedTrack(fn_.pci_address() + " memory");
        trace_recording_ = recording;
    }
    trace::detail::Counter(trace_track_, "device memory in use", trace::detail::NowNs(), int64_t(in_use_));
}

AllocatorStats SpyreAllocator::Stats() const {
    CheckSameProcess("SpyreAllocator::Stats");
    std::lock_guard lock(mutex_);
    AllocatorStats s;
    s.capacity = capacity_;
    s.bytes_in_use = in_use_;
    s.bytes_free = capacity_ - in_use_;
    s.largest_free_block = LargestFreeLocked();
    s.peak_bytes_in_use = peak_;
    s.live_allocations = live_;
    s.allocations = allocations_;
    s.reservation = reservation_;
    for (const Region& r : regions_) s.regions.push_back(
            RegionStats{r.device_index, r.device_base, r.size - HeldBack(r.device_base), r.in_use});
    return s;
}

}  // namespace spyre
