# SPDX-License-Identifier: Apache-2.0
"""spyre.Host and spyre.Device: an embedded mock of 2 cards x 2 VFs, its
functions and cards, opening, Busy, close and use after close."""
import numpy as np
import pytest

import spyre


@pytest.fixture(scope="module")
def host22():
    h = spyre.Host.embedded_mock(cards=2, vfs=2, mem="2G")
    yield h
    h.close()


def test_functions_and_cards(host22):
    fns = host22.functions
    assert len(fns) == 6
    assert [f.kind for f in fns].count("PF") == 2 and [f.kind for f in fns].count("VF") == 4
    assert [f.index for f in fns] == list(range(6))
    cards = host22.cards
    assert [c.card for c in cards] == [0, 1]
    for c in cards:
        assert len(c.functions) == 3
        assert fns[c.functions[0]].kind == "PF"  # PF first
        assert all(fns[i].id.card == c.card for i in c.functions)
    vf = next(f for f in fns if f.kind == "VF")
    assert host22.find(vf.pci_address).index == vf.index
    assert host22.find(str(vf.index)).pci_address == vf.pci_address
    assert vf.memory_bytes > 0
    assert "embedded" in host22.describe() or host22.describe()


def test_open_vfs_on_both_cards_and_round_trip(host22, rng):
    vfs = [f for f in host22.functions if f.kind == "VF"]
    picks = [vfs[0], next(f for f in vfs if f.id.card != vfs[0].id.card)]
    devices = host22.open_all([f.pci_address for f in picks])
    try:
        for d, f in zip(devices, picks):
            assert d.pci_address == f.pci_address and d.id == f.id
            assert d.allocator_mode == "VF"
            data = rng.standard_normal((257, 129)).astype(np.float32)
            t = spyre.SpyreTensor.from_numpy(d, data)
            np.testing.assert_array_equal(t.to_numpy(), data)
            stats = d.memory_stats()
            assert stats.bytes_in_use >= data.nbytes and stats.live_allocations >= 1
            assert stats.capacity > 0 and stats.regions
    finally:
        for d in devices:
            d.close()


def test_busy_then_free_after_close(host22):
    d = host22.open("0")
    with pytest.raises(spyre.Busy):
        host22.open("0")
    with pytest.raises(spyre.InvalidArgument):  # duplicates refused before anything opens
        host22.open_all(["1", "1"])
    d.close()
    assert d.closed
    with host22.open("0") as again:
        assert not again.closed and again.allocator_mode == "PF"
    assert again.closed


def test_use_after_close_raises(host22):
    d = host22.open("2")
    s = d.create_stream()
    b = d.alloc(4096)
    t = spyre.SpyreTensor.from_numpy(d, np.arange(10, dtype=np.int32))
    e = spyre.Event(d)
    read_before = d.default_stream  # handed out again, released, after close (not a raise)
    d.close()
    d.close()  # idempotent
    checks = [
        (lambda: d.alloc(16), "Device.alloc"),
        (lambda: d.memory_stats(), "Device.memory_stats"),
        (lambda: d.synchronize(), "Device.synchronize"),
        (lambda: s.synchronize(), "FlexStream.synchronize"),
        (lambda: b.size, "DeviceBuffer.size"),
        (lambda: t.to_numpy(), "SpyreTensor.to_numpy"),
        (lambda: e.query(), "Event.query"),
        (lambda: d.create_stream(), "Device.create_stream"),
        (lambda: spyre.SpyreTensor.empty(d, [4]), "SpyreTensor.empty"),
        (lambda: d.default_stream, "Device.default_stream"),
        (lambda: read_before.synchronize(), "FlexStream.synchronize"),
    ]
    for call, what in checks:
        with pytest.raises(spyre.InvalidArgument, match=f"{what}: device {d.pci_address} is closed"):
            call()
    # The function is free again.
    host22.open("2").close()


def test_default_host_and_closed_host():
    h = spyre.Host()  # an embedded mock: 1 card, 2 VFs
    assert len(h.functions) == 3
    d = h.open("0")
    h.close()
    with pytest.raises(spyre.InvalidArgument, match="Host is closed"):
        h.functions
    # A Device outlives its Host (it keeps the environment).
    t = spyre.SpyreTensor.from_numpy(d, np.ones(5, np.float32))
    assert t.to_numpy().tolist() == [1.0] * 5
    d.close()


def test_device_open_from_environment(monkeypatch):
    monkeypatch.setenv("FLEX_DEVICE", "MOCK")
    with spyre.Device.open() as d:
        assert d.pci_address.endswith(":00.0")
        assert d.memory_stats().capacity > 0
        assert d.default_stream is d.default_stream
        assert repr(d).startswith("<spyre.Device")


@pytest.fixture
def mounted(tmp_path):
    """A spyre-mockdev mounted by hand (1 card, 1 VF), as a user runs one."""
    import os
    import signal
    import subprocess
    mockdev = os.environ.get("SPYRE_MOCKDEV")
    if not mockdev or not os.path.exists("/dev/fuse"):
        if os.environ.get("SPYRE_REQUIRE_FUSE") == "1":
            pytest.fail("SPYRE_REQUIRE_FUSE=1 but no SPYRE_MOCKDEV or /dev/fuse")
        pytest.skip("needs SPYRE_MOCKDEV and /dev/fuse")
    mount = tmp_path / "mnt"
    mount.mkdir()
    rfd, wfd = os.pipe()
    daemon = subprocess.Popen([mockdev, "--mount", str(mount), "--cards", "1", "--vfs", "1", "--mem", "1G",
                               "--shm-prefix", f"pytest-{os.getpid()}", "--log-level", "error", "--foreground",
                               "--ready-fd", str(wfd)], pass_fds=(wfd,), start_new_session=True)
    os.close(wfd)
    ready = os.read(rfd, 64)
    os.close(rfd)
    assert ready.startswith(b"ready"), ready
    yield mount, daemon
    if daemon.poll() is None:
        os.killpg(daemon.pid, signal.SIGTERM)
    daemon.wait(timeout=30)
    subprocess.run(["fusermount3", "-u", "-q", str(mount)], check=False)


def test_mounted_mock_and_daemon_death(mounted):
    import os
    import signal
    mount, daemon = mounted
    host = spyre.Host.device_root(mount)
    assert [f.kind for f in host.functions] == ["PF", "VF"]
    d = host.open("1")
    s = d.create_stream()
    t = spyre.SpyreTensor.from_numpy(d, np.arange(64, dtype=np.float32), stream=s)
    np.testing.assert_array_equal(t.to_numpy(stream=s), np.arange(64, dtype=np.float32))
    os.killpg(daemon.pid, signal.SIGKILL)  # the daemon dies
    daemon.wait(timeout=30)
    with pytest.raises(spyre.DeviceLost):
        for _ in range(100):  # the first enqueues may still be accepted; the wait reports the loss
            buf = d.alloc(1 << 20)
            s.copy_to_device(np.ones(1 << 18, np.int32), buf)
            s.synchronize()
    d.close()
    host.close()
