# SPDX-License-Identifier: Apache-2.0
"""SpyreTensor to and from numpy, dtypes, layouts (seed 002)."""
import gc
import threading

import numpy as np
import pytest

import spyre

SHAPES = [(1,), (5,), (3, 1000), (17, 33, 7), (1025, 1031), (2, 3, 4, 5)]


def make(rng, shape, np_dtype):
    if np.dtype(np_dtype).kind == "f":
        return rng.standard_normal(shape).astype(np_dtype)
    info = np.iinfo(np_dtype)
    return rng.integers(info.min, info.max, shape, dtype=np_dtype, endpoint=True)


@pytest.mark.parametrize("np_dtype", [np.float16, np.float32, np.int8, np.int32])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", [spyre.TensorLayout.Dense, spyre.TensorLayout.Sticks])
def test_round_trip(dev, rng, np_dtype, shape, layout):
    a = make(rng, shape, np_dtype)
    t = spyre.SpyreTensor.from_numpy(dev, a, layout=layout)
    assert t.shape == shape and t.layout == layout
    assert t.dtype == spyre.dtype_of(np_dtype) and t.numel == a.size and t.ndim == len(shape)
    assert t.nbytes >= a.nbytes
    b = t.to_numpy()
    assert b.dtype == a.dtype and b.shape == a.shape
    assert b.tobytes() == a.tobytes()


def test_bf16_travels_as_uint16_bits(dev, rng):
    bits = rng.integers(0, 1 << 16, (64, 70), dtype=np.uint16)
    t = spyre.SpyreTensor.from_numpy(dev, bits, dtype=spyre.DType.BF16)
    assert t.dtype == spyre.DType.BF16
    out = t.to_numpy()
    assert out.dtype == np.uint16 and out.tobytes() == bits.tobytes()
    with pytest.raises(spyre.InvalidArgument, match="dtype uint16 is not supported"):
        spyre.SpyreTensor.from_numpy(dev, bits)  # uint16 without dtype=BF16


def test_sticks_tensor_is_padded_on_device(dev):
    a = np.arange(3 * 40, dtype=np.float32).reshape(3, 40)
    t = spyre.SpyreTensor.from_numpy(dev, a, layout=spyre.TensorLayout.Sticks)
    assert t.nbytes == 3 * 256  # each 160-byte row padded to two 128-byte sticks
    np.testing.assert_array_equal(t.to_numpy(), a)


def test_async_copies_on_a_stream(dev, rng):
    s = dev.create_stream()
    a = make(rng, (300, 301), np.float32)
    t = spyre.SpyreTensor.from_numpy(dev, a, stream=s)
    out = np.empty_like(a)
    t.copy_to_host(out, s)
    s.synchronize()
    np.testing.assert_array_equal(out, a)
    b = make(rng, (300, 301), np.float32)
    t.copy_from_host(b, s)
    t.copy_to_host(out, s)
    s.synchronize()
    np.testing.assert_array_equal(out, b)
    np.testing.assert_array_equal(t.to_numpy(stream=s), b)


def test_errors(dev, dev2):
    with pytest.raises(spyre.InvalidArgument, match="dtype float64 is not supported"):
        spyre.SpyreTensor.from_numpy(dev, np.zeros(4))
    with pytest.raises(spyre.InvalidArgument, match="dtype complex64 is not supported"):
        spyre.SpyreTensor.from_numpy(dev, np.zeros(4, np.complex64))
    # Swapped byte order: read as this machine's, the numbers would be others.
    for big in (np.arange(4, dtype=">f4"), np.array([1.5, -2, 3.25], ">f2"), np.array([1, 2, 3], ">i4")):
        with pytest.raises(spyre.InvalidArgument, match="not in this machine's byte order"):
            spyre.SpyreTensor.from_numpy(dev, big)
    t_big, s_big = spyre.SpyreTensor.from_numpy(dev, np.arange(4, dtype=np.float32)), dev.create_stream()
    with pytest.raises(spyre.InvalidArgument, match="not in this machine's byte order"):
        t_big.copy_to_host(np.zeros(4, ">f4"), s_big)
    with pytest.raises(spyre.InvalidArgument, match="not in this machine's byte order"):
        t_big.copy_from_host(np.ones(4, ">f4"), s_big)
    with pytest.raises(spyre.InvalidArgument, match="array of dtype float32 given with dtype=fp16"):
        spyre.SpyreTensor.from_numpy(dev, np.zeros(4, np.float32), dtype="fp16")
    with pytest.raises(spyre.InvalidArgument, match="0-d array has no dims"):
        spyre.SpyreTensor.from_numpy(dev, np.array(3.0, np.float32))
    with pytest.raises(spyre.InvalidArgument, match="dim 0 < 1"):
        spyre.SpyreTensor.from_numpy(dev, np.zeros((0, 3), np.float32))
    with pytest.raises(spyre.InvalidArgument, match="not C-contiguous"):
        spyre.SpyreTensor.from_numpy(dev, np.zeros((8, 8), np.float32).T)
    with pytest.raises(spyre.InvalidArgument, match="expected a numpy array, got list"):
        spyre.SpyreTensor.from_numpy(dev, [1.0, 2.0])
    with pytest.raises(spyre.InvalidArgument):
        spyre.SpyreTensor.empty(dev, [2, 0])
    t = spyre.SpyreTensor.from_numpy(dev, np.ones((4, 4), np.float32))
    s = dev.create_stream()
    with pytest.raises(spyre.InvalidArgument, match="dtype int32 given with dtype=fp32"):
        t.copy_to_host(np.empty((4, 4), np.int32), s)
    with pytest.raises(spyre.InvalidArgument, match="the array has 15 elements"):
        t.copy_to_host(np.empty(15, np.float32), s)
    with pytest.raises(spyre.InvalidArgument, match="read-only"):
        t.copy_to_host(_readonly(), s)
    other = dev2.create_stream()
    with pytest.raises(spyre.WrongDevice, match="tensor belongs to " + dev.pci_address):
        t.copy_to_host(np.empty((4, 4), np.float32), other)
    with pytest.raises(spyre.WrongDevice, match="stream belongs to " + dev2.pci_address):
        spyre.SpyreTensor.from_numpy(dev, np.ones(3, np.float32), stream=other)
    with pytest.raises(spyre.WrongDevice):
        t.to_numpy(stream=other)
    t.free()
    with pytest.raises(spyre.InvalidArgument, match="the object was freed"):
        t.to_numpy()
    with pytest.raises(TypeError):
        spyre.SpyreTensor.from_numpy("not a device", np.ones(3, np.float32))


def _readonly():
    a = np.empty((4, 4), np.float32)
    a.setflags(write=False)
    return a


def test_dtypes_and_layout_classes():
    assert spyre.dtype_of(np.float16) == spyre.DType.FP16
    assert spyre.dtype_of("float32") == spyre.DType.FP32
    assert spyre.dtype_of("bf16") == spyre.DType.BF16
    assert spyre.dtype_of(spyre.DType.INT8) == spyre.DType.INT8
    assert spyre.DType.FP16.itemsize == 2 and spyre.DType.BF16.numpy == np.uint16
    with pytest.raises(spyre.InvalidArgument, match="is not a dtype"):
        spyre.dtype_of(object())
    # Seed 002: a [R, C] fp16 host tensor is [tiles, R, stick] on device.
    host = spyre.HostLayout.contiguous([3, 100], "fp16")
    assert host.stride == [100, 1] and host.is_contiguous() and host.numel() == 300
    d = spyre.DeviceLayout.default(host)
    assert d.device_size == [2, 3, 64] and d.dim_map == [1, 0, 1]
    assert d.device_bytes() == 2 * 3 * 128
    assert d.host_index(d.device_offset([2, 70])) == [2, 70]
    assert d.host_index(64 * 3 + 63) is None  # tile 1, row 0, lane 63: column 127 > 99 is padding
    with pytest.raises(spyre.InvalidArgument):
        spyre.HostLayout([2, 3], [1], "fp32")
    fp = spyre.footprint([3, 40], np.float32, spyre.TensorLayout.Sticks)
    assert fp.bytes == 3 * 256 and fp.strides == [64, 1]


@pytest.mark.parametrize("shape,dtype", [((4096,), np.int32), ((256, 32), np.float32), ((256, 64), np.float16)])
def test_an_unpadded_sticks_upload_keeps_its_source_alive(dev, shape, dtype):
    """A Sticks upload on a stream whose rows need no padding (a multiple of
    128 bytes) copied straight from the array without keeping it: freed
    before the copy ran, its memory reused, the tensor read -7s (or the
    process crashed). It is kept until the copy completes, as a Dense
    upload's is."""
    s = dev.create_stream()
    gate = threading.Event()
    s.add_callback(lambda: gate.wait(30))  # the copy waits behind it
    a = np.arange(np.prod(shape)).astype(dtype).reshape(shape)
    expect = a.copy()
    t = spyre.SpyreTensor.from_numpy(dev, a, stream=s, layout=spyre.TensorLayout.Sticks)
    del a
    gc.collect()
    junk = [np.full(shape, -7, dtype) for _ in range(4)]  # would take the freed memory
    out = np.zeros(shape, dtype)
    t.copy_to_host(out, s)
    gate.set()
    s.synchronize()
    np.testing.assert_array_equal(out, expect)
    assert all((j == -7).all() for j in junk)


def test_to_numpy_of_more_dimensions_than_numpy_holds_is_invalid_argument(dev):
    """A bare ValueError came out of to_numpy for a shape numpy cannot hold."""
    t = spyre.SpyreTensor.empty(dev, [1] * 40)
    with pytest.raises(spyre.InvalidArgument, match="SpyreTensor.to_numpy: numpy cannot hold a shape of 40 dimensions"):
        t.to_numpy()
