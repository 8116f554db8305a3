// SPDX-License-Identifier: Apache-2.0
// How an app finds its device, from the environment:
//   SPYRE_DEV_ROOT  the device root (a spyre-mockdev mount, or /sys for cards
//                   bound to vfio-pci); default /run/spyre, else /sys when it
//                   shows a Spyre function bound to vfio-pci
//   FLEX_DEVICE     PF | VF: which kind of function to open by default (PF
//                   when unset); MOCK: always start a private spyre-mockdev
//                   for the life of the app (as does unset FLEX_DEVICE when
//                   no device root exists)
//   SPYRE_DEVICES   comma-separated PCI addresses or indices: visible functions
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "spyre/driver/discovery.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/driver/mock_daemon.hpp"
#include "spyre/driver_options.hpp"
#include "spyre/export.h"

SPYRE_API_BEGIN

namespace spyre::driver {

class DeviceEnvironment {
public:
    // Resolves the device root as documented above. Throws NotFound with a
    // hint when there is no device and FLEX_DEVICE asks for real hardware.
    static DeviceEnvironment Acquire(const MockOptions& embedded = {});
    // The functions under `root`, ignoring SPYRE_DEV_ROOT (FLEX_DEVICE still
    // picks the default kind). Throws NotFound when `root` holds no device tree.
    static DeviceEnvironment AtRoot(const std::filesystem::path& root);
    // A private spyre-mockdev started with `options`, ignoring SPYRE_DEV_ROOT
    // and /run/spyre; it stops when the environment goes.
    static DeviceEnvironment Embedded(const MockOptions& options);

    const DeviceRoot& root() const noexcept { return *root_; }
    // True when this environment started its own spyre-mockdev.
    bool embedded() const noexcept { return mock_.has_value(); }
    // The kind FLEX_DEVICE asks for (PF unless FLEX_DEVICE=VF).
    FunctionKind default_kind() const noexcept { return kind_; }

    // The first visible function of the default kind.
    FunctionInfo DefaultFunction() const;
    // The function named by selector (index or PCI address), or the default
    // function when selector is empty. Throws NotFound / InvalidArgument.
    FunctionInfo Resolve(const std::string& selector) const;
    // Opens the function named by selector (index or PCI address), or the
    // default function when selector is empty.
    Function Open(const std::string& selector = {}) const;

private:
    DeviceEnvironment() = default;
    static FunctionKind KindFromFlexDevice(std::string* flex_device);

    std::optional<MockDaemon> mock_;  // declared first: destroyed after root_
    std::optional<DeviceRoot> root_;
    FunctionKind kind_ = FunctionKind::PF;
};

}  // namespace spyre::driver
SPYRE_API_END
