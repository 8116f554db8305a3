// SPDX-License-Identifier: Apache-2.0
#include "spyre/driver/device_environment.hpp"

#include <cstdlib>

#include "spyre/error.hpp"

namespace spyre::driver {

namespace {

// Unfiltered (SPYRE_DEVICES selects among functions once a root is chosen).
bool HasVfioFunction(const std::filesystem::path& sysfs) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(sysfs / "bus/pci/devices", ec)) {
        const auto info = ProbeFunction(sysfs, entry.path().filename().string());
        if (info && info->transport == Transport::Vfio) return true;
    }
    return false;
}

}  // namespace

FunctionKind DeviceEnvironment::KindFromFlexDevice(std::string* flex_device) {
    const char* flex = std::getenv("FLEX_DEVICE");
    *flex_device = flex ? flex : "";
    if (!flex_device->empty() && *flex_device != "PF" && *flex_device != "VF" && *flex_device != "MOCK")
        throw Error(ErrorKind::InvalidArgument, "FLEX_DEVICE=" + *flex_device + " is not one of PF, VF, MOCK");
    return *flex_device == "VF" ? FunctionKind::VF : FunctionKind::PF;
}

DeviceEnvironment DeviceEnvironment::AtRoot(const std::filesystem::path& root) {
    DeviceEnvironment env;
    std::string flex_device;
    env.kind_ = KindFromFlexDevice(&flex_device);
    env.root_.emplace(root);
    return env;
}

DeviceEnvironment DeviceEnvironment::Embedded(const MockOptions& options) {
    DeviceEnvironment env;
    std::string flex_device;
    env.kind_ = KindFromFlexDevice(&flex_device);
    env.mock_.emplace(MockDaemon::Start(options));
    env.root_.emplace(env.mock_->mount());
    return env;
}

DeviceEnvironment DeviceEnvironment::Acquire(const MockOptions& embedded) {
    DeviceEnvironment env;
    std::string flex_device;
    env.kind_ = KindFromFlexDevice(&flex_device);

    if (flex_device != "MOCK") {
        if (const char* root = std::getenv("SPYRE_DEV_ROOT"); root && *root) {
            env.root_.emplace(root);  // an explicit root must exist: no silent fallback
            return env;
        }
        if (DeviceRoot::Looks(kDefaultDeviceRoot)) {
            env.root_.emplace(kDefaultDeviceRoot);
            return env;
        }
        if (HasVfioFunction(kSysfsRoot)) {  // a card bound to vfio-pci
            env.root_.emplace(kSysfsRoot);
            return env;
        }
    }
    if (flex_device == "PF" || flex_device == "VF")
        throw Error(ErrorKind::NotFound, std::string("no spyre device: SPYRE_DEV_ROOT is unset and ") + kDefaultDeviceRoot +
                                             " holds no device tree (mount spyre-mockdev there, set SPYRE_DEV_ROOT, or "
                                             "unset FLEX_DEVICE / set FLEX_DEVICE=MOCK to start a private mock device)");
    env.mock_.emplace(MockDaemon::Start(embedded));
    env.root_.emplace(env.mock_->mount());
    return env;
}

FunctionInfo DeviceEnvironment::DefaultFunction() const {
    const bool want_vf = kind_ == FunctionKind::VF;
    for (const auto& f : root_->Functions())
        if (f.is_vf == want_vf) return f;
    throw Error(ErrorKind::NotFound, std::string("no visible spyre ") + (want_vf ? "VF" : "PF") + " under " +
                                         root_->path().string() +
                                         (want_vf ? " (enable VFs: echo N > .../sriov_numvfs)" : "") +
                                         " (check SPYRE_DEVICES)");
}

FunctionInfo DeviceEnvironment::Resolve(const std::string& selector) const {
    return selector.empty() ? DefaultFunction() : root_->Find(selector);
}

Function DeviceEnvironment::Open(const std::string& selector) const { return Function::Open(Resolve(selector)); }

}  // namespace spyre::driver
