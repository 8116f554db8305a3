# SPDX-License-Identifier: Apache-2.0
"""spyre: the user-space runtime for Spyre-class accelerators, from Python.

The classes are libspyre's (C++, bound with pybind11 in ``spyre._spyre``)
with the seeds' names; methods are snake_case (``FlexStream.copy_to_device``
is ``FlexStream::CopyToDevice``). docs/python.md describes every area.

    import numpy as np, spyre
    with spyre.Host.embedded_mock(cards=1, vfs=0, mem="4G") as host, host.open("0") as dev:
        a = spyre.SpyreTensor.from_numpy(dev, np.ones((4, 64), np.float32))
        print(a.to_numpy().sum())
"""
import atexit as _atexit

from . import _mockdev
from . import _spyre
from ._spyre import (  # noqa: F401  (re-exports)
    __version__,
    # errors: spyre.Error and one subclass per spyre::ErrorKind
    Error, InvalidArgument, NotFound, Busy, PermissionDenied, Unsupported, DeviceError, DeviceLost, Timeout,
    NotReady, OutOfMemory, IoError, ProtocolError, Internal, WrongDevice, TaskFailed,
    # host and devices
    Host, Device, DeviceId, FunctionDescription, CardDescription,
    # memory
    DeviceBuffer, AllocatorStats, RegionStats, SchedulerStats,
    # streams and events
    FlexStream, Event, SpyreStream, StreamStatus,
    # tensors and layouts
    DType, TensorLayout, HostLayout, DeviceLayout, TensorFootprint, SpyreTensor, STICK_BYTES,
    dtype_of, footprint, from_dlpack,
    # plans and launching
    CompilerOutput, ExecutionPlan, Operation, TensorSpec, TensorRole, load_execution_plan, launch_kernel, Program,
    # the kernel builder
    KernelBuilder, BuiltKernel, KernelTensor, ElementwiseOp, ReduceKind,
    compiler_output_from_kernel, compiler_output_from_kernels,
    # seed 004's orchestration runtime
    Orchestrator, OrchestrationScope, PARAM_INPUT, PARAM_OUTPUT, PARAM_INOUT, WORKER_CUBE, WORKER_VECTOR,
    WORKER_HOST, WORKER_EXTERNAL, PTO_TASK_PENDING, PTO_TASK_READY, PTO_TASK_RUNNING, PTO_TASK_COMPLETED,
    PTO_TASK_CONSUMED, PYTHON_KERNEL_RAISED,
    # seed 003's host level
    DistributedConfig, ChipRuntime, Worker, HostTensor, HostProgram, HostGraph, RunHandle, ChipContext, ChipFunction,
    TaskFailureInfo, TaskRecord, TaskState, HostRunError, TensorArg, Access,
)
# seed 003's writing styles (pure Python over Worker). spyre.Out is both the
# annotation Out[Tensor[...]] and, called with a tensor, a task's output
# argument; In(t) and InOut(t) are the others ((access, tensor) tuples).
from .host_dsl import (  # noqa: F401,E402
    Level, Role, Tensor, TensorType, Out, In, InOut, FP32, FP16, INT32, INT8, function, program, at, ops,
    assemble, create_tensor, compile, CompiledProgram, register_op,
)

ERROR_KINDS = (
    "InvalidArgument", "NotFound", "Busy", "PermissionDenied", "Unsupported", "DeviceError", "DeviceLost",
    "Timeout", "NotReady", "OutOfMemory", "IoError", "ProtocolError", "Internal", "WrongDevice", "TaskFailed",
)


def load_kernel(stream, kernel, name=None):
    """Loads one BuiltKernel as a one-operation ExecutionPlan on ``stream``'s device.

    ``stream`` is a SpyreStream; ``name`` defaults to the kernel's name with
    characters unfit for a file name replaced.
    """
    if not isinstance(stream, SpyreStream):  # else load_execution_plan's TypeError would name that function
        raise TypeError(f"load_kernel: stream is a {type(stream).__name__}, not a SpyreStream")
    if not isinstance(kernel, BuiltKernel):
        raise InvalidArgument(f"load_kernel: kernel is a {type(kernel).__name__}, not a BuiltKernel "
                              "(a compiler output directory goes to load_execution_plan)")
    if name is None:
        name = "".join(c if c.isalnum() or c in "_-." else "_" for c in kernel.name) or "kernel"
    return load_execution_plan(stream, kernel.compiler_output(name))


_mockdev.use_installed_mockdev()

# Queued Python callbacks need a live interpreter: close every Device still
# open before it finalizes.
_atexit.register(_spyre._close_all)

__all__ = [n for n in dir() if not n.startswith("_")]
