// SPDX-License-Identifier: Apache-2.0
// A function on a card bound to vfio-pci (docs/hardware.md, "Binding a card
// to vfio-pci"): FunctionInfo::dev_node is its IOMMU group, /dev/vfio/<group>.
#pragma once

#include <memory>

#include "device_backend.hpp"

namespace spyre::driver {

inline constexpr const char* kVfioContainer = "/dev/vfio/vfio";

// Opens the container, checks the API version and the type-1 IOMMU, attaches
// the group (which must be viable: every device in it bound to vfio-pci or to
// no driver), takes the device fd and its region info. The group and device
// fds are the claim: vfio lets one container hold a group, and the group
// node's permissions (udev/70-spyre.rules) say who may try.
std::unique_ptr<DeviceBackend> OpenVfioBackend(const FunctionInfo& info, Syscalls& sys = Syscalls::Real());

}  // namespace spyre::driver
