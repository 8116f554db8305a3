// SPDX-License-Identifier: Apache-2.0
#include "spyre/plan/operation.hpp"

#include <utility>

namespace spyre {

const char* PreProcessCompute::name() const noexcept {
    if (std::holds_alternative<CopyToDevice>(step_)) return "CopyToDevice";
    if (std::holds_alternative<CopyFromDevice>(step_)) return "CopyFromDevice";
    return "DeviceLaunch";
}

// An Operation built around a compute takes the compute's name, so messages
// about it say what it runs without the caller naming it twice.
Operation::Operation(SpyreCompute compute) : compute_(std::move(compute)) {
    name = compute_->name;
}

Operation::Operation(SpyreCompute compute, std::vector<PreProcessCompute> preprocess)
    : compute_(std::move(compute)), preprocess_(std::move(preprocess)) {
    name = compute_->name;
}

Operation::Operation(std::vector<PreProcessCompute> preprocess) : preprocess_(std::move(preprocess)) {}

}  // namespace spyre
