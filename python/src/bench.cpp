// SPDX-License-Identifier: Apache-2.0
// spyre._spyre._bench: C++ loops the Python benchmarks (python/bench/)
// compare with, measured in the same process and run.
#include <chrono>

#include "bindings.hpp"
#include "objects.hpp"

namespace spyre::python {

void BindBench(py::module_& m) {
    py::module_ b = m.def_submodule("_bench", "C++ baselines for python/bench (same process, same run).");
    b.def("enqueue_loop", [](PyStream& ps, PyBuffer& pb, int batches, int batch) {
        FlexStream& s = ps.Get("_bench.enqueue_loop");
        const DeviceHandle h = pb.Get("_bench.enqueue_loop").handle();
        static const uint64_t value = 42;
        double total_ns = 0;
        py::gil_scoped_release release;
        for (int i = 0; i < batches; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int j = 0; j < batch; ++j) s.CopyToDevice(&value, h, sizeof value);
            total_ns += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
            s.Synchronize();
        }
        return total_ns / double(int64_t(batches) * batch);
    }, py::arg("stream"), py::arg("buffer"), py::arg("batches"), py::arg("batch") = 1024,
    "Mean ns per FlexStream::CopyToDevice of 8 bytes, `batch` enqueues timed together, a Synchronize (untimed) "
    "between batches: the C++ figure beside the same loop in Python.");
}

}  // namespace spyre::python
