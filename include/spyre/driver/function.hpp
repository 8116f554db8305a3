// SPDX-License-Identifier: Apache-2.0
// An open spyre function (PF or VF): its regions, mapped and trapped
// register access, reset and liveness of the device behind it. How the
// device is reached (the mock's device node and shared memory, or vfio-pci)
// is its backend's business (driver/device_backend.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "spyre/driver/discovery.hpp"
#include "spyre/error.hpp"
#include "spyre/uapi/spyre.h"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::driver {

// A mapping of (part of) a region, which it unmaps. Move-only. In a child
// forked while it lives, its pages are private zeros (driver/mapped_region.cpp).
class MappedRegion {
public:
    MappedRegion() = default;
    // Takes over `base` (an mmap of `size` bytes); OutOfMemory (it unmapped it) when it cannot list it.
    MappedRegion(void* base, size_t size);
    MappedRegion(MappedRegion&& o) noexcept;
    MappedRegion& operator=(MappedRegion&& o) noexcept;
    MappedRegion(const MappedRegion&) = delete;
    MappedRegion& operator=(const MappedRegion&) = delete;
    ~MappedRegion();

    uint8_t* data() const noexcept { return static_cast<uint8_t*>(base_); }
    size_t size() const noexcept { return size_; }
    explicit operator bool() const noexcept { return base_ != nullptr; }

private:
    void* base_ = nullptr;
    size_t size_ = 0;
};

// Where a region's bytes can be read and written with plain file I/O (and
// so with io_uring): `fd` at `offset` plus the offset in the region. The fd
// is the caller's, to close.
struct RegionFile {
    int fd = -1;
    uint64_t offset = 0;
};

class SPYRE_INTERNAL DeviceBackend;
class SPYRE_INTERNAL Syscalls;
class SPYRE_INTERNAL HeartbeatWatch;

class Function {
public:
    // Opens the function through the backend its info names (claiming it: a
    // second open anywhere fails with Busy), checks the contract magic and
    // version, and maps BAR0 (registers) and BAR4 (doorbell page and rings).
    // DeviceLost when the device model does not answer within
    // SPYRE_HEARTBEAT_TIMEOUT_MS (a stopped daemon).
    static Function Open(const FunctionInfo& info);

    Function(Function&& o) noexcept;
    Function& operator=(Function&& o) noexcept;
    Function(const Function&) = delete;
    Function& operator=(const Function&) = delete;
    ~Function();

    const FunctionInfo& info() const noexcept { return info_; }
    const spyre_device_info& device_info() const noexcept { return dev_info_; }
    const std::string& pci_address() const noexcept { return info_.pci_address; }
    bool is_vf() const noexcept { return info_.is_vf; }

    spyre_region_info RegionInfo(uint32_t index) const;
    // Maps a region (the fast path). Throws Unsupported for regions that
    // cannot be mapped.
    MappedRegion MapRegion(uint32_t index) const;
    // A region as a file for bulk copies (io_uring DMA): a new fd, the caller's.
    RegionFile OpenRegionFile(uint32_t index) const;
    // Which backend carries this function ("mock", "vfio").
    const char* backend_name() const noexcept;

    // Register access. Reads use the mapping; writes to registers with side
    // effects (CONTROL, RESET, ERR_CLEAR, REGION_CMD) are trapped so the device sees them,
    // other writes use the mapping. Offsets are checked against the contract.
    // Mapped access throws DeviceLost once the device is gone
    // (CheckAliveThrottled), rather than read a dead daemon's memory.
    uint32_t Read32(uint32_t offset) const;
    uint64_t Read64(uint32_t offset) const;
    void Write32(uint32_t offset, uint32_t value);
    // The DMA engine's counters (CNT_DMA_*): on the mock the driver moves
    // host <-> device bytes itself, so it is the engine that counts them, in
    // its function's mapped register file. Never throws.
    void CountDma(uint64_t to_device_bytes, uint64_t from_device_bytes, uint64_t busy_ns) noexcept;
    // Trapped access: one round trip to the device model per call (slow path).
    uint32_t ReadTrapped32(uint32_t offset) const;
    uint64_t ReadTrapped64(uint32_t offset) const;
    void WriteTrapped32(uint32_t offset, uint32_t value);
    // A trapped write a teardown makes at its best (disabling a ring): made
    // only while the device serves, so a stopped device model (SIGSTOP,
    // hung), which would never answer, is given up on after the heartbeat's
    // bound. False when not made. Never throws.
    bool WriteTrapped32WhileServing(uint32_t offset, uint32_t value) noexcept;
    // Raw trapped region access through the device node (pread/pwrite).
    std::vector<uint8_t> ReadRegion(uint32_t index, uint64_t offset, size_t length) const;
    void WriteRegion(uint32_t index, uint64_t offset, std::span<const uint8_t> bytes);

    // Function-level reset through the device node; returns when done. The
    // ring is disabled afterwards.
    void Reset();

    // The register dump text (same as the daemon's `regs` file).
    std::string RegisterDump() const;

    // Liveness of the device model: false once the serving daemon exited or
    // shut the device down, or its heartbeat (contract 3.3) stood still for
    // the driver's bound (SPYRE_HEARTBEAT_TIMEOUT_MS, 10 s by default: a
    // stopped daemon). No round trip to the daemon: the doorbell page's
    // device_state and heartbeat words and one poll of the daemon's pidfd
    // (a system call).
    bool Alive() const;
    // Throws LostError() if !Alive().
    void CheckAlive() const;
    // The per-access check of the fast data paths (mapped register access,
    // inline copies): throws LostError() once the device is known gone or
    // its device_state word says so, and polls the daemon itself (Alive())
    // at most once per kProbePeriod, so a mapped access stays a memory
    // access. A daemon killed without a word (SIGKILL) is noticed within
    // kProbePeriod (plus the coarse clock's tick) of the next access.
    void CheckAliveThrottled() const;
    static constexpr std::chrono::milliseconds kProbePeriod{1};
    // DeviceLost naming the function, the daemon and why it counts as lost.
    Error LostError() const;
    // True once Alive() has seen the device gone; it never comes back.
    bool lost() const noexcept { return std::atomic_ref<bool>(lost_).load(std::memory_order_relaxed); }

    // Task queues a TaskQueue of this process holds (bit q for queue q): a
    // second TaskQueue on a held queue is refused (Busy) instead of sharing
    // its ring. Hold returns false when `group` is held already.
    bool HoldTaskQueue(uint32_t group) noexcept;
    void ReleaseTaskQueue(uint32_t group) noexcept;
    bool TaskQueueHeld(uint32_t group) const noexcept;
    // The same for the CB ring (a CommandRing): a second one is refused
    // (Busy) instead of resetting the function under the first.
    bool HoldCommandRing() noexcept;
    void ReleaseCommandRing() noexcept;

    uint8_t* bar0() const noexcept { return bar0_.data(); }
    uint8_t* bar4() const noexcept { return bar4_.data(); }
    uint64_t bar4_size() const noexcept { return bar4_.size(); }  // bytes mapped
    // The fd trapped access goes through (the device node, the VFIO device fd).
    int fd() const noexcept;

private:
    Function() = default;
    static Function OpenHere(const FunctionInfo& info);  // Open, on the calling thread
    void Close() noexcept;
    DeviceBackend& Backend() const;  // InvalidArgument once closed
    // Makes a request its backend built and waits for it while the device
    // serves: DeviceLost when it stopped serving first (see StillServing).
    void Request(std::function<void(Syscalls&, int)> request) const;
    // One liveness check; the heartbeat's judgement remembers earlier looks.
    bool Probe() const;
    // The parts of Probe that hold during a hand-over, which itself writes
    // GONE to the old owner's pages.
    bool ServingProcess() const noexcept;  // the daemon's process lives (when there is one)
    bool HeartbeatStill() const;           // stood still for the bound (sets lost_why_)
    // While a request waits for the device: false, and lost() from then on,
    // once its process has exited or its heartbeat stood still.
    bool StillServing() const noexcept;
    spyre_doorbell_page* Doorbell() const noexcept;
    uint32_t DeviceState() const noexcept;  // the doorbell page's device_state word
    uint32_t Load32(uint32_t offset) const noexcept;  // a mapped register, unchecked

    FunctionInfo info_;
    spyre_device_info dev_info_{};
    std::unique_ptr<DeviceBackend> backend_;
    int pidfd_ = -1;  // the daemon's pidfd: readable once it has exited
    bool watch_pid_ = false;  // the daemon's pid names it here (our pid namespace is its)
    mutable bool lost_ = false;
    // Why lost_ was set: the device is gone, or it stopped responding
    // (through std::atomic_ref).
    enum LostWhy : uint8_t { kGone, kNotResponding };
    mutable uint8_t lost_why_ = kGone;
    // Null for a device before contract 3.3 or a bound of 0.
    std::unique_ptr<HeartbeatWatch> heartbeat_;
    static constexpr uint32_t kCommandRingBit = 1u << 31;  // above every task queue's (SPYRE_TQ_MAX_QUEUES)
    uint32_t task_queues_held_ = 0;  // through std::atomic_ref; bit kCommandRingBit: the CB ring
    mutable int64_t next_probe_ns_ = 0;  // CheckAliveThrottled: coarse clock time of the next Alive()
    uint32_t db_offset_ = 0;             // the doorbell page in BAR4
    MappedRegion bar0_;
    MappedRegion bar4_;
};

}  // namespace spyre::driver
SPYRE_API_END
