// SPDX-License-Identifier: Apache-2.0
// spyre._spyre: the Python face of libspyre (python/spyre re-exports it).
// One Bind* per area (bindings.hpp); the order matters: classes first used
// as arguments or extended by later areas are registered before them.
#include "bindings.hpp"
#include "spyre/version.hpp"

PYBIND11_MODULE(_spyre, m) {
    m.doc() = "spyre: the user-space runtime for Spyre-class accelerators (libspyre) from Python.";
    m.attr("__version__") = spyre::Version();
    using namespace spyre::python;
    BindErrors(m);
    BindHost(m);
    BindMemory(m);
    BindStreams(m);
    BindTensor(m);
    BindPlan(m);
    BindLaunch(m);
    BindCompiler(m);
    BindBench(m);
    BindOrchestration(m);
    BindHostLevel(m);
}
