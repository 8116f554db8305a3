# SPDX-License-Identifier: Apache-2.0
"""DeviceBuffer and host <-> device copies from buffer-protocol objects."""
import numpy as np
import pytest

import spyre

SIZES = [1, 7, 128, 4095, 4097, 65536 + 3, (1 << 20) + 5, 5 * (1 << 20) + 17]


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_byte_for_byte(dev, rng, size):
    s = dev.create_stream()
    src = rng.integers(0, 256, size, dtype=np.uint8)
    buf = dev.alloc(size)
    assert buf.size == size and buf.nbytes == size
    out = np.zeros(size, np.uint8)
    s.copy_to_device(src, buf)
    s.copy_from_device(buf, out)
    s.synchronize()
    assert out.tobytes() == src.tobytes()


def test_offsets_and_partial_copies(dev):
    s = dev.default_stream
    buf = dev.alloc(10000)
    s.copy_to_device(np.full(10000, 1, np.uint8), buf)
    s.copy_to_device(b"hello", buf, offset=5000)
    s.copy_to_device(bytearray(b"xyz!"), buf, offset=9996)
    out = bytearray(10000)
    s.copy_from_device(buf, out)
    part = np.zeros(5, np.uint8)
    s.copy_from_device(buf, part, offset=5000)
    s.synchronize()
    assert bytes(out[5000:5005]) == b"hello" and bytes(out[9996:]) == b"xyz!"
    assert out[0] == 1 and out[4999] == 1 and out[5005] == 1
    assert part.tobytes() == b"hello"
    few = np.zeros(8, np.uint8)
    s.copy_from_device(buf, few, offset=5000, nbytes=3)
    s.synchronize()
    assert few.tobytes() == b"hel" + bytes(5)


def test_bad_copies_raise_typed_errors(dev, dev2):
    s = dev.create_stream()
    buf = dev.alloc(100)
    with pytest.raises(spyre.InvalidArgument, match="101 bytes at offset 0 do not fit the 100-byte DeviceBuffer"):
        s.copy_to_device(np.zeros(101, np.uint8), buf)
    with pytest.raises(spyre.InvalidArgument, match="at offset 99"):
        s.copy_to_device(np.zeros(2, np.uint8), buf, offset=99)
    with pytest.raises(spyre.InvalidArgument, match="offset -1 is outside the 100-byte DeviceBuffer"):
        s.copy_to_device(np.zeros(2, np.uint8), buf, offset=-1)
    # A launch's size defaults to the rest of the buffer: past its end that
    # wrapped to 18446744073709551516 bytes in the message.
    with pytest.raises(spyre.InvalidArgument, match="FlexStream.launch: offset 200 is outside the 100-byte DeviceBuffer"):
        s.launch(buf, 200)
    with pytest.raises(spyre.InvalidArgument, match="not C-contiguous"):
        s.copy_to_device(np.zeros((10, 10), np.uint8)[:, ::2], buf)
    with pytest.raises(spyre.InvalidArgument, match="read-only"):
        s.copy_from_device(buf, b"immutable bytes")
    with pytest.raises(spyre.InvalidArgument, match="does not export a buffer"):
        s.copy_to_device([1, 2, 3], buf)
    with pytest.raises(spyre.InvalidArgument, match="nothing to copy"):
        s.copy_to_device(np.zeros(0, np.uint8), buf)
    with pytest.raises(spyre.InvalidArgument, match="nbytes=200"):
        s.copy_to_device(np.zeros(10, np.uint8), buf, nbytes=200)
    other = dev2.alloc(100)
    with pytest.raises(spyre.WrongDevice, match="DeviceBuffer belongs to " + dev2.pci_address):
        s.copy_to_device(np.zeros(10, np.uint8), other)
    s.synchronize()  # none of that reached the stream


def test_free_and_stats(dev):
    before = dev.memory_stats()
    bufs = [dev.alloc(1 << 20) for _ in range(4)]
    mid = dev.memory_stats()
    assert mid.bytes_in_use - before.bytes_in_use == 4 << 20
    assert mid.live_allocations - before.live_allocations == 4
    assert mid.allocations - before.allocations == 4
    assert mid.peak_bytes_in_use >= mid.bytes_in_use
    bufs[0].free()
    assert bufs[0].freed
    with pytest.raises(spyre.InvalidArgument, match="DeviceBuffer.size: the object was freed"):
        bufs[0].size
    del bufs
    dev.synchronize()  # frees happen after queued work
    assert dev.memory_stats().bytes_in_use == before.bytes_in_use
    assert "pf:" in repr(dev.alloc(8))


def test_a_size_out_of_range_is_our_error_as_docs_python_md_says(dev):
    """docs/python.md: a negative size is spyre's InvalidArgument, and so is
    a value the parameter cannot hold at all (2**63 was pybind11's
    TypeError "incompatible function arguments")."""
    with pytest.raises(spyre.InvalidArgument, match=r"Device.alloc\(-1\): the size must be at least 1 byte"):
        dev.alloc(-1)
    with pytest.raises(spyre.InvalidArgument, match=r"^spyre: invalid argument: Device.alloc: nbytes is 9223372036854775808 "
                                                    r"\(must be <= 9223372036854775807\)$"):
        dev.alloc(2 ** 63)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        dev.alloc(4096.0)  # not an int at all
