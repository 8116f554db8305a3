# SPDX-License-Identifier: Apache-2.0
"""DLPack: spyre.from_dlpack from host producers, SpyreTensor.__dlpack__ to
numpy (and torch when installed; nothing requires it)."""
import gc
import signal
import sys
import threading
import time

import numpy as np
import pytest

import spyre


@pytest.mark.parametrize("np_dtype", [np.float16, np.float32, np.int8, np.int32])
def test_numpy_round_trip(dev, rng, np_dtype):
    a = (rng.standard_normal((129, 67)) * 50).astype(np_dtype)
    t = spyre.from_dlpack(a, dev)
    assert t.shape == a.shape and t.dtype == spyre.dtype_of(np_dtype)
    assert t.__dlpack_device__() == (1, 0)  # kDLCPU: what __dlpack__ exports is host memory
    b = np.from_dlpack(t)
    assert b.dtype == a.dtype and b.shape == a.shape and b.tobytes() == a.tobytes()


def test_capsules(dev):
    a = np.arange(1000, dtype=np.int32)
    cap = a.__dlpack__()
    t = spyre.from_dlpack(cap, dev, layout=spyre.TensorLayout.Sticks)
    with pytest.raises(spyre.InvalidArgument, match="not an unused 'dltensor' capsule"):
        spyre.from_dlpack(cap, dev)  # consumed
    np.testing.assert_array_equal(t.to_numpy(), a)
    exported = t.__dlpack__()
    del exported  # never consumed: the capsule frees the host copy
    gc.collect()


def test_source_lives_until_the_copy_is_done(dev):
    a = np.full((512, 512), 3.0, np.float32)
    t = spyre.from_dlpack(a, dev)
    del a
    gc.collect()
    assert float(t.to_numpy().sum()) == 3.0 * 512 * 512


def test_errors(dev):
    with pytest.raises(spyre.InvalidArgument, match="not C-contiguous"):
        spyre.from_dlpack(np.zeros((6, 6), np.float32)[:, ::2], dev)
    with pytest.raises(spyre.InvalidArgument, match="DLPack dtype .* not supported"):
        spyre.from_dlpack(np.zeros(3, np.float64), dev)
    with pytest.raises(spyre.InvalidArgument, match="list has no __dlpack__"):
        spyre.from_dlpack([1, 2], dev)
    # As from_numpy: a 0-d tensor would come back as shape (1,).
    with pytest.raises(spyre.InvalidArgument, match="0-d tensor has no dims"):
        spyre.from_dlpack(np.array(3.0, np.float32), dev)
    assert spyre.from_dlpack(np.float32([3.0]), dev).to_numpy().shape == (1,)

    class OnGpu:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):
            raise AssertionError("not called")

    with pytest.raises(spyre.Unsupported, match="DLPack device type 2"):
        spyre.from_dlpack(OnGpu(), dev)


def test_torch_when_installed(dev):
    torch = pytest.importorskip("torch")
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    t = spyre.from_dlpack(x, dev)
    y = torch.from_dlpack(t)
    assert torch.equal(x, y)
    bf = torch.ones(8, dtype=torch.bfloat16)
    tb = spyre.from_dlpack(bf, dev)
    assert tb.dtype == spyre.DType.BF16 and torch.equal(torch.from_dlpack(tb), bf)


def _crafted_capsule(keep, ndim, shape, data):
    """A 'dltensor' capsule of a float32 host tensor, fields as given."""
    import ctypes

    class DLDevice(ctypes.Structure):
        _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]

    class DLDataType(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                    ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                    ("byte_offset", ctypes.c_uint64)]

    class DLManagedTensor(ctypes.Structure):
        _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]

    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    m = DLManagedTensor()
    m.dl_tensor.data, m.dl_tensor.ndim = data, ndim
    m.dl_tensor.device = DLDevice(1, 0)  # kDLCPU
    m.dl_tensor.dtype = DLDataType(2, 32, 1)  # float32
    if shape is not None:
        dims = (ctypes.c_int64 * len(shape))(*shape)
        keep.append(dims)
        m.dl_tensor.shape = dims
    keep.append(m)
    return new(ctypes.addressof(m), b"dltensor", None)


def test_a_malformed_dlpack_capsule_is_invalid_argument(dev):
    """A capsule of ndim -1 came out as Internal ("cannot create
    std::vector larger than max_size()"); one without a shape or data is
    refused too, before anything reads it."""
    keep, buf = [], np.arange(4, dtype=np.float32)
    for ndim, shape, data in [(-1, [4], buf.ctypes.data), (1, None, buf.ctypes.data), (1, [4], None)]:
        with pytest.raises(spyre.InvalidArgument, match="a malformed DLPack tensor"):
            spyre.from_dlpack(_crafted_capsule(keep, ndim, shape, data), dev)
    np.testing.assert_array_equal(spyre.from_dlpack(_crafted_capsule(keep, 1, [4], buf.ctypes.data), dev).to_numpy(), buf)


def test_ctrl_c_during_export_keeps_the_copys_destination(dev):
    """__dlpack__ queues the copy into the capsule's host buffer, then
    waits. A Ctrl-C in that wait freed the buffer while the copy was still
    queued: the copy later wrote into freed memory (a segfault in 7 of 9
    runs, or another object's bytes overwritten). The buffer now lives
    until the copy has run."""
    s = dev.default_stream
    t = spyre.SpyreTensor.from_numpy(dev, np.ones(16 << 20, np.float32))  # 64 MiB: its own mapping
    release, held = threading.Event(), threading.Event()

    def hold():
        held.set()
        release.wait(30)

    def queue_hold():  # runs inside __dlpack__'s first wait; the copy goes behind `hold`
        s.add_callback(hold)

    def interrupt():
        assert held.wait(30)
        time.sleep(0.2)  # into the wait for the copy
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    s.add_callback(lambda: time.sleep(0.05))
    s.add_callback(queue_hold)
    threading.Thread(target=interrupt).start()
    with pytest.raises(KeyboardInterrupt):
        t.__dlpack__()
    junk = [bytearray(1 << 20) for _ in range(96)]  # takes what the export freed, if it did
    release.set()
    dev.synchronize()
    assert all(not any(j) for j in junk)


def test_a_producer_that_refuses_to_export_is_invalid_argument(dev):
    """numpy's __dlpack__ refuses read-only and bool arrays with BufferError,
    which came out of from_dlpack as it was."""
    for a in (np.frombuffer(bytes(16), np.float32), np.zeros(4, bool)):
        with pytest.raises(spyre.InvalidArgument, match="the producer refused to export"):
            spyre.from_dlpack(a, dev)


@pytest.mark.parametrize("upload", ["from_numpy", "from_dlpack"])
def test_ctrl_c_ends_an_upload_behind_a_callback_that_does_not_return(dev, upload, interrupt_main_once_it_waits_in):
    """Ctrl-C while an upload waits for its copy behind a stream callback
    that does not return raised only once the callback ended: the tensor
    nobody would see was freed on the spot, and a free waits for the work
    queued before it. The stream now lets go of it after that work, and its
    memory comes back then."""
    before = dev.memory_stats().bytes_in_use
    gate, finished = threading.Event(), threading.Event()

    def blocked():
        gate.wait(60)
        finished.set()

    dev.default_stream.add_callback(blocked)
    threading.Thread(target=interrupt_main_once_it_waits_in,
                     args=("test_ctrl_c_ends_an_upload_behind_a_callback_that_does_not_return",)).start()
    a = np.arange(1 << 16, dtype=np.float32)
    with pytest.raises(KeyboardInterrupt):
        if upload == "from_numpy":
            spyre.SpyreTensor.from_numpy(dev, a)
        else:
            spyre.from_dlpack(a, dev)
    assert not finished.is_set(), "the interrupt waited for the callback"
    gate.set()
    dev.synchronize()
    for _ in range(1000):  # the scheduler frees it after the work before it, soon after
        if dev.memory_stats().bytes_in_use == before:
            break
        time.sleep(0.01)
    assert dev.memory_stats().bytes_in_use == before
    t = spyre.SpyreTensor.from_numpy(dev, a)  # the stream goes on
    np.testing.assert_array_equal(t.to_numpy(), a)


def test_a_producer_that_misbehaves_is_invalid_argument(dev):
    """A producer whose __dlpack_device__ is no (type, id) pair got pybind11's
    cast text, and one whose __dlpack__ raised got its exception out as it
    was; both are InvalidArgument naming what the producer did."""
    class BadDevice:
        def __dlpack__(self, stream=None):
            return np.ones(4, np.float32).__dlpack__()

        def __dlpack_device__(self):
            return "cpu"

    class Raises:
        def __dlpack__(self, stream=None):
            raise RuntimeError("producer failed")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(spyre.InvalidArgument, match="__dlpack_device__ returned 'cpu', not"):
        spyre.from_dlpack(BadDevice(), dev)
    with pytest.raises(spyre.InvalidArgument, match="__dlpack__ raised RuntimeError: producer failed"):
        spyre.from_dlpack(Raises(), dev)

    class DeviceRaises(BadDevice):
        def __dlpack_device__(self):
            raise RuntimeError("no device")

    with pytest.raises(spyre.InvalidArgument, match="__dlpack_device__ raised RuntimeError: no device"):
        spyre.from_dlpack(DeviceRaises(), dev)


def test_an_upload_that_another_thread_closed_the_device_under_is_closed():
    """Another thread's close() while an upload waited behind a stream
    callback let the upload return a freed tensor (an outside probe); the
    call ends "is closed", as every call does once the device closed."""
    with spyre.Host.embedded_mock(cards=1, vfs=0, mem="1G") as own_host:  # the module's dev stays open
        _upload_while_another_thread_closes(own_host.open("0"))


def _upload_while_another_thread_closes(d):
    gate = threading.Event()
    d.default_stream.add_callback(lambda: gate.wait(60))
    name = "_upload_while_another_thread_closes"

    def close_once_it_waits():
        main = threading.main_thread().ident
        for _ in range(3000):
            frame = sys._current_frames().get(main)
            if frame is not None and frame.f_code.co_name == name:
                break
            time.sleep(0.01)
        closing = threading.Thread(target=d.close)
        closing.start()
        time.sleep(0.2)  # the close waits for the callback
        gate.set()
        closing.join(60)

    threading.Thread(target=close_once_it_waits).start()
    with pytest.raises(spyre.InvalidArgument, match="SpyreTensor.from_numpy: device .* is closed"):
        spyre.SpyreTensor.from_numpy(d, np.arange(1 << 12, dtype=np.float32))
