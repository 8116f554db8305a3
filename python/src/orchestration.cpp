// SPDX-License-Identifier: Apache-2.0
// Seed 004's orchestration runtime from Python.
#include "bindings.hpp"

namespace spyre::python {

void BindOrchestration(py::module_&) {
    // part B
}

}  // namespace spyre::python
