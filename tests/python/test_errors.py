# SPDX-License-Identifier: Apache-2.0
"""spyre.Error and its subclasses: one per spyre::ErrorKind, with the C++
error's message and context, for every call."""
import numpy as np
import pytest

import spyre

BUILTIN = {
    "InvalidArgument": ValueError, "WrongDevice": ValueError, "NotFound": LookupError,
    "PermissionDenied": PermissionError, "Unsupported": NotImplementedError, "Timeout": TimeoutError,
    "OutOfMemory": MemoryError,
}


def test_one_class_per_kind():
    assert len(spyre.ERROR_KINDS) == 15
    for name in spyre.ERROR_KINDS:
        cls = getattr(spyre, name)
        assert issubclass(cls, spyre.Error) and issubclass(cls, Exception)
        if name in BUILTIN:
            assert issubclass(cls, BUILTIN[name])
        assert cls.__doc__


@pytest.mark.parametrize("kind", spyre.ERROR_KINDS)
def test_translation_carries_kind_message_and_context(kind):
    with pytest.raises(getattr(spyre, kind)) as info:
        spyre._spyre._raise_for_test(kind, "the message")
    e = info.value
    assert e.kind == kind
    assert e.message == "the message"
    assert "the message" in str(e)
    assert e.device == "0000:01:00.0" and e.context["device"] == "0000:01:00.0"
    assert e.address == 0x1000 and e.stream == 3 and e.op_index == 7 and e.device_code == 5
    assert e.offset is None and e.register == "" and e.sys_errno == 0


def test_other_cpp_exceptions_are_typed_too():
    with pytest.raises(spyre.Internal, match="unexpected C\\+\\+ exception: boom"):
        spyre._spyre._raise_for_test("std::runtime_error", "boom")
    with pytest.raises(spyre.OutOfMemory):
        spyre._spyre._raise_for_test("std::bad_alloc", "")
    with pytest.raises(spyre.InvalidArgument, match="unknown kind 'Nope'"):
        spyre._spyre._raise_for_test("Nope", "")


def test_a_message_that_is_not_utf8_still_raises_its_kind(tmp_path):
    # Bytes from C++ (a path in the message) that are not UTF-8 raised
    # UnicodeDecodeError in place of the error (found probing from outside).
    with pytest.raises(spyre.NotFound) as info:
        spyre._spyre._raise_for_test("NotFound", b"no \xff here")
    assert info.value.message == "no \\xff here"
    missing = str(tmp_path) + "/no\udcffdir"  # os.fsdecode of b"no\xffdir"
    with pytest.raises(spyre.NotFound, match=r"no\\xffdir is not a directory"):
        spyre.CompilerOutput.read_directory(missing)
    with pytest.raises(spyre.NotFound, match=r"no\\xffdir"):
        spyre.Host.device_root(missing)


def test_a_manifest_that_is_not_utf8_round_trips_and_is_refused_typed(tmp_path):
    d = tmp_path / "plan"
    spyre.KernelBuilder().add([8]).compiler_output("a").write_directory(str(d))
    (d / "plan.json").write_bytes(b'{"name": "\xff"}')
    co = spyre.CompilerOutput.read_directory(str(d))
    assert co.manifest == '{"name": "\udcff"}'  # surrogateescape, as os.fsdecode
    co.manifest = co.manifest
    assert co.manifest.encode("utf-8", "surrogateescape") == b'{"name": "\xff"}'
    with pytest.raises(spyre.InvalidArgument, match="not valid JSON"):
        spyre.ExecutionPlan(co)


def test_real_errors_from_the_runtime(host, dev):
    with pytest.raises(spyre.InvalidArgument, match="at least 1 byte") as info:
        dev.alloc(0)
    assert info.value.device == dev.pci_address
    with pytest.raises(spyre.InvalidArgument, match="the pool holds"):
        dev.alloc(1 << 50)
    free = dev.memory_stats().largest_free_block
    whole = dev.alloc(free)
    with pytest.raises(spyre.OutOfMemory, match="no free block") as info:
        dev.alloc(free)
    assert info.value.kind == "OutOfMemory" and isinstance(info.value, MemoryError)
    whole.free()
    with pytest.raises(spyre.NotFound):
        host.find("7")
    with pytest.raises(spyre.InvalidArgument):
        host.find("")
    with pytest.raises(spyre.Busy, match=dev.pci_address):
        host.open("0")
    # Python code catching the builtin still works.
    with pytest.raises(ValueError):
        dev.alloc(-5)


def test_none_for_a_device_or_host_is_invalid_argument():
    # pybind11 passed None as a null pointer, and each of these crashed the
    # interpreter (SIGSEGV).
    import numpy as np
    calls = {
        "Event": lambda: spyre.Event(None),
        "SpyreStream": lambda: spyre.SpyreStream(None),
        "SpyreStream.default": lambda: spyre.SpyreStream.default(None),
        "SpyreTensor.empty": lambda: spyre.SpyreTensor.empty(None, [4]),
        "SpyreTensor.from_numpy": lambda: spyre.SpyreTensor.from_numpy(None, np.zeros(4, np.float32)),
        "spyre.from_dlpack": lambda: spyre.from_dlpack(np.zeros(4, np.float32), None),
        "Program": lambda: spyre.Program(None),
        "Orchestrator": lambda: spyre.Orchestrator(None),
        "Device.default_stream": lambda: spyre.Device.default_stream.fget(None),
    }
    for what, call in calls.items():
        with pytest.raises(spyre.InvalidArgument, match=f"{what}: the device is None"):
            call()
    with pytest.raises(spyre.InvalidArgument, match="Worker: the host is None"):
        spyre.Worker(None, spyre.DistributedConfig())
    # A method called on None is pybind11's own TypeError (its self must be a Device).
    with pytest.raises(TypeError):
        spyre.Device.alloc(None, 64)


def test_an_object_of_a_closed_device_says_so_on_the_device_reopened(host):
    # Reopened, the function is a new Device: the old one's objects used to
    # read "WrongDevice: ... belongs to X, stream to X", the same X twice.
    d = host.open("1")
    plan = spyre.load_kernel(spyre.SpyreStream(d), spyre.KernelBuilder().relu([4]))
    old = spyre.SpyreTensor.empty(d, [4])
    d.close()
    d2 = host.open("1")
    try:
        s2 = spyre.SpyreStream(d2)
        t = spyre.SpyreTensor.empty(d2, [4])
        with pytest.raises(spyre.InvalidArgument, match=f"plan '.*': device {d2.pci_address} is closed"):
            spyre.launch_kernel(s2, plan, [t, t])
        plan2 = spyre.load_kernel(s2, spyre.KernelBuilder().relu([4]))
        with pytest.raises(spyre.InvalidArgument, match=f"tensor.*device {d2.pci_address} is closed"):
            spyre.launch_kernel(s2, plan2, [old, t])
        spyre.launch_kernel(s2, plan2, [t, t])  # the new device's own objects work
        s2.synchronize()
    finally:
        d2.close()


def test_load_kernel_of_something_else_than_a_built_kernel_is_refused(host):
    d = host.open("1")
    try:
        with pytest.raises(spyre.InvalidArgument, match="kernel is a str, not a BuiltKernel"):
            spyre.load_kernel(spyre.SpyreStream(d), "/path/to/plan")
        # The error names load_kernel, not the load_execution_plan it calls.
        with pytest.raises(TypeError, match="^load_kernel: stream is a NoneType, not a SpyreStream$"):
            spyre.load_kernel(None, spyre.KernelBuilder().relu([4]))
        with pytest.raises(TypeError, match="^load_kernel: stream is a Device, not a SpyreStream$"):
            spyre.load_kernel(d, spyre.KernelBuilder().relu([4]))
    finally:
        d.close()


def test_a_freed_buffer_frees_again_quietly(dev):
    """A second free() on an open device does nothing, as a second file close()."""
    buf = dev.alloc(4096)
    buf.free()
    buf.free()
    assert buf.freed
    with pytest.raises(spyre.InvalidArgument, match="DeviceBuffer.size: the object was freed"):
        buf.size


def test_hostile_arguments_of_the_host_level_are_typed(host):
    """Each of these raised a bare ValueError, AttributeError, or a
    NotFound for the function "None", or was accepted and failed later."""
    for bad in ("ab", [-1], []):
        with pytest.raises(spyre.InvalidArgument, match=r"Tensor\[...\]"):
            spyre.Tensor[bad, spyre.FP32]
    with pytest.raises(spyre.InvalidArgument, match="not an index or a PCI address"):
        host.open(None)
    with pytest.raises(spyre.InvalidArgument, match="task_rows 0, k 4 and n 4 must be at least 1"):
        spyre.ChipFunction.matmul(1, 0, 4, 4)
    w = spyre.Worker(host, spyre.DistributedConfig(device_ids=[1]))  # function 0 is the module's dev
    try:
        with pytest.raises(spyre.InvalidArgument, match="op 'pow' is not add"):
            spyre.register_op(w, "x", "pow", [4])
        # The worker itself: None as the bindings say it for a Device or Host,
        # another type a TypeError (both were an AttributeError on .config).
        with pytest.raises(spyre.InvalidArgument, match="^register_op: the worker is None$"):
            spyre.register_op(None, "x", "matmul", [4, 4], [4, 4])
        with pytest.raises(TypeError, match="^register_op: worker is a Host, not a spyre.Worker$"):
            spyre.register_op(host, "x", "add", [4])
        # Malformed matmul shapes, and a dtype its chip function does not
        # compute: TypeError, ValueError and IndexError before, and an fp16
        # matmul registered and failed every run (found probing).
        for args, message in [(([4, 8],), r"matmul needs b_shape \(rows, columns\)"),
                              (([4, 8, 2], [8, 4]), r"a_shape \[4, 8, 2\] is not \(rows, columns\)"),
                              (([4, 8], [8]), r"b_shape \[8\] is not \(rows, columns\)"),
                              (([4, 8], [4, 8]), r"matmul of \[4, 8\] by \[4, 8\]: b_shape needs 8 rows")]:
            with pytest.raises(spyre.InvalidArgument, match=message):
                spyre.register_op(w, "mm", "matmul", *args)
        with pytest.raises(spyre.InvalidArgument, match="computes fp32 only"):
            spyre.register_op(w, "mm", "matmul", [4, 8], [8, 4], dtype=spyre.FP16)
        with pytest.raises(spyre.InvalidArgument, match="does not export a buffer"):
            w.register_kernel(6, 5)
        # A numpy buffer of a program is taken, as Orchestrator.register_device_kernel takes it.
        w.register_kernel(5, np.frombuffer(spyre.KernelBuilder().add([4]).program, np.uint8))
    finally:
        w.close()


def test_an_int_argument_out_of_its_range_names_itself(host, dev):
    """A count, index, size or status outside its C++ type (a negative size,
    an index of 2**70, a kernel id of 2**70) was pybind11's TypeError
    "incompatible function arguments", naming neither the argument nor the
    value."""
    w = spyre.Worker(host, spyre.DistributedConfig(device_ids=[1]))
    o = spyre.Orchestrator(dev)
    program = spyre.Program(dev)
    config = spyre.DistributedConfig()

    def set_heap(v):
        config.chip_heap_bytes = v

    calls = {
        "HostProgram: num_inputs": lambda v: spyre.HostProgram("p", v, [], lambda g, t: None),
        "Worker.describe_device: index": w.describe_device,
        "Worker.chip_tasks_at_once: index": w.chip_tasks_at_once,
        "Worker.stats: index": w.stats,
        "DistributedConfig: chip_heap_bytes": lambda v: spyre.DistributedConfig(chip_heap_bytes=v),
        "DistributedConfig: chip_heap_bytes ": set_heap,  # the property
        "Orchestrator: heap_size": lambda v: spyre.Orchestrator(dev, heap_size=v),
        "Orchestrator: host_threads": lambda v: spyre.Orchestrator(dev, host_threads=v),
        "Orchestrator.alloc: size": o.alloc,
        "Orchestrator.fail: error_code": lambda v: o.fail(0, v),
        "Program.remove_instruction: index": program.remove_instruction,
    }
    try:
        for what, call in calls.items():
            what = what.strip()
            with pytest.raises(spyre.InvalidArgument, match=f"^spyre: invalid argument: {what} is -1 \\(must be >= 0\\)$"):
                call(-1)
            with pytest.raises(spyre.InvalidArgument, match=f"^spyre: invalid argument: {what} is {2**70} \\(must be <= "):
                call(2**70)
            with pytest.raises(spyre.InvalidArgument, match=f"{what} is -2"):
                call(np.int64(-2))  # what stands for an int is taken as one
            with pytest.raises(TypeError, match="incompatible"):
                call(1.5)  # no int at all stays pybind11's TypeError,
            with pytest.raises(TypeError, match="incompatible"):
                call(np.zeros(3))  # as an array whose __index__ raises does
        # Signed parameters: 2**70 fits none of them.
        stream = dev.create_stream()
        buf = dev.alloc(64)
        rows = spyre.HostTensor.zeros([4, 4])
        layout = spyre.DeviceLayout.default(spyre.HostLayout.contiguous([3, 100], "fp16"))
        signed = {
            "HostTensor.rows: begin": lambda v: rows.rows(v, 1),
            "HostTensor.rows: end": lambda v: rows.rows(0, v),
            "DeviceLayout.host_index: device_offset": layout.host_index,
            "Device.alloc: nbytes": dev.alloc,
            "Device.create_stream: priority": dev.create_stream,
            "SpyreStream: priority": lambda v: spyre.SpyreStream(dev, v),
            "FlexStream.copy_to_device: offset": lambda v: stream.copy_to_device(bytes(4), buf, v),
            "FlexStream.copy_to_device: nbytes": lambda v: stream.copy_to_device(bytes(4), buf, 0, v),
            "FlexStream.copy_from_device: offset": lambda v: stream.copy_from_device(buf, bytearray(4), v),
            "FlexStream.launch: nbytes": lambda v: stream.launch(buf, 0, v),
            "Host.embedded_mock: cards": lambda v: spyre.Host.embedded_mock(cards=v),
            "KernelBuilder.matmul: k": lambda v: spyre.KernelBuilder().matmul(4, v, 4),
            "KernelBuilder.reduce: axis": lambda v: spyre.KernelBuilder().reduce(spyre.ReduceKind.Sum, [4], v),
            "Orchestrator: task_ring_size": lambda v: spyre.Orchestrator(dev, task_ring_size=v),
            "Orchestrator.submit: kernel_id": lambda v: o.submit(v, spyre.WORKER_HOST, []),
            "Orchestrator.task_state: task_id": o.task_state,
            "Worker.register_kernel: kernel_id": lambda v: w.register_kernel(v, b"x"),
            "ChipFunction.matmul: task_rows": lambda v: spyre.ChipFunction.matmul(1, v, 4, 4),
            "DistributedConfig: max_tasks_in_flight": lambda v: spyre.DistributedConfig(max_tasks_in_flight=v),
            "DistributedConfig: block_dim": lambda v: setattr(config, "block_dim", v),
        }
        for what, call in signed.items():
            with pytest.raises(spyre.InvalidArgument, match=f"^spyre: invalid argument: {what} is -?{2**70} \\(must be "):
                call(2**70)
            with pytest.raises(spyre.InvalidArgument, match=f"^spyre: invalid argument: {what} is -{2**70} \\(must be >= "):
                call(-2**70)
        stream.synchronize()
        # In range, the value arrives: the config keeps it, the device refuses its own way.
        config.chip_heap_bytes = np.uint64(1 << 20)
        assert config.chip_heap_bytes == 1 << 20
        with pytest.raises(spyre.InvalidArgument, match="device 7, but the Worker has 1 device"):
            w.describe_device(7)
    finally:
        o.close()
        w.close()


def test_a_chip_task_device_out_of_range_fails_the_run_as_invalid_argument(host):
    """g.chip(device=-1) or device=2**64 failed the run with pybind11's
    TypeError as its cause, naming neither the argument nor the value."""
    w = spyre.Worker(host, spyre.DistributedConfig(device_ids=[1]))
    try:
        for device, bound in ((-1, ">= 0"), (2**64, "<= ")):
            p = spyre.HostProgram("bad_device", 2, [[4]], lambda g, x, d=device: g.chip(
                "chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])], device=d))
            with pytest.raises(spyre.InvalidArgument, match=f"HostGraph.chip: device is {device} \\(must be {bound}"):
                w.run(p, [spyre.HostTensor.zeros([4]), spyre.HostTensor.zeros([4])])
    finally:
        w.close()


def test_a_host_program_output_that_is_no_shape_names_the_output(host):
    """An output shape that was no list of ints was pybind11's cast_error, a
    RuntimeError naming no output."""
    fn = lambda g, x: None  # noqa: E731
    with pytest.raises(spyre.InvalidArgument, match="^spyre: invalid argument: HostProgram: output 1 is a str, not a shape"):
        spyre.HostProgram("p", 0, [[4], "ab"], fn)
    with pytest.raises(spyre.InvalidArgument, match="^spyre: invalid argument: HostProgram: output 0 is a float, "):
        spyre.HostProgram("p", 0, [1.5], fn)
    with pytest.raises(spyre.InvalidArgument, match=f"^spyre: invalid argument: HostProgram: output 0: item 1 is {2**70} "):
        spyre.HostProgram("p", 0, [([4, 2**70], spyre.FP32)], fn)
    with pytest.raises(spyre.InvalidArgument, match="HostProgram: output 0: item 0 is a str$"):
        spyre.HostProgram("p", 0, [(["x"], spyre.FP32)], fn)
    # A dim below 1, or no dims, is refused here, not when a run makes the
    # tensor ("host tensor: dim 0 of shape [0x4] is 0": an outside probe).
    with pytest.raises(spyre.InvalidArgument, match=r"^spyre: invalid argument: HostProgram: output 1: dim 0 is 0 \(each"):
        spyre.HostProgram("p", 0, [[4], [0, 4]], fn)
    with pytest.raises(spyre.InvalidArgument, match="HostProgram: output 0: dim 1 is -2 "):
        spyre.HostProgram("p", 0, [([4, -2], spyre.FP32)], fn)
    with pytest.raises(spyre.InvalidArgument, match="HostProgram: output 0 has no dims"):
        spyre.HostProgram("p", 0, [[]], fn)
    # Shapes as before: a list, a tuple of ints, (shape, dtype), numpy ints.
    p = spyre.HostProgram("p", 0, [[4], (2, 3), ((5,), spyre.FP32), (np.int64(2), np.int64(2))], fn)
    assert [list(s) for s, _ in p.outputs] == [[4], [2, 3], [5], [2, 2]]


def test_an_int_list_item_out_of_range_or_not_an_int_names_its_position(host, dev):
    """A shape or permutation item that is no int, or that its C++ type cannot
    hold, was pybind11's TypeError for the whole call."""
    kb = spyre.KernelBuilder()
    calls = {
        "KernelBuilder.relu": kb.relu,
        "KernelBuilder.add": kb.add,
        "KernelBuilder.transpose perm": lambda s: kb.transpose([4, 4], s),
        "HostTensor.zeros": spyre.HostTensor.zeros,
        "footprint": lambda s: spyre.footprint(s, spyre.FP32),
        "SpyreTensor.empty": lambda s: spyre.SpyreTensor.empty(dev, s, spyre.FP32),
        "HostLayout": lambda s: spyre.HostLayout(s, [1, 1], spyre.FP32),
        "HostTensor.full": lambda s: spyre.HostTensor.full(s, 1.0),
    }
    for what, call in calls.items():
        bound = 2**31 - 1 if "perm" in what else 2**63 - 1
        with pytest.raises(spyre.InvalidArgument, match=f"^spyre: invalid argument: a list of ints: item 1 is {2**70} "
                                                        f"\\(must be <= {bound}\\)$"):
            call([1, 2**70])
        with pytest.raises(spyre.InvalidArgument, match="^spyre: invalid argument: a list of ints: item 0 is a float$"):
            call([1.5, 1])
        with pytest.raises(spyre.InvalidArgument, match="item 1 is a str$"):
            call((1, "x"))
        with pytest.raises(spyre.InvalidArgument, match="item 0 is a ndarray$"):
            call([np.zeros(3), 1])  # its __index__ raises TypeError: no int
        with pytest.raises(TypeError):
            call("ab")  # no list at all stays a TypeError
    # What stands for ints is taken: numpy items and arrays.
    assert spyre.HostTensor.zeros(np.array([2, 3])).shape == (2, 3)
    assert spyre.HostTensor.zeros([np.int64(2), np.int32(3)]).shape == (2, 3)
