// SPDX-License-Identifier: Apache-2.0
// spyre._spyre: the Python face of libspyre (python/spyre re-exports it).
// One Bind* per area (bindings.hpp); the order matters: classes first used
// as arguments or extended by later areas are registered before them.
#include "bindings.hpp"
#include "gil.hpp"
#include "spyre/version.hpp"

PYBIND11_MODULE(_spyre, m) {
    m.doc() = "spyre: the user-space runtime for Spyre-class accelerators (libspyre) from Python.";
    m.attr("__version__") = spyre::Version();
    using namespace spyre::python;
    // Registered first, so it runs last of spyre's exit handlers (after the
    // devices closed and the runs in flight ended): no Python callable
    // starts on a runtime thread from then on, and the exit waits for those
    // still running (RuntimeCalls); a second Ctrl-C leaves them.
    py::module_::import("atexit").attr("register")(py::cpp_function([] {
        const int left = RuntimeCalls::Instance().CloseAndWait([] { return OnMainThread() && PyErr_CheckSignals() != 0; });
        if (left == 0) return;
        PyErr_Clear();
        PySys_WriteStderr("spyre: exiting while %d Python callable(s) still run on runtime threads\n", left);
    }));
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
