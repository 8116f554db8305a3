// SPDX-License-Identifier: Apache-2.0
// DeviceHandle: an opaque location in device memory (seed 001). A PF handle
// is a physical address; a VF handle is a block offset inside one of the
// regions the device granted to the VF. Size travels beside a handle, never
// inside it: an allocation is a handle plus its size.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre {

// The device (function) an object belongs to: the card index and the
// function index (0 = PF, n = VF n) of the function's device info, and the
// device tree it was found in. Handles, tensors, loaded plans and events
// carry it; APIs that mix objects refuse a mix of devices with
// ErrorKind::WrongDevice.
struct DeviceId {
    uint16_t card = 0;
    uint16_t function = 0;
    // Which device tree of this process (numbered from 1 in the order they
    // are first opened; 0: none named): two private spyre-mockdevs both have
    // a card 0, and their functions are still different devices; so are a
    // daemon's and those of the daemon restarted on its mount.
    uint32_t tree = 0;
    // "0000:01:00.2": the PCI address the contract gives this card and
    // function (spyre_pci.h), for messages.
    std::string ToString() const;
    auto operator<=>(const DeviceId&) const = default;
};

// The number DeviceId::tree gives the device tree whose functions' sysfs
// directories are under `devices_dir` (MOUNT/bus/pci/devices), served by
// the spyre-mockdev of pid `daemon_pid` (its DAEMON_PID register; 0 on a
// card): the same directory and daemon, the same number, for the life of
// the process. A daemon restarted on the same mount serves a new tree, so
// objects of the lost one are WrongDevice there, never its memory.
uint32_t DeviceTreeNumber(const std::string& devices_dir, uint32_t daemon_pid);

[[noreturn]] void ThrowWrongDevice(const DeviceId& owner, const DeviceId& expected, const std::string& what,
                                   const char* user);

// Throws Error(WrongDevice, "<what> belongs to <owner>, <user> to
// <expected>") when `owner` is known and is not `expected`. `what` is a
// string or a callable returning one, called only on a mismatch: the check
// sits on enqueue paths, where building a message every time would cost
// more than the enqueue.
template <typename What>
void CheckSameDevice(const std::optional<DeviceId>& owner, const DeviceId& expected, const What& what,
                     const char* user) {
    if (!owner || *owner == expected) return;
    if constexpr (std::is_invocable_v<const What&>)
        ThrowWrongDevice(*owner, expected, what(), user);
    else
        ThrowWrongDevice(*owner, expected, what, user);
}

struct PFDeviceHandle {
    uint64_t physical_address = 0;
    auto operator<=>(const PFDeviceHandle&) const = default;
};

struct VFDeviceHandle {
    uint32_t region_id = 0;  // index in the VF's region table
    uint64_t vf_offset = 0;  // byte offset of the block inside the region
    auto operator<=>(const VFDeviceHandle&) const = default;
};

struct DeviceAllocation;

// A handle from SpyreAllocator knows its device (device()); one built by
// hand from a PF/VF handle does not, and is checked only against the
// allocator it is used with.
class DeviceHandle {
public:
    DeviceHandle(PFDeviceHandle pf) noexcept : value_(pf) {}  // NOLINT: implicit by design
    DeviceHandle(VFDeviceHandle vf) noexcept : value_(vf) {}  // NOLINT
    DeviceHandle(PFDeviceHandle pf, DeviceId device) noexcept : value_(pf), device_(device) {}
    DeviceHandle(VFDeviceHandle vf, DeviceId device) noexcept : value_(vf), device_(device) {}

    // The device the handle belongs to, when known.
    const std::optional<DeviceId>& device() const noexcept { return device_; }

    bool is_pf() const noexcept { return std::holds_alternative<PFDeviceHandle>(value_); }
    bool is_vf() const noexcept { return std::holds_alternative<VFDeviceHandle>(value_); }
    // The variant's fields; Error(InvalidArgument) when asked for the wrong one.
    const PFDeviceHandle& pf() const;
    const VFDeviceHandle& vf() const;

    // The handle `bytes` further into the same allocation (and device), for
    // a range of `size` bytes (tiles). Throws InvalidArgument when
    // [this + bytes, this + bytes + size) leaves `within`.
    DeviceHandle Offset(uint64_t bytes, uint64_t size, const DeviceAllocation& within) const;

    // "pf:0x1000" or "vf:region 2+0x80", for messages.
    std::string ToString() const;

    friend bool operator==(const DeviceHandle&, const DeviceHandle&) = default;

private:
    std::variant<PFDeviceHandle, VFDeviceHandle> value_;
    std::optional<DeviceId> device_;
};

// What SpyreAllocator::Allocate returns: where, and how many bytes.
struct DeviceAllocation {
    DeviceHandle handle;
    uint64_t size = 0;
};

}  // namespace spyre
SPYRE_API_END
