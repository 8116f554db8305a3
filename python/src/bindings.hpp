// SPDX-License-Identifier: Apache-2.0
// The Python module spyre._spyre: one Bind* per bound area, each in its own
// .cpp (module.cpp calls them in this order). Classes a later area uses are
// registered by an earlier one, so pybind11 knows them when signatures are built.
#pragma once

#include <pybind11/pybind11.h>

namespace spyre::python {

namespace py = pybind11;

void BindErrors(py::module_& m);    // errors.cpp: spyre.Error and one subclass per ErrorKind
void BindHost(py::module_& m);      // host.cpp: Host, FunctionDescription, CardDescription, Device
void BindMemory(py::module_& m);    // memory.cpp: DeviceBuffer, AllocatorStats
void BindTensor(py::module_& m);    // tensor.cpp: DType, TensorLayout, layouts, SpyreTensor, DLPack
void BindStreams(py::module_& m);   // streams.cpp: FlexStream, Event, SpyreStream
void BindLaunch(py::module_& m);    // launch.cpp: launch_kernel, Program, Instruction
void BindPlan(py::module_& m);      // plan.cpp: CompilerOutput, ExecutionPlan, Operation, load_execution_plan
void BindCompiler(py::module_& m);  // compiler.cpp: KernelBuilder, BuiltKernel, compiler output helpers
void BindBench(py::module_& m);     // bench.cpp: spyre._spyre._bench (C++ loops for the benchmarks)
// Seed 004's orchestration runtime and seed 003's host level.
void BindOrchestration(py::module_& m);  // orchestration.cpp
void BindHostLevel(py::module_& m);      // host_level.cpp

}  // namespace spyre::python
