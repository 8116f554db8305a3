# SPDX-License-Identifier: Apache-2.0
"""Seed 003's two writing styles (spyre.host_dsl over spyre.Worker): its three
programs, verified with numpy, in place and in return style; shape and dtype
errors; a raising SubWorker; two threads calling one compiled program."""
import collections
import functools
import itertools
import pathlib
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import spyre
from spyre import Level, Out, Role, Tensor, ops

T = Tensor[[128, 128], spyre.FP32]

# seed 003's three programs are the examples' (examples/python/), tested here too
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"))
from l3_dependency import L3DependencyProgram  # noqa: E402
from l3_inline import host_orch as l3_dependency_inline  # noqa: E402
from l3_parallel_reduce import L3ParallelReduceProgram  # noqa: E402


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def parallel_reduce_inline(a: T, b: T, f: Out[T]):
    sum_ab = spyre.create_tensor([128, 128])
    diff_ab = spyre.create_tensor([128, 128])
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR, name_hint="chip_add"):
        with spyre.at(level=Level.CORE_GROUP):
            spyre.assemble(sum_ab, ops.add(a, b))
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR, name_hint="chip_sub"):
        with spyre.at(level=Level.CORE_GROUP):
            spyre.assemble(diff_ab, ops.sub(a, b))
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        total: Tensor[[128, 128], spyre.FP32] = sum_ab + diff_ab
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[:] = total
    return f


@pytest.fixture(scope="module")
def config():
    return spyre.DistributedConfig(device_ids=[0, 1], num_sub_workers=2)


def ab(rng=None):
    if rng is None:
        return np.full((128, 128), 2.0, np.float32), np.full((128, 128), 3.0, np.float32)
    return (rng.standard_normal((128, 128)).astype(np.float32), rng.standard_normal((128, 128)).astype(np.float32))


@pytest.mark.parametrize("target", [L3DependencyProgram, l3_dependency_inline], ids=["functional", "inline"])
def test_dependency_program_both_styles(host, config, target):
    with spyre.compile(target, config, host=host) as compiled:
        a, b = ab()
        f = np.zeros((128, 128), np.float32)
        assert compiled(a, b, f) is f  # in place
        np.testing.assert_allclose(f, 5.0)
        f2 = compiled(a, b)  # return style
        np.testing.assert_allclose(f2, 5.0)
        # the SubWorker checks 5.0: other data makes it fail with its message
        with pytest.raises(spyre.TaskFailed, match="expected 5.0"):
            compiled(a, a)


@pytest.mark.parametrize("target", [L3ParallelReduceProgram, parallel_reduce_inline], ids=["functional", "inline"])
def test_parallel_add_sub_and_reduce_both_styles(host, config, target, rng):
    with spyre.compile(target, config, host=host) as compiled:
        a, b = ab(rng)
        np.testing.assert_allclose(compiled(a, b), 2 * a, rtol=1e-5, atol=1e-5)


def test_functional_uses_the_ready_made_cpp_chip_function(host, config):
    with spyre.compile(L3DependencyProgram, config, host=host) as compiled:
        assert len(compiled.kernels) == 1


def test_a_chip_orchestration_with_temporaries_and_matmul(host, rng):
    A = Tensor[[64, 32], spyre.FP32]
    B = Tensor[[32, 16], spyre.FP32]
    C = Tensor[[64, 16], spyre.FP32]

    @spyre.program
    class MatmulBias:
        @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
        def chip(self, a: A, b: B, bias: C, c: Out[C]):
            t = ops.matmul(a, b)
            ops.add(t, bias, out=c)

        @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
        def host_orch(self, a: A, b: B, bias: C, c: Out[C]):
            self.chip(a, b, bias, c)

    with spyre.compile(MatmulBias, spyre.DistributedConfig(), host=host) as compiled:
        a = rng.standard_normal((64, 32)).astype(np.float32)
        b = rng.standard_normal((32, 16)).astype(np.float32)
        bias = rng.standard_normal((64, 16)).astype(np.float32)
        np.testing.assert_allclose(compiled(a, b, bias), a @ b + bias, rtol=1e-4, atol=1e-4)


def test_wrong_shapes_and_dtypes_are_refused(host, config):
    with spyre.compile(L3DependencyProgram, config, host=host) as compiled:
        a, b = ab()
        with pytest.raises(spyre.InvalidArgument, match="'b' has shape"):
            compiled(a, b[:64])
        with pytest.raises(spyre.InvalidArgument, match="dtype float64"):
            compiled(a, b.astype(np.float64))
        with pytest.raises(spyre.InvalidArgument, match="takes 2 input"):
            compiled(a)
        # Not an array: named as such, not as an array of shape [].
        with pytest.raises(spyre.InvalidArgument, match="'a': None is not a numpy array or HostTensor"):
            compiled(None, b)
        with pytest.raises(spyre.InvalidArgument, match="'a': str is not a numpy array or HostTensor"):
            compiled("a", b)
        with pytest.raises(spyre.InvalidArgument, match="'a': object is not a numpy array or HostTensor"):
            compiled(object(), b)
        # A list is what numpy makes of it: its own shape, then its dtype.
        with pytest.raises(spyre.InvalidArgument, match="'a' has dtype float64"):
            compiled(a.tolist(), b)
        with pytest.raises(spyre.InvalidArgument, match=r"'b' has shape \[2\]"):
            compiled(a, [1.0, 2.0])
        # An output must be one the results can land in (a list's were lost).
        with pytest.raises(spyre.InvalidArgument, match="the output is a list, which results cannot land in"):
            compiled(a, b, np.zeros_like(a).tolist())


def test_misuse_is_reported(host):
    with pytest.raises(spyre.InvalidArgument, match="role"):
        spyre.function(level=Level.HOST)(lambda a: a)
    with pytest.raises(spyre.InvalidArgument, match="compiled program"):
        L3DependencyProgram().host_orch(1, 2, 3)

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def never_assembled(a: T, f: Out[T]):
        with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
            ops.add(a, a)

    with pytest.raises(spyre.InvalidArgument, match="assemble"):
        spyre.compile(never_assembled, spyre.DistributedConfig(), host=host)


def test_compile_and_program_of_the_wrong_things_say_what_they_got(host):
    """A config or worker of another type was an AttributeError from inside
    compile(), an empty device_ids max()'s ValueError, and @spyre.program on
    a non-class an AttributeError."""
    with pytest.raises(TypeError, match="^compile: config is a int, not a spyre.DistributedConfig$"):
        spyre.compile(L3DependencyProgram, -1, host=host)
    with pytest.raises(TypeError, match="^compile: worker is a str, not a spyre.Worker$"):
        spyre.compile(L3DependencyProgram, worker="w")
    with pytest.raises(spyre.InvalidArgument, match="device_ids is empty"):
        spyre.compile(L3DependencyProgram, spyre.DistributedConfig(device_ids=[]))
    with pytest.raises(spyre.InvalidArgument, match=r"device_ids\[0\] is -3"):
        spyre.compile(L3DependencyProgram, spyre.DistributedConfig(device_ids=[-3]))
    with pytest.raises(TypeError, match="^spyre.program decorates a class, not a NoneType$"):
        spyre.program(None)
    # assemble(x, y, None) was Python's "'NoneType' object is not iterable",
    # naming no argument; create_tensor(None) the same.
    with pytest.raises(TypeError, match="^assemble: offset is a NoneType, not a list of ints$"):
        spyre.assemble(None, None, None)

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def shapeless(a: T, f: Out[T]):
        spyre.create_tensor(None)

    with pytest.raises(spyre.TaskFailed, match="raised TypeError: create_tensor: shape is a NoneType, not a list of ints"):
        with spyre.compile(shapeless, spyre.DistributedConfig(), host=host) as compiled:
            compiled(np.zeros((128, 128), np.float32))


def test_two_threads_call_one_compiled_program(host, config):
    with spyre.compile(L3ParallelReduceProgram, config, host=host) as compiled:
        errors, out = [], {}

        def go(i):
            try:
                a = np.full((128, 128), float(i), np.float32)
                for _ in range(5):
                    out[i] = compiled(a, a)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=go, args=(i,)) for i in (1, 2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors
        np.testing.assert_allclose(out[1], 2.0)
        np.testing.assert_allclose(out[2], 4.0)


S = Tensor[[32, 8], spyre.FP32]


@spyre.program
class StoredAndRead:
    @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
    def chip(self, a: S, b: S, c: Out[S], d: Out[S]):
        t = ops.add(a, b, out=c)  # stored into c ...
        ops.mul(t, a, out=d)      # ... and read by the next op

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: S, b: S, c: Out[S], d: Out[S]):
        self.chip(a, b, c, d)


def test_a_result_stored_and_read_by_a_later_op(host, config, rng):
    """An op's result stored into an output and read by a later op: the
    replay looked for it among the temporaries, and every run failed with
    KeyError: 0."""
    a, b = (rng.standard_normal((32, 8)).astype(np.float32) for _ in range(2))
    with spyre.compile(StoredAndRead, config, host=host) as compiled:
        c, d = compiled(a, b)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)
    np.testing.assert_allclose(d, (a + b) * a, rtol=1e-6)


def test_a_program_whose_source_cannot_be_read_compiles(host, config):
    """exec'd code (or python -c) has no source for inspect: compile raised
    its bare OSError, though the functional style needs none. A name that
    merely ends in "at(" (float(, format() no longer counts as a block."""
    src = "\n".join([
        "import spyre",
        "from spyre import Level, Out, Role, Tensor, ops",
        "T = Tensor[[32, 8], spyre.FP32]",
        "@spyre.program",
        "class P:",
        "    @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)",
        "    def chip(self, a: T, b: T, c: Out[T]):",
        "        ops.add(a, b, out=c)",
        "    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)",
        "    def host_orch(self, a: T, b: T, c: Out[T]):",
        "        self.chip(a, b, c)",
    ])
    ns = {}
    exec(compile(src, "<generated>", "exec"), ns)
    a = np.ones((32, 8), np.float32)
    with spyre.compile(ns["P"], config, host=host) as compiled:
        np.testing.assert_array_equal(compiled(a, a), 2.0)


def test_a_bad_dtype_name_is_invalid_argument():
    with pytest.raises(spyre.InvalidArgument, match="'notadtype' is not a dtype"):
        Tensor[[4], "notadtype"]


H16 = Tensor[[32, 16], spyre.FP16]
F32 = Tensor[[32, 16], spyre.FP32]


@spyre.program
class Fp16ChainIntoFp32:
    @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
    def chip(self, a: H16, b: H16, c: Out[F32]):
        ops.mul(ops.add(a, b), a, out=c)

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: H16, b: H16, c: Out[F32]):
        self.chip(a, b, c)


@spyre.program
class Fp16OpOfAnFp32Operand:
    @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
    def chip(self, a: H16, b: F32, c: Out[H16]):
        ops.mul(ops.add(a, b), a, out=c)

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: H16, b: F32, c: Out[H16]):
        self.chip(a, b, c)


def test_ops_of_mixed_element_types_are_refused(host, config, rng):
    """A chain of fp16 ops stored into an fp32 output, or an fp16 op with an
    fp32 operand, ran and gave garbage (1e-14 for -0.05): the kernel read
    the other type's bytes as its own. Both are InvalidArgument now."""
    a, b = (rng.standard_normal((32, 16)).astype(np.float16) for _ in range(2))
    with pytest.raises(spyre.InvalidArgument, match="a float16 result into a float32 tensor"):
        with spyre.compile(Fp16ChainIntoFp32, config, host=host) as compiled:
            compiled(a, b)
    with pytest.raises(spyre.InvalidArgument, match="operands of float16 and float32"):
        with spyre.compile(Fp16OpOfAnFp32Operand, config, host=host) as compiled:
            compiled(a, b.astype(np.float32))


S8 = Tensor[[8, 32], spyre.FP32]


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def accumulate_inline(a: S8, f: Out[S8]):
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
        with spyre.at(level=Level.CORE_GROUP):
            s = ops.add(f, a)  # reads f ...
        spyre.assemble(f, s)  # ... then writes it: f = f + a
    return f


def test_a_chip_block_that_reads_a_tensor_and_stores_into_it(host, config):
    """The block's chip task takes the tensor in-out: it took it as an
    output only, so the chip saw zeros where f was, and f came back as a
    alone (found probing from outside)."""
    a = np.full((8, 32), 2.0, np.float32)
    with spyre.compile(accumulate_inline, config, host=host) as compiled:
        f = np.full((8, 32), 3.0, np.float32)
        compiled(a, f)
        np.testing.assert_array_equal(f, np.full((8, 32), 5.0, np.float32))
        ht = spyre.HostTensor.from_numpy(np.full((8, 32), 3.0, np.float32))
        compiled(a, ht)
        np.testing.assert_array_equal(ht.numpy(), np.full((8, 32), 5.0, np.float32))


Small = Tensor[[4, 4], spyre.FP32]


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def augmented_inline(a: Small, f: Out[Small]):
    t = spyre.create_tensor([4, 4])
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        t[:] = a
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        t *= 2
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f += t


def test_augmented_assignments_to_whole_tensors_in_worker_blocks(host, config):
    """`f += t` and `t *= 2` on a whole tensor take it in-out, as
    python.md says: the block took the name as written only, never as an
    input, and raised UnboundLocalError (found probing from outside)."""
    with spyre.compile(augmented_inline, config, host=host) as compiled:
        a = np.arange(16, dtype=np.float32).reshape(4, 4)
        f = np.ones((4, 4), np.float32)
        compiled(a, f)
        np.testing.assert_array_equal(f, 1 + 2 * a)


BLOCK_CALLS = 0


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_local_accumulator(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        acc = np.zeros((4, 4), np.float32)
        for _ in range(3):
            acc += a
        f[:] = acc


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_global_counter(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        global BLOCK_CALLS
        BLOCK_CALLS += 1
        f[:] = a * BLOCK_CALLS


def test_augmented_assignments_to_a_blocks_own_names_and_globals(host, config):
    """`acc = ...; acc += a` in one block, and `global n; n += 1`, are no
    inputs of the block: taking every augmented target as one (the fix
    above) made the first a NameError and the second a SyntaxError
    (found probing from outside)."""
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    with spyre.compile(block_local_accumulator, config, host=host) as compiled:
        f = np.zeros((4, 4), np.float32)
        compiled(a, f)
        np.testing.assert_array_equal(f, 3 * a)
    with spyre.compile(block_global_counter, config, host=host) as compiled:
        before = BLOCK_CALLS
        f = np.zeros((4, 4), np.float32)
        compiled(a, f)
        assert BLOCK_CALLS == before + 1
        np.testing.assert_array_equal(f, a * BLOCK_CALLS)


def test_a_host_tensors_dtype_is_checked_against_the_annotation(host, config):
    """Nothing after the call checks it: int32 HostTensors into an FP32
    program ran its fp32 kernels over their bits (found probing from
    outside); they are refused as an array of that dtype is."""
    with spyre.compile(L3DependencyProgram, config, host=host) as compiled:
        a, b = ab()
        ai = spyre.HostTensor.from_numpy(np.full((128, 128), 2, np.int32))
        with pytest.raises(spyre.InvalidArgument, match="argument 'a' has dtype int32, expected float32"):
            compiled(ai, b)
        bits = spyre.HostTensor.from_numpy(np.zeros((128, 128), np.uint16), dtype=spyre.DType.BF16)
        with pytest.raises(spyre.InvalidArgument, match="argument 'b' has dtype bf16, expected float32"):
            compiled(a, bits)
        good = spyre.HostTensor.from_numpy(a.copy())
        np.testing.assert_allclose(compiled(good, b), 5.0)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def data_dependent_blocks(a: S8, b: S8, f: Out[S8]):
    for _ in range(2 if np.asarray(a)[0, 0] > 0 else 1):
        with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
            with spyre.at(level=Level.CORE_GROUP):
                s = ops.add(a, b)
            spyre.assemble(f, s)
    return f


def test_chip_blocks_that_depend_on_the_data_are_a_usage_error(host, config):
    """Compiled with zeros the body has one CHIP block; ones give it two:
    the second is the program's mistake, InvalidArgument saying so (it was
    Internal, as if the library had failed)."""
    with spyre.compile(data_dependent_blocks, config, host=host) as compiled:
        with pytest.raises(spyre.HostRunError, match="invalid argument: .*block 1 was not seen when the program was "
                                                     "compiled \\(the blocks must not depend on the data\\)") as e:
            compiled(np.ones((8, 32), np.float32), np.ones((8, 32), np.float32))
        assert isinstance(e.value, spyre.InvalidArgument)


# ---- the inline style's names: globals as they are, closures, local helpers ----

SCALE = 1.0


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def scaled_by_the_global(a: Small, f: Out[Small]):
    s = SCALE  # read by the orchestrator itself
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = a * s * SCALE  # and by the block
    return f


def test_an_inline_orchestrator_reads_module_globals_as_they_are(host, config):
    """The outlined orchestrator ran on a copy of the module's globals made
    at compile time: SCALE = 1, 2, 3 gave 1, 1, 1 (found probing from
    outside)."""
    global SCALE
    a = np.ones((4, 4), np.float32)
    with spyre.compile(scaled_by_the_global, config, host=host) as compiled:
        try:
            for v in (1.0, 2.0, 3.0):
                SCALE = v
                np.testing.assert_array_equal(compiled(a), v * v)
        finally:
            SCALE = 1.0


twice = None  # a module global a local helper of the same name must not shadow


def inline_closures(k):
    import math as local_math

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def orch(a: Small, f: Out[Small]):
        def twice(x):
            return x * 2

        s = np.float32(k)  # a closure variable read by the orchestrator
        with spyre.at(level=Level.HOST, role=Role.WORKER):
            f[...] = twice(a) * k * s + local_math.floor(0.5)  # ... and by the block
        return f

    return orch


def test_closures_and_local_helpers_reach_inline_blocks(host, config):
    """A closure variable, a local def and a local import went to the
    module's globals when a block was outlined: wrong values where a global
    shared the name, NameError where none did (found probing from outside)."""
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    with spyre.compile(inline_closures(5.0), config, host=host) as compiled:
        np.testing.assert_array_equal(compiled(a), a * 2 * 25)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def refilled_scratch(a: Small, f: Out[Small]):
    s = np.zeros((4, 4), np.float32)
    for i in (1, 2, 3):
        s[...] = i
        with spyre.at(level=Level.HOST, role=Role.WORKER):
            f += a * s
    return f


def test_a_blocks_plain_inputs_are_taken_as_they_are_when_it_is_reached(host, config):
    """A numpy scratch array refilled in a loop went to each task by
    reference: tasks that ran after the loop moved on read its last
    contents (9 instead of 6; found probing from outside)."""
    a = np.ones((4, 4), np.float32)
    with spyre.compile(refilled_scratch, config, host=host) as compiled:
        for _ in range(10):
            f = np.zeros((4, 4), np.float32)
            compiled(a, f)
            np.testing.assert_array_equal(f, 6.0)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_reads_a_view(a: Small, f: Out[Small]):
    t = spyre.create_tensor([4, 4])
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        t[...] = a + 1
    v = t.numpy()  # the same memory as t (a view, python.md)
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = v * 2
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_writes_through_a_view(a: Small, f: Out[Small]):
    v = np.asarray(f)
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        v[...] = a + 1
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f += 1
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_reads_a_column_view(a: Small, f: Out[Small]):
    t = spyre.create_tensor([4, 4])
    v = t.numpy()[:, 1:]
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = a + v.sum()
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_reads_a_view_in_a_list(a: Small, f: Out[Small]):
    t = spyre.create_tensor([4, 4])
    vs = [t.numpy()]
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = a + vs[0]
    return f


def test_a_numpy_view_of_a_tensor_in_a_block_is_that_tensor(host, config):
    """A block's numpy view of a tensor (t.numpy(), np.asarray(t)) was
    copied when the block was reached: it read the tensor before the block
    writing it ran (stale bytes), and its writes through the view were lost
    (found probing from outside). A view that is neither the whole tensor
    nor its rows cannot be ordered: InvalidArgument (from compile, whose dry
    run reaches the block)."""
    a = np.ones((4, 4), np.float32)
    with spyre.compile(block_reads_a_view, config, host=host) as compiled:
        for _ in range(10):
            np.testing.assert_array_equal(compiled(a), 4.0)
    with spyre.compile(block_writes_through_a_view, config, host=host) as compiled:
        for _ in range(10):
            np.testing.assert_array_equal(compiled(a), 3.0)
    with pytest.raises(spyre.InvalidArgument, match=r"sub\d+: 'v': the array shares memory with .*but is neither "
                                                    r"that tensor's whole array nor a row range of it"):
        spyre.compile(block_reads_a_column_view, config, host=host)
    with pytest.raises(spyre.InvalidArgument, match="'vs' holds a numpy view of a spyre tensor inside a list"):
        spyre.compile(block_reads_a_view_in_a_list, config, host=host)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def view_of_an_argument_read_after_its_writer(a: Small, f: Out[Small]):
    va = a.numpy()
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        time.sleep(0.01)  # the reader, were it not ordered after this, would run first
        a += 1
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = va * 2
    return f


def test_a_view_of_a_copied_argument_is_that_argument(host, config):
    """A read-only or strided run argument is copied for the run; a view of
    the run's tensor was then not known as a tensor's (the record had the
    caller's memory, not the copy's): the block read `a` before its writer
    (found probing from outside)."""
    base = np.arange(16, dtype=np.float32).reshape(4, 4)
    read_only = base.copy()
    read_only.setflags(write=False)

    def strided():  # copied for the run, the copy written back when it ends
        s = np.zeros((4, 8), np.float32)
        s[:, ::2] = base
        return s[:, ::2]

    with spyre.compile(view_of_an_argument_read_after_its_writer, config, host=host) as compiled:
        for make in (lambda: read_only, strided, base.copy):
            for _ in range(5):
                np.testing.assert_array_equal(compiled(make()), (base + 1) * 2)
    np.testing.assert_array_equal(read_only, base)  # the caller's read-only array is left alone


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_writes_a_read_only_view(a: Small, f: Out[Small]):
    v = f.numpy()
    v.setflags(write=False)
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        v[...] = a
    return f


def test_a_read_only_view_stays_read_only_in_a_block(host, config):
    """A block's write through a read-only view landed (numpy raises)."""
    with spyre.compile(block_writes_a_read_only_view, config, host=host) as compiled:
        with pytest.raises(spyre.TaskFailed, match="read-only"):
            compiled(np.ones((4, 4), np.float32))


class _Slotted:
    __slots__ = "t"

    def __init__(self, t):
        self.t = t


class _Holder:
    def __init__(self, v):
        self.v = v

    def get(self):
        return self.v


def hidden_in(how):
    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def orch(a: Small, f: Out[Small]):
        t = spyre.create_tensor([4, 4])
        v = t.numpy()
        box = np.empty(1, dtype=object)
        box[0] = v
        hidden = {"lambda": lambda: v, "method": _Holder(t).get, "object": _Holder(v), "object array": box,
                  "deep list": [[[[[[[[[[[[v]]]]]]]]]]]], "memoryview": memoryview(v),
                  "partial": functools.partial(np.add, v), "deque": collections.deque([0.0] * 20000 + [t]),
                  "slots": _Slotted(t), "iterator": iter([t]), "map": map(float, [v]),
                  "dict values": {"t": t}.values(), "weakref": weakref.ref(t), "exception": ValueError(t),
                  "tee": itertools.tee([t])[0]}[how]
        with spyre.at(level=Level.HOST, role=Role.WORKER):
            t[...] = a + 1
        with spyre.at(level=Level.HOST, role=Role.WORKER):
            f[...] = a if hidden is None else a * 2
        return f

    return orch


@pytest.mark.parametrize("how, what", [("lambda", "function"), ("method", "method"), ("object", "_Holder"),
                                       ("object array", "ndarray"), ("deep list", "list"),
                                       ("memoryview", "memoryview"), ("partial", "partial"),
                                       ("deque", "deque"), ("slots", "_Slotted"), ("iterator", "list_iterator"),
                                       ("map", "map"), ("dict values", "dict_values"), ("weakref", "ReferenceType"),
                                       ("exception", "ValueError"), ("tee", "_tee")])
def test_a_tensor_reached_through_a_closure_object_or_buffer_is_refused(host, config, how, what):
    """A tensor (or a view of one) a block reached through a lambda's
    closure, an object's method or attributes, an object array, a list
    five deep or a memoryview was copied when the block was reached, with
    no dependency: it read zeros (found probing from outside)."""
    with pytest.raises(spyre.InvalidArgument, match=rf"'hidden' holds a (numpy view of a )?spyre tensor inside a {what}"):
        spyre.compile(hidden_in(how), config, host=host)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_with_return(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = a
        if a[0, 0] > 0:
            return
        f[...] = -a
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f += 1
    return f


def test_a_return_in_a_worker_block_ends_only_that_block(host, config):
    """python.md: a `return` in a block ends only that block. It returned
    None where the block's outputs were due, and the task failed
    (TypeError: 'NoneType' object is not iterable)."""
    with spyre.compile(block_with_return, config, host=host) as compiled:
        for v in (1.0, -1.0):
            a = np.full((4, 4), v, np.float32)
            np.testing.assert_array_equal(compiled(a), abs(a) + 1)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def at_of_a_local_level(a: Small, f: Out[Small]):
    where = Level.HOST
    with spyre.at(level=where, role=Role.WORKER):
        f[...] = a
    return f


def test_spyre_at_of_what_compile_cannot_read_is_invalid_argument(host, config):
    """spyre.at(level=where) with a local `where` was a bare NameError from
    compile, and spyre.at(**kw) was never outlined and failed at run time
    saying the orchestrator was not compiled."""
    with pytest.raises(spyre.InvalidArgument, match="name 'where' is not defined; level is read when"):
        spyre.compile(at_of_a_local_level, config, host=host)
    kw = {"level": Level.HOST, "role": Role.WORKER}

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def at_of_kwargs(a: Small, f: Out[Small]):
        with spyre.at(**kw):
            f[...] = a
        return f

    with pytest.raises(spyre.InvalidArgument, match=r"must be spelled out \(spyre.at\(level=..., role=...\)\)"):
        spyre.compile(at_of_kwargs, config, host=host)


@spyre.program
class CommentMentionsAt:
    @spyre.function(level=Level.HOST, role=Role.WORKER)
    def scale(self, a: Small, s: Small, f: Out[Small]):
        f[...] = a * s

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: Small, f: Out[Small]):
        # look at (the current) SCALE: a comment, not a block
        s = spyre.create_tensor([4, 4])
        s.numpy()[...] = SCALE
        self.scale(a, s, f)


def test_a_functional_program_mentioning_at_in_a_comment_stays_functional(host, config):
    """A comment with "at (" made a functional program be outlined as an
    inline one (and then read compile-time globals)."""
    global SCALE
    a = np.ones((4, 4), np.float32)
    with spyre.compile(CommentMentionsAt, config, host=host) as compiled:
        assert compiled._body is compiled.orchestrator.fn
        try:
            for v in (2.0, 3.0):
                SCALE = v
                np.testing.assert_array_equal(compiled(a), v)
        finally:
            SCALE = 1.0


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def one_add(a: S8, b: S8, f: Out[S8]):
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
        with spyre.at(level=Level.CORE_GROUP):
            s = ops.add(a, b)
        spyre.assemble(f, s)
    return f


def test_the_dsl_takes_kernel_ids_the_user_left_free(host):
    """The DSL numbers its kernels from 1001: a Worker whose user had
    registered the next ids first failed the compile "already registered".
    It skips them, and the user's kernels stay theirs."""
    from spyre import host_dsl
    w = spyre.Worker(host, spyre.DistributedConfig(device_ids=[0]))
    try:
        taken = [host_dsl._kernel_next[0] + i for i in range(1, 4)]
        for kid in taken:
            w.register_kernel(kid, spyre.KernelBuilder().mul([8, 32]))
        w.register_chip_function("users_mul", spyre.ChipFunction.elementwise(taken[0]))
        a, b = np.full((8, 32), 2, np.float32), np.full((8, 32), 3, np.float32)
        with spyre.compile(one_add, worker=w) as compiled:
            np.testing.assert_array_equal(compiled(a, b), 5.0)
            assert not set(compiled.kernels) & set(taken)
        mul = spyre.HostProgram("mul", 2, [[8, 32]], lambda g, x: g.chip("users_mul", [spyre.In(x[0]), spyre.In(x[1]),
                                                                                         spyre.Out(x[2])]))
        np.testing.assert_array_equal(w.run(mul, [a, b])[0], 6.0)
    finally:
        w.close()


# ---- the inline style's scopes and what a block cannot be (outside probe 13B) ----

i = 100.0  # module globals a block must not read in place of the orchestrator's
x = 7.0


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def scopes_of_a_block(a: Small, f: Out[Small]):
    i = 2.0  # noqa: F841 (read by the block)

    def helper(x):  # a block inside a helper reads the helper's parameter
        with spyre.at(level=Level.HOST, role=Role.WORKER):
            f[...] = a * x

    helper(3.0)
    scales = []
    for k in range(3):
        scales.append(lambda v, k=None: v)  # noqa: E731
        scale = lambda v: v * k  # noqa: E731 (a closure over the loop: taken as it is at the block)
        with spyre.at(level=Level.HOST, role=Role.WORKER):
            vals = [i for i in range(3)]  # the comprehension's own i
            try:
                raise ValueError("x")
            except ValueError as exc:
                caught = str(exc)
            import math as m
            def twice(v):
                return v * 2
            f += scale(a) + a * i * 0 + a * (sum(vals) - 3) + a * (len(caught) - 1) + twice(a) * m.floor(0.5) * 0
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f += a * i  # the orchestrator's i, not the module's
    return f


def test_a_block_reads_the_names_of_the_scopes_around_it(host, config):
    """A comprehension's variable hid the orchestrator's (the block read the
    module's i), a block in a helper read the module's x, a lambda made in
    a loop was called with the loop's last k, a def, an import or an
    `except ... as` inside a block failed the compile or the task."""
    a = np.ones((4, 4), np.float32)
    with spyre.compile(scopes_of_a_block, config, host=host) as compiled:
        for _ in range(5):
            np.testing.assert_array_equal(compiled(a), 3 + (0 + 1 + 2) + 2)


@spyre.program
class PrivateNames:
    __k = 4.0

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: Small, f: Out[Small]):
        k = self.__k
        with spyre.at(level=Level.HOST, role=Role.WORKER):
            f[...] = a * k * self.__k
        return f


def test_private_names_of_a_method_orchestrator_are_mangled_as_in_its_class(host, config):
    with spyre.compile(PrivateNames, config, host=host) as compiled:
        np.testing.assert_array_equal(compiled(np.ones((4, 4), np.float32)), 16.0)


def test_what_a_block_or_an_op_cannot_be_is_invalid_argument(host, config):
    """Each was a wrong result, a raw Python error, or nothing run."""
    def refused(fn, match):
        with pytest.raises(spyre.InvalidArgument, match=match):
            spyre.compile(spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)(fn), config, host=host)

    def with_break(a: Small, f: Out[Small]):
        for _ in range(2):
            with spyre.at(level=Level.HOST, role=Role.WORKER):
                break
        return f

    n = 0

    def with_nonlocal(a: Small, f: Out[Small]):
        with spyre.at(level=Level.HOST, role=Role.WORKER):
            nonlocal n
            n += 1
        return f

    def typo(a: Small, f: Out[Small]):
        with spyre.at(level=Level.HOTS, role=Role.WORKER):
            f[...] = a
        return f

    def string_level(a: Small, f: Out[Small]):
        with spyre.at(level="HOST", role=Role.WORKER):
            f[...] = a
        return f

    def scalar_operand(a: S8, f: Out[S8]):
        with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
            with spyre.at(level=Level.CORE_GROUP):
                spyre.assemble(f, ops.add(a, 2.0))
        return f

    def assembled_twice(a: S8, f: Out[S8], g: Out[S8]):
        with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
            with spyre.at(level=Level.CORE_GROUP):
                s = ops.add(a, a)
            spyre.assemble(f, s)
            spyre.assemble(g, s)
        return f, g

    refused(with_break, "`break` at line .* leaves the block")
    refused(with_nonlocal, "`nonlocal` at line")
    refused(typo, "AttributeError")
    refused(string_level, "level is 'HOST', not a spyre.Level")
    refused(scalar_operand, "operand b is a float")
    refused(assembled_twice, "lands in another tensor already")
    with pytest.raises(spyre.InvalidArgument, match="generator or coroutine function"):
        @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
        def generator(a: Small, f: Out[Small]):
            yield f

    def deco(fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args):
            return fn(*args)
        return wrapper

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    @deco
    def decorated(a: Small, f: Out[Small]):
        with spyre.at(level=Level.HOST, role=Role.WORKER):
            f[...] = a
        return f

    with pytest.raises(spyre.InvalidArgument, match="takes no decorator but spyre.function"):
        spyre.compile(decorated, config, host=host)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def tensors_in_a_list(a: Small, f: Out[Small]):
    t = spyre.create_tensor([4, 4])
    ts = [t]
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = np.asarray(ts[0]) + a
    return f


def test_a_tensor_a_block_reaches_through_a_container_is_refused(host, config):
    """It got no dependency: the block read it before its writer ran (12 to
    20 of 20 runs wrong)."""
    with pytest.raises(spyre.InvalidArgument, match="'ts' holds a spyre tensor inside a list"):
        spyre.compile(tensors_in_a_list, config, host=host)  # seen by the compile's dry run


def test_a_program_compiles_again_onto_a_shared_worker(host):
    """A second compile onto one Worker failed "chip function ... is already
    registered", closed or not; the second takes name#2."""
    w = spyre.Worker(host, spyre.DistributedConfig(device_ids=[0], num_sub_workers=1))
    try:
        a, b = np.full((8, 32), 2, np.float32), np.full((8, 32), 3, np.float32)
        with spyre.compile(one_add, worker=w) as first:
            np.testing.assert_array_equal(first(a, b), 5.0)
        with spyre.compile(one_add, worker=w) as second, spyre.compile(L3DependencyProgram, worker=w) as third:
            np.testing.assert_array_equal(second(a, b), 5.0)
            assert any(n.endswith("#2") for n, *_ in second._inline_chips.values())
            x, y = ab()
            np.testing.assert_allclose(third(x, y), 5.0)
    finally:
        w.close()


@spyre.program
class WorkerReturnsItsResult:
    @spyre.function(level=Level.HOST, role=Role.WORKER)
    def double(self, a: Small, f: Out[Small]):
        return a * 2  # goes nowhere: the result belongs in f

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: Small, f: Out[Small]):
        self.double(a, f)


@spyre.program
class WorkerReturnsItsOut:
    @spyre.function(level=Level.HOST, role=Role.WORKER)
    def double(self, a: Small, f: Out[Small]):
        f[...] = a * 2
        return f

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: Small, f: Out[Small]):
        self.double(a, f)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def output_declared_under_an_if(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        if True:
            t: Small = a * 2
    f[...] = 0
    return f


def test_results_that_would_go_nowhere_are_invalid_argument(host, config):
    """A WORKER that returned its result instead of writing its Out had it
    dropped silently (f stayed zeros); an output declared under an `if`
    in a block was a raw NameError at compile. Returning the Out itself
    stays fine."""
    a = np.ones((4, 4), np.float32)
    with spyre.compile(WorkerReturnsItsResult, config, host=host) as compiled:
        with pytest.raises(spyre.HostRunError, match="it returned a ndarray, which goes nowhere"):
            compiled(a)
    with spyre.compile(WorkerReturnsItsOut, config, host=host) as compiled:
        np.testing.assert_array_equal(compiled(a), 2.0)
    with pytest.raises(spyre.InvalidArgument, match="the output 't' at line .* is declared inside a statement"):
        spyre.compile(output_declared_under_an_if, config, host=host)


SCALE_HINT = "scale"


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def named_worker_blocks(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER, name_hint="double"):
        t: Small = a * 2
    with spyre.at(level=Level.HOST, role=Role.WORKER, name_hint=SCALE_HINT):
        f[...] = t * 3
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f += 1
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def worker_hint_of_a_local(a: Small, f: Out[Small]):
    hint = "local"
    with spyre.at(level=Level.HOST, role=Role.WORKER, name_hint=hint):
        f[...] = a
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def worker_hint_not_a_string(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER, name_hint=3):
        f[...] = a
    return f


def test_worker_blocks_take_their_name_hint(host, config):
    """A WORKER block's name_hint names its SubWorker task (report, trace,
    failures) as a CHIP block's does; it was ignored (every block was
    `<orchestrator>.sub<N>`: found probing). One the compile cannot read is
    InvalidArgument, as a level or role would be."""
    a = np.ones((4, 4), np.float32)
    with spyre.compile(named_worker_blocks, config, host=host) as compiled:
        h = compiled.submit(a)
        np.testing.assert_array_equal(h.wait(), 7.0)
        names = [r.name for r in h.report()]
        assert names == ["named_worker_blocks.double", "named_worker_blocks.scale", "named_worker_blocks.sub2"]
    with pytest.raises(spyre.InvalidArgument, match=r"NameError.*name_hint is read when the program is compiled"):
        spyre.compile(worker_hint_of_a_local, config, host=host)
    with pytest.raises(spyre.InvalidArgument, match="name_hint is 3, not a str"):
        spyre.compile(worker_hint_not_a_string, config, host=host)


Row4 = Tensor[[4, 8], spyre.FP32]


def two_op_program(rows, dtype):
    """A CHIP function of two ops over [4, 8] fp32, called on [rows, 8]
    tensors of `dtype`."""
    Given = Tensor[[rows, 8], dtype]

    @spyre.program
    class TwoOps:
        @spyre.function(level=Level.CORE_GROUP)
        def twice_times(self, x: Row4, y: Out[Row4]):
            return ops.mul(ops.add(x, x), x, out=y)

        @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
        def chip(self, x: Row4, y: Out[Row4]):
            return self.twice_times(x, y)

        @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
        def orch(self, a: Given, f: Out[Given]):
            self.chip(a, f)
            return f

    return TwoOps


def test_a_chip_function_takes_only_its_annotated_tensors(host, config):
    """A CHIP function of two ops given [8, 8] tensors for its [4, 8]
    annotations computed rows 0-3 and left 4-7 zeros; given fp16 of the same
    bytes, ran its fp32 kernels over the fp16 bits (found probing from
    outside). Both are refused, naming the argument."""
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    with spyre.compile(two_op_program(4, spyre.FP32), config, host=host) as compiled:
        np.testing.assert_array_equal(compiled(x), (x + x) * x)
    with spyre.compile(two_op_program(8, spyre.FP32), config, host=host) as compiled:
        with pytest.raises(spyre.Error, match=r"chip: argument 'x' has shape \[8, 8\], expected \[4, 8\]"):
            compiled(np.ones((8, 8), np.float32))
    with spyre.compile(two_op_program(4, spyre.FP16), config, host=host) as compiled:
        with pytest.raises(spyre.Error, match=r"chip: argument 'x' has dtype float16, expected float32"):
            compiled(np.ones((4, 8), np.float16))


CHIP_OP = "add"
CHIP_ROWS = 4


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def chip_block_of_a_global_op(a: Small, b: Small, f: Out[Small]):
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR, name_hint="pick"):
        with spyre.at(level=Level.CORE_GROUP):
            spyre.assemble(f, ops.add(a, b) if CHIP_OP == "add" else ops.sub(a, b))
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def chip_block_of_global_rows(a: Small, f: Out[Small]):
    t = spyre.create_tensor([CHIP_ROWS, 4])
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
        with spyre.at(level=Level.CORE_GROUP):
            spyre.assemble(t, ops.add(t, t))
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = t[:4] + a
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def chip_block_that_raises(a: Small, b: Small, f: Out[Small]):
    try:
        with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
            with spyre.at(level=Level.CORE_GROUP):
                spyre.assemble(f, ops.add(a, b))
            raise ValueError("after the assemble")
    except ValueError:
        pass
    return f


def test_an_inline_chip_block_runs_what_it_records_or_is_refused(host, config):
    """An inline CHIP block replayed the ops it recorded at compile time: an
    op chosen by a global gave the compile's op after the global changed,
    and a create_tensor sized by a global was computed in part. Each is
    InvalidArgument now. An exception leaving a block that recorded ops
    dropped its chip task without a word (f kept its old bytes): refused.
    The block's task is named <orchestrator>.<name_hint> (it was the
    function's name with '#0'). All found probing from outside."""
    global CHIP_OP, CHIP_ROWS
    a, b = np.full((4, 4), 3.0, np.float32), np.full((4, 4), 5.0, np.float32)
    try:
        with spyre.compile(chip_block_of_a_global_op, config, host=host) as compiled:
            h = compiled.submit(a, b)
            np.testing.assert_array_equal(h.wait(), 8.0)
            assert [r.name for r in h.report()] == ["chip_block_of_a_global_op.pick"]
            CHIP_OP = "sub"
            with pytest.raises(spyre.Error, match=r"block 0: it records ops \['sub'\] now, \['add'\] when the "
                                                    "program was compiled"):
                compiled(a, b)
        with spyre.compile(chip_block_of_global_rows, config, host=host) as compiled:
            np.testing.assert_array_equal(compiled(a), 3.0)
            CHIP_ROWS = 8
            with pytest.raises(spyre.Error, match=r"block 0: its tensor 0 is \[8, 4\] fp32 \(inout\) now, \[4, 4\]"):
                compiled(a)
    finally:
        CHIP_OP, CHIP_ROWS = "add", 4
    with pytest.raises(spyre.InvalidArgument, match="ValueError left the block after it recorded 1 op"):
        spyre.compile(chip_block_that_raises, config, host=host)


@spyre.function(level=Level.HOST, role=Role.WORKER)
def a_loose_worker(x: Small, y: Out[Small]):
    y[...] = x


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def calls_a_loose_worker(a: Small, f: Out[Small]):
    a_loose_worker(a, f)
    return f


def test_a_function_outside_the_program_is_invalid_argument(host, config):
    """An orchestrator calling a spyre.function that is not part of the
    compiled program failed with a raw KeyError (found probing)."""
    with spyre.compile(calls_a_loose_worker, config, host=host) as compiled:
        with pytest.raises(spyre.Error, match="a_loose_worker: not a function of the compiled program"):
            compiled(np.ones((4, 4), np.float32))


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def worker_blocks_of_one_name(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER, name_hint="sub1"):
        f[...] = a
    with spyre.at(level=Level.HOST, role=Role.WORKER):  # sub1 by default
        f += 1
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def chip_and_worker_blocks_of_one_name(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER, name_hint="step"):
        f[...] = a
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR, name_hint="step"):
        with spyre.at(level=Level.CORE_GROUP):
            r = spyre.ops.add(a, a)
        spyre.assemble(f, r)
    return f


def test_two_blocks_of_one_task_name_are_invalid_argument(host, config):
    """Two blocks with one name_hint, or a hint equal to another block's
    default name, gave tasks the report and the trace could not tell apart
    (found probing from outside)."""
    with pytest.raises(spyre.InvalidArgument, match=r"worker_blocks_of_one_name.sub1 \(the WORKER block at line 5\): "
                                                    r"the WORKER block at line 3 has that name too"):
        spyre.compile(worker_blocks_of_one_name, config, host=host)
    with pytest.raises(spyre.InvalidArgument, match=r"spyre.at\(CHIP\) block 0: another block's task is named "
                                                    r"chip_and_worker_blocks_of_one_name.step too"):
        spyre.compile(chip_and_worker_blocks_of_one_name, config, host=host)


@spyre.program
class KeywordOnlyScale:
    @spyre.function(level=Level.HOST, role=Role.WORKER)
    def scale(self, a: Small, f: Out[Small], *, by=2.0):
        f[...] = a * by

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: Small, f: Out[Small]):
        self.scale(a, f)


def test_a_keyword_only_parameter_keeps_its_default(host, config):
    """A keyword-only parameter was counted as a tensor: the program
    compiled and every run failed, "takes 3 tensor(s), got 2" (found
    probing from outside). One without a default cannot be passed by a
    task: InvalidArgument when the function is declared."""
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    with spyre.compile(KeywordOnlyScale, config, host=host) as compiled:
        np.testing.assert_array_equal(compiled(a), a * 2)
    for params in ("a, *, by", "a, *rest", "a, **kw"):
        ns = {}
        exec(f"def w({params}): pass", ns)  # noqa: S102 (the test's own source)
        with pytest.raises(spyre.InvalidArgument, match=r"w: parameter '\*{0,2}(by|rest|kw)' cannot be passed by a "
                                                        r"task"):
            spyre.function(level=Level.HOST, role=Role.WORKER)(ns["w"])


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR, name_hint="main")
def chip_block_in_a_loop(a: Small, f: Out[Small]):
    for _ in range(3):
        with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR, name_hint="step"):
            with spyre.at(level=Level.CORE_GROUP):
                r = spyre.ops.add(f, a)
            spyre.assemble(f, r)
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f += 1
    return f


def test_a_chip_block_in_a_loop_keeps_its_name_and_blocks_take_the_orchestrators(host, config):
    """One CHIP block with a name_hint in a loop was refused as two blocks
    of one name (a regression of the one-name check); and a WORKER block
    was named after the function, a CHIP block after the orchestrator's
    name_hint (found probing from outside)."""
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    with spyre.compile(chip_block_in_a_loop, config, host=host) as compiled:
        h = compiled.submit(a, np.zeros((4, 4), np.float32))
        h.wait()
        assert [r.name for r in h.report()] == ["main.step"] * 3 + ["main.sub0"]


@spyre.program
class PositionalDefault:
    @spyre.function(level=Level.HOST, role=Role.WORKER)
    def scale(self, a: Small, f: Out[Small], by=3.0):
        f[...] = a * by

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: Small, f: Out[Small]):
        self.scale(a, f)


def test_a_plain_positional_parameter_with_a_default_keeps_it(host, config):
    """It was counted as a tensor: every run failed "takes 3 tensor(s), got
    2" (found probing from outside). A tensor after it would land in it:
    InvalidArgument when declared."""
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    with spyre.compile(PositionalDefault, config, host=host) as compiled:
        np.testing.assert_array_equal(compiled(a), a * 3)
    with pytest.raises(spyre.InvalidArgument, match="w: tensor parameter 'f' follows 'by', a plain parameter with a "
                                                    "default: put the tensors first"):
        @spyre.function(level=Level.HOST, role=Role.WORKER)
        def w(a: Small, by=2.0, f: Out[Small] = None):
            pass


SCRATCH = None  # a module global a block reads (set by the test)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_reads_a_global_tensor(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = a + SCRATCH
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def worker_block_inside_a_chip_block(a: Small, f: Out[Small]):
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
        with spyre.at(level=Level.CORE_GROUP):
            r = spyre.ops.add(a, a)
        spyre.assemble(f, r)
        with spyre.at(level=Level.HOST, role=Role.WORKER):
            f += 1
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def chip_block_writes_a_tensor_and_reads_its_rows(a: Small, f: Out[Small]):
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
        with spyre.at(level=Level.CORE_GROUP):
            r = spyre.ops.add(a, a)
        spyre.assemble(f, r)
        with spyre.at(level=Level.CORE_GROUP):
            r2 = spyre.ops.add(f.rows(0, 4), a)
        spyre.assemble(f, r2)
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def divides_by_its_data(a: Small, f: Out[Small]):
    k = 1.0 / float(np.asarray(a)[0, 0])
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = a * k
    return f


def test_what_a_block_cannot_order_is_invalid_argument(host, config):
    """Wrong results, silently, before (found probing from outside): a
    global tensor a block read was read before its writer; a WORKER block
    inside a CHIP block ran before that block's ops; a CHIP block that
    wrote a tensor and read its rows read the bytes from before the block.
    And a compile whose dry run raised was a bare ZeroDivisionError."""
    global SCRATCH
    SCRATCH = spyre.HostTensor.zeros([4, 4])
    try:
        with pytest.raises(spyre.InvalidArgument, match="the global 'SCRATCH' is a spyre tensor"):
            spyre.compile(block_reads_a_global_tensor, config, host=host)
    finally:
        SCRATCH = None
    with spyre.compile(block_reads_a_global_tensor, config, host=host):  # a global that is no tensor is fine
        pass
    with pytest.raises(spyre.InvalidArgument, match="a WORKER block inside a spyre.at\\(CHIP\\) block"):
        spyre.compile(worker_block_inside_a_chip_block, config, host=host)
    with pytest.raises(spyre.InvalidArgument, match="(share bytes|stands for two tensors) and one is written"):
        with spyre.compile(chip_block_writes_a_tensor_and_reads_its_rows, config, host=host) as compiled:
            compiled(np.ones((4, 4), np.float32))
    with pytest.raises(spyre.InvalidArgument, match="raised ZeroDivisionError: float division by zero"):
        spyre.compile(divides_by_its_data, config, host=host)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def helpers_share_a_list(a: Small, f: Out[Small]):
    total = []

    def add(x):
        total.append(x)

    def count(n):
        return 0 if n == 0 else 1 + count(n - 1)  # calls itself

    alias = total
    match [1.0, 2.0]:
        case [first, *rest]:
            pass
    k = sum(x for x in [1.0])
    g = (lambda x: x)(1.0)
    x = 5.0  # the orchestrator binds x too: the lambda's and the generator's are theirs
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        add(1.0)
        add(2.0)
        f[...] = a * (len(alias) + count(3) + first + len(rest) + sum(x for x in [k]) + (lambda x: x)(g))
    return f


def test_a_blocks_plain_inputs_are_copied_together(host, config):
    """A block's plain inputs were copied one by one: two helpers sharing a
    list, and the list read by name, saw three lists (0 instead of 2); a
    helper calling itself made compile raise RecursionError; a `match`
    capture read the module's global of its name; a lambda's parameter or
    a generator's variable that the orchestrator also binds was taken for
    an input, UnboundLocalError at compile (found probing from outside)."""
    a = np.ones((4, 4), np.float32)
    with spyre.compile(helpers_share_a_list, config, host=host) as compiled:
        np.testing.assert_array_equal(compiled(a), a * (2 + 3 + 1 + 1 + 1 + 1))


@spyre.program
class ChipFunctionWithItsOwnTensor:
    @spyre.function(level=Level.CORE_GROUP)
    def add_bias(self, a: Small, f: Out[Small]):
        spyre.ops.add(a, SMALL_BIAS, out=f)

    @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
    def chip(self, a: Small, f: Out[Small]):
        self.add_bias(a, f)

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: Small, f: Out[Small]):
        self.chip(a, f)


SMALL_BIAS = spyre.HostTensor.full([4, 4], 10.0)


def test_a_chip_function_takes_no_tensor_but_its_parameters(host, config):
    """A tensor of its own (a global, a create_tensor) took parameter 0's
    place: a + a instead of a + 10 (found probing from outside)."""
    with pytest.raises(spyre.InvalidArgument, match="a tensor that is not one of its parameters"):
        spyre.compile(ChipFunctionWithItsOwnTensor, config, host=host)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def matmul_in_place(a: Small, f: Out[Small]):
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
        with spyre.at(level=Level.CORE_GROUP):
            spyre.ops.matmul(f, a, out=f)
    return f


def test_a_matmul_into_its_own_operand_is_refused_at_compile(host, config):
    """It compiled, then every run failed on the card (OVERLAP)."""
    with pytest.raises(spyre.InvalidArgument, match="ops.matmul: out is one of its operands"):
        spyre.compile(matmul_in_place, config, host=host)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def assemble_after_the_target_was_used(a: Small, f: Out[Small]):
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
        with spyre.at(level=Level.CORE_GROUP):
            t = spyre.ops.add(a, a)
            spyre.ops.mul(a, a, out=f)
        spyre.assemble(f, t)
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def matmul_assembled_into_its_operand(a: Small, f: Out[Small]):
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
        with spyre.at(level=Level.CORE_GROUP):
            t = spyre.ops.matmul(a, a)
        spyre.assemble(a, t)
    return f


@spyre.program
class ReadsItsOut:
    @spyre.function(level=Level.CORE_GROUP)
    def acc(self, a: Small, c: Out[Small]):
        spyre.ops.add(c, a, out=c)

    @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
    def chip(self, a: Small, c: Out[Small]):
        self.acc(a, c)

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: Small, c: Out[Small]):
        self.chip(a, c)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def two_augmented_assignments(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f += a
        f *= 2
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def annotation_compile_cannot_read(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        k: NotDefinedAnywhere = 2.0  # noqa: F821 (the point)
        f[...] = a * k
    return f


def test_chip_ops_keep_their_order_and_outs_start_as_zeros(host, config):
    """Wrong results, silently (found probing from outside): assemble(f, t)
    after a later op wrote f made t's op write f, and the later op's value
    stayed; a functional CHIP function that read its Out parameter read
    zeros (an Out is not uploaded). A matmul assembled into its operand
    failed every run on the card. Refused at compile now."""
    with pytest.raises(spyre.InvalidArgument, match=r"assemble: ops.mul \(call 1\) uses the target after"):
        spyre.compile(assemble_after_the_target_was_used, config, host=host)
    with pytest.raises(spyre.InvalidArgument, match="its result lands in one of its operands"):
        spyre.compile(matmul_assembled_into_its_operand, config, host=host)
    with pytest.raises(spyre.InvalidArgument, match="reads the Out parameter 'c' before an op wrote it"):
        spyre.compile(ReadsItsOut, config, host=host)


def test_a_block_that_augments_a_tensor_twice_and_odd_annotations(host, config):
    """`f += a; f *= 2` made f the block's own (UnboundLocalError every
    run); an annotation compile cannot evaluate was a raw NameError."""
    a = np.ones((4, 4), np.float32)
    with spyre.compile(two_augmented_assignments, config, host=host) as compiled:
        np.testing.assert_array_equal(compiled(a, np.ones((4, 4), np.float32)), 4.0)
    with pytest.raises(spyre.InvalidArgument, match="the annotation of 'k' at line 4 cannot be read"):
        spyre.compile(annotation_compile_cannot_read, config, host=host)


GLOBAL_FOR_HELPER = None


def _helper_reading_a_global():
    return np.asarray(GLOBAL_FOR_HELPER)


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_calls_a_helper_reading_a_global(a: Small, f: Out[Small]):
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = a + _helper_reading_a_global()
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def closures_in_a_list(a: Small, f: Out[Small]):
    fns = []
    for k in range(4):
        fns.append(lambda: k)
        with spyre.at(level=Level.HOST, role=Role.WORKER):
            f[k] = a[k] * fns[k]()
    return f


def test_helpers_globals_and_closures_in_containers(host, config):
    """A module helper reading a global tensor read it unordered; a lambda
    kept in a list read the loop's last value (found probing from
    outside). Library functions a block calls (spyre.at, numpy) are not
    looked into: they reach their own state."""
    global GLOBAL_FOR_HELPER
    GLOBAL_FOR_HELPER = spyre.HostTensor.zeros([4, 4])
    try:
        with pytest.raises(spyre.InvalidArgument, match="the global '_helper_reading_a_global' holds a spyre tensor"):
            spyre.compile(block_calls_a_helper_reading_a_global, config, host=host)
    finally:
        GLOBAL_FOR_HELPER = None
    a = np.ones((4, 4), np.float32)
    with spyre.compile(closures_in_a_list, config, host=host) as compiled:
        np.testing.assert_array_equal(compiled(a)[:, 0], [0, 1, 2, 3])


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def caught_second_assemble(a: Small, b: Small, h: Small, f: Out[Small]):
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
        with spyre.at(level=Level.CORE_GROUP):
            v = ops.add(a, b)
        spyre.assemble(f, v)
        try:
            spyre.assemble(h, v)  # refused: the result lands in f
        except spyre.InvalidArgument:
            pass
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def caught_spyre_error_after_an_op(a: Small, b: Small, f: Out[Small]):
    try:
        with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
            with spyre.at(level=Level.CORE_GROUP):
                spyre.assemble(f, ops.add(a, b))
                ops.matmul(a, spyre.create_tensor([3, 4]))  # shapes do not chain
    except spyre.InvalidArgument:
        pass
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_over_a_name_bound_on_a_path_not_taken(a: Small, f: Out[Small]):
    use_extra = False
    if use_extra:
        extra = 1.0
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = a + extra if use_extra else a * 2
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def block_reading_a_name_never_bound(a: Small, f: Out[Small]):
    if a.shape[0] > 100:
        extra = 1.0
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = a + extra
    return f


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def add_into(a: Small, b: Small, f: Out[Small]):
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
        with spyre.at(level=Level.CORE_GROUP):
            spyre.assemble(f, ops.add(a, b))
    return f


@spyre.program
class LeavesAnOutUnwritten:
    @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
    def chip(self, a: Small, o1: Out[Small], o2: Out[Small]):
        ops.add(a, a, out=o1)

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: Small, f: Out[Small], g: Out[Small]):
        self.chip(a, f, g)
        return f


@spyre.program
class CallsByKeyword:
    @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
    def chip(self, a: Small, b: Small, o: Out[Small]):
        ops.sub(a, b, out=o)

    @spyre.function(level=Level.HOST, role=Role.WORKER)
    def twice(self, x: Small, o: Out[Small], scale=2.0):
        o[...] = x * scale

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: Small, b: Small, f: Out[Small], g: Out[Small]):
        self.chip(b=b, o=f, a=a)
        self.twice(a, o=g)
        return f, g


def test_refusals_and_exceptions_leave_what_the_caller_passed_alone(host, config, rng):
    """Wrong results, silently (found probing from outside): an assemble
    refused and caught inside a CHIP block had made its target an output
    all the same, and the caller's input came back zeros; a functional CHIP
    function's Out that no op wrote came back zeros over what the caller
    passed; a spyre error leaving a CHIP block after its ops, caught by
    the orchestrator, dropped the block without a word."""
    a, b, h = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(3))
    h0 = h.copy()
    with spyre.compile(caught_second_assemble, config, host=host) as c:
        np.testing.assert_array_equal(c(a, b, h), a + b)
    np.testing.assert_array_equal(h, h0)
    with pytest.raises(spyre.InvalidArgument, match="no op writes the Out parameter 'o2'"):
        spyre.compile(LeavesAnOutUnwritten, config, host=host)
    with pytest.raises(spyre.InvalidArgument, match="InvalidArgument left the block after it recorded 1 op"):
        spyre.compile(caught_spyre_error_after_an_op, config, host=host)


def test_a_block_input_unbound_where_the_block_is_reached_is_unbound_in_it(host, config):
    """Plain Python runs a block that reads a name only on a path not
    taken; compiling it raised UnboundLocalError (found probing from
    outside). Read, the name fails the block's task as in plain Python."""
    a = np.ones((4, 4), np.float32)
    with spyre.compile(block_over_a_name_bound_on_a_path_not_taken, config, host=host) as c:
        np.testing.assert_array_equal(c(a), a * 2)
    with spyre.compile(block_reading_a_name_never_bound, config, host=host) as c:
        with pytest.raises(spyre.HostRunError, match="UnboundLocalError: cannot access local variable 'extra'"):
            c(a)


def test_dsl_functions_take_keyword_arguments_and_int_dims(host, config, rng):
    """A call by keyword was a TypeError naming the library's internals;
    Tensor[[2.9, 3]] was taken as [2, 3], '4' as 4 and True as 1 (found
    probing from outside); one array given as two CHIP arguments, one
    written, fails the run InvalidArgument (it was TaskFailed)."""
    a, b = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(2))
    with spyre.compile(CallsByKeyword, config, host=host) as c:
        f, g = c(a, b)
    np.testing.assert_array_equal(f, a - b)
    np.testing.assert_array_equal(g, a * 2)
    for dims in ([2.9, 3], ["4", 3], [True, 3]):
        with pytest.raises(spyre.InvalidArgument, match="is not a list of int dims"):
            Tensor[dims]
    assert Tensor[[np.int64(2), 3]].shape == (2, 3)
    with spyre.compile(add_into, config, host=host) as c:
        with pytest.raises(spyre.InvalidArgument, match="stands for two tensors and one is written"):
            c(a, b, a)
        # The program itself takes keywords too (a TypeError naming CompiledProgram before).
        np.testing.assert_array_equal(c(b=b, a=a), a + b)
        f = np.zeros((4, 4), np.float32)
        c(a, f=f, b=b)
        np.testing.assert_array_equal(f, a + b)
        np.testing.assert_array_equal(c.submit(a, b=b).wait(), a + b)
        with pytest.raises(spyre.InvalidArgument, match="keyword argument 'g': no such parameter"):
            c(a, b, g=f)
        with pytest.raises(spyre.InvalidArgument, match="keyword argument 'a': given by position already"):
            c(a, a=a)


def test_an_orchestrator_runs_its_source_as_imported_not_as_edited_since(host, config, tmp_path, monkeypatch):
    """compile read the orchestrator's file as it was then: edited after
    the import, the program ran the edit (found probing from outside)."""
    module = tmp_path / "edited_after_import.py"
    text = '''import spyre
from spyre import Level, Role, Tensor, Out
T = Tensor[[4, 4], spyre.FP32]


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def orch(a: T, f: Out[T]):
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        f[...] = a + 1.0
    return f
'''
    module.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    import edited_after_import
    module.write_text(text.replace("a + 1.0", "a + 2.0"))
    with spyre.compile(edited_after_import.orch, config, host=host) as c:
        np.testing.assert_array_equal(c(np.zeros((4, 4), np.float32)), np.ones((4, 4), np.float32))
