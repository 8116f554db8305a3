# SPDX-License-Identifier: Apache-2.0
"""The kernel builder's operations: metadata, errors, and results on the
device checked against numpy."""
import numpy as np
import pytest

import spyre


@pytest.fixture(scope="module")
def ss(dev):
    return spyre.SpyreStream(dev)


def run(dev, ss, kernel, inputs):
    plan = spyre.load_kernel(ss, kernel)
    tensors = [spyre.SpyreTensor.from_numpy(dev, a, stream=ss.flex_stream) for a in inputs]
    outs = [spyre.SpyreTensor.empty(dev, o.shape, o.dtype) for o in kernel.outputs]
    spyre.launch_kernel(ss, plan, tensors + outs)
    ss.synchronize()
    return [o.to_numpy() for o in outs]


def test_metadata():
    k = spyre.KernelBuilder().matmul(32, 16, 8)
    assert [t.shape for t in k.inputs] == [[32, 16], [16, 8]] and k.outputs[0].shape == [32, 8]
    assert k.reduction_loops == [1]
    assert k.correction_input_size == 3 * 8 and len(k.program) > 0 and len(k.correction) > 0
    assert "matmul" in k.name
    t = spyre.KernelBuilder(spyre.TensorLayout.Sticks).tensor([3, 40], np.float32)
    assert t.bytes == 3 * 256 and t.layout == spyre.TensorLayout.Sticks


def test_builder_errors():
    kb = spyre.KernelBuilder()
    with pytest.raises(spyre.InvalidArgument):
        kb.matmul(0, 4, 4)
    with pytest.raises(spyre.InvalidArgument):
        kb.add([4, 5], [4, 6])  # not broadcastable
    with pytest.raises(spyre.InvalidArgument):
        kb.add([4, 4], dtype=np.int8)  # arithmetic is fp16/fp32
    with pytest.raises(spyre.InvalidArgument):
        kb.reduce(spyre.ReduceKind.Sum, [4, 4], axis=2)
    with pytest.raises(spyre.InvalidArgument):
        kb.transpose([2, 3], [0, 0])
    with pytest.raises(spyre.InvalidArgument, match="float64 is not supported"):
        kb.relu([4], np.float64)


def test_elementwise_ops(dev, ss, rng):
    kb = spyre.KernelBuilder()
    a = rng.standard_normal((33, 70)).astype(np.float32)
    b = rng.standard_normal((33, 70)).astype(np.float32) + 3.0
    for kernel, ref in [(kb.add([33, 70]), a + b), (kb.sub([33, 70]), a - b), (kb.mul([33, 70]), a * b),
                        (kb.div([33, 70]), a / b)]:
        (c,) = run(dev, ss, kernel, [a, b])
        np.testing.assert_allclose(c, ref, rtol=1e-6, atol=1e-6)
    row = rng.standard_normal((70,)).astype(np.float32)
    (c,) = run(dev, ss, kb.add([33, 70], [70]), [a, row])  # broadcasting
    np.testing.assert_allclose(c, a + row, rtol=1e-6)
    h = rng.standard_normal((8, 64)).astype(np.float16)
    (c,) = run(dev, ss, kb.mul([8, 64], dtype=np.float16), [h, h])
    np.testing.assert_allclose(c.astype(np.float32), (h * h).astype(np.float32), rtol=2e-3, atol=2e-3)


def test_unary_reduce_transpose_fill(dev, ss, rng):
    kb = spyre.KernelBuilder()
    x = rng.standard_normal((16, 48)).astype(np.float32)
    (c,) = run(dev, ss, kb.relu([16, 48]), [x])
    np.testing.assert_array_equal(c, np.maximum(x, 0))
    (c,) = run(dev, ss, kb.softmax([16, 48]), [x])
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(c, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    (c,) = run(dev, ss, kb.reduce(spyre.ReduceKind.Sum, [16, 48], axis=1), [x])
    np.testing.assert_allclose(c, x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
    (c,) = run(dev, ss, kb.reduce(spyre.ReduceKind.Max, [16, 48], axis=0), [x])
    np.testing.assert_array_equal(c, x.max(axis=0, keepdims=True))
    (c,) = run(dev, ss, kb.transpose([16, 48], [1, 0]), [x])
    np.testing.assert_array_equal(c, x.T)
    (c,) = run(dev, ss, kb.fill([5, 7], 2.5), [])
    np.testing.assert_array_equal(c, np.full((5, 7), 2.5, np.float32))
    (c,) = run(dev, ss, kb.copy([5, 7], np.int32), [np.arange(35, dtype=np.int32).reshape(5, 7)])
    np.testing.assert_array_equal(c, np.arange(35, dtype=np.int32).reshape(5, 7))
