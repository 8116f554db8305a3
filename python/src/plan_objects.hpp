// SPDX-License-Identifier: Apache-2.0
// spyre.Operation: one Operation of a plan, by index (plan.cpp, launch.cpp).
#pragma once

#include <memory>

#include "objects.hpp"

namespace spyre::python {

struct PyOperation {
    std::shared_ptr<PyPlan> plan;
    size_t index = 0;
    const Operation& Get(const char* what) const { return plan->Get(what).operations.at(index); }
};

}  // namespace spyre::python
