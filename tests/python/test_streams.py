# SPDX-License-Identifier: Apache-2.0
"""FlexStream, Event, SpyreStream: ordering, callbacks, sticky errors, the
GIL released in waits, Python threads on separate streams."""
import threading
import time

import numpy as np
import pytest

import spyre


def test_streams_and_order(dev):
    s = dev.create_stream(priority=-1)
    assert s.priority == -1 and s.index > 0 and s.device is dev
    buf = dev.alloc(4)
    seen = []
    for i in range(5):
        s.copy_to_device(np.array([i], np.int32), buf)
        s.add_callback(lambda i=i: seen.append(i))
    out = np.zeros(1, np.int32)
    s.copy_from_device(buf, out)
    s.synchronize()
    assert seen == [0, 1, 2, 3, 4] and out[0] == 4
    assert s.query() == spyre.StreamStatus.Idle
    assert s.completed == s.enqueued and s.enqueued >= 11
    assert s.last_error() is None


def test_events_order_streams(dev):
    a, b = dev.create_stream(), dev.create_stream()
    buf = dev.alloc(1 << 20)
    start, done = spyre.Event(dev), spyre.Event(dev)
    assert done.query()  # never recorded
    settled = dev.scheduler_stats().host_events
    start.record(a)
    a.copy_to_device(np.full(1 << 18, 7, np.int32), buf)
    a.record(done)
    b.wait(done)
    out = np.zeros(1 << 18, np.int32)
    b.copy_from_device(buf, out)
    b.synchronize()
    assert (out == 7).all()
    done.synchronize()
    assert done.query()
    assert spyre.Event.elapsed_time(start, done) >= 0.0
    # Both records and B's wait found their streams idle: settled on the host.
    assert dev.scheduler_stats().host_events - settled == 3
    never = spyre.Event(dev)
    with pytest.raises(spyre.InvalidArgument):
        spyre.Event.elapsed_time(never, done)


def test_callback_exception_is_sticky_then_reset(dev):
    s = dev.create_stream()

    def boom():
        raise KeyError("no such key")

    s.add_callback(boom)
    with pytest.raises(spyre.TaskFailed, match="FlexStream callback raised KeyError: 'no such key'") as info:
        s.synchronize()
    assert info.value.stream == s.index
    assert s.query() == spyre.StreamStatus.Faulted
    err = s.last_error()
    assert isinstance(err, spyre.TaskFailed) and "KeyError" in err.message
    with pytest.raises(spyre.TaskFailed):  # further enqueues throw it too
        s.add_callback(lambda: None)
    s.reset()
    ran = []
    s.add_callback(lambda: ran.append(1))
    s.synchronize()
    assert ran == [1] and s.query() == spyre.StreamStatus.Idle


def test_wrong_device_mixes(dev, dev2):
    s = dev.create_stream()
    e2 = spyre.Event(dev2)
    with pytest.raises(spyre.WrongDevice, match="event belongs to " + dev2.pci_address):
        s.wait(e2)
    with pytest.raises(spyre.WrongDevice):
        e2.record(s)
    with pytest.raises(spyre.WrongDevice):
        spyre.Event.elapsed_time(spyre.Event(dev), e2)


def test_synchronize_releases_the_gil(dev):
    """A callback blocks the stream until the main thread, running Python,
    lets it go; a waiter in synchronize() must not hold the GIL meanwhile."""
    s = dev.create_stream()
    gate = threading.Event()
    s.add_callback(lambda: gate.wait(30))
    waited = []

    def waiter():
        s.synchronize()
        waited.append(True)

    t = threading.Thread(target=waiter)
    t.start()
    total = sum(i * i for i in range(200000))  # Python work while the waiter waits
    assert not waited
    gate.set()
    t.join(30)
    assert waited == [True] and total > 0


def test_threads_drive_separate_streams(dev):
    n_threads, rounds, n = 4, 40, 4096 + 13
    errors = []

    def work(k):
        try:
            s = dev.create_stream()
            buf = dev.alloc(n * 4)
            out = np.empty(n, np.int32)
            for r in range(rounds):
                src = np.arange(n, dtype=np.int32) * (k + 1) + r
                s.copy_to_device(src, buf)
                s.copy_from_device(buf, out)
                s.synchronize()
                if not np.array_equal(out, src):
                    errors.append((k, r))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []


def test_spyre_stream(dev):
    ss = spyre.SpyreStream(dev, priority=1)
    fs = ss.flex_stream
    assert fs.priority == 1 and ss.device is dev
    buf = dev.alloc(8)
    fs.copy_to_device(np.arange(2, dtype=np.int32), buf)
    ss.synchronize()
    d = spyre.SpyreStream.default(dev)
    assert d.flex_stream.index == dev.default_stream.index


def test_ctrl_c_ends_stream_event_and_device_waits_the_work_goes_on(dev, interrupt_main_once_it_waits_in):
    """synchronize waited in C++ without looking at signals: behind a held
    callback, SIGINT came out only once the callback returned (30 s here).
    Now a stream's, an event's and the device's synchronize raise
    KeyboardInterrupt at once; the work goes on and a later wait sees it."""
    name = "test_ctrl_c_ends_stream_event_and_device_waits_the_work_goes_on"
    s = dev.create_stream()
    release, ran, waiting = threading.Event(), threading.Event(), threading.Event()

    def held():
        release.wait(30)
        ran.set()

    def interrupt_the_wait():
        assert waiting.wait(30)
        time.sleep(0.05)  # into the wait
        interrupt_main_once_it_waits_in(name)

    s.add_callback(held)
    ev = spyre.Event(dev)
    ev.record(s)
    start = time.monotonic()
    for wait in (s.synchronize, ev.synchronize, dev.synchronize):
        waiting.clear()
        threading.Thread(target=interrupt_the_wait).start()
        with pytest.raises(KeyboardInterrupt):
            waiting.set()
            wait()
        assert not ran.is_set()
    assert time.monotonic() - start < 20
    release.set()
    s.synchronize()
    ev.synchronize()
    assert ran.is_set() and ev.query()


def test_a_copy_of_a_negative_or_too_large_size_says_which(dev):
    """nbytes=-1 said "but the host array holds 64", as if it were too
    large (an outside probe)."""
    s = dev.create_stream()
    buf = dev.alloc(64)
    host = np.zeros(16, np.float32)
    with pytest.raises(spyre.InvalidArgument, match=r"copy_to_device: nbytes=-1 is negative \(it must be >= 0\)"):
        s.copy_to_device(host, buf, 0, -1)
    with pytest.raises(spyre.InvalidArgument, match="copy_from_device: nbytes=65 but the host array holds 64"):
        s.copy_from_device(buf, host, 0, 65)
    with pytest.raises(spyre.InvalidArgument, match=r"FlexStream.launch: nbytes=-1 is negative \(it must be >= 0"):
        s.launch(buf, 0, -1)  # was "18446744073709551615 bytes at offset 0 do not fit"
    s.copy_to_device(np.arange(16, dtype=np.float32), buf, 0, 64)
    s.copy_from_device(buf, host, 0, 64)
    s.synchronize()
    np.testing.assert_array_equal(host, np.arange(16, dtype=np.float32))


def test_python_copies_have_their_api_span_in_a_trace(tmp_path):
    # Each enqueue's flow arrow starts inside the enqueuing call's span on
    # the calling thread. Copies from Python went around FlexStream's own
    # calls, so they had no span and their arrows started in none (an
    # outside probe, 3 of 3 traces).
    import json
    import os
    import subprocess
    import sys

    snippet = (
        "import numpy as np, spyre\n"
        "with spyre.Host.embedded_mock(cards=1, vfs=0, mem='1G') as host, host.open('0') as dev:\n"
        "    s = dev.create_stream()\n"
        "    buf = dev.alloc(1 << 20)\n"
        "    a = np.ones(1 << 18, np.float32)\n"
        "    s.copy_to_device(a, buf, 0, a.nbytes)\n"
        "    b = np.empty_like(a); s.copy_from_device(buf, b, 0, b.nbytes); s.synchronize()\n"
        "    t = spyre.SpyreTensor.from_numpy(dev, a.reshape(512, 512))\n"
        "    assert (t.to_numpy().ravel() == a).all()\n"
    )
    path = tmp_path / "run.json"
    env = dict(os.environ, SPYRE_TRACE=str(path))
    subprocess.run([sys.executable, "-c", snippet], check=True, env=env, timeout=120)
    events = json.loads(path.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    spans = [e for e in events if e.get("ph") == "X"]
    names = {e["name"] for e in spans}
    assert "FlexStream::CopyToDevice" in names and "FlexStream::CopyFromDevice" in names, sorted(names)
    starts = [e for e in events if e.get("ph") == "s"]
    assert starts, "no flow arrows"
    for f in starts:
        inside = [e for e in spans if e["pid"] == f["pid"] and e.get("tid") == f.get("tid")
                  and e["ts"] <= f["ts"] <= e["ts"] + e["dur"]]
        assert inside, f"flow {f.get('name')} at {f['ts']} starts in no span on its thread"
