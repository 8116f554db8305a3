# SPDX-License-Identifier: Apache-2.0
"""Seed 003's host level from Python: DistributedConfig, HostTensor <-> numpy,
spyre.Worker with ready-made and Python chip functions, Python SubWorkers,
runs (in place, return style, handles, threads) and HostRunError."""
import gc
import os
import threading
import time
import weakref

import numpy as np
import pytest

import spyre

S = [128, 128]
ADD, SUB, JUNK, PYK = 301, 302, 304, 306


@pytest.fixture(scope="module")
def worker(host, refused_program):
    w = spyre.Worker(host, spyre.DistributedConfig(device_ids=[0, 1], num_sub_workers=2))
    kb = spyre.KernelBuilder()
    w.register_kernel(ADD, kb.add(S))
    w.register_kernel(SUB, kb.sub(S))
    w.register_kernel(JUNK, refused_program(3))  # the device refuses it (chip_fault's three arguments)
    w.register_chip_function("chip_add", spyre.ChipFunction.elementwise(ADD))
    w.register_chip_function("chip_sub", spyre.ChipFunction.elementwise(SUB))
    w.register_chip_function("chip_fault", spyre.ChipFunction.elementwise(JUNK))
    w.register_chip_function("chip_empty", spyre.ChipFunction.empty())
    yield w
    w.close()


def full(v):
    return np.full(S, v, np.float32)


def test_config_fields_and_validation(host):
    c = spyre.DistributedConfig(device_ids=[1], num_sub_workers=3, block_dim=2, aicpu_thread_num=4,
                                chip_tasks_per_device=2, runtime="tensormap_and_ringbuffer_lockfree")
    assert (c.device_ids, c.num_sub_workers, c.block_dim, c.aicpu_thread_num, c.chip_tasks_per_device) == \
        ([1], 3, 2, 4, 2)
    assert c.runtime == spyre.ChipRuntime.TensorMapAndRingBufferLockFree
    c.validate()
    c.chip_heap_bytes = 1 << 20
    assert repr(c) == ("DistributedConfig(device_ids=[1], num_sub_workers=3, runtime='tensormap_and_ringbuffer_lockfree', "
                       "block_dim=2, aicpu_thread_num=4, chip_heap_bytes=1048576, chip_tasks_per_device=2, "
                       "max_tasks_in_flight=1024, cheap_chip_task_ns=1000)")
    assert spyre.DistributedConfig().runtime == spyre.ChipRuntime.TensorMapAndRingBuffer
    c.runtime = spyre.ChipRuntime.TensorMapAndRingBuffer
    assert c.runtime == spyre.ChipRuntime.TensorMapAndRingBuffer
    c.runtime = "tensormap_and_ringbuffer_lockfree"
    assert c.runtime == spyre.ChipRuntime.TensorMapAndRingBufferLockFree
    with pytest.raises(spyre.InvalidArgument, match="runtime 'simpler' is unknown"):
        c.runtime = "simpler"
    with pytest.raises(spyre.InvalidArgument, match="runtime is a int"):
        spyre.DistributedConfig(runtime=3)
    with pytest.raises(spyre.InvalidArgument, match="block_dim"):
        spyre.DistributedConfig(block_dim=0).validate()
    with pytest.raises(spyre.InvalidArgument, match="runtime 'nonsense' is unknown"):
        spyre.Worker(host, spyre.DistributedConfig(runtime="nonsense"))
    with pytest.raises(spyre.Error):
        spyre.Worker(host, spyre.DistributedConfig(device_ids=[7]))


def test_chip_tasks_per_device(host):
    with spyre.Worker(host, spyre.DistributedConfig(device_ids=[0], chip_tasks_per_device=1)) as w:
        assert w.chip_tasks_at_once(0) == 1
    with pytest.raises(spyre.InvalidArgument, match="chip_tasks_per_device"):
        spyre.Worker(host, spyre.DistributedConfig(device_ids=[0], chip_tasks_per_device=64))


def test_tasks_run_as_submitted_within_the_window_and_are_reported(host):
    """(Before the module's Worker opens the devices.) A Python SubWorker runs while the orchestration function is still
    submitting (the function waits for it), a window of 2 holds 200 chip
    tasks, and the report lists every task with device-clock times."""
    with spyre.Worker(host, spyre.DistributedConfig(device_ids=[0, 1], num_sub_workers=1,
                                                    max_tasks_in_flight=2)) as w:
        assert w.config.max_tasks_in_flight == 2
        w.register_kernel(ADD, spyre.KernelBuilder().add(S))
        w.register_chip_function("chip_add", spyre.ChipFunction.elementwise(ADD))
        seen = threading.Event()

        def orch(g, x):
            g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])], name="first")
            g.sub(lambda f: seen.set(), [spyre.In(x[2])], name="seen")
            assert seen.wait(60), "the SubWorker did not run while the function was submitting"
            for i in range(200):
                g.chip("chip_add", [spyre.In(x[2]), spyre.In(x[1]), spyre.Out(g.create_tensor(S))])

        h = w.submit(spyre.HostProgram("stream", 2, [S], orch), [full(2), full(3)])
        np.testing.assert_array_equal(h.wait(), 5.0)
        report = h.report()
        assert len(report) == 202
        first, sub = report[0], report[1]
        assert (first.name, first.level, first.state) == ("first", spyre.Level.CHIP, spyre.TaskState.DONE)
        assert first.device in (w.describe_device(0), w.describe_device(1))
        assert (sub.name, sub.level, sub.device, sub.state) == ("seen", spyre.Level.HOST, "", spyre.TaskState.DONE)
        assert all(0 < r.start_ns <= r.end_ns for r in report)
        assert sub.start_ns >= first.end_ns
        assert [r.name for r in report[2:5]] == ["chip_add#0", "chip_add#1", "chip_add#2"]
    with pytest.raises(spyre.InvalidArgument, match="max_tasks_in_flight is 0"):
        spyre.DistributedConfig(max_tasks_in_flight=0).validate()
    # The bound under which a chip task runs on its submitter: any uint32, 0 turns it off.
    c = spyre.DistributedConfig(cheap_chip_task_ns=0)
    assert c.cheap_chip_task_ns == 0
    c.cheap_chip_task_ns = 2**32 - 1
    assert c.cheap_chip_task_ns == 2**32 - 1
    with pytest.raises(spyre.InvalidArgument, match=r"DistributedConfig: cheap_chip_task_ns is -1 \(must be >= 0"):
        c.cheap_chip_task_ns = -1


def test_ctrl_c_ends_a_wait_the_run_goes_on_and_close_waits_for_it(host, interrupt_main_once_it_waits_in):
    """(Before the module's Worker opens the devices.) SIGINT while
    Worker.run waits raises KeyboardInterrupt then (the
    SubWorker it waits for still runs), the run goes on, and close() waits
    for it; an interrupted RunHandle.wait can be waited again."""
    name = "test_ctrl_c_ends_a_wait_the_run_goes_on_and_close_waits_for_it"
    w = spyre.Worker(host, spyre.DistributedConfig(device_ids=[0], num_sub_workers=1))
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow(y):
        started.set()
        interrupt_main_once_it_waits_in(name)
        release.wait(30)
        y[...] = 7
        finished.set()

    def orch(g, x):
        g.sub(slow, [spyre.InOut(x[0])])
        # Returns once a pool thread runs it: the waiter would run a queued
        # task itself.
        assert started.wait(30)

    p = spyre.HostProgram("slow", 1, [], orch)
    a = np.zeros(4, np.float32)
    with pytest.raises(KeyboardInterrupt):
        w.run(p, [a])
    assert not finished.is_set()
    threading.Timer(0.2, release.set).start()
    w.close()  # waits for the interrupted run
    assert finished.is_set() and a[0] == 7

    with spyre.Worker(host, spyre.DistributedConfig(device_ids=[0], num_sub_workers=1)) as w:
        started.clear()
        release.clear()
        finished.clear()
        b = np.zeros(4, np.float32)
        h = w.submit(p, [b])
        with pytest.raises(KeyboardInterrupt):
            h.wait()
        assert not finished.is_set() and not h.done()
        threading.Thread(target=interrupt_main_once_it_waits_in, args=(name,)).start()
        with pytest.raises(KeyboardInterrupt):
            h.report()  # waits for the run the same way
        assert not finished.is_set()
        release.set()
        h.wait()
        assert b[0] == 7


def test_host_tensor_numpy_zero_copy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = spyre.HostTensor.from_numpy(a)
    assert t.shape == (3, 4)
    v = t.numpy()
    v[0, 0] = 42
    assert a[0, 0] == 42  # the same memory
    z = spyre.HostTensor.zeros([2, 8])
    z.numpy()[:] = 1
    assert np.asarray(z).sum() == 16
    assert t.rows(1, 3).numpy()[0, 0] == 4
    # A tensor of more dimensions than numpy has: our error, not numpy's ValueError.
    deep = spyre.HostTensor.zeros([1] * 33)
    with pytest.raises(spyre.InvalidArgument, match="HostTensor.numpy: numpy cannot view a shape of 33 dimensions"):
        deep.numpy()


def dependency_program(verify):
    def orch(g, x):
        g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])])
        g.sub(verify, [spyre.In(x[2])])
    return spyre.HostProgram("l3_dependency", 2, [(S, np.float32)], orch)


def test_dependency_and_verify_in_place_and_return_style(worker):
    seen = []

    def verify(f):
        seen.append(f.copy())
        assert np.allclose(f, 5.0)

    p = dependency_program(verify)
    a, b, f = full(2), full(3), np.zeros(S, np.float32)
    r = worker.run(p, [a, b, f])
    assert r is f
    np.testing.assert_allclose(f, 5.0)
    out = worker.run(p, [a, b])
    np.testing.assert_allclose(out, 5.0)
    assert len(seen) == 2


def test_parallel_add_sub_and_reduce(worker, rng):
    def orch(g, x):
        s, d = g.create_tensor(S), g.create_tensor(S)
        g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(s)])
        g.chip("chip_sub", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(d)])
        g.sub("reduce_sum", [spyre.In(s), spyre.In(d), spyre.Out(x[2])])

    def reduce_sum(s, d, f):
        f[:] = s + d

    worker.register_sub_worker("reduce_sum", reduce_sum)
    p = spyre.HostProgram("l3_parallel_reduce", 2, [S], orch)
    a = rng.standard_normal(S).astype(np.float32)
    b = rng.standard_normal(S).astype(np.float32)
    np.testing.assert_allclose(worker.run(p, [a, b]), 2 * a, rtol=1e-5, atol=1e-5)


def test_python_chip_function_submits_on_the_chip_orchestrator(worker, rng):
    calls = []

    def chip_triple(ctx):
        calls.append((ctx.shapes, ctx.block_dim, ctx.args[0].shape, bool(ctx.device)))
        a, out = ctx.args  # numpy views on the device's memory
        t = ctx.orch.submit(ADD, spyre.WORKER_VECTOR, [("in", a), ("in", a), ("out", None, a.nbytes)])
        ctx.orch.submit(ADD, spyre.WORKER_VECTOR, [("in", ctx.orch.task_output(t)), ("in", a), ("out", out)])

    worker.register_chip_function("chip_triple", chip_triple)
    p = spyre.HostProgram("triple", 1, [S], lambda g, x: g.chip("chip_triple", [spyre.In(x[0]), spyre.Out(x[1])]))
    a = rng.standard_normal(S).astype(np.float32)
    np.testing.assert_allclose(worker.run(p, [a]), 3 * a, rtol=1e-5)
    assert calls == [([S, S], 1, tuple(S), True)]

    # An In tensor's view is read-only: its device copy is kept for the next
    # run over the same bytes, which a write would corrupt.
    seen = []

    def chip_writes_its_input(ctx):
        a, out = ctx.args
        seen.append((a.flags.writeable, out.flags.writeable))
        a[0] = 99.0

    worker.register_chip_function("chip_writes_its_input", chip_writes_its_input)
    p = spyre.HostProgram("writes_input", 1, [S],
                          lambda g, x: g.chip("chip_writes_its_input", [spyre.In(x[0]), spyre.Out(x[1])]))
    with pytest.raises(spyre.TaskFailed, match="read-only"):
        worker.run(p, [a])
    assert seen == [(False, True)]
    p = spyre.HostProgram("triple", 1, [S], lambda g, x: g.chip("chip_triple", [spyre.In(x[0]), spyre.Out(x[1])]))
    np.testing.assert_allclose(worker.run(p, [a]), 3 * a, rtol=1e-5)  # the kept copy is still a's

    # So is the view a host kernel on ctx.orch gets of it as an "in"
    # parameter (it was writable: the write reached the kept copy, and the
    # next run over a computed with 555s).
    def hk(x, y):
        seen.append((x.flags.writeable, y.flags.writeable))
        x[:] = 555.0
        y[:] = 0.0

    registered = set()  # a chip runtime keeps its kernels for later calls

    def chip_host_kernel_writes_its_input(ctx):
        a, out = ctx.args
        if ctx.device not in registered:
            ctx.orch.register_host_kernel(ADD + 100, hk)
            registered.add(ctx.device)
        ctx.orch.submit(ADD + 100, spyre.WORKER_HOST, [("in", a), ("out", out)])

    seen.clear()
    worker.register_chip_function("chip_host_kernel_writes_its_input", chip_host_kernel_writes_its_input)
    p = spyre.HostProgram("hk_writes_input", 1, [S],
                          lambda g, x: g.chip("chip_host_kernel_writes_its_input", [spyre.In(x[0]), spyre.Out(x[1])]))
    for _ in range(2):  # on each device the Worker places it on
        with pytest.raises(spyre.TaskFailed, match="read-only"):
            worker.run(p, [a])
    assert seen and all(flags == (False, True) for flags in seen)
    p = spyre.HostProgram("triple", 1, [S], lambda g, x: g.chip("chip_triple", [spyre.In(x[0]), spyre.Out(x[1])]))
    for _ in range(2):
        np.testing.assert_allclose(worker.run(p, [a]), 3 * a, rtol=1e-5)

    def chip_raises(ctx):
        raise KeyError("no such tile")

    worker.register_chip_function("chip_raises", chip_raises)
    p = spyre.HostProgram("raises", 1, [S], lambda g, x: g.chip("chip_raises", [spyre.In(x[0]), spyre.Out(x[1])]))
    with pytest.raises(spyre.TaskFailed, match="no such tile") as info:
        worker.run(p, [a])
    assert info.value.failures[0].level == spyre.Level.CHIP


def test_subworker_that_raises_fails_with_its_message_and_skips_dependents(worker):
    ran = []

    def bad(f):
        raise ValueError("checksum mismatch in tile 3")

    def after(f, g):
        ran.append("after")

    def independent(x):
        ran.append("independent")

    def orch(g, x):
        g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])])
        g.sub(bad, [spyre.InOut(x[2])])
        g.sub(after, [spyre.In(x[2]), spyre.Out(g.create_tensor([4]))], name="after")
        g.sub(independent, [spyre.In(x[0])])

    p = spyre.HostProgram("failing", 2, [S], orch)
    a, b = full(1), full(2)
    with pytest.raises(spyre.TaskFailed) as info:
        worker.run(p, [a, b])
    e = info.value
    assert isinstance(e, spyre.HostRunError)
    assert "checksum mismatch in tile 3" in str(e) and "ValueError" in e.cause
    assert e.failures[0].function == "bad" and e.failures[0].level == spyre.Level.HOST
    # the one failure record: a failed task is its own root
    assert not e.failures[0].skipped and e.failures[0].root_task_id == e.failures[0].task_id
    assert any("after" in s for s in e.skipped)
    assert ran == ["independent"]
    # the worker is usable afterwards
    np.testing.assert_allclose(worker.run(dependency_program(lambda f: None), [a, b]), 3.0)


def test_an_ended_run_keeps_none_of_its_arrays_or_subworkers_alive(worker):
    """Arrays passed to a run, and a SubWorker callable with what it closes
    over, are freed once the run ended and the caller dropped them, whether
    the run succeeded or failed (before: until a later run reused the tasks,
    or the next call wrapped an array)."""
    for fail in (False, True):
        a, b, out = full(1), full(2), np.zeros(S, np.float32)
        refs = [weakref.ref(a), weakref.ref(b), weakref.ref(out)]

        class Check:
            def __call__(self, y):
                if fail:
                    raise ValueError("fails on purpose")

        check = Check()
        refs.append(weakref.ref(check))

        def orch(g, x):
            g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])])
            g.sub(check, [spyre.InOut(x[2])], name="check")
            g.chip("chip_add", [spyre.In(x[2]), spyre.In(x[1]), spyre.Out(x[0])])

        p = spyre.HostProgram("holds", 3, [], orch)
        if fail:
            with pytest.raises(spyre.TaskFailed):
                worker.run(p, [a, b, out])
        else:
            worker.run(p, [a, b, out])
            assert out[0, 0] == 3.0 and a[0, 0] == 5.0
        del a, b, out, check, orch, p
        gc.collect()
        assert [r() is None for r in refs] == [True] * 4, f"fail={fail}"


def test_ctrl_c_in_the_orchestration_function_raises_keyboard_interrupt(worker):
    """KeyboardInterrupt raised by the host orchestration function (Ctrl-C
    while it runs) comes out of run() as KeyboardInterrupt, with the run's
    failure as its context; what it submitted before ran."""
    def orch(g, x):
        g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])])
        raise KeyboardInterrupt

    a, b, out = full(1), full(2), np.zeros(S, np.float32)
    with pytest.raises(KeyboardInterrupt) as info:
        worker.run(spyre.HostProgram("interrupted", 2, [S], orch), [a, b, out])
    assert isinstance(info.value.__context__, spyre.HostRunError)
    assert "raised KeyboardInterrupt" in info.value.__context__.failures[0].cause
    np.testing.assert_array_equal(out, 3.0)


def test_only_the_orchestration_functions_keyboard_interrupt_is_one(worker):
    """Any task failure whose cause said " raised KeyboardInterrupt" came
    out of run() as KeyboardInterrupt: a SubWorker's message naming it, or
    a SubWorker (on a pool thread, no Ctrl-C of the caller's) raising it.
    Those are the run's failure, HostRunError."""
    def says_it(a):
        raise ValueError("parser raised KeyboardInterrupt")

    def raises_it(a):
        raise KeyboardInterrupt

    for sub, cause in ((says_it, "raised ValueError: parser raised KeyboardInterrupt"),
                       (raises_it, "raised KeyboardInterrupt")):
        p = spyre.HostProgram("p", 1, [], lambda g, x, f=sub: g.sub(f, [spyre.In(x[0])]))
        with pytest.raises(spyre.HostRunError) as info:
            worker.run(p, [spyre.HostTensor.zeros([4, 4])])
        assert cause in info.value.failures[0].cause, info.value.failures[0].cause
        with pytest.raises(spyre.HostRunError):
            worker.submit(p, [spyre.HostTensor.zeros([4, 4])]).wait()


def test_chip_task_that_faults_carries_the_device_code(worker):
    p = spyre.HostProgram("fault", 2, [S], lambda g, x: g.chip("chip_fault", [spyre.In(x[0]), spyre.In(x[1]),
                                                                               spyre.Out(x[2])]))
    with pytest.raises(spyre.HostRunError) as info:
        worker.run(p, [full(1), full(2)])
    e = info.value
    f = e.failures[0]
    assert f.level == spyre.Level.CHIP and f.function == "chip_fault" and f.device
    assert f.device_code != 0 and e.device_code == f.device_code


def test_bad_arguments_are_typed(worker):
    p = dependency_program(lambda f: None)
    with pytest.raises(spyre.InvalidArgument, match="output 0"):
        worker.run(p, [full(1), full(2), np.zeros([4, 4], np.float32)])
    with pytest.raises(spyre.InvalidArgument, match="dtype"):
        worker.run(p, [full(1), full(2), np.zeros(S, np.float64)])
    with pytest.raises(spyre.InvalidArgument, match="C-contiguous"):
        worker.run(p, [full(1), full(2), np.zeros([128, 256], np.float32)[:, ::2]])
    with pytest.raises(spyre.Error, match="nope"):
        worker.run(spyre.HostProgram("x", 1, [S], lambda g, x: g.chip("nope", [spyre.In(x[0])])), [full(1)])


def test_an_elementwise_chip_function_refuses_tensors_not_of_its_kernels_size(worker):
    # The 128x128 add on 256x128 tensors ran, and computed only the first
    # half of the output: the rest stayed 0, and the run said it was done.
    big = [256, 128]

    def orch(g, x):
        g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])])

    p = spyre.HostProgram("too_big", 2, [(big, np.float32)], orch)
    with pytest.raises(spyre.InvalidArgument, match=r"elementwise chip function \(kernel 301\): argument 0 is 131072 "
                                                    r"bytes, the kernel's operand 0 spans 65536"):
        worker.run(p, [np.ones(big, np.float32), np.ones(big, np.float32)])
    # A smaller one is refused in the same words (it was the runtime's
    # submit message, naming the program's operand slots).
    small = [64, 128]
    with pytest.raises(spyre.InvalidArgument, match=r"elementwise chip function \(kernel 301\): argument 0 is 32768 "
                                                    r"bytes, the kernel's operand 0 spans 65536: the kernel would run "
                                                    r"past its end"):
        worker.run(spyre.HostProgram("too_small", 2, [(small, np.float32)], orch),
                   [np.ones(small, np.float32), np.ones(small, np.float32)])
    # Tensors of the kernel's shape still add.
    f = worker.run(spyre.HostProgram("fits", 2, [(S, np.float32)], orch), [full(1), full(2)])
    assert (np.asarray(f) == 3).all()


def test_an_elementwise_chip_function_refuses_tensors_of_another_dtype(worker):
    # Same bytes, another dtype: fp16 [128, 256] and int32 [128, 128] tensors
    # ran through the fp32 add and came back as garbage, with no error.
    def orch(g, x):
        g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])])

    for dtype, shape in ((np.float16, [128, 256]), (np.int32, S)):
        a = np.full(shape, 3, dtype)
        p = spyre.HostProgram("other_dtype", 2, [(shape, dtype)], orch)
        name = np.dtype(dtype).name.replace("float", "fp")
        with pytest.raises(spyre.InvalidArgument, match=r"elementwise chip function \(kernel 301\): argument 0 is "
                                                        + name + r", the kernel's operand 0 is fp32"):
            worker.run(p, [a, a])
    f = worker.run(spyre.HostProgram("fp32", 2, [(S, np.float32)], orch), [full(3), full(5)])
    assert (np.asarray(f) == 8).all()
    # ChipFunction.matmul checks the same way.
    worker.register_kernel(320, spyre.KernelBuilder().matmul(16, 16, 16))
    worker.register_chip_function("mm_rows", spyre.ChipFunction.matmul(320, 16, 16, 16))
    mm = spyre.HostProgram("mm", 2, [([16, 16], np.int32)],
                           lambda g, x: g.chip("mm_rows", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])]))
    ones = np.ones([16, 16], np.int32)
    with pytest.raises(spyre.InvalidArgument, match=r"argument 0 is int32, the kernel's operand 0 is fp32"):
        worker.run(mm, [ones, ones])


def test_ready_made_chip_functions_refuse_arguments_given_the_wrong_access(worker):
    """The ready-made chip functions took arguments by position: an output
    given as In was written on the device, and the copy kept for that In
    tensor then fed the next run (c + b read 5 + 3, not 10 + 3); an input
    given as Out was never uploaded, and the kernel read and returned
    zeros. Both are InvalidArgument now, and the kept copies stay right."""
    a, b, c = (spyre.HostTensor.from_numpy(full(v)) for v in (2, 3, 10))
    add = lambda *access: spyre.HostProgram(
        "add", 3, [], lambda g, x: g.chip("chip_add", [f(t) for f, t in zip(access, x)]))
    with pytest.raises(spyre.InvalidArgument, match=r"parameter 2 \(OUTPUT\) \[device address .*\) writes memory "
                                                    r"its tasks may only read .* a chip call's In argument"):
        worker.run(add(spyre.In, spyre.In, spyre.In), [a, b, c])
    out = full(0)
    worker.run(add(spyre.In, spyre.In, spyre.Out), [c, b, out])
    assert (out == 13).all() and (np.asarray(c) == 10).all()
    b_array = full(3)
    with pytest.raises(spyre.InvalidArgument, match=r"elementwise chip function \(kernel 301\): argument 1 is Out, "
                                                    r"but the kernel reads it: pass it as In or InOut"):
        worker.run(add(spyre.In, spyre.Out, spyre.Out), [a, b_array, out])
    assert (b_array == 3).all()
    # ChipFunction.matmul: C given as In, A given as Out.
    worker.register_kernel(322, spyre.KernelBuilder().matmul(16, 16, 16))
    worker.register_chip_function("mm_access", spyre.ChipFunction.matmul(322, 16, 16, 16))
    m1, m2, m7 = (spyre.HostTensor.from_numpy(np.full([16, 16], v, np.float32)) for v in (1, 2, 7))
    mm = lambda *access: spyre.HostProgram(
        "mm", 3, [], lambda g, x: g.chip("mm_access", [f(t) for f, t in zip(access, x)]))
    with pytest.raises(spyre.InvalidArgument, match="writes memory its tasks may only read"):
        worker.run(mm(spyre.In, spyre.In, spyre.In), [m1, m2, m7])
    with pytest.raises(spyre.InvalidArgument, match="matmul chip function: argument 0 is Out, but the kernel reads it"):
        worker.run(mm(spyre.Out, spyre.In, spyre.Out), [m1, m2, m7])
    assert (np.asarray(m7) == 7).all() and (np.asarray(m1) == 1).all()
    c_out = np.zeros([16, 16], np.float32)
    worker.run(mm(spyre.In, spyre.In, spyre.Out), [m7, m2, c_out])  # m7's device copy is still 7s
    assert (c_out == 7 * 2 * 16).all()


def test_the_matmul_chip_function_refuses_a_kernel_of_other_shapes(worker):
    """ChipFunction.matmul compared the tensors with its own task_rows, k and
    n only: a kernel of smaller k and n (or an add kernel) ran, since the
    device refuses operands smaller than the kernel's but not larger ones,
    and C came back wrong with no error (max error 20.8 against A @ B)."""
    rng = np.random.default_rng(7)
    a = rng.random((16, 64), np.float32)
    b = rng.random((64, 64), np.float32)
    mm = spyre.HostProgram("mm", 2, [([16, 64], np.float32)],
                           lambda g, x: g.chip("mm_other", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])]))
    worker.register_kernel(330, spyre.KernelBuilder().matmul(16, 32, 32))
    worker.register_chip_function("mm_other", spyre.ChipFunction.matmul(330, 16, 64, 64))
    with pytest.raises(spyre.InvalidArgument, match=r"matmul chip function: kernel 330's operand 0 spans 2048 bytes, "
                                                    r"each task passes 4096: register a kernel of the function's shapes"):
        worker.run(mm, [a, b])
    worker.register_kernel(331, spyre.KernelBuilder().matmul(16, 64, 64))
    worker.register_chip_function("mm_right", spyre.ChipFunction.matmul(331, 16, 64, 64))
    right = spyre.HostProgram("mm", 2, [([16, 64], np.float32)],
                              lambda g, x: g.chip("mm_right", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])]))
    np.testing.assert_allclose(np.asarray(worker.run(right, [a, b])), a @ b, rtol=1e-4)


def test_a_subworker_s_in_views_are_read_only(worker):
    """A SubWorker's In view was writable: a write through it was seen by
    no later task's dependencies, and a chip call of the same run read the
    kept device copy of the old bytes (o2 = 1, not 101). Now the write
    raises, and the task fails with numpy's message."""
    seen = []

    def writes_its_input(t, flag):
        seen.append((t.flags.writeable, flag.flags.writeable))
        flag[...] = 1
        t[...] = 100.0

    def orch(g, x):
        t, o1, o2 = x
        flag = g.create_tensor(S)
        g.chip("chip_add", [spyre.In(t), spyre.In(t), spyre.Out(o1)])
        g.sub(writes_its_input, [spyre.In(t), spyre.Out(flag)])
        g.chip("chip_add", [spyre.In(t), spyre.In(flag), spyre.Out(o2)])

    t, o1, o2 = full(1), full(0), full(0)
    with pytest.raises(spyre.HostRunError, match="read-only"):
        worker.run(spyre.HostProgram("writes_in", 3, [], orch), [t, o1, o2])
    assert seen == [(False, True)]
    assert (t == 1).all() and (o1 == 2).all()


def test_a_python_chip_function_sees_its_tensors_dtypes(worker):
    """ctx.args took their dtype from the element size: an int32 tensor was
    a float32 view, so `out = a + 1` wrote float bits (1.0f as 1065353216)."""
    seen = []

    def inc(ctx):
        a, out = ctx.args
        seen.append((a.dtype, out.dtype))
        out[...] = a + 1

    worker.register_chip_function("inc_any_dtype", inc)
    p = spyre.HostProgram("inc", 2, [], lambda g, x: g.chip("inc_any_dtype", [spyre.In(x[0]), spyre.Out(x[1])]))
    for dtype in (np.int32, np.float32, np.float16, np.int8):
        a = np.arange(64, dtype=dtype).reshape(8, 8)
        out = np.zeros_like(a)
        seen.clear()
        worker.run(p, [a, out])
        assert seen == [(np.dtype(dtype), np.dtype(dtype))]
        np.testing.assert_array_equal(out, a + 1)


def test_bf16_arrays_the_host_level_hands_out_go_back_in(worker):
    """A bf16 tensor's numpy() and a return-style bf16 result are uint16
    arrays of its bits: passed back to run they were refused ("dtype uint16
    is not supported ... named with dtype=DType.BF16", a dtype= that
    from_numpy did not take; probe of 5 Dec). They are that tensor now, and
    from_numpy(bits, dtype=DType.BF16) names other bits bf16."""
    bits = np.arange(8, dtype=np.uint16) + 0x3F80
    copy = spyre.HostProgram("bf16_copy", 1, [([8], spyre.DType.BF16)],
                             lambda g, x: g.sub(lambda i, o: o.__setitem__(slice(None), i), [spyre.In(x[0]), spyre.Out(x[1])]))
    t = spyre.HostTensor.zeros([8], spyre.DType.BF16)
    t.numpy()[:] = bits
    r = worker.run(copy, [t.numpy()])  # the tensor's own view
    assert r.dtype == np.uint16
    np.testing.assert_array_equal(r, bits)
    again = worker.run(copy, [r])  # a result fed back
    np.testing.assert_array_equal(again, bits)
    out = spyre.HostTensor.zeros([8], spyre.DType.BF16).numpy()
    worker.run(copy, [t, out])  # in place, into a bf16 tensor's view
    np.testing.assert_array_equal(out, bits)
    named = spyre.HostTensor.from_numpy(bits.copy(), dtype=spyre.DType.BF16)
    assert named.dtype == spyre.DType.BF16
    np.testing.assert_array_equal(worker.run(copy, [named]), bits)
    with pytest.raises(spyre.InvalidArgument, match=r"wrap bf16 bits with HostTensor.from_numpy\(bits, dtype=DType.BF16\)"):
        worker.run(copy, [bits.copy()])  # plain uint16: which dtype is not known
    with pytest.raises(spyre.InvalidArgument, match="array of dtype float32 given with dtype=bf16"):
        spyre.HostTensor.from_numpy(np.zeros(8, np.float32), dtype=spyre.DType.BF16)


def test_orchestration_function_that_raises_fails_the_run_and_what_it_submitted_runs(worker):
    ran = []

    def orch(g, x):
        g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[0]), spyre.Out(x[1])])
        g.sub(lambda f: ran.append(1), [spyre.In(x[1])], name="after")
        raise RuntimeError("cannot plan")

    p = spyre.HostProgram("plan_fails", 1, [S], orch)
    f = np.zeros(S, np.float32)
    for start in (lambda: worker.run(p, [full(1), f]), lambda: worker.submit(p, [full(1), f]).wait()):
        with pytest.raises(spyre.HostRunError, match="cannot plan") as info:
            start()
        e = info.value
        assert isinstance(e, spyre.TaskFailed)  # the kind of a raising Python function
        assert len(e.failures) == 1
        fail = e.failures[0]
        assert (fail.task, fail.function, fail.level, fail.device) == ("plan_fails", "plan_fails", spyre.Level.HOST, "")
        assert fail.orchestrator
        assert "RuntimeError: cannot plan" in fail.cause and e.cause == fail.cause
        assert e.skipped == []
        assert [(r.name, r.state) for r in e.report] == [("chip_add#0", spyre.TaskState.DONE),
                                                          ("after", spyre.TaskState.DONE)]
    assert ran == [1, 1]  # what it submitted before it raised ran, once per run
    np.testing.assert_array_equal(f, 2.0)
    np.testing.assert_array_equal(worker.run(dependency_program(lambda f: None), [full(1), full(2)]), 3.0)


def test_a_thread_submitting_while_its_orchestration_function_returns_loses_no_task(worker):
    """A thread of the orchestration function keeps its graph and submits in
    a loop while the function returns: each call runs in the run or raises
    InvalidArgument, none is lost. (The thread's call, made without the
    GIL, used the graph the return destroyed.) A graph kept past the run
    refuses tasks."""
    for _ in range(3):
        accepted, refused, threads = [], [], []
        started = threading.Event()

        def orch(g, x):
            def loop():
                for _ in range(100000):
                    try:
                        g.chip("chip_add", [spyre.In(x[1]), spyre.In(x[0]), spyre.Out(x[1])])
                    except spyre.Error as e:
                        refused.append(e)
                        return
                    accepted.append(1)
                    if len(accepted) >= 3:
                        started.set()
            threads.append(threading.Thread(target=loop))
            threads[0].start()
            started.wait(60)
            kept.append(g)

        kept = []
        out = worker.run(spyre.HostProgram("outlived", 1, [S], orch), [full(1)])
        threads[0].join(60)
        assert not threads[0].is_alive()
        assert len(refused) == 1 and isinstance(refused[0], spyre.InvalidArgument), refused
        np.testing.assert_array_equal(out, float(len(accepted)))
        with pytest.raises(spyre.InvalidArgument, match="graph is closed"):
            kept[0].chip("chip_add", [spyre.In(out), spyre.In(out), spyre.Out(out)])


def test_a_subworker_submitting_into_its_own_run_is_refused(worker):
    """A SubWorker given its run's graph submits into that run: refused
    (its submit could wait for room only its own end makes), the run ends."""
    refused = []
    tried = threading.Event()

    def orch(g, x):
        def sub(y):
            try:
                g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[0]), spyre.Out(x[1])])
            except spyre.InvalidArgument as e:
                refused.append(str(e))
            tried.set()
        g.sub(sub, [spyre.InOut(x[1])])
        assert tried.wait(60)  # the graph is open while the SubWorker tries

    out = worker.run(spyre.HostProgram("own_run", 1, [S], orch), [full(1)])
    np.testing.assert_array_equal(out, 0.0)
    assert len(refused) == 1 and "submits into its own run" in refused[0], refused


def test_a_subworker_submitting_into_another_run_is_refused(worker):
    """A SubWorker of one run, given another run's graph, submits into it:
    refused (waiting there for room could wait for the SubWorker itself),
    and both runs end."""
    graphs, refused = [], []
    handed, tried = threading.Event(), threading.Event()

    def open_orch(g, x):
        graphs.append(g)
        handed.set()
        assert tried.wait(60)  # the graph is open while the other run's SubWorker tries

    def other_orch(g, x):
        def sub(y):
            try:
                graphs[0].chip("chip_add", [spyre.In(x[0]), spyre.In(x[0]), spyre.Out(x[1])])
            except spyre.InvalidArgument as e:
                refused.append(str(e))
            tried.set()
        g.sub(sub, [spyre.InOut(x[1])], name="hands_off")

    first = threading.Thread(target=lambda: worker.run(spyre.HostProgram("open_run", 0, [], open_orch), []))
    first.start()
    assert handed.wait(60)
    out = worker.run(spyre.HostProgram("other_run", 1, [S], other_orch), [full(1)])
    first.join(60)
    assert not first.is_alive()
    np.testing.assert_array_equal(out, 0.0)
    assert len(refused) == 1, refused
    assert ("task 'hands_off' of host program 'other_run' submits into host program 'open_run', "
            "a run it did not start") in refused[0], refused


def add_on(device):
    """f = a + b on the Worker's device `device`."""
    return spyre.HostProgram("add_on", 2, [S], lambda g, x: g.chip(
        "chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])], device=device))


def test_numpy_writes_to_a_wrapped_array_are_seen_by_the_next_run(worker):
    a_arr, b_arr = full(2), full(4)
    a, b = spyre.HostTensor.from_numpy(a_arr), spyre.HostTensor.from_numpy(b_arr)  # kept across runs
    np.testing.assert_array_equal(worker.run(add_on(0), [a, b]), 6.0)
    b_arr[:] = 3  # numpy writes the memory b wraps
    np.testing.assert_array_equal(worker.run(add_on(0), [a, b]), a_arr + b_arr)


def test_a_numpy_view_kept_since_before_the_first_run_is_seen(worker):
    a, b = spyre.HostTensor.full(S, 1.0), spyre.HostTensor.full(S, 0.5)
    view = a.numpy()  # taken before any run, kept
    np.testing.assert_array_equal(worker.run(add_on(1), [a, b]), 1.5)
    view[127, 127] = 9.0  # one element
    out = worker.run(add_on(1), [a, b])
    np.testing.assert_array_equal(out, view + 0.5)
    assert out[127, 127] == 9.5


def test_an_output_written_by_numpy_is_seen_by_the_next_reader(worker):
    a, b, f = spyre.HostTensor.full(S, 1.0), spyre.HostTensor.full(S, 2.0), spyre.HostTensor.zeros(S)
    worker.run(add_on(0), [a, b, f])  # f = 3, on the host and in device 0's copy
    np.testing.assert_array_equal(f.numpy(), 3.0)
    np.asarray(f)[:] = 10.0
    sub = spyre.HostProgram("sub_on", 2, [S], lambda g, x: g.chip(
        "chip_sub", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])], device=0))
    np.testing.assert_array_equal(worker.run(sub, [f, b]), 8.0)


def test_an_intermediate_the_orchestration_function_refills_is_seen_by_each_reader(worker):
    # The function fills one create_tensor intermediate before each chip
    # task, reading each result back through a SubWorker: every reader on
    # device 0 sees the bytes written before it was submitted (all three
    # once computed 0 + 3: the device copy the first made was reused).
    b = spyre.HostTensor.full(S, 3.0)
    seen = []

    def orch(g, x):
        t = g.create_tensor(S)
        for i in range(3):
            t.numpy()[...] = float(i)
            out = g.create_tensor(S)
            g.chip("chip_add", [spyre.In(t), spyre.In(b), spyre.Out(out)], device=0)
            ended = threading.Event()
            g.sub(lambda o: (seen.append(o[5, 5]), ended.set()), [spyre.In(out)])
            assert ended.wait(60)

    worker.run(spyre.HostProgram("refill", 0, [], orch), [])
    assert seen == [3.0, 4.0, 5.0]


def test_two_python_threads_run_programs_at_once(worker, rng):
    p = dependency_program(lambda f: time.sleep(0.01))
    errors, results = [], {}

    def run(i):
        try:
            a = np.full(S, float(i), np.float32)
            for _ in range(5):
                results[i] = worker.run(p, [a, a])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    for i in range(2):
        np.testing.assert_allclose(results[i], 2.0 * i)


def test_arrays_stay_alive_while_a_run_is_in_flight(worker):
    gate = threading.Event()
    p = dependency_program(lambda f: gate.wait(5))
    a, b = full(2), full(3)
    h = worker.submit(p, [a, b, np.zeros(S, np.float32)])
    del a, b  # the run holds them
    import gc
    gc.collect()
    assert not h.done()
    gate.set()
    out = h.wait()
    np.testing.assert_allclose(out, 5.0)
    assert h.done()
    assert h.wait() is out


def test_submit_handles_and_many_runs(worker):
    p = dependency_program(lambda f: None)
    hs = [worker.submit(p, [full(i), full(1)]) for i in range(8)]
    for i, h in enumerate(hs):
        np.testing.assert_allclose(h.wait(), i + 1.0)


def test_subworkers_waiting_on_nested_runs_of_their_worker_run_those_runs_subworkers(worker):
    """Both SubWorker threads (num_sub_workers=2) start a run of the same
    Worker from a SubWorker and wait on it; the nested runs' SubWorkers have
    no free thread, so the waiting threads run them (this deadlocked)."""
    both = threading.Barrier(2, timeout=60)
    leaves = []

    def leaf_orch(g, x):
        g.sub(lambda f: leaves.append(1), [spyre.In(g.create_tensor([4]))], name="leaf")

    leaf = spyre.HostProgram("leaf_run", 0, [], leaf_orch)

    def outer_sub(f):
        both.wait()  # both threads busy before either nests
        worker.run(leaf, [])

    def outer_orch(g, x):
        for i in range(2):
            g.sub(outer_sub, [spyre.In(g.create_tensor([4]))], name=f"outer {i}")

    done = []
    t = threading.Thread(target=lambda: done.append(worker.submit(spyre.HostProgram("outer", 0, [], outer_orch), []).report()))
    t.start()
    t.join(60)
    if t.is_alive():
        print(f"the nested runs deadlocked ({len(leaves)} of 2 leaves ran)", flush=True)
        os._exit(1)  # the Worker's threads are stuck: no clean teardown is possible
    assert len(leaves) == 2
    assert [r.state for r in done[0]] == [spyre.TaskState.DONE] * 2


def test_a_read_only_input_array_is_copied_not_refused(worker):
    ro = full(2)
    ro.flags.writeable = False
    np.testing.assert_array_equal(worker.run(add_on(0), [ro, full(1)]), 3.0)
    t = spyre.HostTensor.from_numpy(ro)  # a copy: the tensor may be written
    t.numpy()[0, 0] = 7.0
    assert ro[0, 0] == 2.0
    with pytest.raises(spyre.InvalidArgument, match="read-only"):
        worker.run(add_on(0), [full(1), full(1), ro])


def slow_increment(x):
    time.sleep(0.05)  # a reader that did not wait for it would see the old value
    x += 1


def twice_plus_one(x, y):
    y[...] = 2 * x + 1


# The first task increments the array, the second reads it: given as two
# arguments, the same memory is one tensor, so the second waits.
ALIAS = spyre.HostProgram("alias", 3, [], lambda g, x: (
    g.sub(slow_increment, [spyre.InOut(x[0])]),
    g.sub(twice_plus_one, [spyre.In(x[1]), spyre.Out(x[2])])))


def test_one_array_given_twice_is_one_tensor(worker):
    a, out = np.zeros(S, np.float32), np.zeros(S, np.float32)
    worker.run(ALIAS, [a, a, out])
    np.testing.assert_array_equal(a, 1.0)
    np.testing.assert_array_equal(out, 3.0)
    # A row range of it is a row view of the same tensor.
    a[...], out4 = 0.0, np.zeros([4, S[1]], np.float32)
    worker.run(ALIAS, [a, a[4:8], out4])
    np.testing.assert_array_equal(out4, 3.0)
    # An array of the same memory made another way (a wrapped tensor's own).
    t = spyre.HostTensor.from_numpy(np.zeros(S, np.float32))
    worker.run(ALIAS, [t, np.asarray(t), out])
    np.testing.assert_array_equal(out, 3.0)


def test_a_tensor_and_a_view_of_it_are_one_tensor(worker):
    """A HostTensor not made from numpy (zeros, full, a run's result) and
    an array of its memory (t.numpy(), np.asarray(t), rows of them) were
    two storages: the read went first and gave 1.0, not 3.0."""
    for make_args in (
        lambda t, out: [t, t.numpy(), out],
        lambda t, out: [np.asarray(t), t, out],
        lambda t, out: [t, t.numpy()[0:64], out[0:64]],
    ):
        t, out = spyre.HostTensor.zeros(S), np.zeros(S, np.float32)
        args = make_args(t, out)
        worker.run(ALIAS, args)
        np.testing.assert_array_equal(np.asarray(args[2]), 3.0)
    # A run's result and a view of it, and runs in flight over the two.
    made = worker.run(spyre.HostProgram("mk", 0, [(S, np.float32)], lambda g, x: None), [])
    made = made[0] if isinstance(made, (list, tuple)) else made
    t = spyre.HostTensor.zeros(S)
    out = np.zeros(S, np.float32)
    inc = spyre.HostProgram("inc", 1, [], lambda g, x: g.sub(slow_increment, [spyre.InOut(x[0])]))
    read = spyre.HostProgram("read", 2, [], lambda g, x: g.sub(twice_plus_one, [spyre.In(x[0]), spyre.Out(x[1])]))
    first = worker.submit(inc, [t])
    second = worker.submit(read, [t.numpy(), out])
    second.wait()
    first.wait()
    np.testing.assert_array_equal(out, 3.0)
    made[...] = 0.0
    worker.run(ALIAS, [made, np.asarray(made), out])
    np.testing.assert_array_equal(out, 3.0)


def test_runs_in_flight_over_one_array_are_ordered(worker):
    a, out = np.zeros(S, np.float32), np.zeros(S, np.float32)
    inc = spyre.HostProgram("inc", 1, [], lambda g, x: g.sub(slow_increment, [spyre.InOut(x[0])]))
    read = spyre.HostProgram("read", 2, [], lambda g, x: g.sub(twice_plus_one, [spyre.In(x[0]), spyre.Out(x[1])]))
    first = worker.submit(inc, [a])
    second = worker.submit(read, [a, out])
    second.wait()
    first.wait()
    np.testing.assert_array_equal(out, 3.0)


def test_arrays_that_overlap_otherwise_are_refused(worker):
    a = np.zeros(S, np.float32)
    with pytest.raises(spyre.InvalidArgument, match="shares memory"):
        worker.run(ALIAS, [a, a[:, :4], np.zeros([S[0], 4], np.float32)])  # columns: not a row range
    with pytest.raises(spyre.InvalidArgument, match="shares memory"):
        worker.run(ALIAS, [a, a.reshape(-1), np.zeros(S[0] * S[1], np.float32)])
    np.testing.assert_array_equal(a, 0.0)  # refused before anything ran
    worker.run(ALIAS, [a, a, np.zeros(S, np.float32)])  # and the Worker goes on


def test_device_ids_items_are_checked(host):
    with pytest.raises(spyre.InvalidArgument, match="device_ids item 0 is a str"):
        spyre.DistributedConfig(device_ids=["0"])
    with pytest.raises(spyre.InvalidArgument, match=r"device_ids item 1 is 1099511627776 \(must be <= 2147483647\)"):
        spyre.DistributedConfig(device_ids=[0, 2**40])
    with pytest.raises(spyre.InvalidArgument, match="device_ids is a int"):
        spyre.DistributedConfig(device_ids=3)
    c = spyre.DistributedConfig(device_ids=(1, 0))
    assert c.device_ids == [1, 0]
    # numpy's ints are ints here as in every other int argument (they were
    # refused: "device_ids item 0 is a int64").
    assert spyre.DistributedConfig(device_ids=np.array([1, 0])).device_ids == [1, 0]
    with pytest.raises(spyre.InvalidArgument, match="device_ids item 0 is a float"):
        c.device_ids = [1.5]
    assert spyre.DistributedConfig().device_ids == [0]


def test_a_run_handle_waited_from_two_threads_gives_both_the_outputs(worker):
    """Both waiters get the result: the second used to get InvalidArgument
    ("RunHandle: empty ...") while the first was still inside wait()."""
    gate = threading.Event()

    def orch(g, x):
        g.sub(lambda f: gate.wait(30), [spyre.In(x[0])], name="hold")
        g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])])

    for _ in range(20):
        gate.clear()
        h = worker.submit(spyre.HostProgram("two_waiters", 2, [S], orch), [full(2), full(3)])
        got, errors = [None, None], []

        def wait(i):
            try:
                got[i] = h.wait()
            except Exception as e:  # noqa: BLE001 - the test reports whatever came
                errors.append(e)

        threads = [threading.Thread(target=wait, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        polled = h.done()  # while both wait (the handle's Done beside its Wait)
        gate.set()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert polled in (False, True)
        for r in got:
            np.testing.assert_array_equal(r, 5.0)


def test_an_input_copied_from_memory_another_argument_writes_is_refused_in_either_order(worker):
    """A read-only or non-contiguous input is copied. Another argument over
    the same memory that a task writes used to be wrapped in place when it
    came second, and the copy then missed the write (out = 1 instead of 3).
    A non-contiguous copy is refused in that order now; a read-only view of
    another argument's memory is that argument (or its rows) in either
    order, so its reader reads the write."""
    def slow_increment(x):
        time.sleep(0.02)
        x += 1

    def twice_plus_one(x, y):
        y[...] = 2 * x + 1

    def program(writes, reads):
        return spyre.HostProgram("aliased", 3, [], lambda g, x: (
            g.sub(slow_increment, [spyre.InOut(x[writes])]),
            g.sub(twice_plus_one, [spyre.In(x[reads]), spyre.Out(x[2])])))

    def read_only(a):
        v = a.view()
        v.flags.writeable = False
        return v

    a, out = np.zeros([8, 16], np.float32), np.zeros([8, 16], np.float32)
    worker.run(program(0, 1), [a, read_only(a), out])  # in place first: the reader reads a itself
    np.testing.assert_array_equal(out, 3.0)
    a = np.zeros([8, 16], np.float32)
    with pytest.raises(spyre.InvalidArgument, match="shares memory with an input that was copied"):
        worker.run(program(1, 0), [a[:, ::2], a, np.zeros([8, 8], np.float32)])
    assert not a.any(), "nothing ran"
    for first in (lambda a: read_only(a), lambda a: read_only(a[2:6])):
        a = np.zeros([8, 16], np.float32)
        view = first(a)
        out = np.zeros(view.shape, np.float32)
        worker.run(program(1, 0), [view, a, out])
        np.testing.assert_array_equal(out, 3.0)
        np.testing.assert_array_equal(a, 1.0)
    # Two copies of the same bytes, nothing written there: both are fine.
    a, out = np.ones([8, 16], np.float32), np.zeros([8, 16], np.float32)
    worker.run(spyre.HostProgram("two_reads", 2, [[8, 16]], lambda g, x: g.sub(
        lambda p, q, r: r.__setitem__(..., p + q), [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])])),
        [read_only(a), read_only(a), out])
    np.testing.assert_array_equal(out, 2.0)


def test_a_strided_input_a_task_writes_gets_what_was_written(worker):
    """A writable input that is not C-contiguous runs on a copy. What a task
    wrote into that copy used to stay there: the caller's array kept its old
    values with no error: a strided view's results were lost.
    Now the written copies go back when the run ends, in both styles, also
    from a failed run (as far as its tasks got); unwritten ones are left
    alone, and a read-only input stays as it was."""
    prog = spyre.HostProgram("strided", 2, [], lambda g, x: g.sub(twice_plus_one, [spyre.In(x[0]), spyre.Out(x[1])]))
    base_in, base_out = np.arange(16 * 32, dtype=np.float32).reshape(16, 32), np.zeros([16, 32], np.float32)
    x, y = base_in[:, ::2], base_out[:, 1::2]  # views, not C-contiguous
    worker.run(prog, [x, y])
    np.testing.assert_array_equal(y, 2 * x + 1)
    np.testing.assert_array_equal(base_out[:, ::2], 0.0)  # the bytes between were not touched
    np.testing.assert_array_equal(base_in, np.arange(16 * 32, dtype=np.float32).reshape(16, 32))
    # Arguments from a generator (read twice: once to wrap, once to remember the copies).
    base_out[...] = 0.0
    worker.run(prog, (v for v in [x, y]))
    np.testing.assert_array_equal(y, 2 * x + 1)
    # A handle: the copy goes back when the wait returns.
    base_out[...] = 0.0
    h = worker.submit(prog, [x, base_out.T[::2]])
    h.wait()
    np.testing.assert_array_equal(base_out.T[::2], 2 * x + 1)
    # A handle let go without a wait: the copy goes back all the same (it
    # was lost).
    base_out[...] = 0.0
    h = worker.submit(prog, [x, y])
    del h
    np.testing.assert_array_equal(y, 2 * x + 1)
    # A run that fails after the write: the write is kept.
    def fail(_):
        raise ValueError("after the write")
    failing = spyre.HostProgram("strided_fails", 2, [], lambda g, x: (
        g.sub(twice_plus_one, [spyre.In(x[0]), spyre.Out(x[1])]),
        g.sub(fail, [spyre.In(x[1])])))
    base_out[...] = 0.0
    with pytest.raises(spyre.HostRunError, match="after the write"):
        worker.run(failing, [x, y])
    np.testing.assert_array_equal(y, 2 * x + 1)
    # Read-only: the task writes a private copy, the array stays.
    ro = np.zeros([16, 16], np.float32)
    ro.flags.writeable = False
    worker.run(prog, [x, ro])
    assert not ro.any()
    # Only what the tasks changed goes back: a write the caller made after
    # the run ended, before the wait, stays (the whole copy was written
    # back over it), and so do elements a task left alone.
    def first_only(t):
        t[0, 0] = -1.0

    touch = spyre.HostProgram("first_only", 1, [], lambda g, x: g.sub(first_only, [spyre.InOut(x[0])]))
    look = spyre.HostProgram("look", 1, [], lambda g, x: g.sub(lambda t: None, [spyre.In(x[0])]))
    for prog_, first in ((look, 0.0), (touch, -1.0)):
        base_out[...] = 0.0
        h = worker.submit(prog_, [y])
        h.report()  # the run has ended; nothing went back yet
        base_out[10, 1] = 9.0  # y[10, 0], the caller's own write
        h.wait()
        assert base_out[10, 1] == 9.0, prog_
        assert y[0, 0] == first
    # A change only of bits that compare equal still goes back: -0.0 over
    # 0.0, another NaN payload.
    def negate(t):
        t[...] = -t

    base_out[...] = 0.0
    worker.run(spyre.HostProgram("negate", 1, [], lambda g, x: g.sub(negate, [spyre.InOut(x[0])])), [y])
    assert np.signbit(y).all() and not np.signbit(base_out[:, ::2]).any()


def test_a_subworker_task_is_named_as_the_program_names_it(worker):
    """name= is the task's name, for a SubWorker as for a chip task. Before,
    a registered SubWorker's name= was dropped without a word (the task was
    'registered#0'), and a callable's named the function, the task
    '<name>#0'. The SubWorker itself keeps its own name in failures."""
    worker.register_sub_worker("note", lambda x: None)

    def fails(_):
        raise ValueError("on purpose")

    def orch(g, x):
        g.sub("note", [spyre.In(x[0])], name="note the input")
        g.sub("note", [spyre.In(x[0])])
        g.sub(lambda a: None, [spyre.In(x[0])], name="inline check")
        g.sub(lambda a: None, [spyre.In(x[0])])
        g.sub(fails, [spyre.In(x[0])], name="the failing step")

    with pytest.raises(spyre.HostRunError) as info:
        worker.run(spyre.HostProgram("named", 1, [], orch), [full(1)])
    assert [r.name for r in info.value.report] == ["note the input", "note#0", "inline check", "<lambda>#0",
                                                   "the failing step"]
    failure = info.value.failures[0]
    assert (failure.task, failure.function) == ("the failing step", "fails")


@pytest.fixture
def one_vf():
    """A host of its own (one card, one VF): these tests open Workers on a
    device the module's `worker` fixture would hold."""
    h = spyre.Host.embedded_mock(cards=1, vfs=1, mem="1G")
    yield h
    h.close()


def test_threads_of_the_orchestration_function_submit_into_one_graph(one_vf):
    """The orchestration function hands the graph to threads of its own.
    Their submissions raced in the dispatcher's spare tasks: a segfault in
    2-3 runs of 5."""
    shape = [16, 128]
    w = spyre.Worker(one_vf, spyre.DistributedConfig(device_ids=[1], num_sub_workers=1))
    w.register_kernel(ADD, spyre.KernelBuilder().add(shape))
    w.register_chip_function("chip_add", spyre.ChipFunction.elementwise(ADD))
    per_thread, threads = 200, 4

    def orch(g, x):
        outs = [g.create_tensor(shape) for _ in range(threads)]

        def submit(i):
            for _ in range(per_thread):
                g.chip("chip_add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(outs[i])])

        ts = [threading.Thread(target=submit, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        g.sub(lambda *a: np.copyto(a[-1], sum(a[:-1])), [spyre.In(o) for o in outs] + [spyre.Out(x[2])])

    prog = spyre.HostProgram("threads", 2, [shape], orch)
    for _ in range(5):
        h = w.submit(prog, [np.ones(shape, np.float32), np.full(shape, 2, np.float32)])
        assert (h.wait() == 3 * threads).all()
        report = h.report()
        assert len(report) == per_thread * threads + 1
        assert len({r.name for r in report}) == len(report)
        assert len({r.task_id for r in report}) == len(report)
    w.close()


def test_a_subworker_waits_on_a_handle_the_main_thread_waits_on(one_vf):
    """Run A's SubWorker waits on run B while the main thread does, and B's
    SubWorker needs the one SubWorker thread A's holds: the waiting SubWorker
    runs it. And a SubWorker waiting on its own run is refused at once.
    Before, the main thread's wait held the handle's lock, so the SubWorker
    blocked on it: both hung."""
    w = spyre.Worker(one_vf, spyre.DistributedConfig(device_ids=[1], num_sub_workers=1))
    go = threading.Event()
    handles = {}

    def a_sub(x):
        go.wait(10)
        time.sleep(0.2)  # the main thread is in B's wait by now
        handles["b"].wait()
        x[...] = 1

    a = spyre.HostProgram("A", 1, [], lambda g, x: g.sub(a_sub, [spyre.InOut(x[0])]))
    b = spyre.HostProgram("B", 1, [], lambda g, x: g.sub(lambda y: y.__setitem__(Ellipsis, 2), [spyre.InOut(x[0])]))
    xa, xb = np.zeros([8], np.float32), np.zeros([8], np.float32)
    ha = w.submit(a, [xa])
    time.sleep(0.1)  # a_sub holds the only SubWorker thread
    handles["b"] = w.submit(b, [xb])
    go.set()
    handles["b"].wait()
    ha.wait()
    assert (xa == 1).all() and (xb == 2).all()

    seen = []

    def waits_on_own_run(x):
        time.sleep(0.2)  # the main thread is in the wait by now
        try:
            handles["own"].wait()
            seen.append("returned")
        except spyre.InvalidArgument as e:
            seen.append(str(e))

    own = spyre.HostProgram("own", 1, [], lambda g, x: g.sub(waits_on_own_run, [spyre.InOut(x[0])]))
    handles["own"] = w.submit(own, [np.zeros([8], np.float32)])
    handles["own"].wait()
    assert len(seen) == 1 and "waits for the run itself" in seen[0], seen
    w.close()


def test_a_writable_strided_input_shared_with_another_is_refused(one_vf):
    """A writable input that is not C-contiguous runs on a copy whose bytes
    go back when its run ends. Two such copies of one memory (two runs in
    flight, or one array given twice) each saw only their own tasks' writes:
    +1 and +10 in two runs gave 10, and a write then a read in one run read
    0. Refused now; the C-contiguous array orders both as one tensor."""
    w = spyre.Worker(one_vf, spyre.DistributedConfig(device_ids=[1], num_sub_workers=1))
    gate = threading.Event()

    def add(v, wait=False):
        def sub(x):
            if wait:
                gate.wait(5)
            x += v

        return spyre.HostProgram("plus%d" % v, 1, [], lambda g, x: g.sub(sub, [spyre.InOut(x[0])]))

    base = np.zeros([4, 8], np.float32)
    view = base[:, ::2]
    first = w.submit(add(1, wait=True), [view])
    with pytest.raises(spyre.InvalidArgument, match="shares memory with a writable input that is not C-contiguous"):
        w.submit(add(10), [view])
    gate.set()
    first.wait()
    assert (base[:, ::2] == 1).all() and (base[:, 1::2] == 0).all()

    twice = spyre.HostProgram("twice", 2, [], lambda g, x: None)
    with pytest.raises(spyre.InvalidArgument, match="argument 1: the array shares memory with a writable input"):
        w.run(twice, [view, view])
    # Two read-only views of one memory are two snapshots, as before.
    ro = base.copy()
    ro.flags.writeable = False
    w.run(twice, [ro[:, ::2], ro[:, ::2]])
    # The C-contiguous array in two runs in flight: one tensor, both updates.
    gate.clear()
    contiguous = np.zeros([4, 8], np.float32)
    first = w.submit(add(1, wait=True), [contiguous])
    second = w.submit(add(10), [contiguous])
    gate.set()
    first.wait()
    second.wait()
    assert (contiguous == 11).all()
    w.close()


def test_close_waits_for_the_runs_and_releases_the_devices(one_vf):
    """close() returned at once with a run in flight, and the devices stayed
    open while any handle of the Worker lived: a new Worker on them was Busy."""
    config = spyre.DistributedConfig(device_ids=[1], num_sub_workers=1)
    w = spyre.Worker(one_vf, config)
    gate = threading.Event()

    def slow(x):
        gate.wait(5)
        x += 1

    prog = spyre.HostProgram("slow", 1, [], lambda g, x: g.sub(slow, [spyre.InOut(x[0])]))
    x = np.zeros([8], np.float32)
    h = w.submit(prog, [x])
    threading.Timer(0.3, gate.set).start()
    w.close()
    assert h.done() and (x == 1).all()
    assert w.closed
    again = spyre.Worker(one_vf, config)  # the handle `h` still lives
    h.wait()
    assert len(h.report()) == 1
    again.close()


def test_close_while_other_threads_submit_waits_for_their_runs(one_vf):
    """close() while two threads submitted: it freed the Worker under a thread
    inside submit (a segfault in 16 of 20 processes), or returned with runs
    started meanwhile still in flight (the device stayed held: Busy). Now
    every submit either returns a handle whose run close waited for, or
    raises 'Worker.submit: the Worker is closed', and the device is free."""
    shape = [128, 128]
    a = np.ones(shape, np.float32)
    prog = spyre.HostProgram("p", 2, [(shape, np.float32)],
                             lambda g, x: g.chip("add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])]))
    for attempt in range(8):
        w = spyre.Worker(one_vf, spyre.DistributedConfig(device_ids=[1]))
        w.register_kernel(ADD, spyre.KernelBuilder().add(shape))
        w.register_chip_function("add", spyre.ChipFunction.elementwise(ADD))
        handles, refused = [], []
        go = threading.Barrier(3)

        def submitter():
            go.wait()
            try:
                for _ in range(200):
                    handles.append(w.submit(prog, [a, a]))
            except spyre.InvalidArgument as e:
                refused.append(str(e))

        threads = [threading.Thread(target=submitter) for _ in range(2)]
        for t in threads:
            t.start()
        go.wait()
        time.sleep(0.002 * attempt)
        w.close()
        assert all(h.done() for h in handles), "close returned with runs in flight"
        spyre.Worker(one_vf, spyre.DistributedConfig(device_ids=[1])).close()  # the device is free
        for t in threads:
            t.join()
        assert all("Worker.submit: the Worker is closed" in m for m in refused), refused
        for h in handles:
            np.testing.assert_array_equal(h.wait(), 2 * a)
    with pytest.raises(spyre.InvalidArgument, match="Worker.submit: the Worker is closed"):
        w.submit(prog, [a, a])


def test_close_from_the_workers_own_orchestration_function_is_refused(one_vf):
    w = spyre.Worker(one_vf, spyre.DistributedConfig(device_ids=[1]))
    seen = []

    def orchestrate(g, x):
        try:
            w.close()
        except spyre.InvalidArgument as e:
            seen.append(str(e))

    w.run(spyre.HostProgram("closer", 1, [], orchestrate), [np.zeros([4], np.float32)])
    assert len(seen) == 1 and ("Worker.close: called from a host program's orchestration function of this "
                               "Worker (it would wait for itself)") in seen[0], seen
    assert not w.closed
    w.close()


def test_a_chip_function_waiting_for_a_nested_run_on_its_own_only_slot_fails(one_vf):
    """A Python chip function that runs a nested program on a Worker of one
    device with one chip slot: the nested chip task waited for the slot the
    caller holds, and both runs hung. The nested run now fails, typed."""
    w = spyre.Worker(one_vf, spyre.DistributedConfig(device_ids=[1], chip_tasks_per_device=1))
    shape = [64]
    w.register_kernel(ADD, spyre.KernelBuilder().add(shape))
    w.register_chip_function("add", spyre.ChipFunction.elementwise(ADD))
    inner = spyre.HostProgram("inner", 2, [(shape, np.float32)],
                              lambda g, x: g.chip("add", [spyre.In(x[0]), spyre.In(x[1]), spyre.Out(x[2])]))
    a = np.arange(64, dtype=np.float32)
    w.register_chip_function("nest", lambda ctx: w.run(inner, [a, a]))
    outer = spyre.HostProgram("outer", 1, [], lambda g, x: g.chip("nest", [spyre.In(x[0])]))
    with pytest.raises(spyre.HostRunError, match="chip slot\\(s\\) are held by chip calls of this same thread"):
        w.run(outer, [a])
    np.testing.assert_array_equal(w.run(inner, [a, a]), 2 * a)  # the Worker goes on
    w.close()


def test_a_chip_function_that_keeps_a_heap_view_past_its_call_fails_its_task(one_vf):
    """A view of ctx.orch.alloc() kept past a Python chip function's call
    pointed into the chip runtime's heap ring, which the next call reuses:
    it read, and wrote, what later calls allocated there. Now the task
    fails saying so. A view that only a garbage cycle holds is not kept."""
    kept = []

    def keeps(ctx):
        buf = ctx.orch.alloc(256)
        buf[...] = 1
        kept.append(buf[:4])  # a view of a view holds it too

    def drops(ctx):
        cycle = [ctx.orch.alloc(256)]
        cycle.append(cycle)  # garbage, but held until the collector runs
        cycle[0][...] = 2
        ctx.args[0][...] = cycle[0][:16]

    with spyre.Worker(one_vf, spyre.DistributedConfig(device_ids=[1], num_sub_workers=1)) as w:
        w.register_chip_function("keeps", keeps)
        w.register_chip_function("drops", drops)
        y = np.full(16, 3, dtype=np.float32)
        with pytest.raises(spyre.Error, match=r"chip function 'keeps' kept 1 view\(s\) of ctx.orch.alloc\(\)") as info:
            w.run(spyre.HostProgram("p", 1, [], lambda g, t: g.chip("keeps", [spyre.InOut(t[0])])), [y])
        assert info.value.failures[0].level == spyre.Level.CHIP
        kept.clear()
        w.run(spyre.HostProgram("q", 1, [], lambda g, t: g.chip("drops", [spyre.Out(t[0])])), [y])
        np.testing.assert_array_equal(y, np.full(16, 2, dtype=np.float32))


def test_a_host_kernel_a_chip_function_registers_reports_what_it_raised(one_vf):
    """A Python host kernel registered on ctx.orch failed its task with the
    PYTHON_KERNEL_RAISED code alone (its message went to the call's
    Orchestrator, which no wait of the chip task reads), and the kernel
    kept a pointer to that Orchestrator, freed once the call ended, for the
    later calls the chip runtime runs it in. Now the message is the task's
    failure, in this call and later ones."""
    kernel = 77

    def raises(x):
        raise ValueError("boom from the kernel")

    def registers(ctx):
        ctx.orch.register_host_kernel(kernel, raises)
        ctx.orch.submit(kernel, spyre.WORKER_HOST, [("inout", ctx.orch.alloc(64))])

    def uses(ctx):
        ctx.orch.submit(kernel, spyre.WORKER_HOST, [("inout", ctx.orch.alloc(64))])

    with spyre.Worker(one_vf, spyre.DistributedConfig(device_ids=[1], num_sub_workers=1)) as w:
        w.register_chip_function("registers", registers)
        w.register_chip_function("uses", uses)
        y = np.zeros(16, dtype=np.float32)
        for name in ["registers", "uses", "uses"]:
            with pytest.raises(spyre.Error, match="ValueError: boom from the kernel") as info:
                w.run(spyre.HostProgram("p", 1, [], lambda g, t: g.chip(name, [spyre.InOut(t[0])])), [y])
            assert info.value.failures[0].level == spyre.Level.CHIP
            gc.collect()


def test_a_chip_function_s_views_kept_past_its_call_reach_no_later_run(one_vf):
    """A view of ctx.args kept past the call wrote into the device copy the
    executor kept, which the next run reused (the content check hashes the
    host bytes): z = y + 1 came out 1001, not 2. And once the Worker closed,
    touching the kept view segfaulted. Now a kept view's device memory is
    set aside for it: later runs use fresh copies. Once the Worker is
    closed it stays mapped over private zeros."""
    kept = []

    def inc(ctx):
        kept.append(ctx.args[-1][1:])  # a view of a view keeps it too
        if len(ctx.args) == 1:
            ctx.args[0][...] += 1
        else:
            ctx.args[1][...] = ctx.args[0] + 1

    with spyre.Worker(one_vf, spyre.DistributedConfig(device_ids=[1], num_sub_workers=1)) as w:
        w.register_chip_function("inc_kept", inc)
        y = np.zeros([4, 16], dtype=np.float32)
        z = np.zeros([4, 16], dtype=np.float32)
        w.run(spyre.HostProgram("p", 1, [], lambda g, t: g.chip("inc_kept", [spyre.InOut(t[0])])), [y])
        assert (y == 1).all()
        kept[0][...] = 1000  # late write through y's old device copy
        q = spyre.HostProgram("q", 2, [], lambda g, t: g.chip("inc_kept", [spyre.In(t[0]), spyre.Out(t[1])]))
        for _ in range(2):
            w.run(q, [y, z])
            np.testing.assert_array_equal(z, np.full([4, 16], 2, dtype=np.float32))
        assert (y == 1).all()
    assert (kept[0] == 0).all() and (kept[1] == 0).all()  # still mapped after close, over zeros
    kept[1][...] = 7
    assert (kept[1] == 7).all() and (kept[0] == 0).all()
    kept.clear()


def test_another_workers_task_over_an_array_a_run_in_flight_writes_is_refused():
    """Each Worker orders its own tasks only: a second Worker's task reading
    an array a run in flight writes read either value. It is refused when
    submitted (naming the argument); reads of other rows run, and after the
    run the read sees its value."""
    h = spyre.Host.embedded_mock(cards=2, vfs=0, mem="1G")
    try:
        w1 = spyre.Worker(h, spyre.DistributedConfig(device_ids=[0], num_sub_workers=1))
        w2 = spyre.Worker(h, spyre.DistributedConfig(device_ids=[1], num_sub_workers=1))
        a = np.zeros([4, 4], np.float32)
        started, release = threading.Event(), threading.Event()

        def hold(x):
            started.set()
            assert release.wait(30)
            x[:] = 7

        held = w1.submit(spyre.HostProgram("holder", 1, [], lambda g, x: g.sub(hold, [spyre.Out(x[0].rows(0, 2))])), [a])
        assert started.wait(30)
        seen = []
        reader = spyre.HostProgram("reader", 1, [], lambda g, x: g.sub(lambda v: seen.append(v.sum()),
                                                                       [spyre.In(x[0])], name="read"))
        with pytest.raises(spyre.HostRunError) as info:
            w2.run(reader, [a[1:2]])
        assert info.value.failures[0].kind == "InvalidArgument"
        assert ("SubWorker task 'read' of host program 'reader': argument 0 (in, [1x4] fp32 rows 1..2 of [4x4]"
                in info.value.failures[0].cause), info.value.failures[0].cause
        assert "reads bytes that a task of another Worker in flight writes" in info.value.failures[0].cause
        w2.run(reader, [a[2:4]])  # rows the run does not write
        release.set()
        held.wait()
        w2.run(reader, [a[1:2]])
        assert seen == [0.0, 28.0]
        w1.close()
        w2.close()
    finally:
        h.close()


def test_a_subworkers_view_kept_past_its_task_is_its_tensor():
    """A SubWorker's numpy view of its argument, kept and given to a run of
    another Worker while the task still held the tensor to write it, was
    wrapped as a second storage over the same memory: nothing ordered the
    two and the read raced the write (an outside probe). The view is that
    tensor now, so the other Worker's task is refused; after the run, the
    kept view reads the task's write through either Worker."""
    h = spyre.Host.embedded_mock(cards=2, vfs=0, mem="1G")
    try:
        w1 = spyre.Worker(h, spyre.DistributedConfig(device_ids=[0], num_sub_workers=1))
        w2 = spyre.Worker(h, spyre.DistributedConfig(device_ids=[1], num_sub_workers=1))
        t = spyre.HostTensor.zeros([4, 16])
        kept, release = [], threading.Event()

        def hold(v):
            kept.append(v)
            assert release.wait(30)
            v[:] = 3

        held = w1.submit(spyre.HostProgram("holder", 1, [], lambda g, x: g.sub(hold, [spyre.InOut(x[0])])), [t])
        for _ in range(3000):
            if kept:
                break
            time.sleep(0.01)
        assert kept, "the holding SubWorker never started"
        seen = []
        reader = spyre.HostProgram("reader", 1, [], lambda g, x: g.sub(lambda v: seen.append(float(v.sum())),
                                                                       [spyre.In(x[0])], name="read"))
        with pytest.raises(spyre.HostRunError) as info:
            w2.run(reader, [kept[0]])
        assert "reads bytes that a task of another Worker in flight writes" in info.value.failures[0].cause, \
            info.value.failures[0].cause
        release.set()
        held.wait()
        w2.run(reader, [kept[0]])
        w1.run(reader, [kept[0]])
        assert seen == [192.0, 192.0]
        w1.close()
        w2.close()
    finally:
        h.close()


def test_subworkers_over_row_views_keep_no_array_alive_after_the_run(worker):
    """A SubWorker's argument views are remembered as their tensor's memory
    (above); that record must not outlive the run: once the caller let go
    of the array, it is freed."""
    a = np.zeros([8, 16], np.float32)
    ref = weakref.ref(a)

    def orch(g, x):
        g.sub(lambda v: v.__iadd__(1), [spyre.InOut(x[0].rows(0, 4))])
        g.sub(lambda v: v.__iadd__(2), [spyre.InOut(x[0].rows(4, 8))])

    worker.run(spyre.HostProgram("rows", 1, [], orch), [a])
    assert a[:4].sum() == 64 and a[4:].sum() == 128
    del a
    worker.run(dependency_program(lambda f: None), [full(1), full(2)])  # a later call forgets what nothing holds
    gc.collect()
    assert ref() is None


def write_input_program(value):
    """A host program whose SubWorker writes its input in place."""
    return spyre.HostProgram("write_input", 1, [],
                             lambda g, x: g.sub(lambda v: v.__setitem__(slice(None), value), [spyre.InOut(x[0])]))


def test_a_read_only_view_of_a_held_tensor_is_copied_for_a_run_and_from_numpy(worker):
    """A read-only array over memory a held tensor wraps was taken as that
    tensor: a run that writes its input wrote the memory the caller had
    marked read-only, and from_numpy's tensor was the caller's memory
    (an outside probe). It is copied now, as every read-only input is; a
    task's In argument over it is still that tensor, ordered after its
    writers."""
    t = spyre.HostTensor.full([4, 16], 1.0)
    view = t.numpy()
    ro = view[1:3]
    ro.flags.writeable = False
    worker.run(write_input_program(7.0), [ro])
    assert (view == 1.0).all(), view
    copy = spyre.HostTensor.from_numpy(ro)
    copy.numpy()[:] = 5.0
    assert (view == 1.0).all(), view
    # An In argument over it is the tensor: ordered after the run's writer.
    seen = []

    def orch(g, x):
        g.sub(lambda v: v.__setitem__(slice(None), 2.0), [spyre.InOut(x[0])])
        g.sub(lambda v: seen.append(float(v.sum())), [spyre.In(ro)])

    worker.run(spyre.HostProgram("write_then_read", 1, [], orch), [t])
    assert seen == [64.0] and (view == 2.0).all()


def test_a_read_only_view_a_run_in_flight_writes_is_refused_not_torn(worker):
    """Its copy would read bytes a task in flight writes, so the read-only
    view is refused while that run is in flight, and copied after."""
    t = spyre.HostTensor.full([4, 16], 1.0)
    view = t.numpy()
    ro = view[:]
    ro.flags.writeable = False
    release, started = threading.Event(), threading.Event()

    def hold(v):
        started.set()
        assert release.wait(30)
        v[:] = 3.0

    held = worker.submit(spyre.HostProgram("holder", 1, [], lambda g, x: g.sub(hold, [spyre.InOut(x[0])])), [t])
    try:
        assert started.wait(30), "the holding SubWorker never started"
        with pytest.raises(spyre.InvalidArgument, match="read-only, so it is copied .* which a task in flight writes"):
            worker.run(write_input_program(9.0), [ro])
        with pytest.raises(spyre.InvalidArgument, match="which a task in flight writes"):
            spyre.HostTensor.from_numpy(ro)
    finally:
        release.set()
        held.wait()
    worker.run(write_input_program(9.0), [ro])
    assert (view == 3.0).all(), view


def test_a_subworkers_read_only_view_is_copied_for_a_run_while_it_holds_it():
    """A SubWorker's In view is read-only: given to a run of another Worker
    while the SubWorker still holds it, it is copied even though its own
    run's next task, which writes it, is in flight already (that task waits
    for the SubWorker, so the copy cannot tear)."""
    h = spyre.Host.embedded_mock(cards=2, vfs=0, mem="1G")
    try:
        w1 = spyre.Worker(h, spyre.DistributedConfig(device_ids=[0], num_sub_workers=1))
        w2 = spyre.Worker(h, spyre.DistributedConfig(device_ids=[1], num_sub_workers=1))
        t = spyre.HostTensor.full([4, 16], 1.0)

        def read(v):
            assert not v.flags.writeable
            w2.run(write_input_program(6.0), [v])  # writes its copy only

        def orch(g, x):
            g.sub(read, [spyre.In(x[0])])
            g.sub(lambda v: v.__iadd__(1.0), [spyre.InOut(x[0])])

        w1.run(spyre.HostProgram("read_then_write", 1, [], orch), [t])
        assert (t.numpy() == 2.0).all(), t.numpy()
        w1.close()
        w2.close()
    finally:
        h.close()


def test_a_generator_or_coroutine_function_is_refused_not_run_empty(worker):
    """A host program, SubWorker or chip function written as a generator or
    coroutine function returns without running its body: the run
    "succeeded" with nothing submitted or computed (an outside probe)."""
    def gen_program(g, x):
        g.sub(lambda v: v.__iadd__(1), [spyre.InOut(x[0])])
        yield

    async def coro_program(g, x):
        g.sub(lambda v: v.__iadd__(1), [spyre.InOut(x[0])])

    a = np.zeros([4, 4], np.float32)
    for fn, kind in ((gen_program, "generator"), (coro_program, "coroutine")):
        with pytest.raises(spyre.HostRunError) as info:
            worker.run(spyre.HostProgram("unrun", 1, [], fn), [a])
        assert info.value.kind == "InvalidArgument", info.value
        assert f"host orchestration function 'unrun' is a generator or coroutine function: calling it returned a " \
               f"{kind}" in str(info.value), str(info.value)

    def gen_sub(v):
        v += 1
        yield

    with pytest.raises(spyre.HostRunError, match="SubWorker 'gen_sub' is a generator or coroutine function"):
        worker.run(spyre.HostProgram("sub", 1, [], lambda g, x: g.sub(gen_sub, [spyre.InOut(x[0])])), [a])

    def gen_chip(ctx):
        yield

    worker.register_chip_function("gen_chip", gen_chip)
    with pytest.raises(spyre.HostRunError, match="chip function 'gen_chip' is a generator or coroutine function"):
        worker.run(spyre.HostProgram("chip", 1, [], lambda g, x: g.chip("gen_chip", [spyre.InOut(x[0])])), [a])
    assert not a.any()


def test_a_non_callable_task_or_a_none_argument_is_invalid_argument_naming_it(worker):
    """register_chip_function("x", 42) and g.sub(42, ...) raised pybind11's
    bare TypeError ("Object of type 'int' is not an instance of
    'function'"), and None as an argument "dtype object is not supported"
    (an outside probe)."""
    with pytest.raises(spyre.InvalidArgument, match="Worker.register_chip_function: a int is not callable"):
        worker.register_chip_function("not_callable", 42)
    # register_sub_worker was still pybind11's TypeError (probe of 5 Dec).
    for fn in (42, None):
        with pytest.raises(spyre.InvalidArgument, match="Worker.register_sub_worker: a (int|NoneType) is not callable"):
            worker.register_sub_worker("not_callable", fn)
    a = np.zeros([2, 2], np.float32)
    with pytest.raises(spyre.HostRunError, match="HostGraph.sub: a int is not callable") as info:
        worker.run(spyre.HostProgram("p", 1, [], lambda g, x: g.sub(42, [spyre.InOut(x[0])])), [a])
    assert info.value.kind == "InvalidArgument"
    with pytest.raises(spyre.InvalidArgument, match="argument 0: None is not a numpy array or HostTensor"):
        worker.run(spyre.HostProgram("p", 1, [], lambda g, x: None), [None])
    # An output numpy makes a new array of (a list, a tuple) took the results
    # into that array, and they were lost (an outside probe).
    with_output = spyre.HostProgram("p", 1, [[2, 2]], lambda g, x: None)
    for output in ([[0.0, 0.0], [0.0, 0.0]], ((0.0, 0.0), (0.0, 0.0))):
        with pytest.raises(spyre.InvalidArgument, match="argument 1: the output is a (list|tuple), which results cannot"):
            worker.run(with_output, [a, output])
    with pytest.raises(spyre.HostRunError, match="SubWorker '<lambda>': argument 0: None is not a numpy array"):
        worker.run(spyre.HostProgram("p", 1, [], lambda g, x: g.sub(lambda v: None, [spyre.In(None)])), [a])


def test_a_task_exception_with_awkward_text_keeps_its_type(worker):
    """A SubWorker raising with lone surrogates in its message was reported
    as UnicodeEncodeError, and one whose __str__ raises without its type
    (an outside probe): the run's failure is the task's, naming its type."""
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no text")

    def surrogate(v):
        raise ValueError("bad \udcff byte")

    def unprintable(v):
        raise Unprintable("kept")

    for sub, cause in ((surrogate, "raised ValueError: bad \\udcff byte"),
                       (unprintable, "raised Unprintable: Unprintable('kept')")):
        p = spyre.HostProgram("p", 1, [], lambda g, x, f=sub: g.sub(f, [spyre.In(x[0])]))
        with pytest.raises(spyre.HostRunError) as info:
            worker.run(p, [np.zeros([2, 2], np.float32)])
        assert info.value.failures[0].kind == "TaskFailed"
        assert cause in info.value.failures[0].cause, info.value.failures[0].cause
