# SPDX-License-Identifier: Apache-2.0
"""Launching: launch_kernel (exact and tiled), SpyreStream.launch and
launch_tiled, the synchronous Program; results checked against numpy;
bad shapes, dtypes and foreign devices raise typed errors."""
import numpy as np
import pytest

import spyre


@pytest.fixture(scope="module")
def ss(dev):
    return spyre.SpyreStream(dev)


@pytest.fixture(scope="module")
def matmul_plan(ss):
    return spyre.load_kernel(ss, spyre.KernelBuilder().matmul(64, 64, 64), name="mm64")


def tensors(dev, *arrays):
    return [spyre.SpyreTensor.from_numpy(dev, a) for a in arrays]


def test_add_exact(dev, ss, rng):
    plan = spyre.load_kernel(ss, spyre.KernelBuilder().add([128, 96]), name="add")
    a, b = rng.standard_normal((2, 128, 96)).astype(np.float32)
    ta, tb = tensors(dev, a, b)
    tc = spyre.SpyreTensor.empty(dev, [128, 96])
    spyre.launch_kernel(ss, plan, [ta, tb, tc])
    ss.synchronize()
    np.testing.assert_array_equal(tc.to_numpy(), a + b)


def test_matmul_exact_and_tiled(dev, ss, rng, matmul_plan):
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    ta, tb = tensors(dev, a, b)
    tc = spyre.SpyreTensor.empty(dev, [64, 64])
    ss.launch(matmul_plan.operations[0], [ta, tb, tc])
    ss.synchronize()
    np.testing.assert_allclose(tc.to_numpy(), a @ b, rtol=1e-4, atol=1e-4)
    # 200 x 130 x 150 over a 64^3 tile: remainders on every loop, K accumulated.
    a = rng.standard_normal((200, 130)).astype(np.float32)
    b = rng.standard_normal((130, 150)).astype(np.float32)
    ta, tb = tensors(dev, a, b)
    tc = spyre.SpyreTensor.empty(dev, [200, 150])
    tiles = []
    ss.launch_tiled(matmul_plan.operations[0], [ta, tb, tc], progress=lambda *p: tiles.append(p))
    ss.synchronize()
    np.testing.assert_allclose(tc.to_numpy(), a @ b, rtol=1e-4, atol=1e-3)
    assert tiles and tiles[-1][1] == tiles[-1][2] == 4 * 3 * 3 and tiles[-1][3] == "tiles"
    # A progress that is not callable is refused at once (it was accepted,
    # and the stream's next, unrelated call raised TaskFailed).
    with pytest.raises(spyre.InvalidArgument, match="launch_tiled progress is a int, not a callable"):
        ss.launch_tiled(matmul_plan.operations[0], [ta, tb, tc], progress=5)
    ss.synchronize()
    tc2 = spyre.SpyreTensor.empty(dev, [200, 150])
    spyre.launch_kernel(ss, matmul_plan, [ta, tb, tc2])  # routes to LaunchTiled
    ss.synchronize()
    np.testing.assert_array_equal(tc2.to_numpy(), tc.to_numpy())


def test_program(dev, ss, rng, matmul_plan):
    prog = spyre.Program(dev, matmul_plan)
    assert prog.instruction_count == 1
    a, b = rng.standard_normal((2, 64, 64)).astype(np.float32)
    ta, tb = tensors(dev, a, b)
    tc = spyre.SpyreTensor.empty(dev, [64, 64])
    prog.launch([ta, tb, tc])  # waits
    np.testing.assert_allclose(tc.to_numpy(), a @ b, rtol=1e-4, atol=1e-4)
    big = [spyre.SpyreTensor.from_numpy(dev, x) for x in (np.ones((128, 64), np.float32), np.ones((64, 64), np.float32))]
    out = spyre.SpyreTensor.empty(dev, [128, 64])
    with pytest.raises(spyre.InvalidArgument):
        prog.launch(big + [out])  # strict shapes
    prog.launch_tiled(big + [out])
    assert (out.to_numpy() == 64.0).all()
    empty = spyre.Program(dev)
    empty.add_instruction(matmul_plan.operations[0])
    assert empty.instruction_count == 1
    empty.remove_instruction(0)
    assert empty.instruction_count == 0
    with pytest.raises(spyre.InvalidArgument, match="has 0 instructions"):
        empty.remove_instruction(0)


def test_a_program_of_two_plans_shares_tensors_by_index_unless_renumbered(dev, ss):
    # Each instruction takes launch()'s tensors at its plan's indices: the
    # relu (plan tensors 0, 1) wrote slot 1, the add's input y, which a
    # probe from outside took for a silent overwrite. Documented, and
    # tensor_indices gives the relu tensors of its own.
    kb = spyre.KernelBuilder()
    add = spyre.load_kernel(ss, kb.add([8]), name="a8").operations[0]
    relu = spyre.load_kernel(ss, kb.relu([8]), name="r8").operations[0]
    x = np.arange(-4, 4, dtype=np.float32)
    y = np.full(8, 10, np.float32)
    shared = spyre.Program(dev)
    shared.add_instruction(add)
    shared.add_instruction(relu)
    tx, ty = tensors(dev, x, y)
    tz = spyre.SpyreTensor.empty(dev, [8])
    shared.launch([tx, ty, tz])
    np.testing.assert_array_equal(tz.to_numpy(), x + y)
    np.testing.assert_array_equal(ty.to_numpy(), np.maximum(x, 0))  # relu's output slot is index 1
    own = spyre.Program(dev)
    own.add_instruction(add)
    own.add_instruction(relu, tensor_indices=[0, 3])
    tx, ty = tensors(dev, x, y)
    tz, tr = spyre.SpyreTensor.empty(dev, [8]), spyre.SpyreTensor.empty(dev, [8])
    own.launch([tx, ty, tz, tr])
    np.testing.assert_array_equal(ty.to_numpy(), y)
    np.testing.assert_array_equal(tz.to_numpy(), x + y)
    np.testing.assert_array_equal(tr.to_numpy(), np.maximum(x, 0))
    with pytest.raises(spyre.InvalidArgument, match="tensor_indices has 3 items, the operation 'r8.*' has 2 tensor slots"):
        own.add_instruction(relu, tensor_indices=[0, 1, 2])
    with pytest.raises(spyre.InvalidArgument, match="tensor_indices item 1 is -1"):
        own.add_instruction(relu, tensor_indices=[0, -1])
    assert own.instruction_count == 2


def test_launch_errors(dev, dev2, ss, matmul_plan):
    a, b = tensors(dev, np.ones((64, 64), np.float32), np.ones((64, 64), np.float32))
    c = spyre.SpyreTensor.empty(dev, [64, 64])
    with pytest.raises(spyre.InvalidArgument):  # too few tensors
        spyre.launch_kernel(ss, matmul_plan, [a, b])
    bad = spyre.SpyreTensor.empty(dev, [64, 63])
    with pytest.raises(spyre.InvalidArgument):  # bad shape (K disagrees)
        spyre.launch_kernel(ss, matmul_plan, [a, bad, c])
    wrong = spyre.SpyreTensor.from_numpy(dev, np.ones((64, 64), np.int32))
    with pytest.raises(spyre.InvalidArgument, match="(?i)dtype|int32"):
        spyre.launch_kernel(ss, matmul_plan, [a, wrong, c])
    foreign = spyre.SpyreTensor.from_numpy(dev2, np.ones((64, 64), np.float32))
    with pytest.raises(spyre.WrongDevice, match="tensor 1 belongs to " + dev2.pci_address):
        spyre.launch_kernel(ss, matmul_plan, [a, foreign, c])
    ss2 = spyre.SpyreStream(dev2)
    with pytest.raises(spyre.WrongDevice, match="plan 'mm64' belongs to " + dev.pci_address):
        spyre.launch_kernel(ss2, matmul_plan, [foreign, foreign, foreign])
    unloaded = spyre.ExecutionPlan(spyre.KernelBuilder().add([4]).compiler_output("x"))
    with pytest.raises(spyre.InvalidArgument, match="not loaded"):
        spyre.launch_kernel(ss, unloaded, [a, b, c])
    with pytest.raises(TypeError):
        spyre.launch_kernel(ss, matmul_plan, [a, b, "c"])
    # A Program names what of the call's is on the other device (it said
    # "stream", which the caller never gave).
    with pytest.raises(spyre.WrongDevice, match="belongs to " + dev.pci_address + ", device to " + dev2.pci_address):
        spyre.Program(dev2, matmul_plan)
    with pytest.raises(spyre.WrongDevice, match="belongs to " + dev.pci_address + ", program to " + dev2.pci_address):
        spyre.Program(dev2).add_instruction(matmul_plan.operations[0])
    ss.synchronize()  # nothing bad reached the stream


def test_a_sticks_kernel_refuses_dense_tensors_before_anything_runs(dev, ss):
    # 4 x 8 fp32 rows are 32 bytes: dense rows do not fill a 128-byte stick.
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    b = np.full((4, 8), 100, np.float32)
    plan = spyre.load_kernel(ss, spyre.KernelBuilder(spyre.TensorLayout.Sticks).add([4, 8], [4, 8], np.float32),
                             name="add_sticks")
    dense = tensors(dev, a, b) + [spyre.SpyreTensor.empty(dev, [4, 8])]
    with pytest.raises(spyre.InvalidArgument, match="stick-layout operand.*give it the Sticks layout"):
        spyre.launch_kernel(ss, plan, dense)
    with pytest.raises(spyre.InvalidArgument, match="stick-layout operand"):
        ss.launch_tiled(plan.operations[0], dense)
    ss.synchronize()  # nothing reached the stream: no device fault
    sticks = [spyre.SpyreTensor.from_numpy(dev, x, layout=spyre.TensorLayout.Sticks) for x in (a, b)]
    sticks.append(spyre.SpyreTensor.empty(dev, [4, 8], np.float32, spyre.TensorLayout.Sticks))
    spyre.launch_kernel(ss, plan, sticks)
    ss.synchronize()
    np.testing.assert_array_equal(sticks[2].to_numpy(), a + b)
