// SPDX-License-Identifier: Apache-2.0
// Internal: the device identity checks of launches, which mix operations,
// plans and tensors of possibly different devices.
#pragma once

#include <span>
#include <string>
#include <variant>

#include "spyre/plan/operation.hpp"
#include "spyre/tensor/spyre_tensor.hpp"

namespace spyre {

// Device identity checks of the calls that mix objects: they throw
// WrongDevice "<what>: <object> belongs to <its device>, <user> to <device>".
namespace detail {

// Every handle an Operation holds (its binaries, correction table,
// preprocessing targets) must be on `device`: launched elsewhere, a plan
// loaded on one function would write into another's memory.
inline void CheckOperationDevice(const Operation& op, const DeviceId& device, const char* what, const char* user) {
    auto who = [&] { return std::string(what) + ": operation" + (op.name.empty() ? "" : " '" + op.name + "'"); };
    auto check = [&](const DeviceHandle& h) { CheckSameDevice(h.device(), device, who, user); };
    if (op.compute() && op.compute()->device_handle()) check(*op.compute()->device_handle());
    if (op.correction && op.correction->binary_handle()) check(*op.correction->binary_handle());
    if (op.correction && op.correction->input_handle()) check(*op.correction->input_handle());
    for (const DeviceHandle& h : op.device_handles()) check(h);
    for (const PreProcessCompute& step : op.preprocess())
        std::visit([&](const auto& s) { check(s.device_handle); }, step.step());
}

inline void CheckTensorDevices(std::span<const SpyreTensor> tensors, const DeviceId& device, const char* what,
                               const char* user) {
    for (size_t i = 0; i < tensors.size(); ++i)
        CheckSameDevice(tensors[i].device(), device, [&] { return std::string(what) + ": tensor " + std::to_string(i); },
                        user);
}

}  // namespace detail

}  // namespace spyre
