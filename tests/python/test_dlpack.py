# SPDX-License-Identifier: Apache-2.0
"""DLPack: spyre.from_dlpack from host producers, SpyreTensor.__dlpack__ to
numpy (and torch when installed; nothing requires it)."""
import gc

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
