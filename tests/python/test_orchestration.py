# SPDX-License-Identifier: Apache-2.0
"""Seed 004's orchestration runtime from Python: spyre.Orchestrator on a device,
device kernels from the kernel builder, Python host kernels, scopes, implicit
outputs, alloc/free, and failures (device code, Python exception, skipped tasks)."""
import threading
import time

import numpy as np
import pytest

import spyre

N = 256
NB = N * 4
ADD, MUL, PYADD, PYRAISE, JUNK = 1, 2, 3, 4, 5


@pytest.fixture
def orch(dev):
    o = spyre.Orchestrator(dev, task_ring_size=64, heap_size=4 << 20)
    kb = spyre.KernelBuilder()
    o.register_device_kernel(ADD, kb.add([N]))
    o.register_device_kernel(MUL, kb.mul([N]))
    yield o
    o.close()


def example1(o, A, B, C, D, E):
    """Seed 004's Example 1 shape: two independent adds, their product into E."""
    t0 = o.submit(ADD, spyre.WORKER_VECTOR, [("in", A), ("in", B), ("out", None, NB)])
    t1 = o.submit(ADD, spyre.WORKER_VECTOR, [("in", C), ("in", D), ("out", None, NB)])
    o.submit(MUL, spyre.WORKER_VECTOR, [("in", o.task_output(t0)), ("in", o.task_output(t1)), ("out", E)])


def test_example1_dag_on_device_matches_numpy(orch, rng):
    bufs = [orch.alloc(NB) for _ in range(5)]
    A, B, C, D, E = bufs
    for x in (A, B, C, D):
        x[:] = rng.standard_normal(N).astype(np.float32)
    with orch.scope():
        example1(orch, A, B, C, D, E)
    orch.wait_all()
    np.testing.assert_allclose(E, (A + B) * (C + D), rtol=1e-5)
    for b in bufs:
        orch.free(b)


def test_orchestration_function_written_in_python_with_run(orch, rng):
    A, B, C, D, E = (orch.alloc(NB) for _ in range(5))
    for x in (A, B, C, D):
        x[:] = rng.standard_normal(N).astype(np.float32)
    orch.run(example1, A, B, C, D, E)
    np.testing.assert_allclose(E, (A + B) * (C + D), rtol=1e-5)


def counter_with_inc_kernel(orch):
    """A zeroed int32 counter and kernel PYADD incrementing its first parameter."""
    acc = orch.alloc(4, dtype=np.int32)
    acc[:] = 0

    def inc(x, *implicit_outputs):
        x += 1

    orch.register_host_kernel(PYADD, inc, dtype=np.int32)
    return acc


def test_run_streams_a_loop_of_scopes_beyond_the_ring_and_reports_ignored_failures(orch):
    acc = counter_with_inc_kernel(orch)

    def loop(o, n):  # 4 x the ring of 64 (the fixture's), in scopes of 4
        for _ in range(n // 4):
            with o.scope():
                for _ in range(4):
                    o.submit(PYADD, spyre.WORKER_HOST, [("inout", acc)])

    orch.run(loop, 256)  # run used to hold every task in a scope of its own: "task ring ... cannot drain"
    assert acc[0] == 256

    def ignores_a_failure(o):
        try:
            o.submit(999, spyre.WORKER_HOST, [("inout", acc)])  # a kernel never registered
        except spyre.InvalidArgument:
            pass  # and goes on

    with pytest.raises(spyre.InvalidArgument, match="the orchestration function's pto_submit_task failed"):
        orch.run(ignores_a_failure)

    def raises(o):
        o.submit(PYADD, spyre.WORKER_HOST, [("inout", acc)])
        raise KeyError("in the orchestration function")

    with pytest.raises(KeyError, match="in the orchestration function"):
        orch.run(raises)
    assert acc[0] == 257  # what it submitted ran before the error was raised

    # A generator function returned at once, none of its body run, and run
    # returned None as if done (found probing from outside).
    def generator(o):
        o.submit(PYADD, spyre.WORKER_HOST, [("inout", acc)])
        yield

    with pytest.raises(spyre.InvalidArgument, match=r"Orchestrator.run: the function is a generator or coroutine "
                                                     r"function: calling it returned a generator and ran none of its body"):
        orch.run(generator)
    assert acc[0] == 257


def test_python_host_kernels_get_views_and_mix_with_device_tasks(orch, rng):
    calls = []

    def pyadd(a, b, c):
        calls.append(threading.current_thread().name)
        c[:] = a + b  # views on the task's memory: written in place

    orch.register_host_kernel(PYADD, pyadd)
    A, B, E = (orch.alloc(NB) for _ in range(3))
    A[:] = rng.standard_normal(N).astype(np.float32)
    B[:] = 2.0
    with orch.scope():
        t0 = orch.submit(PYADD, spyre.WORKER_HOST, [("in", A), ("in", B), ("out", None, NB)])
        orch.submit(ADD, spyre.WORKER_VECTOR, [("in", orch.task_output(t0)), ("in", A), ("out", E)])
    orch.wait_all()  # the GIL is released here: the host kernel takes it on a worker thread
    assert len(calls) == 1 and calls[0] != threading.current_thread().name
    np.testing.assert_allclose(E, 2 * A + 2.0, rtol=1e-5)

    # An input's view is read-only (other tasks may read it at once); an
    # output's and an inout's are writable.
    flags = []

    def flags_of(a, b, c):
        flags.append((a.flags.writeable, b.flags.writeable, c.flags.writeable))
        a[0] = 1.0

    orch.register_host_kernel(PYADD + 50, flags_of)
    before = np.array(A)
    orch.submit(PYADD + 50, spyre.WORKER_HOST, [("in", A), ("out", E), ("inout", B)])
    with pytest.raises(spyre.TaskFailed, match="assignment destination is read-only"):
        orch.wait_all()
    assert flags == [(False, True, True)]
    np.testing.assert_array_equal(A, before)


def test_many_python_host_tasks_with_a_chain(orch):
    acc = counter_with_inc_kernel(orch)
    for _ in range(10):  # 200 tasks through a ring of 64: submit stalls (GIL released) until slots drain
        with orch.scope():
            for _ in range(20):
                orch.submit(PYADD, spyre.WORKER_HOST, [("inout", acc)])
    orch.wait_all()
    assert acc[0] == 200
    with orch.scope():  # a scope holds implicit outputs only: 200 explicit writes stream through the ring of 64
        for _ in range(200):
            orch.submit(PYADD, spyre.WORKER_HOST, [("inout", acc)])
    orch.wait_all()
    assert acc[0] == 400
    with pytest.raises(spyre.OutOfMemory, match="task ring"):  # but cannot hold more implicit outputs than the ring
        with orch.scope():
            for _ in range(65):
                orch.submit(PYADD, spyre.WORKER_HOST, [("inout", acc), ("out", None, 16)])
    orch.wait_all()


def test_python_host_kernel_that_raises_fails_its_task_and_skips_dependents(orch, rng):
    def boom(a, out):
        raise ValueError("bad tile 7")

    orch.register_host_kernel(PYRAISE, boom)
    A, E, F = (orch.alloc(NB) for _ in range(3))
    A[:] = 1.0
    F[:] = 0.0
    with orch.scope():
        t0 = orch.submit(PYRAISE, spyre.WORKER_HOST, [("in", A), ("out", None, NB)])
        t1 = orch.submit(ADD, spyre.WORKER_VECTOR, [("in", orch.task_output(t0)), ("in", A), ("out", E)])
        orch.submit(ADD, spyre.WORKER_VECTOR, [("in", A), ("in", A), ("out", F)])  # independent
    with pytest.raises(spyre.TaskFailed) as info:
        orch.wait_all()
    e = info.value
    assert "bad tile 7" in str(e) and "ValueError" in str(e)
    # The binding's marker is not the kernel's return code: not named as one.
    assert "return code" not in str(e) and "(1 task(s) failed, 1 dependent task(s) skipped)" in str(e), str(e)
    assert e.task_id == t0 and e.kernel_id == PYRAISE
    assert e.device_code == spyre.PYTHON_KERNEL_RAISED
    assert t1 in e.skipped
    # The failure records say what the exception says: they were kind
    # DeviceError, cause "host kernel return code 1886978049".
    by_task = {f["task_id"]: f for f in e.failures}
    for t in (t0, t1):
        assert by_task[t]["kind"] == e.kind and by_task[t]["device_code"] == spyre.PYTHON_KERNEL_RAISED, by_task[t]
        assert by_task[t]["cause"] == f"host kernel {PYRAISE} raised ValueError: bad tile 7", by_task[t]
    np.testing.assert_allclose(F, 2.0)  # the independent task ran
    # the runtime is usable afterwards
    with orch.scope():
        orch.submit(ADD, spyre.WORKER_VECTOR, [("in", A), ("in", A), ("out", E)])
    orch.wait_all()
    np.testing.assert_allclose(E, 2.0)


def test_device_fault_carries_task_kernel_and_device_code(orch, refused_program):
    orch.register_device_kernel(JUNK, refused_program(2))  # the device refuses it
    A, E = orch.alloc(NB), orch.alloc(NB)
    with orch.scope():
        t0 = orch.submit(JUNK, spyre.WORKER_CUBE, [("in", A), ("out", None, NB)])
        t1 = orch.submit(ADD, spyre.WORKER_VECTOR, [("in", orch.task_output(t0)), ("in", A), ("out", E)])
    with pytest.raises(spyre.DeviceError) as info:
        orch.wait_all()
    e = info.value
    assert e.task_id == t0 and e.kernel_id == JUNK
    assert e.device_code != 0
    assert t1 in e.skipped
    assert any(f["task_id"] == t0 and not f["skipped"] for f in e.failures)
    # A skipped task's record carries the failure it was skipped for.
    (s,) = [f for f in e.failures if f["task_id"] == t1]
    assert s["skipped"] and s["root_task_id"] == t0 and s["root_kernel_id"] == JUNK
    assert s["kind"] == "DeviceError" and s["device_code"] == e.device_code and s["cause"]


def test_bad_parameters_are_typed_errors(orch):
    A = orch.alloc(NB)
    with pytest.raises(spyre.InvalidArgument, match="kind"):
        orch.submit(ADD, spyre.WORKER_VECTOR, [("sideways", A)])
    with pytest.raises(spyre.InvalidArgument, match="implicit output"):
        orch.submit(ADD, spyre.WORKER_VECTOR, [("in", None, NB)])
    with pytest.raises(spyre.InvalidArgument):  # host memory, not the device mapping
        with orch.scope():
            orch.submit(ADD, spyre.WORKER_VECTOR, [("in", np.zeros(N, np.float32)), ("out", None, NB)])
    orch.wait_all()
    # Values inside the arguments that do not convert were pybind11's
    # RuntimeError; negative shapes read as 2^64 - 4 bytes. Each names its
    # parameter and field (it was pybind11's "Unable to cast ... to C++
    # type 'unsigned long'").
    for size in (-1, 2**64):
        with pytest.raises(spyre.InvalidArgument, match=f"^spyre: invalid argument: submit: parameter 1: size is {size} "):
            orch.submit(ADD, spyre.WORKER_VECTOR, [("in", A), ("in", A, size)])
    with pytest.raises(spyre.InvalidArgument, match="submit: parameter 0: size is a float$"):
        orch.submit(ADD, spyre.WORKER_VECTOR, [("in", A, 1.5)])
    with pytest.raises(spyre.InvalidArgument, match=f"submit: parameter 0: address is {2**70} \\(must be <="):
        orch.submit(ADD, spyre.WORKER_VECTOR, [("in", 2**70, 64)])
    with pytest.raises(spyre.InvalidArgument, match="^spyre: invalid argument: Orchestrator.device_address: address is -1 "):
        orch.device_address(-1)
    # A buffer passed bare, not in its tuple: tuple() of it counted its elements.
    with pytest.raises(spyre.InvalidArgument, match="submit: parameter 0: expected a \\(kind, buffer\\[, size\\]\\) "
                                                    "tuple, got a ndarray$"):
        orch.submit(ADD, spyre.WORKER_VECTOR, [A])
    with pytest.raises(spyre.InvalidArgument, match="HostProgram: output 0 is an int, not a shape"):
        spyre.HostProgram("g", 1, [5], lambda g, x: None)
    with pytest.raises(spyre.InvalidArgument, match="shape dimension 0 is -1"):
        orch.alloc(1024, np.float32, [-1])
    with pytest.raises(spyre.InvalidArgument, match="more than 2\\^64 bytes"):
        orch.alloc(1024, np.float32, [2**62, 2**62])
    with pytest.raises(spyre.InvalidArgument, match="the shape spans 4000 bytes, more than the buffer \\(1024 bytes\\)"):
        orch.alloc(1024, np.float32, [1000])
    # A view of device memory holds plain numbers: an object dtype read the
    # bytes as pointers (SIGSEGV), a dtype of no size divided by zero (SIGFPE).
    for dtype in (object, "V0", "S0", np.dtype([]), np.dtype([("x", np.float32), ("o", object)])):
        for make in (lambda d: orch.alloc(1024, d), lambda d: orch.task_output(0, 0, d),
                     lambda d: orch.register_host_kernel(70, lambda *a: 0, d)):
            with pytest.raises(spyre.InvalidArgument, match="plain numeric dtype"):
                make(dtype)
    # A name numpy does not know was numpy's bare TypeError.
    for make in (lambda d: orch.alloc(1024, d), lambda d: orch.task_output(0, 0, d),
                 lambda d: orch.register_host_kernel(70, lambda *a: 0, d)):
        with pytest.raises(spyre.InvalidArgument, match="'notadtype' is not a dtype"):
            make("notadtype")


def test_a_shape_numpy_cannot_view_is_our_error_and_takes_no_memory(dev):
    # More dimensions than numpy has was numpy's bare ValueError, and the
    # memory stayed taken: three refused 768 KiB views of a 1 MiB heap, then
    # one that fits.
    with spyre.Orchestrator(dev, task_ring_size=16, heap_size=1 << 20) as o:
        for _ in range(3):
            with pytest.raises(spyre.InvalidArgument,
                               match="Orchestrator.alloc: numpy cannot view a shape of 33 dimensions"):
                o.alloc(768 << 10, np.float32, [1] * 33)
        view = o.alloc(768 << 10, np.float32)
        assert view.nbytes == 768 << 10
        o.free(view)


def test_views_outlive_nothing_after_close(dev):
    o = spyre.Orchestrator(dev, task_ring_size=16, heap_size=1 << 20, ready_queues="locked")
    a = o.alloc(64)
    a[:] = 3
    o.close()
    with pytest.raises(spyre.InvalidArgument, match="closed"):
        o.alloc(64)
    with pytest.raises(spyre.InvalidArgument, match="ready_queues"):
        spyre.Orchestrator(dev, ready_queues="sideways")


def test_a_second_orchestrator_while_views_keep_the_first_says_why_it_is_busy(dev):
    # After `del`, the first runtime lives on in its view and holds the
    # device's task queues: Busy said "held by another TaskQueue of this
    # process", a class the Python user never made (probe of 5 Dec). It
    # names the Orchestrator, what to do, and the views.
    o = spyre.Orchestrator(dev, task_ring_size=16, heap_size=1 << 20)
    view = o.alloc(64)
    del o
    with pytest.raises(spyre.Busy, match=r"task queue 0 of .* is held by another Orchestrator of this process .*: close it first, or give each "
                       r"runtime its own OrchestratorOptions::task_queues \(task_queues= here\); an Orchestrator's "
                       r"alloc\(\)/task_output\(\) views keep it alive after `del`"):
        spyre.Orchestrator(dev, task_ring_size=16, heap_size=1 << 20)
    del view  # the first runtime goes with its last view
    spyre.Orchestrator(dev, task_ring_size=16, heap_size=1 << 20).close()


@pytest.mark.parametrize("close", ["orchestrator", "device"])
def test_closing_while_another_thread_waits_lets_the_wait_end(host, close):
    """close() of the Orchestrator (or its Device) while another thread is
    in wait_all() (GIL released): the wait ends (returns, or raises a spyre
    error), no crash. It used to read the destroyed runtime (SIGSEGV)."""
    d = host.open("1")
    o = spyre.Orchestrator(d, task_ring_size=8, host_threads=1)
    started = threading.Event()

    def slow(x):
        started.set()
        time.sleep(0.005)
        x += 1

    o.register_host_kernel(PYADD, slow)
    buf = o.alloc(1024)
    buf[:] = 0
    for _ in range(40):
        o.submit(PYADD, spyre.WORKER_HOST, [("inout", buf)])
    outcome = []

    def wait():
        try:
            o.wait_all()
            outcome.append("returned")
        except spyre.Error as e:
            outcome.append(e)

    t = threading.Thread(target=wait)
    t.start()
    assert started.wait(30)
    (o if close == "orchestrator" else d).close()
    if close == "device":
        # close() waited for the wait to let go of the device: the function
        # opens again at once (it was Busy while the wait went on).
        host.open("1").close()
    t.join(60)
    assert not t.is_alive()
    assert outcome and (outcome[0] == "returned" or isinstance(outcome[0], spyre.Error)), outcome
    with pytest.raises(spyre.InvalidArgument, match="closed"):
        o.wait_all()
    d.close()


def close_noting(device, kind, seen):
    """device.close(), noting in `seen` "closed", the message of a `kind`
    error, or the repr of any other (the defect a test looks for)."""
    try:
        device.close()
        seen.append("closed")
    except kind as e:
        seen.append(str(e))
    except BaseException as e:  # noqa: BLE001 - any other kind is the defect
        seen.append(repr(e))


def test_closing_the_device_from_its_own_runtime_s_host_kernel_is_refused(host):
    """Device.close() inside a host kernel of an Orchestrator on that device
    waited 10 s for the call running the kernel (it holds the device), then
    returned with the function still held (probe of 5 Dec). It is refused at
    once; the device closes after the task, and the function opens again."""
    d = host.open("1")
    o = spyre.Orchestrator(d, task_ring_size=8, host_threads=1)
    seen = []

    def close_here(x):
        t0 = time.monotonic()
        close_noting(d, spyre.InvalidArgument, seen)
        seen.append(time.monotonic() - t0)
        x += 1

    o.register_host_kernel(PYADD, close_here)
    buf = o.alloc(1024)
    buf[:] = 0
    o.submit(PYADD, spyre.WORKER_HOST, [("inout", buf)])
    o.wait_all()
    assert len(seen) == 2, seen
    assert "called from a host kernel of an Orchestrator on device" in seen[0], seen
    assert seen[1] < 5, seen  # no wait for itself (the old bound was 10 s)
    assert buf[0] == 1  # the kernel went on and its task finished
    d.close()
    host.open("1").close()


def test_a_host_kernel_that_is_not_callable_is_invalid_argument(orch):
    """register_host_kernel(10, 42) was pybind11's bare TypeError (probe of
    5 Dec), unlike the host level's registrations."""
    for fn in (42, None):
        with pytest.raises(spyre.InvalidArgument, match="Orchestrator.register_host_kernel: a (int|NoneType) is not callable"):
            orch.register_host_kernel(PYADD + 50, fn)


def test_a_close_that_waits_for_itself_through_another_thread_is_busy():
    """Device.close() of d1 in a host kernel of d2's runtime, which a kernel
    of d1's runtime waits for: the calls holding d1 wait for the close.
    close waited 10 s, then returned as if closed with the function still
    open (probe of 5 Dec); it raises Busy saying so, and the function opens
    again once the calls end."""
    host = spyre.Host.embedded_mock(cards=1, vfs=2, mem="512M")  # the module's functions may be held
    d1, d2 = host.open("1"), host.open("2")
    oa = spyre.Orchestrator(d1, task_ring_size=8, host_threads=1)
    ob = spyre.Orchestrator(d2, task_ring_size=8, host_threads=1)
    seen = []
    ob.register_host_kernel(PYADD, lambda x: close_noting(d1, spyre.Busy, seen))
    bb = ob.alloc(64)
    oa.register_host_kernel(PYADD, lambda x: (ob.submit(PYADD, spyre.WORKER_HOST, [("inout", bb)]), ob.wait_all())[-1])
    oa.submit(PYADD, spyre.WORKER_HOST, [("inout", oa.alloc(64))])
    try:
        oa.wait_all()  # returns, or says the device closed meanwhile (the docs allow either)
    except spyre.InvalidArgument as e:
        assert "is closed" in str(e)
    assert len(seen) == 1 and "calls of other threads still hold device" in seen[0], seen
    ob.close()
    d2.close()
    host.open("1").close()
    host.close()


def test_a_host_kernels_return_code_is_marked_as_the_kernels(orch):
    """A Python host kernel that returns 9 fails its task with device_code 9
    and host_kernel_code True: 9 is the kernel's own code, not the device's
    SPYRE_ERR_BAD_DEPENDENCY."""
    orch.register_host_kernel(PYRAISE + 100, lambda x: 9)
    buf = orch.alloc(NB)
    orch.submit(PYRAISE + 100, spyre.WORKER_HOST, [("inout", buf)])
    with pytest.raises(spyre.DeviceError) as info:
        orch.wait_all()
    e = info.value
    assert e.device_code == 9 and e.host_kernel_code is True
    assert e.context["host_kernel_code"] is True and e.context["sys_errno"] == e.context["errno"] == 0
    assert "host kernel return code 9" in str(e) and "BAD_DEPENDENCY" not in str(e)


def test_task_waits_follow_the_devices_wait_mode(host, rng):
    """A blocking Device's runtime sleeps on the completion interrupt and never
    yields the CPU looking; scheduler_stats() counts both (SchedulerStats)."""
    d = host.open("1", wait_mode="blocking")
    try:
        o = spyre.Orchestrator(d, task_ring_size=64, heap_size=4 << 20)
        o.register_device_kernel(ADD, spyre.KernelBuilder().add([N]))
        A, B, C = (o.alloc(NB) for _ in range(3))
        A[:] = rng.standard_normal(N).astype(np.float32)
        B[:] = rng.standard_normal(N).astype(np.float32)
        before = d.scheduler_stats()
        for _ in range(20):
            o.submit(ADD, spyre.WORKER_VECTOR, [("in", A), ("in", B), ("out", C)])
            o.wait_all()
        after = d.scheduler_stats()
        np.testing.assert_allclose(C, A + B, rtol=1e-6)
        assert after.tasks_reaped - before.tasks_reaped == 20
        assert after.task_yields == before.task_yields
        assert after.task_sleeps >= before.task_sleeps
        o.close()
    finally:
        d.close()


def test_ctrl_c_ends_wait_all_the_tasks_go_on(orch, interrupt_main_once_it_waits_in):
    """SIGINT while wait_all waits for a host kernel that is held raised
    KeyboardInterrupt only once the kernel ended (the wait did not look at
    signals). Now it raises then; the task goes on, and the next wait_all
    sees it end. close() waits in the same slices."""
    name = "test_ctrl_c_ends_wait_all_the_tasks_go_on"
    waiting, release, finished = threading.Event(), threading.Event(), threading.Event()

    def interrupt_the_wait():
        assert waiting.wait(30)
        time.sleep(0.05)  # into the wait (a signal before it raises in the same block: the test still holds)
        interrupt_main_once_it_waits_in(name)

    def held(x):
        interrupt_the_wait()
        release.wait(30)
        x[:] = 9
        finished.set()

    orch.register_host_kernel(PYADD, held)
    a = orch.alloc(NB)
    a[:] = 0
    with orch.scope():
        orch.submit(PYADD, spyre.WORKER_HOST, [("inout", a)])
    with pytest.raises(KeyboardInterrupt):
        waiting.set()
        orch.wait_all()
    assert not finished.is_set()
    # close() waits for it the same way: Ctrl-C leaves the runtime open.
    waiting.clear()
    threading.Thread(target=interrupt_the_wait).start()
    with pytest.raises(KeyboardInterrupt):
        waiting.set()
        orch.close()
    assert not orch.closed and not finished.is_set()
    release.set()
    orch.wait_all()
    assert finished.is_set()
    np.testing.assert_array_equal(a, 9.0)


def test_ctrl_c_ends_run_s_wait_the_tasks_go_on(orch, interrupt_main_once_it_waits_in):
    """Orchestrator.run(fn) waited for fn's tasks in C++ without looking at
    signals: SIGINT after fn returned, or a KeyboardInterrupt fn raised,
    came out only once the held task ended. Now run raises at once and the
    tasks go on, as after wait_all's Ctrl-C."""
    name = "test_ctrl_c_ends_run_s_wait_the_tasks_go_on"
    submitted, release, finished = threading.Event(), threading.Event(), threading.Event()

    def held(x):
        release.wait(30)
        x[:] += 1
        finished.set()

    orch.register_host_kernel(PYADD, held)
    a = orch.alloc(NB)
    a[:] = 0

    def submit(o):
        o.submit(PYADD, spyre.WORKER_HOST, [("inout", a)])
        submitted.set()

    def interrupt_once_submitted():
        assert submitted.wait(30)
        time.sleep(0.05)  # fn has returned: run waits for its task
        interrupt_main_once_it_waits_in(name)

    threading.Thread(target=interrupt_once_submitted).start()
    with pytest.raises(KeyboardInterrupt):
        orch.run(submit)
    assert not finished.is_set()

    def submit_then_ctrl_c(o):
        submit(o)
        raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        orch.run(submit_then_ctrl_c)
    assert not finished.is_set() and time.monotonic() - start < 20
    release.set()
    orch.wait_all()
    np.testing.assert_array_equal(a, 2.0)  # both tasks ran


def test_a_scope_exited_twice_raises_as_a_second_end_does_in_cpp(orch):
    """A second __exit__ returned silently where C++'s second Scope::End()
    throws; a scope never entered was the same."""
    s = orch.scope()
    with pytest.raises(spyre.InvalidArgument, match="not entered"):
        s.__exit__(None, None, None)
    s.__enter__()
    s.__exit__(None, None, None)
    with pytest.raises(spyre.InvalidArgument, match=r"not entered \(or already exited\)"):
        s.__exit__(None, None, None)
    with s:  # entered again: a new scope
        pass


def test_scopes_exited_out_of_order_raise_and_end_in_order(orch):
    """s1.__exit__ before s2's (s2 inside s1) returned normally and left s1
    open for good: later implicit outputs outside any scope then failed
    'task ring ... cannot drain ... held by 1 open scope(s)'. Now it raises
    InvalidArgument and s1 stays entered until its own exit."""
    a = orch.alloc(NB)
    a[:] = 1
    orch.register_host_kernel(PYADD, lambda x, out: None)
    s1, s2 = orch.scope(), orch.scope()
    s1.__enter__()
    s2.__enter__()
    with pytest.raises(spyre.InvalidArgument, match="reverse order"):
        s1.__exit__(None, None, None)
    s2.__exit__(None, None, None)
    s1.__exit__(None, None, None)
    for _ in range(3 * 64):  # thrice the ring
        orch.submit(PYADD, spyre.WORKER_HOST, [("in", a), ("out", None, 16)])
    orch.wait_all()
    # One let go of unexited (garbage) ends with its inner scope.
    s3, s4 = orch.scope(), orch.scope()
    s3.__enter__()
    s4.__enter__()
    del s3
    s4.__exit__(None, None, None)
    for _ in range(3 * 64):  # thrice the ring
        orch.submit(PYADD, spyre.WORKER_HOST, [("in", a), ("out", None, 16)])
    orch.wait_all()


def test_a_host_kernel_returning_neither_an_int_nor_none_fails_its_task(orch):
    """A host kernel that returned a str (a message) passed as success;
    anything but None or an int status now fails its task, saying what it
    returned."""
    a = orch.alloc(NB)
    for kernel, result, message in [(71, "error: bad tile", "returned str 'error: bad tile', not an int status or None"),
                                     (72, 1.5, "returned float 1.5, not an int status or None"),
                                     (73, -1, "returned -1, outside a task status"),
                                     (74, 2**32, "returned 4294967296, outside a task status"),
                                     # np.multiply(..., out=) returns the array: it was
                                     # "raised TypeError: only integer scalar arrays ..."
                                     (80, np.zeros(2), "returned ndarray array\\(\\[0., 0.\\]\\), not an int status"),
                                     # A long repr was cut mid-line, a raw newline and a
                                     # stray "     ," in the message (an outside probe):
                                     # one line, cut with "...".
                                     (81, np.full(64, 2.0), "returned ndarray array\\(\\[2., 2., 2., 2., 2., 2., "
                                                            "2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., 2., "
                                                            "2\\.\\.\\., not an int status or None"),
                                     # Cut at 80 bytes, mid-character: the message was
                                     # no UTF-8, and raising it failed in turn.
                                     (82, "\u00e9" * 100, "returned str '" + "\u00e9" * 39 + "\\.\\.\\., not an int")]:
        orch.register_host_kernel(kernel, lambda x, r=result: r)
        orch.submit(kernel, spyre.WORKER_HOST, [("inout", a)])
        with pytest.raises(spyre.TaskFailed, match=message):
            orch.wait_all()
    # A numpy integer is an int status (it failed as "returned int64 0").
    for kernel, result in [(75, None), (76, 0), (77, np.int64(0)), (78, np.uint32(0))]:
        orch.register_host_kernel(kernel, lambda x, r=result: r)
        orch.submit(kernel, spyre.WORKER_HOST, [("inout", a)])
        orch.wait_all()
    orch.register_host_kernel(79, lambda x: np.int32(-2))
    orch.submit(79, spyre.WORKER_HOST, [("inout", a)])
    with pytest.raises(spyre.TaskFailed, match="returned -2, outside a task status"):
        orch.wait_all()


def test_the_docs_orchestrator_example_runs(dev):
    """docs/python.md's example registered a lambda that returned
    np.multiply's array, which fails its task: every run of it raised."""
    ADD, SCALE = 1, 2
    orch = spyre.Orchestrator(dev, task_ring_size=1024, heap_size=64 << 20, ready_queues="lockfree")
    orch.register_device_kernel(ADD, spyre.KernelBuilder().add([256]))

    def scale(x, y):
        np.multiply(x, 2, out=y)

    orch.register_host_kernel(SCALE, scale)
    A, B, E = (orch.device_alloc(1024) for _ in range(3))
    A[:], B[:] = np.arange(256, dtype=np.float32), 3.0
    with orch.scope():
        t0 = orch.submit(ADD, spyre.WORKER_VECTOR, [("in", A), ("in", B), ("out", None, 1024)])
        orch.submit(SCALE, spyre.WORKER_HOST, [("in", orch.task_output(t0)), ("out", E)])
    orch.wait_all()
    np.testing.assert_array_equal(E, 2 * (np.arange(256, dtype=np.float32) + 3.0))
    orch.close()


def test_device_alloc_buffers_live_across_many_laps_of_the_heap_ring(dev):
    """Python had no pto_device_malloc: a long-lived alloc() buffer pinned
    the heap ring's tail, and after a lap of implicit outputs submit failed
    OutOfMemory (an outside probe). device_alloc() memory is the function
    allocator's: 200 tasks with 64 KiB implicit outputs go round a 1 MiB
    heap many times, each reading the same long-lived input."""
    ADD = 1
    orch = spyre.Orchestrator(dev, task_ring_size=64, heap_size=1 << 20)
    orch.register_device_kernel(ADD, spyre.KernelBuilder().add([16384]))
    a = orch.device_alloc(65536)
    a[:] = np.arange(16384, dtype=np.float32)
    assert orch.device_address(a) >= 0
    for _ in range(200):
        with orch.scope():
            t = orch.submit(ADD, spyre.WORKER_VECTOR, [("in", a), ("in", a), ("out", None, 65536)])
        orch.wait_all()
    with orch.scope():
        t = orch.submit(ADD, spyre.WORKER_VECTOR, [("in", a), ("in", a), ("out", None, 65536)])
        orch.wait_all()
        np.testing.assert_array_equal(orch.task_output(t), 2 * np.arange(16384, dtype=np.float32))
    # The same with a long-lived alloc() buffer fails once the ring goes round.
    pinned = orch.alloc(65536)
    pinned[:] = 1.0
    with pytest.raises(spyre.OutOfMemory, match="heap ring"):
        for _ in range(200):
            with orch.scope():
                orch.submit(ADD, spyre.WORKER_VECTOR, [("in", pinned), ("in", pinned), ("out", None, 65536)])
            orch.wait_all()
    orch.wait_all()
    orch.free(pinned)
    orch.device_free(a)
    with pytest.raises(spyre.InvalidArgument):
        orch.device_free(a)  # freed already
    orch.close()


def test_a_view_kept_past_device_free_reaches_no_later_allocation(dev):
    """device_free() gives the memory back once the last view of it goes:
    freed at once, a view kept past the free wrote into the next
    device_alloc() at that address (found probing from outside)."""
    orch = spyre.Orchestrator(dev, task_ring_size=16, heap_size=1 << 20)
    for _ in range(3):
        a = orch.device_alloc(4096)
        a_part = a[16:32]  # a view of the view keeps it too
        a[:] = 1.0
        orch.device_free(a)
        b = orch.device_alloc(4096)
        assert orch.device_address(b) != orch.device_address(a)
        b[:] = 42.0
        a[:] = 7.0
        a_part[:] = 8.0
        assert (b == 42.0).all()
        del a
        c = orch.device_alloc(4096)
        assert (b == 42.0).all() and not c.any()
        del a_part  # the last view: the memory goes back now
        d = orch.device_alloc(4096)
        assert not d.any()  # zeroed, as device_alloc memory is
        for x in (b, c, d):
            orch.device_free(x)
        del b, c, d
    orch.close()


def test_device_free_of_a_slice_is_refused_and_frees_nothing(dev):
    """device_free(a[0:10]) freed all of `a` (the slice starts where it
    does): the rest of the program's view then pointed at memory given
    back. A view of part of the buffer is refused; the buffer, a reshaped
    view of all of it and its address are still taken."""
    orch = spyre.Orchestrator(dev, task_ring_size=16, heap_size=1 << 20)
    a = orch.device_alloc(4096)
    a[:] = 3.0
    with pytest.raises(spyre.InvalidArgument, match="a view of 40 of the buffer's 4096 bytes"):
        orch.device_free(a[0:10])
    b = orch.device_alloc(4096)
    assert orch.device_address(b) != orch.device_address(a)
    assert (a == 3.0).all()
    orch.device_free(a.reshape(32, 32))  # all of it
    with pytest.raises(spyre.InvalidArgument, match="freed already"):
        orch.device_free(a)
    orch.device_free(b)
    orch.close()


def test_a_host_kernel_s_views_kept_past_close_read_zeros(dev):
    """A host kernel's views had no base: one kept past close() pointed into
    the unmapped runtime memory, and touching it segfaulted. They now keep
    the runtime's mapping, as alloc() views do: zeros after close()."""
    o = spyre.Orchestrator(dev, task_ring_size=64, heap_size=4 << 20)
    kept = []

    def keep(x):
        kept.append(x)
        x += 1

    o.register_host_kernel(PYADD, keep, dtype=np.int32)
    acc = o.alloc(16, dtype=np.int32)
    acc[:] = 5
    o.submit(PYADD, spyre.WORKER_HOST, [("inout", acc)])
    o.wait_all()
    assert (acc == 6).all() and (kept[0] == 6).all()  # the task's buffer while it lives
    del acc
    o.close()
    assert (kept[0] == 0).all()
    kept[0][...] = 9
    assert (kept[0] == 9).all()


def test_views_kept_past_close_read_zeros_and_reach_no_device_memory(dev):
    """An alloc() view touched after Orchestrator.close() segfaulted (the
    runtime's mapping was gone). Now the mapping stays for the view, over
    private zeros: what the device hands out next is not reachable."""
    o = spyre.Orchestrator(dev, task_ring_size=64, heap_size=4 << 20)
    a = o.alloc(4096)
    a[...] = 3
    o.close()
    assert (a == 0).all()
    buf = dev.alloc(4 << 20)  # the heap's device memory, given out again
    s = dev.default_stream
    # Known bytes first: what earlier tests freed may hold anything (4s too).
    s.copy_to_device(np.full(1 << 20, 7, np.float32), buf)
    s.synchronize()
    a[...] = 4
    out = np.ones(1 << 20, np.float32)
    s.copy_from_device(buf, out)
    s.synchronize()
    assert (out == 7).all()
    buf.free()
    assert (a == 4).all()
