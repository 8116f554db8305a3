// SPDX-License-Identifier: Apache-2.0
// Finding spyre functions under a device root (a spyre-mockdev mount, or a
// tree shaped like it): MOUNT/bus/pci/devices/<addr>/ and MOUNT/dev/spyre/<addr>.
// The root may be a real sysfs (/sys): functions bound to vfio-pci there are
// opened through their IOMMU group, /dev/vfio/<group>.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::driver {

// Where an app looks when SPYRE_DEV_ROOT is unset.
inline constexpr const char* kDefaultDeviceRoot = "/run/spyre";
// Where the kernel's sysfs is: a device root too.
inline constexpr const char* kSysfsRoot = "/sys";
// Where vfio puts the IOMMU group nodes.
inline constexpr const char* kVfioDevDir = "/dev/vfio";

// How a function is reached: spyre-mockdev's device node and shared memory,
// or a card bound to vfio-pci.
enum class Transport { Mock, Vfio };

struct FunctionInfo {
    std::string pci_address;              // "0000:01:00.0"
    uint16_t vendor_id = 0;
    uint16_t device_id = 0;
    bool is_vf = false;
    std::filesystem::path sysfs_dir;      // MOUNT/bus/pci/devices/<addr>
    std::filesystem::path dev_node;       // MOUNT/dev/spyre/<addr>; for Vfio the group, /dev/vfio/<group>
    Transport transport = Transport::Mock;
};

// Each call below reads the device model's files; one that gets no answer
// within SPYRE_HEARTBEAT_TIMEOUT_MS (a stopped daemon) fails with
// DeviceLost.
class DeviceRoot {
public:
    // Throws NotFound when the path holds no spyre device tree.
    explicit DeviceRoot(std::filesystem::path mount);

    const std::filesystem::path& path() const noexcept { return path_; }

    // Every spyre function (1014:06a7 / 1014:06a8) under the root, sorted by
    // PCI address, then filtered and ordered by SPYRE_DEVICES if it is set
    // (comma-separated PCI addresses or indices into the sorted list).
    std::vector<FunctionInfo> Functions() const;

    // A function by PCI address ("0000:01:00.1", or the short "01:00.1") or
    // by index into Functions() ("0", "2"). Throws NotFound / InvalidArgument.
    FunctionInfo Find(std::string_view selector) const;

    // True when `mount` looks like a device root (has bus/pci/devices).
    static bool Looks(const std::filesystem::path& mount);

private:
    std::filesystem::path path_;
};

// The function a path names: MOUNT/dev/spyre/<addr>, or MOUNT/bus/pci/
// devices/<addr> or a file in it; nullopt when no such file exists (the
// name is then a selector). Waits for a stopped daemon no longer than
// SPYRE_HEARTBEAT_TIMEOUT_MS (DeviceLost); a mount whose daemon is gone is
// DeviceLost naming it; an existing path that is no function is NotFound.
std::optional<FunctionInfo> FunctionAtPath(const std::string& target);

// A function selector read as DeviceRoot::Find reads it: an index ("2") or a
// PCI address ("0000:01:00.1", or the short "01:00.1"), normalised to the
// long lower-case form. InvalidArgument for an empty selector or one that is
// neither (checked before any device is looked at, so a typo is never read as
// "no such device").
struct FunctionSelector {
    std::optional<size_t> index;
    std::string pci_address;  // when not an index
};
FunctionSelector ParseFunctionSelector(std::string_view selector);

// What a function tells about itself without being opened (no claim on it):
// its identity and memory size from its register file (resource0, readable by
// everyone, one trapped read), and whether another process holds it (a one-byte
// read of its memory file, resource2, which the device refuses to all but the
// holder and its card's PF holder). Fields that cannot be read this way (a
// tree without readable resource files) fall back to the PCI address and
// "unknown".
struct FunctionStatus {
    uint16_t card = 0;           // FUNC_ID's card field (else the bus number from the first bus)
    uint16_t function = 0;       // 0 = PF, n = VF n
    uint64_t memory_bytes = 0;   // MEM_SIZE; 0 when unknown
    std::optional<bool> held;    // held by another process; nullopt when unknown
    uint32_t daemon_pid = 0;     // DAEMON_PID: the spyre-mockdev serving it; 0 on a card
};
FunctionStatus ReadFunctionStatus(const FunctionInfo& info);

// Reads MOUNT/bus/pci/devices/<addr>/{vendor,device} into a FunctionInfo;
// nullopt for non-spyre functions. A function whose `driver` link names
// vfio-pci and that has an `iommu_group` link gets Transport::Vfio.
std::optional<FunctionInfo> ProbeFunction(const std::filesystem::path& root, const std::string& pci_address);

}  // namespace spyre::driver
SPYRE_API_END
