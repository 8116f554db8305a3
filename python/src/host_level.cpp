// SPDX-License-Identifier: Apache-2.0
// Seed 003's host level (level-3 Worker, SubWorkers in Python).
#include "bindings.hpp"

namespace spyre::python {

void BindHostLevel(py::module_&) {
    // part B
}

}  // namespace spyre::python
