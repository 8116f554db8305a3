# SPDX-License-Identifier: Apache-2.0
"""Seed 003's two writing styles for host-level programs, in pure Python over
spyre.Worker (the C++ level-3 runtime): nothing here schedules, moves data or
runs kernels; it turns decorated functions into a HostProgram, chip functions
and SubWorkers, and registers them on a Worker.

Functional style::

    @spyre.program
    class Dep:
        @spyre.function(level=spyre.Level.CORE_GROUP)
        def tile_add(self, a: T128, b: T128, f: spyre.Out[T128]):
            return spyre.ops.add(a, b)                  # a kernel-builder op
        @spyre.function(level=spyre.Level.CHIP, role=spyre.Role.ORCHESTRATOR)
        def chip_orch(self, a: T128, b: T128, f: spyre.Out[T128]):
            return self.tile_add(a, b, f)
        @spyre.function(level=spyre.Level.HOST, role=spyre.Role.WORKER)
        def verify(self, f: T128):                      # a SubWorker: numpy arrays
            assert np.allclose(f, 5.0)
        @spyre.function(level=spyre.Level.HOST, role=spyre.Role.ORCHESTRATOR)
        def host_orch(self, a: T128, b: T128, f: spyre.Out[T128]):
            out_f = self.chip_orch(a, b, f)
            self.verify(out_f)
            return out_f

    compiled = spyre.compile(Dep, spyre.DistributedConfig(num_sub_workers=1), host=host)
    compiled(a, b, f)        # in place
    f = compiled(a, b)       # return style

Inline style: one HOST orchestrator whose body has ``with spyre.at(...)``
blocks (docs/python.md, "Orchestration and host-level programs").
"""
from __future__ import annotations

import ast
import builtins
import collections
import collections.abc
import copy
import enum
import functools
import inspect
import operator
import re
import sys
import textwrap
import threading
import types
import weakref

import numpy as np

from . import _spyre

_pycompile = builtins.compile

Level = _spyre.Level


class Role(enum.Enum):
    """A HOST-level function's role: ORCHESTRATOR builds the DAG; WORKER is a
    SubWorker (pure Python on numpy arrays). SUB_WORKER is the same role."""
    ORCHESTRATOR = "orchestrator"
    WORKER = "worker"
    SUB_WORKER = "worker"


FP32, FP16, INT32, INT8 = np.float32, np.float16, np.int32, np.int8


def _dtype(dtype, what):
    """numpy's dtype of `dtype`, or spyre.InvalidArgument naming `what`."""
    try:
        return np.dtype(dtype)
    except TypeError as e:
        raise _spyre.InvalidArgument(f"{what}: {dtype!r} is not a dtype ({e})") from None


class TensorType:
    def __init__(self, shape, dtype=FP32):
        # Dims are ints (numpy's too): int() took 2.9 as 2, '4' as 4 and True
        # as 1 (found probing from outside; create_tensor refuses them).
        try:
            if isinstance(shape, (str, bytes)) or any(isinstance(d, (bool, np.bool_)) for d in shape):
                raise TypeError
            self.shape = tuple(operator.index(d) for d in shape)
        except TypeError:
            raise _spyre.InvalidArgument(f"Tensor[...]: the shape {shape!r} is not a list of int dims") from None
        if not self.shape or any(d <= 0 for d in self.shape):
            raise _spyre.InvalidArgument(f"Tensor[...]: the shape {list(self.shape)} needs dims of at least 1")
        self.dtype = _dtype(dtype, "Tensor[...]")

    @property
    def nbytes(self):
        return int(np.prod(self.shape)) * self.dtype.itemsize

    def __repr__(self):
        return f"Tensor[{list(self.shape)}, {self.dtype}]"


class _TensorFactory:
    """``Tensor[[128, 128], FP32]``: a tensor annotation (shape, dtype)."""

    def __getitem__(self, item):
        if isinstance(item, tuple) and len(item) == 2 and not isinstance(item[1], int):
            return TensorType(item[0], item[1])
        return TensorType(item)


class OutType:
    def __init__(self, t):
        if not isinstance(t, TensorType):
            raise _spyre.InvalidArgument(f"Out[...] takes a Tensor[...] annotation, got {t!r}")
        self.tensor = t

    def __repr__(self):
        return f"Out[{self.tensor!r}]"


class _OutFactory:
    """``Out[Tensor[...]]``: an output annotation; ``Out(t)``: a task's output argument."""

    def __getitem__(self, t):
        return OutType(t)

    def __call__(self, tensor):
        return ("out", tensor)


def In(tensor):  # noqa: N802 (the C++ API's In/Out/InOut)
    """A task's input argument: ``("in", tensor)``."""
    return ("in", tensor)


def InOut(tensor):  # noqa: N802
    """A task's argument it reads and writes: ``("inout", tensor)``."""
    return ("inout", tensor)


Tensor = _TensorFactory()
Out = _OutFactory()


# ---- decorated functions -------------------------------------------------------

class DslFunction:
    """A function marked with its level and role (spyre.function)."""

    def __init__(self, fn, level, role):
        if level == Level.HOST and role is None:
            raise _spyre.InvalidArgument(f"{fn.__name__}: a HOST function needs role=Role.ORCHESTRATOR or Role.WORKER")
        if level != Level.HOST and role == Role.WORKER:
            raise _spyre.InvalidArgument(f"{fn.__name__}: Role.WORKER (a SubWorker) is a HOST-level role")
        # Called, a generator or coroutine function runs nothing: every
        # level's would compile and run with nothing done (found probing).
        if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise _spyre.InvalidArgument(f"{fn.__name__}: a generator or coroutine function cannot be a "
                                         "spyre.function (calling it would run nothing)")
        self.fn, self.level, self.role, self.name = fn, level, role, fn.__name__
        # A HOST orchestrator's source as it is when it is defined: its
        # spyre.at blocks are outlined from it. Read at compile, it was the
        # file's text then: edited since the import, the program ran the
        # edit (found probing from outside). None: it has none to read.
        self.source = None
        if level == Level.HOST and role == Role.ORCHESTRATOR:
            try:
                self.source = inspect.getsource(fn)
            except (OSError, TypeError):
                pass
        sig = inspect.signature(fn)
        hints = fn.__annotations__
        self.params = []  # (name, TensorType or None, is_out)
        defaulted = None  # the first positional parameter left at its default
        for i, p in enumerate(sig.parameters.values()):
            if i == 0 and p.name == "self":
                continue
            # Tasks pass their tensors by position: a keyword-only parameter
            # was counted as one, and every call failed at run time saying
            # it took one tensor more (found probing from outside).
            if p.kind == p.KEYWORD_ONLY and p.default is not p.empty:
                continue  # keeps its default
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                raise _spyre.InvalidArgument(
                    f"{fn.__name__}: parameter '{p}' cannot be passed by a task: a spyre.function takes its "
                    "tensors by position (a keyword-only parameter needs a default, which it keeps)")
            ann = hints.get(p.name)
            if isinstance(ann, str):
                ann = eval(ann, fn.__globals__)  # noqa: S307 (annotations of the user's own module)
            if p.default is not p.empty and not isinstance(ann, (TensorType, OutType)):
                defaulted = defaulted or p.name
                continue  # a plain parameter with a default keeps it
            if defaulted:  # the task's tensors are passed by position: this one would land in it
                raise _spyre.InvalidArgument(f"{fn.__name__}: tensor parameter '{p.name}' follows '{defaulted}', a "
                                             "plain parameter with a default: put the tensors first")
            if isinstance(ann, OutType):
                self.params.append((p.name, ann.tensor, True))
            else:
                self.params.append((p.name, ann if isinstance(ann, TensorType) else None, False))
        self.is_method = bool(sig.parameters) and next(iter(sig.parameters)) == "self"

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        return _Bound(self, obj)

    def __call__(self, *args, **kwargs):
        return _dispatch(self, None, self.bind(args, kwargs))

    def bind(self, args, kwargs):
        """The task's arguments in parameter order (a call by keyword was a
        TypeError naming library internals: found probing from outside)."""
        if not kwargs:
            return args
        return _bind_by_name(self.name, [n for n, _, _ in self.params], args, kwargs,
                             inspect.signature(self.fn).parameters)


def _bind_by_name(who, names, args, kwargs, defaulted=()):
    """`args`, then `kwargs` by name in the order of `names`, up to the
    first name not given (a count check follows); InvalidArgument for a
    keyword left over, saying why (`defaulted`: names that keep their
    defaults)."""
    bound = list(args)
    for n in names[len(args):]:
        if n not in kwargs:
            break
        bound.append(kwargs.pop(n))
    if kwargs:
        n = next(iter(kwargs))
        why = "given by position already" if n in names[:len(args)] else \
            f"'{names[len(bound)]}' before it is missing" if n in names else \
            "a plain parameter with a default keeps it (a task passes tensors)" if n in defaulted else \
            "no such parameter"
        raise _spyre.InvalidArgument(f"{who}: keyword argument '{n}': {why}")
    return tuple(bound)


class _Bound:
    def __init__(self, f, obj):
        self.f, self.obj = f, obj

    def __call__(self, *args, **kwargs):
        return _dispatch(self.f, self.obj, self.f.bind(args, kwargs))


def function(level=Level.HOST, role=None, *, name_hint=""):
    """Seed 003's @pl.function(level=, role=): marks a function's level and role."""
    def wrap(fn):
        f = DslFunction(fn, level, role)
        if name_hint:
            f.name = name_hint
        return f
    return wrap


def program(cls):
    """Seed 003's @pl.program: a class of DslFunctions (kept as is; compile() reads it)."""
    if not isinstance(cls, type):
        raise TypeError(f"spyre.program decorates a class, not a {type(cls).__name__}")
    cls.__spyre_program__ = True
    return cls


# ---- tracing state (one per thread) --------------------------------------------

_tls = threading.local()


def _ints(value, what):
    """`value` as a list (a shape, an offset), or TypeError saying what it is."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{what} is a {type(value).__name__}, not a list of ints")
    return list(value)


def _ctx():
    return getattr(_tls, "ctx", None)


class _CoreValue:
    """A core-group op's result inside a chip trace."""

    def __init__(self, builder, call_index, shape, dtype):
        self.builder, self.call, self.shape, self.dtype = builder, call_index, tuple(shape), np.dtype(dtype)


class _ChipArg:
    """Argument i of a chip function being traced (functional style)."""

    def __init__(self, index, t):
        self.index, self.shape, self.dtype = index, t.shape, t.dtype

    def rows(self, begin, end):
        raise _spyre.Unsupported("rows() of a CHIP function's parameter: its ops take whole parameters (pass the "
                                 "rows from the HOST orchestrator as the argument instead)")


def _block_signature(chip):
    """What an inline CHIP block recorded: its ops (with operands, result
    and shapes) and its tensors' shapes, dtypes and directions."""
    ops = tuple((c["op"], tuple(c["operands"]), c["out"], tuple(c["shape"]), str(c["dtype"]), tuple(c["a"]),
                 tuple(c["b"])) for c in chip.calls)
    tensors = tuple((tuple(t.shape), str(t.dtype).replace("DType.", "").lower(), acc) for t, acc in chip.args)
    return ops, tensors


def _signature_change(then, now):
    (ops_then, tensors_then), (ops_now, tensors_now) = then, now
    if [o[0] for o in ops_now] != [o[0] for o in ops_then]:
        return f"it records ops {[o[0] for o in ops_now]} now, {[o[0] for o in ops_then]}"
    if len(tensors_now) != len(tensors_then):
        return f"{len(tensors_now)} tensors now, {len(tensors_then)}"
    for k, (a, b) in enumerate(zip(tensors_now, tensors_then)):
        if a != b:
            return f"its tensor {k} is {list(a[0])} {a[1]} ({a[2]}) now, {list(b[0])} {b[1]} ({b[2]})"
    return "its ops take other operands or shapes now than"


class _ChipBuilder:
    """Records the core calls of one chip function: ops over args and temporaries."""

    def __init__(self, compiled, args=None, functional=False):
        self.compiled = compiled
        self.calls = []       # dicts: op, operands (refs), out (ref), shape, dtype
        self.args = [] if args is None else args  # inline: (HostTensor, access) in chip-arg order
        self.arg_ids = {}
        # A CHIP function's operands are its parameters (_ChipArg) and its
        # ops' results: a tensor of its own (a global, a create_tensor) took
        # parameter 0's place (found probing from outside).
        self.functional = functional

    def ref(self, x, access="in", peek=False):
        """Where operand or target `x` is: ("tmp", call) or ("arg", index),
        made an argument of the task unless `peek` (None then for a tensor
        that is not one yet)."""
        if isinstance(x, _CoreValue):
            return ("tmp", x.call)
        if isinstance(x, _ChipArg):
            return ("arg", x.index)
        if isinstance(x, _spyre.HostTensor):
            if self.functional:
                raise _spyre.InvalidArgument(
                    "a CHIP function's ops take its parameters and its ops' results; a tensor that is not one of "
                    "its parameters (a global, a spyre.create_tensor) cannot be an operand or target: pass it in")
            key = id(x)  # two objects over one memory, one written, are refused (finish)
            if peek:
                return ("arg", self.arg_ids[key]) if key in self.arg_ids else None
            if key not in self.arg_ids:
                self.arg_ids[key] = len(self.args)
                self.args.append([x, access])
            elif access != "in" and self.args[self.arg_ids[key]][1] == "in":
                # read before this store: its bytes must reach the device
                self.args[self.arg_ids[key]][1] = "inout"
            return ("arg", self.arg_ids[key])
        raise _spyre.InvalidArgument(f"a core-group op takes tensors, got {type(x).__name__}")

    def op(self, name, a, b, out=None):
        if out is not None and not isinstance(out, (_ChipArg, _spyre.HostTensor)):
            raise _spyre.InvalidArgument(f"ops.{name}: out is a {type(out).__name__}, not a tensor")
        if name == "matmul" and out is not None and (out is a or out is b):
            # Every run failed on the card (OVERLAP) after it compiled (found probing from outside).
            raise _spyre.InvalidArgument("ops.matmul: out is one of its operands; a matmul cannot write over what it "
                                         "reads (store into another tensor)")
        for which, x in (("a", a), ("b", b)):
            if not isinstance(x, (_CoreValue, _ChipArg, _spyre.HostTensor)):
                raise _spyre.InvalidArgument(f"ops.{name}: operand {which} is a {type(x).__name__}; core-group ops "
                                             "take tensors (for a scalar, fill a tensor on the host)")
        sa, sb = tuple(a.shape), tuple(b.shape)
        if name == "matmul":
            if len(sa) != 2 or len(sb) != 2 or sa[1] != sb[0]:
                raise _spyre.InvalidArgument(f"ops.matmul: shapes {list(sa)} and {list(sb)} do not chain")
            shape = (sa[0], sb[1])
        else:
            try:
                shape = np.broadcast_shapes(sa, sb)
            except ValueError:
                raise _spyre.InvalidArgument(f"ops.{name}: shapes {list(sa)} and {list(sb)} do not broadcast") from None
        # One element type per op: its kernel is built for a's, and would
        # read b's bytes as that type (no conversion happens on the way).
        dtype, dtype_b = _np_dtype(a), _np_dtype(b)
        if dtype != dtype_b:
            raise _spyre.InvalidArgument(f"ops.{name}: operands of {dtype} and {dtype_b}; an op takes one element type "
                                         f"(convert on the host first)")
        self.calls.append({"op": name, "operands": [self.ref(a), self.ref(b)], "out": None, "shape": shape,
                           "dtype": dtype, "a": sa, "b": sb})
        v = _CoreValue(self, len(self.calls) - 1, shape, dtype)
        if out is not None:
            self.store(v, out)
        return v

    def finish(self, where, problem):
        """Results read by later ops stay temporaries (implicit outputs on the
        chip's heap ring); one neither read nor stored is an error. Two
        arguments over overlapping bytes, one written, are an error: the
        ops of one chip task are not ordered through memory they alias (a
        read of g.rows(...) after a write of g read the bytes from before)."""
        arrays = [t.numpy() for t, _ in self.args]
        for i, (t, acc) in enumerate(self.args):
            for j in range(i):
                if (acc != "in" or self.args[j][1] != "in") and np.shares_memory(arrays[i], arrays[j]):
                    one, other = t.describe(), self.args[j][0].describe()
                    what = f"{one} stands for two tensors" if one == other else f"{one} and {other} share bytes"
                    raise _spyre.InvalidArgument(
                        f"{where}: {what} and one is written; within a CHIP block use one tensor for those bytes "
                        "(not a tensor and its rows, nor one array passed as two arguments)")
        for k, call in enumerate(self.calls):
            if call["out"] is None:
                if not any(("tmp", k) in later["operands"] for later in self.calls[k + 1:]):
                    raise _spyre.InvalidArgument(f"{where}: the result of ops.{call['op']} (call {k}) {problem}")
                call["out"] = ("tmp", k)

    def store(self, v, target):
        if not isinstance(v, _CoreValue):
            raise _spyre.InvalidArgument("assemble/store: the value is not a core-group op's result")
        if not isinstance(target, (_ChipArg, _spyre.HostTensor)):
            raise _spyre.InvalidArgument(f"assemble: the target is a {type(target).__name__}, not a tensor")
        if tuple(target.shape) != v.shape:
            raise _spyre.InvalidArgument(f"assemble: a {list(v.shape)} result into a {list(target.shape)} tensor")
        if _np_dtype(target) != v.dtype:
            raise _spyre.InvalidArgument(f"assemble: a {v.dtype} result into a {_np_dtype(target)} tensor "
                                         f"(an op writes its operands' element type)")
        # Checked before the target becomes one of the task's outputs: a
        # refused store (caught by the program) left it one, never written,
        # and the caller's tensor came back zeros (found probing from outside).
        dest = self.ref(target, "out", peek=True)
        # The op writes the target itself: ops after it that read or write
        # the target would see (or be undone by) it out of order (found
        # probing from outside: a mul into f, then assemble(f, earlier
        # add), left the mul's result).
        later = [k for k in range(v.call + 1, len(self.calls))
                 if dest is not None and (dest in self.calls[k]["operands"] or self.calls[k]["out"] == dest)]
        if later:
            raise _spyre.InvalidArgument(
                f"assemble: ops.{self.calls[later[0]]['op']} (call {later[0]}) uses the target after the result's "
                f"ops.{self.calls[v.call]['op']} (call {v.call}) was computed; assemble a result before the target "
                "is used again (or compute it again after)")
        if self.calls[v.call]["op"] == "matmul" and dest in self.calls[v.call]["operands"]:
            raise _spyre.InvalidArgument("ops.matmul: its result lands in one of its operands; a matmul cannot "
                                         "write over what it reads (store into another tensor)")
        if self.calls[v.call]["out"] not in (None, dest):
            # The op has one output: a second store moved it, and the first
            # target was never written (found probing from outside).
            raise _spyre.InvalidArgument(f"assemble: the result of ops.{self.calls[v.call]['op']} (call {v.call}) "
                                         "lands in another tensor already; an op's result lands in one tensor "
                                         "(compute it again for a second one)")
        self.calls[v.call]["out"] = self.ref(target, "out")
        return target


def _np_dtype(x):
    if isinstance(x, _spyre.HostTensor):
        return x.numpy().dtype
    return np.dtype(x.dtype)


class _Ops:
    """The core-group operations (the kernel builder's): add, sub, mul, div, matmul."""

    def _do(self, name, a, b, out):
        c = _ctx()
        if c is None or c.chip is None:
            raise _spyre.InvalidArgument(f"ops.{name}: only inside a CORE_GROUP function or a spyre.at(CHIP) block")
        return c.chip.op(name, a, b, out)

    def add(self, a, b, out=None):
        return self._do("add", a, b, out)

    def sub(self, a, b, out=None):
        return self._do("sub", a, b, out)

    def mul(self, a, b, out=None):
        return self._do("mul", a, b, out)

    def div(self, a, b, out=None):
        return self._do("div", a, b, out)

    def matmul(self, a, b, out=None):
        return self._do("matmul", a, b, out)


ops = _Ops()


def assemble(target, value, offset=(0, 0)):
    """Seed 003's pl.assemble: a core-group result lands in a host tensor (whole tensors only)."""
    if tuple(_ints(offset, "assemble: offset")) not in ((0, 0), (0,), ()):
        raise _spyre.Unsupported("assemble: only whole tensors (offset [0, 0]) are supported")
    c = _ctx()
    if c is None or c.chip is None:
        raise _spyre.InvalidArgument("assemble: only inside a spyre.at(level=CHIP) block")
    return c.chip.store(value, target)


def create_tensor(shape, dtype=FP32):
    """Seed 003's pl.create_tensor: an intermediate host tensor of a HOST orchestrator."""
    c = _ctx()
    if c is None or (c.graph is None and not c.dry):
        raise _spyre.InvalidArgument("create_tensor: only inside a HOST orchestrator")
    dtype = _dtype(dtype, "create_tensor")
    shape = _ints(shape, "create_tensor: shape")
    if c.graph is None:
        return _spyre.HostTensor.zeros(shape, dtype)
    return c.graph.create_tensor(shape, dtype)


class _Ctx:
    def __init__(self, compiled, graph, dry):
        self.compiled, self.graph, self.dry = compiled, graph, dry
        self.chip = None
        self.chip_blocks = 0
        self.level = Level.HOST
        # Raised when the orchestrator returns: a CHIP block an exception
        # left (raised here, the orchestrator's own `except` could take it).
        self.dropped_block = None


# ---- calls between levels ---------------------------------------------------------

def _check_annotated(who, name, a, t):
    """InvalidArgument unless array or HostTensor `a` has the shape and
    dtype of annotation `t`."""
    shape = tuple(a.shape)
    if shape != t.shape:
        raise _spyre.InvalidArgument(f"{who}: argument '{name}' has shape {list(shape)}, expected {list(t.shape)}")
    # A HostTensor's too: nothing later checks it, and a chip kernel would
    # read its bytes as the annotation's type.
    bf16 = isinstance(a, _spyre.HostTensor) and a.dtype == _spyre.DType.BF16
    dtype = None if bf16 else _dtype(a.dtype if isinstance(a, np.ndarray) else a.numpy().dtype,
                                     f"{who}: argument '{name}'")
    if dtype != t.dtype:
        raise _spyre.InvalidArgument(f"{who}: argument '{name}' has dtype {'bf16' if bf16 else dtype}, "
                                     f"expected {t.dtype}")


def _dispatch(f, obj, args):
    c = _ctx()
    if c is None:
        if f.level == Level.HOST and f.role == Role.WORKER:  # a SubWorker called directly: plain Python
            return f.fn(obj, *args) if f.is_method else f.fn(*args)
        raise _spyre.InvalidArgument(f"{f.name}: call the compiled program (spyre.compile) instead")
    if len(args) != len(f.params):
        raise _spyre.InvalidArgument(f"{f.name} takes {len(f.params)} tensor(s), got {len(args)}")
    if f.level == Level.CORE_GROUP:
        if c.chip is None:
            raise _spyre.InvalidArgument(f"{f.name}: a CORE_GROUP function is called from a CHIP orchestration")
        outs = [a for a, (_, _, o) in zip(args, f.params) if o]
        r = f.fn(obj, *args) if f.is_method else f.fn(*args)
        if r is not None and not isinstance(r, _CoreValue) and not any(r is o for o in outs):
            # Returning an argument wrote nothing: the Out stayed zeros (found probing).
            raise _spyre.InvalidArgument(f"{f.name}: a CORE_GROUP function returns an op's result (or nothing), "
                                         f"not a {type(r).__name__}")
        if isinstance(r, _CoreValue) and outs and c.chip.calls[r.call]["out"] is None:
            c.chip.store(r, outs[0])
        return outs[0] if len(outs) == 1 else (tuple(outs) if outs else r)
    if c.graph is None and not c.dry:
        raise _spyre.InvalidArgument(f"{f.name}: called outside a HOST orchestrator")
    access = ["out" if o else "in" for (_, _, o) in f.params]
    targs = [(acc, a) for acc, a in zip(access, args)]
    if f.level == Level.CHIP:
        # Its kernels are built for the annotations: a larger tensor was
        # computed in part, another dtype's bytes read as the annotated
        # type (found probing from outside).
        for (n, t, _), a in zip(f.params, args):
            if t is not None and isinstance(a, (_spyre.HostTensor, np.ndarray)):
                _check_annotated(f.name, n, a, t)
        # One memory as two arguments, one written: its ops are not ordered
        # through the alias (the second read the first's input as it was
        # before: found probing from outside; the inline style refuses it too).
        arrays = [np.asarray(a) if isinstance(a, _spyre.HostTensor) else a for a in args]
        for i, (ni, _, out_i) in enumerate(f.params):
            for j, (nj, _, out_j) in enumerate(f.params[:i]):
                if (out_i or out_j) and isinstance(arrays[i], np.ndarray) and isinstance(arrays[j], np.ndarray) \
                        and np.shares_memory(arrays[i], arrays[j]):
                    raise _spyre.InvalidArgument(f"{f.name}: arguments '{nj}' and '{ni}' share bytes and one is "
                                                 "written; a CHIP function's arguments must not alias")
        if not c.dry:
            c.graph.chip(c.compiled._chip_name(f), targs)
    elif f.role == Role.WORKER:
        if not c.dry:
            c.graph.sub(c.compiled._sub_name(f), targs)
    else:
        raise _spyre.InvalidArgument(f"{f.name}: a HOST orchestrator cannot call another one")
    outs = [a for acc, a in targs if acc == "out"]
    return outs[0] if len(outs) == 1 else (tuple(outs) if outs else None)


# ---- inline style: spyre.at blocks ------------------------------------------------

class at:  # noqa: N801 (seed 003's pl.at)
    """``with spyre.at(level=..., role=...)``: a CHIP block becomes one chip task
    (its CORE_GROUP blocks the core calls), a HOST WORKER block one SubWorker
    task (outlined when the orchestrator is compiled)."""

    def __init__(self, level, role=None, *, optimizations=None, name_hint=""):
        self.level, self.role, self.name_hint = level, role, name_hint

    def __enter__(self):
        self.line = sys._getframe(1).f_lineno  # the block's own: one block run in a loop is one block
        c = _ctx()
        if c is None:
            raise _spyre.InvalidArgument("spyre.at: only inside a HOST orchestrator run by a compiled program")
        if self.level == Level.HOST and self.role == Role.WORKER:
            raise _spyre.InvalidArgument("spyre.at(HOST, WORKER): the block was not outlined (is the orchestrator "
                                         "decorated and compiled with spyre.compile, and the block a `with` of "
                                         "spyre.at alone, not of several context managers?)")
        self.prev = c.level
        if self.level == Level.CHIP:
            if c.chip is not None:
                raise _spyre.InvalidArgument("spyre.at(CHIP) blocks do not nest")
            c.chip = _ChipBuilder(c.compiled)
        elif self.level == Level.CORE_GROUP and c.chip is None:
            raise _spyre.InvalidArgument("spyre.at(CORE_GROUP) belongs inside a spyre.at(CHIP) block")
        c.level = self.level
        return self

    def __exit__(self, et, ev, tb):
        c = _ctx()
        c.level = self.prev
        if self.level != Level.CHIP:
            return False
        chip, c.chip = c.chip, None
        if et is not None:
            if chip.calls and issubclass(et, Exception) and not c.dropped_block:
                # Its chip task runs whole or not at all: dropped, what it
                # assembled before the raise was lost without a word (found
                # probing from outside; a spyre error too, caught by the
                # orchestrator: uncaught, it fails the run itself).
                c.dropped_block = _spyre.InvalidArgument(
                    f"spyre.at(CHIP) block {c.chip_blocks}: {et.__name__} left the block after it recorded "
                    f"{len(chip.calls)} op(s); a CHIP block becomes one chip task, run whole or not at all: "
                    "catch the exception inside the block, or raise it before the block's first op")
            return False
        index = c.chip_blocks
        c.chip_blocks += 1
        chip.finish(f"spyre.at(CHIP) block {index}", "never lands in a host tensor (use spyre.assemble(target, value))")
        name, task = c.compiled._inline_chip(index, self.name_hint, chip, c.dry, self.line)
        if not c.dry:
            c.graph.chip(name, [(acc, t) for t, acc in chip.args], name=task)
        return False


def _sub_call(index, inputs, consts):
    """Replaces a HOST WORKER block at run time: records one SubWorker task."""
    c = _ctx()
    spec = c.compiled._inline_subs[index]
    if c.chip is not None:  # it would run before the CHIP block's ops, which go in when that block ends
        raise _spyre.InvalidArgument(f"{spec['name']}: a WORKER block inside a spyre.at(CHIP) block; put it after "
                                     "the CHIP block")
    outs = [create_tensor(t.shape, t.dtype) for _, t in spec["outputs"]]
    # A numpy view of a tensor (t.numpy(), np.asarray(t)) is that tensor:
    # a copy taken here would be read before the tensor's writers ran, and
    # the block's writes to it lost (found probing from outside).
    read_only = {n for n, v in zip(spec["inputs"], inputs) if isinstance(v, np.ndarray) and not v.flags.writeable}
    inputs = [_tensor_or_value(spec["name"], n, v) for n, v in zip(spec["inputs"], inputs)]
    tensor_in = [(n, v) for n, v in zip(spec["inputs"], inputs) if isinstance(v, _spyre.HostTensor)]
    # A plain value is taken as it is now: the task runs later, and the
    # orchestrator may change it meanwhile (a scratch array refilled in a
    # loop gave every task its last contents: found probing from outside).
    fixed = {}
    memo = {}  # one copy for all of them: what they share stays shared (a list two helpers append to)
    home = spec["fn_globals"].get("__name__")  # the program's module: its helpers and classes are looked into
    for n in spec["globals"]:
        value = spec["fn_globals"].get(n)
        _refuse_global_tensors(spec["name"], n, value, c.compiled.obj, home)
        for a in sorted(spec["attrs"].get(n, ())):  # st.T of an imported module `st`
            _refuse_global_tensors(spec["name"], f"{n}.{a}", _attribute(value, a), c.compiled.obj, home)
    for n, v in zip(spec["inputs"], inputs):
        if not isinstance(v, _spyre.HostTensor):
            _refuse_hidden_tensors(spec["name"], n, v, spec["attrs"].get(n, ()), c.compiled.obj, home)
            fixed[n] = _as_it_is_now(v, memo)
    fn = spec["fn"]
    n_in = len(tensor_in)

    def body(*arrays):
        kw = dict(fixed)
        kw.update({n: a for (n, _), a in zip(tensor_in, arrays[:n_in])})
        results = fn(**kw)
        for dst, val in zip(arrays[n_in:], results):
            dst[...] = val

    if not c.dry:
        body.__name__ = spec["name"]  # the SubWorker's name in failures, as the task's
        # A read-only view stays read-only: written, it fails the task, as numpy would.
        c.graph.sub(body, [("inout" if n in spec["written"] and n not in read_only else "in", v)
                           for n, v in tensor_in] +
                    [("out", o) for o in outs], name=spec["name"])
    return tuple(outs)


def _tensor_or_value(block, name, value):
    """The tensor `value` views (a numpy array over a tensor's memory, whole
    or rows), else `value`; InvalidArgument for another view of one."""
    t = _spyre._tensor_viewed_by(value, f"{block}: '{name}'")
    return value if t is None else t


class _Unbound:
    """A WORKER block's input that was unbound where the block was reached
    (the block unbinds it again: _outline)."""
    __slots__ = ()

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return "_UNBOUND"

    def __repr__(self):
        return "<unbound>"


_UNBOUND = _Unbound()

_SCALARS = (int, float, complex, bool, str, bytes, type(None), np.generic, _Unbound)


def _contents(v, program=None, home=None):
    """What a block could reach through `v`: its items (a mapping's view's
    too), a function's closure, defaults and (for the program module's
    functions) the globals it names, a bound method's function and object,
    an iterator's source (what itertools.tee buffers too), a weak
    reference's object, an exception's arguments, an object's attributes
    and (for the program module's classes) a class's; nothing through the
    program object or a module."""
    if isinstance(v, (str, bytes, bytearray, types.ModuleType)) or v is program:
        return []
    if isinstance(v, np.ndarray):
        return list(v.ravel()) if v.dtype == object else []
    if isinstance(v, memoryview):
        return [v.obj]
    if isinstance(v, functools.partial):
        return [v.func, *v.args, *v.keywords.values()]
    if isinstance(v, types.MethodType):
        return [v.__func__] + ([] if v.__self__ is program else [v.__self__])
    if isinstance(v, types.FunctionType):
        cells = [c.cell_contents for c in v.__closure__ or () if _cell_is_set(c)]
        # The module globals its code names (a helper reading a global
        # tensor), for the program's own module's functions (a library's
        # reach its own state, which is no block's input).
        named = [v.__globals__[n] for n in v.__code__.co_names if n in v.__globals__] \
            if v.__module__ == home else []
        return cells + list(v.__defaults__ or ()) + list((v.__kwdefaults__ or {}).values()) + named
    if isinstance(v, collections.abc.Mapping):
        return list(v.keys()) + list(v.values())
    if isinstance(v, (collections.abc.Sequence, collections.abc.Set, collections.abc.MappingView, collections.deque)):
        return list(v)  # dict.values() too (found probing from outside, as the three below)
    if isinstance(v, weakref.ref):
        target = v()
        return [] if target is None else [target]
    if isinstance(v, BaseException):
        return list(v.args) + [v.__cause__, v.__context__] + (list(vars(v).values()) if hasattr(v, "__dict__") else [])
    if (isinstance(v, collections.abc.Iterator) and not isinstance(v, types.GeneratorType)) or \
            (type(v).__module__ == "itertools" and type(v).__name__ == "_tee_dataobject"):  # what tee() buffers
        # iter(list), map, itertools.chain: what they would go through,
        # as pickling sees it (nothing is consumed).
        reduced = v.__reduce__()
        return [x for part in reduced[1:3] for x in (part if isinstance(part, tuple) else (part,))]
    if isinstance(v, type):  # a class's own attributes (its methods' closures too), the program module's
        return list(vars(v).values()) if v.__module__ == home else []
    try:  # an object's attributes (__slots__ too); one whose attribute lookup fails has none to look at
        declared = [getattr(c, "__slots__", ()) for c in type(v).__mro__]
        slots = [getattr(v, n) for d in declared for n in ((d,) if isinstance(d, str) else d)
                 if isinstance(n, str) and n not in ("__dict__", "__weakref__") and hasattr(v, n)]
        return slots + (list(vars(v).values()) if hasattr(v, "__dict__") else [])
    except Exception:  # noqa: BLE001 (a __getattr__ raising KeyError: found probing from outside)
        return []


def _tensor_found_in(value, program, home=None):
    """What of a tensor `value` holds (None, "a spyre tensor", "a numpy
    view of a spyre tensor"), looked for through containers (any mapping,
    sequence or set), numpy object arrays, memoryviews, functools.partial,
    a function's closure and defaults, a bound method's object, an object's
    attributes and a class's (not the program object's: the attributes a
    block reads of it are looked at by name), 32 levels deep and through
    at most 100,000 objects (scalars not counted)."""
    budget = [100000]

    def kind(v):
        if isinstance(v, _spyre.HostTensor):
            return "a spyre tensor"
        return "a numpy view of a spyre tensor" if isinstance(v, np.ndarray) and _spyre._views_a_tensor(v) else None

    def find(v, depth, seen):
        if isinstance(v, _SCALARS):
            return None
        k = kind(v)
        if k or depth > 32 or id(v) in seen or budget[0] <= 0:
            return k
        seen.add(id(v))
        budget[0] -= 1
        try:
            items = _contents(v, program, home)
        except Exception:  # noqa: BLE001 (a container that cannot be listed: a released memoryview)
            return None
        return next((k for k in (find(x, depth + 1, seen) for x in items) if k), None)

    return kind(value), find(value, 0, set())


def _refuse_hidden_tensors(block, name, value, attrs, program=None, home=None):
    """A tensor (or a numpy view of one) a block reaches otherwise than by
    name gets no dependency: the task read it before its writer ran, or
    after the next run's (found probing). InvalidArgument naming where it
    is (_tensor_found_in says where it is looked for)."""
    where = [(name, value)] + [(f"{name}.{a}", _attribute(value, a)) for a in sorted(attrs)]
    for label, v in where:
        direct, found = _tensor_found_in(v, program, home)
        if found:
            how = f"is {found} reached through an attribute" if direct else \
                f"holds {found} inside a {type(v).__name__}"
            raise _spyre.InvalidArgument(f"{block}: '{label}' {how}; a WORKER block takes tensors by name (one "
                                         "reached otherwise would be read without waiting for its writers)")


def _refuse_global_tensors(block, name, value, program=None, home=None):
    """A module global a block reads that is (or holds) a tensor gets no
    dependency either (found probing from outside: a global tensor a CHIP
    block wrote was read before the write)."""
    direct, found = _tensor_found_in(value, program, home)
    if found:
        how = f"is {found}" if direct else f"holds {found} inside a {type(value).__name__}"
        raise _spyre.InvalidArgument(f"{block}: the global '{name}' {how}; a WORKER block takes tensors by name from "
                                     "the orchestrator's variables (a global's would be read without waiting for "
                                     "its writers): pass it to the orchestrator")


def _attribute(value, name):
    try:
        return getattr(value, name, None)
    except Exception:  # noqa: BLE001 (a property or __getattr__ that raises: nothing to look at)
        return None


def _as_it_is_now(value, memo):
    """A copy of a WORKER block's plain input; the object itself when it
    cannot be copied (a module, a class, a device handle). A function's
    closure is taken as it is now too (a lambda made in a loop read the
    loop's last value: found probing). `memo` is deepcopy's, shared by a
    block's inputs: objects they share stay shared in the copies, and a
    helper that calls itself is copied once (found probing from outside)."""
    if id(value) in memo:
        return memo[id(value)]
    if isinstance(value, types.FunctionType) and value.__closure__:
        cells = tuple(types.CellType() if _cell_is_set(c) else c for c in value.__closure__)
        f = types.FunctionType(value.__code__, value.__globals__, value.__name__, value.__defaults__, cells)
        f.__kwdefaults__ = value.__kwdefaults__
        memo[id(value)] = f
        memo.setdefault(id(memo), []).append(value)  # deepcopy's rule: the original lives as long as the memo
        for new, old in zip(cells, value.__closure__):
            if new is not old:
                new.cell_contents = _as_it_is_now(old.cell_contents, memo)
        return f
    # deepcopy takes functions as they are: one inside a list or an object
    # kept the orchestrator's live variables (a lambda made in a loop read
    # the loop's last value: found probing). Copied first, into the memo.
    for f in _closures_inside(value):
        _as_it_is_now(f, memo)
    try:
        return copy.deepcopy(value, memo)
    except Exception:  # noqa: BLE001 (whatever the object's __deepcopy__ or pickling raises)
        return value


def _closures_inside(value):
    """The functions with closures `value` holds (through _contents, not
    into functions; a bounded number of objects)."""
    found, todo, seen = [], [(value, 0)], set()
    while todo and len(seen) < 10000:
        v, depth = todo.pop()
        if isinstance(v, _SCALARS) or id(v) in seen or depth > 16:
            continue
        seen.add(id(v))
        if isinstance(v, types.FunctionType):
            if v.__closure__ and depth > 0:
                found.append(v)
            continue
        try:
            todo.extend((x, depth + 1) for x in _contents(v))
        except Exception:  # noqa: BLE001 (a container that cannot be listed: a released memoryview)
            pass
    return found


def _names(node, ctx_type):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx_type)}


def _free_loads(node):
    """The names `node` reads that no lambda, comprehension or def inside
    it binds (a lambda's parameter, a generator's variable were taken for
    the orchestrator's variables of the same name: found probing)."""
    def args_of(a):
        return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} | {x.arg for x in (a.vararg, a.kwarg) if x}

    def loads(nodes):
        return set().union(*(_free_loads(n) for n in nodes if n is not None))

    if isinstance(node, ast.Name):
        return {node.id} if isinstance(node.ctx, ast.Load) else set()
    if isinstance(node, ast.Lambda):
        return (_free_loads(node.body) - args_of(node.args)) | loads(node.args.defaults + node.args.kw_defaults)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return (loads(node.body) - _bound_names(node)) | loads(node.args.defaults + node.args.kw_defaults +
                                                                node.decorator_list)
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        own, found = set(), set()
        for g in node.generators:
            found |= _free_loads(g.iter) - own
            own |= _names(g.target, ast.Store)
            found |= loads(g.ifs) - own
        elts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        return found | (loads(elts) - own)
    return loads(ast.iter_child_nodes(node))


def _in_this_scope(node):
    """The nodes of `node`'s body outside nested functions, lambdas, classes
    and comprehensions (whose names are their own)."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
                              ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.extend(ast.iter_child_nodes(n))


def _scope_bindings(nodes):
    """Names a scope's statements `nodes` bind: assignments, nested def and
    class names, imports, `except ... as` names, and walrus targets in its
    comprehensions (which bind in the enclosing scope)."""
    bound = set()
    for root in nodes:
        for n in [root, *_in_this_scope(root)]:
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                bound.add(n.id)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(n.name)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                bound |= {a.asname or a.name.split(".")[0] for a in n.names if a.name != "*"}
            elif isinstance(n, ast.ExceptHandler) and n.name:
                bound.add(n.name)
            elif isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name:  # `case [x, *rest]`, `case P() as p`
                bound.add(n.name)
            elif isinstance(n, ast.MatchMapping) and n.rest:  # `case {**rest}`
                bound.add(n.rest)
            elif isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                bound |= {w.target.id for w in ast.walk(n) if isinstance(w, ast.NamedExpr)}
    return bound


def _bound_names(fdef):
    """Names the function binds: parameters and its scope's bindings (a
    local `def twice` or `import math as m` a block reads was taken from the
    module's globals: found probing)."""
    bound = {a.arg for a in fdef.args.posonlyargs + fdef.args.args + fdef.args.kwonlyargs}
    bound |= {a.arg for a in (fdef.args.vararg, fdef.args.kwarg) if a is not None}
    return bound | _scope_bindings(fdef.body)


def _block_problem(node):
    """Why a WORKER block cannot run as a task of its own, or None: it would
    leave the block (break, continue), hand values out (yield), or rebind
    the orchestrator's enclosing variables (nonlocal)."""
    loops = (ast.For, ast.AsyncFor, ast.While)

    def look(n, in_loop):
        for c in ast.iter_child_nodes(n):
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(c, (ast.Yield, ast.YieldFrom, ast.Await)):
                return f"`{type(c).__name__.lower()}` at line {c.lineno}"
            if isinstance(c, ast.Nonlocal):
                return f"`nonlocal` at line {c.lineno} (the block runs later, as a task: pass values on in tensors)"
            if isinstance(c, (ast.Break, ast.Continue)) and not in_loop:
                return f"`{type(c).__name__.lower()}` at line {c.lineno} leaves the block (it runs as a task of its own)"
            inner = look(c, in_loop or (isinstance(c, loops)))
            if inner:
                return inner
        return None

    return look(node, False)


def _at_call(item):
    """The spyre.at(...) call of a with-item, or None."""
    call = item.context_expr
    if not isinstance(call, ast.Call):
        return None
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else None)
    return call if name == "at" else None


def _has_at_blocks(source):
    """Whether the function's source has `with ...at(...)` blocks (a comment
    or string mentioning "at (" made a functional-style program inline)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return False
    return any(isinstance(n, (ast.With, ast.AsyncWith)) and any(_at_call(i) for i in n.items) for n in ast.walk(tree))


def _is_at(item, names):
    """(level, role) of a `with spyre.at(...)` item, evaluated in `names`
    (the module's globals and the function's closure); None for another."""
    call = _at_call(item)
    if call is None:
        return None
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        raise _spyre.InvalidArgument(f"spyre.at at line {call.lineno}: level and role must be spelled out "
                                     "(spyre.at(level=..., role=...)), not passed with * or **")
    kw = {k.arg: k.value for k in call.keywords}
    args = list(call.args)
    level = kw.get("level", args[0] if args else None)
    role = kw.get("role", args[1] if len(args) > 1 else None)
    return _at_argument(call, level, "level", Level, names), _at_argument(call, role, "role", Role, names)


def _at_argument(call, node, what, kind, names):
    """A `spyre.at(...)` argument, evaluated in `names` when the program is
    compiled; None when not given. InvalidArgument for any error or a value
    not of `kind`."""
    if node is None:
        return None
    try:
        v = eval(_pycompile(ast.Expression(node), "<at>", "eval"), names)  # noqa: S307
    except Exception as e:  # noqa: BLE001 (a typo is any error: NameError, AttributeError, IndexError)
        raise _spyre.InvalidArgument(f"spyre.at at line {call.lineno}: {type(e).__name__}: {e}; {what} is read "
                                     "when the program is compiled, from the module or the enclosing function, "
                                     "not from the orchestrator's own variables") from None
    if not isinstance(v, kind):
        prefix = "spyre." if kind in (Level, Role) else ""
        raise _spyre.InvalidArgument(f"spyre.at at line {call.lineno}: {what} is {v!r}, not a {prefix}{kind.__name__}")
    return v


def _worker_hint(item, names):
    """The name_hint of a WORKER block's `spyre.at(...)`, read as its level
    and role are; "" when none is given (it was ignored and the task named
    `<orchestrator>.sub<N>`: found probing)."""
    call = _at_call(item)
    hint = next((k.value for k in call.keywords if k.arg == "name_hint"), None)
    return _at_argument(call, hint, "name_hint", str, names) or ""


def _rebuilt(fn, fdef, extra):
    """`fdef` (the rewritten orchestrator) as a function that reads the
    module's globals as they are when it runs and the original's closure
    cells; `extra` maps further free names to their values. Executed as it
    was, at module level on a copy of the globals, it saw the globals of
    compile time and lost the closure (both found probing from outside)."""
    freevars = fn.__code__.co_freevars
    cells = dict(zip(freevars, fn.__closure__ or ()))
    factory = ast.FunctionDef(
        name="__spyre_factory__", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[ast.Assign([ast.Name(v, ast.Store())], ast.Constant(None)) for v in (*freevars, *extra)
              if v != "__class__"] + [fdef, ast.Return(ast.Name(fdef.name, ast.Load()))],
        decorator_list=[], returns=None, type_comment=None)
    code = _in_owner_class(fn, factory, f"<host orchestrator {fn.__name__}>")().__code__
    closure = tuple(cells[v] if v in cells else types.CellType(extra[v]) for v in code.co_freevars)
    out = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    out.__kwdefaults__ = fn.__kwdefaults__
    return out


def _in_owner_class(fn, fdef, filename):
    """`fdef` compiled and executed as `fn` was: over its module's globals,
    and inside a class of its owner's name when `fn` is a method, so that
    `self.__k` is mangled as in the class (it was an AttributeError: found
    probing). Returns the function made."""
    parts = fn.__qualname__.split(".")
    owner = parts[-2] if len(parts) >= 2 and parts[-2] != "<locals>" else None
    body = ast.ClassDef(name=owner, bases=[], keywords=[], body=[fdef], decorator_list=[]) if owner else fdef
    mod = ast.fix_missing_locations(ast.Module([body], type_ignores=[]))
    ns = {}
    exec(_pycompile(mod, filename, "exec"), fn.__globals__, ns)  # noqa: S102
    return ns[owner].__dict__[fdef.name] if owner else ns[fdef.name]


class _BlockReturns(ast.NodeTransformer):
    """`return` in a WORKER block ends the block: it returns the block's
    outputs (a bare return returned None, and the task failed)."""

    def __init__(self, outputs, where):
        self.outputs, self.where = outputs, where

    def visit_Return(self, node):  # noqa: N802 (ast's visitor names)
        if node.value is not None:
            raise _spyre.InvalidArgument(f"{self.where}: `return` with a value at line {node.lineno} (a block "
                                         "returns nothing; pass values on in tensors)")
        return ast.copy_location(ast.Return(ast.Tuple([ast.Name(o, ast.Load()) for o in self.outputs], ast.Load())),
                                 node)

    def _own_scope(self, node):
        return node  # a nested function's returns are its own

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = _own_scope  # noqa: N815


def _outline(fn, source, compiled):
    """The inline style's compile step: every ``with spyre.at(HOST, WORKER)``
    block of `fn` (its `source`) becomes a SubWorker function; inputs are
    the enclosing functions' variables the block reads, outputs its
    annotated assignments."""
    src = textwrap.dedent(source)
    tree = ast.parse(src)
    fdef = tree.body[0]
    # Other decorators would be dropped with the source's (they ran 0 times,
    # and a wrapper's closure stood in for the function's: found probing).
    if len(fdef.decorator_list) > 1 or hasattr(fn, "__wrapped__"):
        raise _spyre.InvalidArgument(f"{fn.__name__}: an inline orchestrator (with spyre.at blocks) takes no "
                                     "decorator but spyre.function: its blocks are outlined from its own source")
    fdef.decorator_list = []
    globs = fn.__globals__
    closure = {v: c.cell_contents for v, c in zip(fn.__code__.co_freevars, fn.__closure__ or ())
               if _cell_is_set(c)}
    names = {**globs, **closure}
    specs = []

    class Outliner(ast.NodeTransformer):
        # What a block may read from the functions around it: what each
        # binds (the orchestrator, and a helper def inside it that holds the
        # block), and the closure (each was looked up in the module's
        # globals: found probing).
        scopes = [_bound_names(fdef) | set(fn.__code__.co_freevars)]

        def visit_FunctionDef(self, node):  # noqa: N802 (ast's visitor names)
            self.scopes.append(_bound_names(node))
            try:
                self.generic_visit(node)
            finally:
                self.scopes.pop()
            return node

        visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

        def visit_With(self, node):  # noqa: N802
            lr = _is_at(node.items[0], names) if len(node.items) == 1 else None
            if not lr or lr != (Level.HOST, Role.WORKER):
                self.generic_visit(node)
                return node
            index = len(specs)
            name = f"{compiled.orchestrator.name}.{_worker_hint(node.items[0], names) or 'sub' + str(index)}"
            where = f"{name} (the WORKER block at line {node.lineno})"
            # Two blocks of one name could not be told apart in the report,
            # the trace or a failure (found probing from outside).
            twin = next((sp["line"] for sp in specs if sp["name"] == name), None)
            if twin is not None:
                raise _spyre.InvalidArgument(f"{where}: the WORKER block at line {twin} has that name too; "
                                             "give each block a name_hint of its own")
            problem = _block_problem(node)
            if problem:
                raise _spyre.InvalidArgument(f"{where}: {problem}")
            outputs = []
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    try:
                        t = eval(_pycompile(ast.Expression(st.annotation), "<annotation>", "eval"), names)  # noqa: S307
                    except Exception as e:  # noqa: BLE001 (a local's annotation: plain Python never evaluates it)
                        raise _spyre.InvalidArgument(
                            f"{where}: the annotation of '{st.target.id}' at line {st.lineno} cannot be read when the "
                            f"program is compiled ({type(e).__name__}: {e}); a block's top-level annotated "
                            "assignment declares an output (Tensor[...]): use a module-level name, or no "
                            "annotation") from e
                    if isinstance(t, TensorType):
                        outputs.append((st.target.id, t))
            # An output declared under an if, a loop or a try might not be
            # made; it was a raw NameError at compile (found probing).
            for st in _in_this_scope(node):
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st not in node.body:
                    try:
                        t = eval(_pycompile(ast.Expression(st.annotation), "<annotation>", "eval"), names)  # noqa: S307
                    except Exception:  # noqa: BLE001 (not an annotation of ours)
                        continue
                    if isinstance(t, TensorType):
                        raise _spyre.InvalidArgument(f"{where}: the output '{st.target.id}' at line {st.lineno} is "
                                                     "declared inside a statement of the block; declare it at the "
                                                     "block's top level, so it is made whatever path the block takes")
            # `f += a` reads f too, though its name is a Store: without it in
            # the inputs, the block raised UnboundLocalError (found probing).
            # What the block binds itself in its own scope (`acc = ...; acc
            # += a`, a def, an import; not a comprehension's variable) is
            # its own, and a `global` name is no input.
            aug_targets = [st.target for st in [node, *_in_this_scope(node)]
                           if isinstance(st, ast.AugAssign) and isinstance(st.target, ast.Name)]
            augmented = {t.id for t in aug_targets}
            # (`f += a; f *= 2` is no binding of f: only a plain store is.)
            aug_nodes = {id(t) for t in aug_targets}
            own = _scope_bindings(node.body) - {t.id for t in aug_targets
                                               if not any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                                                          and n.id == t.id and id(n) not in aug_nodes
                                                          for n in _in_this_scope(node))}
            declared = {name for st in ast.walk(node) if isinstance(st, ast.Global) for name in st.names}
            outer = set().union(*self.scopes) - own
            free = _free_loads(node)
            inputs = sorted(((free | augmented) & outer) - {o for o, _ in outputs} - declared)
            # The module globals it reads (not builtins): looked at for
            # tensors when it is reached (_sub_call).
            global_reads = sorted(((free - outer - own) | declared) - set(dir(builtins)) - {"__spyre_dsl__"})
            # Attributes the block reads of each input (`self.t`): checked
            # for tensors when it is reached (_sub_call).
            attrs = {}
            for n in ast.walk(node):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and \
                        (n.value.id in inputs or n.value.id in global_reads):
                    attrs.setdefault(n.value.id, set()).add(n.attr)
            written = set()  # f[...] = ... / f += ...: the block writes the tensor (InOut)
            for st in ast.walk(node):
                targets = st.targets if isinstance(st, ast.Assign) else (
                    [st.target] if isinstance(st, ast.AugAssign) else [])
                for t in targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                        written.add(t.value.id)
                    elif isinstance(st, ast.AugAssign) and isinstance(t, ast.Name):
                        written.add(t.id)
            ends = _BlockReturns([o for o, _ in outputs], where)
            body = [ends.visit(st) for st in node.body]
            # An input unbound where the block is reached (set only on a path
            # not taken) is unbound in the block too: read, it raises there,
            # as in plain Python; unread, nothing happens (reaching the block
            # raised UnboundLocalError: found probing from outside).
            unbound = ast.Name("__spyre_unbound__", ast.Load())
            unbind = [ast.If(ast.Compare(ast.Name(n, ast.Load()), [ast.Is()], [unbound]),
                             [ast.Delete([ast.Name(n, ast.Del())])], []) for n in inputs]
            sub = ast.FunctionDef(
                name="__spyre_sub__", args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in inputs],
                                                        kwonlyargs=[ast.arg(arg=unbound.id)],
                                                        kw_defaults=[ast.Constant(None)], defaults=[]),
                body=unbind + body + [ast.Return(ast.Tuple([ast.Name(o, ast.Load()) for o, _ in outputs],
                                                           ast.Load()))],
                decorator_list=[], returns=None, type_comment=None)
            sub_fn = _in_owner_class(fn, sub, f"<SubWorker {name}>")
            sub_fn.__kwdefaults__ = {unbound.id: _UNBOUND}
            specs.append({"name": name, "fn": sub_fn, "inputs": inputs,
                          "outputs": outputs, "written": written, "attrs": attrs, "line": node.lineno,
                          "globals": global_reads, "fn_globals": fn.__globals__})
            temps = [f"__spyre_in_{index}_{k}__" for k in range(len(inputs))]
            loads = [ast.Try([ast.Assign([ast.Name(t, ast.Store())], ast.Name(n, ast.Load()))],
                             [ast.ExceptHandler(ast.Name("NameError", ast.Load()), None,
                                                [ast.Assign([ast.Name(t, ast.Store())],
                                                            ast.Attribute(ast.Name("__spyre_dsl__", ast.Load()),
                                                                          "_UNBOUND", ast.Load()))])], [], [])
                     for n, t in zip(inputs, temps)]
            call = ast.Call(ast.Attribute(ast.Name("__spyre_dsl__", ast.Load()), "_sub_call", ast.Load()),
                            [ast.Constant(index), ast.List([ast.Name(t, ast.Load()) for t in temps], ast.Load()),
                             ast.Constant(None)], [])
            target = ast.Tuple([ast.Name(o, ast.Store()) for o, _ in outputs], ast.Store())
            return loads + [ast.Assign([target], call) if outputs else ast.Expr(call)]

    Outliner().visit(tree)
    body = _rebuilt(fn, fdef, {"__spyre_dsl__": __import__(__name__, fromlist=["_sub_call"])})
    compiled._inline_subs = specs
    return body


def _cell_is_set(cell):
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
        return True
    except ValueError:
        return False


# ---- compile -----------------------------------------------------------------------

_KERNEL_BASE = 1000
_kernel_lock = threading.Lock()
_kernel_next = [_KERNEL_BASE]


def _next_kernel_id():
    with _kernel_lock:
        _kernel_next[0] += 1
        return _kernel_next[0]


def _register_named(register, name, fn):
    """Registers `fn` as `name`, or, where the Worker has that name already
    (the same program compiled onto a shared Worker again, or another of the
    same name), as `name#2`, `name#3`, ...; returns the name taken (a second
    compile failed "already registered": found probing)."""
    for k in range(1, 1 << 16):
        taken = name if k == 1 else f"{name}#{k}"
        try:
            register(taken, fn)
            return taken
        except _spyre.InvalidArgument as e:
            if "already registered" not in str(e):
                raise
    raise _spyre.OutOfMemory(f"no free name for {name!r} in 65536 tries")


def _register_kernel(worker, program, kernel_id=None):
    """Registers `program` on `worker` as `kernel_id`, or as the next id of
    the DSL's own that the worker has free (an id the user registered
    first failed the compile "already registered")."""
    if kernel_id:
        worker.register_kernel(kernel_id, program)
        return kernel_id
    for _ in range(1 << 16):
        kid = _next_kernel_id()
        try:
            worker.register_kernel(kid, program)
            return kid
        except _spyre.InvalidArgument as e:
            if "is already registered" not in str(e):
                raise
    raise _spyre.OutOfMemory("no free kernel id for the DSL's kernels in 65536 tries")


class CompiledProgram:
    """A host-level program on a Worker: ``compiled(a, b, f)`` runs in place
    (returns f), ``f = compiled(a, b)`` allocates and returns the outputs.
    Inputs and outputs are checked against the orchestrator's annotations
    (spyre.InvalidArgument naming the argument). Thread-safe: Python threads
    may call it at once (the Worker runs the programs side by side)."""

    def __init__(self, target, config, host=None, worker=None):
        # A config or worker of another type was an AttributeError from deep
        # inside, and an empty device_ids max()'s ValueError.
        if config is None:
            config = _spyre.DistributedConfig()
        elif not isinstance(config, _spyre.DistributedConfig):
            raise TypeError(f"compile: config is a {type(config).__name__}, not a spyre.DistributedConfig")
        if worker is not None and not isinstance(worker, _spyre.Worker):
            raise TypeError(f"compile: worker is a {type(worker).__name__}, not a spyre.Worker")
        self.config = config
        self._own_host = None
        self._own_worker = False
        if worker is None:
            config.validate()  # InvalidArgument naming a bad field
            if host is None:
                host = self._own_host = _spyre.Host.embedded_mock(cards=max(self.config.device_ids) + 1, vfs=0,
                                                                  mem="1G")
            worker = _spyre.Worker(host, self.config)
            self._own_worker = True
        self.worker = worker
        try:
            self._setup(target)
        except BaseException:
            self.close()
            raise

    def _setup(self, target):
        self._chip_names, self._sub_names, self._inline_chips = {}, {}, {}
        self._inline_subs = []
        self._lock = threading.Lock()
        self.kernels = {}  # kernel id -> BuiltKernel
        if isinstance(target, DslFunction):
            self.obj, orch = None, target
        else:
            self.obj = target() if isinstance(target, type) else target
            funcs = [v for v in vars(type(self.obj)).values() if isinstance(v, DslFunction)]
            orchs = [f for f in funcs if f.level == Level.HOST and f.role == Role.ORCHESTRATOR]
            if len(orchs) != 1:
                raise _spyre.InvalidArgument(f"{type(self.obj).__name__}: needs exactly one HOST ORCHESTRATOR function, "
                                             f"found {len(orchs)}")
            orch = orchs[0]
            for f in funcs:
                if f.level == Level.CHIP:
                    self._chip_names[f] = self._register_chip(f)
                elif f.level == Level.HOST and f.role == Role.WORKER:
                    self._sub_names[f] = self._register_sub(f)
        self.orchestrator = orch
        self.inputs = [(n, t) for n, t, o in orch.params if not o]
        self.outputs = [(n, t) for n, t, o in orch.params if o]
        for n, t in self.outputs:
            if t is None:
                raise _spyre.InvalidArgument(f"{orch.name}: output '{n}' needs a Out[Tensor[shape, dtype]] annotation")
        body = orch.fn
        # spyre.at(CHIP) blocks are outlined from the source. A function
        # whose source cannot be read (exec'd, python -c) has none to
        # outline: it runs as written, the functional style.
        source = orch.source or ""
        src_has_at = _has_at_blocks(source)
        if src_has_at:
            body = _outline(orch.fn, source, self)
        self._body = body
        if src_has_at:  # the dry run: registers each spyre.at(CHIP) block's chip function
            try:
                self._trace(None, [self._placeholder(t, n) for n, t, _ in orch.params], dry=True)
            except _spyre.Error:
                raise
            except Exception as e:  # noqa: BLE001 (the user's code, run on placeholders: a raw error was untyped)
                raise _spyre.InvalidArgument(
                    f"{orch.name}: compiling runs the orchestrator once on zero-filled placeholder tensors (to record "
                    f"its CHIP blocks), and it raised {type(e).__name__}: {e}; its blocks must not depend on the "
                    "data") from e
        self.program = _spyre.HostProgram(orch.name, len(self.inputs),
                                          [(list(t.shape), t.dtype) for _, t in self.outputs], self._run_graph)

    # -- registration
    def _build_kernel(self, call):
        kb = _spyre.KernelBuilder()
        if call["op"] == "matmul":
            (m, k), (_, n) = call["a"], call["b"]
            return kb.matmul(m, k, n, dtype=call["dtype"])
        return getattr(kb, call["op"])(list(call["a"]), list(call["b"]), dtype=call["dtype"])

    def _chip_function(self, name, chip, nargs, arg_bytes):
        for call in chip.calls:
            built = self._build_kernel(call)
            call["kernel"] = kid = _register_kernel(self.worker, built)
            self.kernels[kid] = built
        # one call over the chip arguments in order: a ready-made C++ chip function (no Python per task)
        if len(chip.calls) == 1:
            call = chip.calls[0]
            refs = call["operands"] + [call["out"]]
            if refs == [("arg", i) for i in range(nargs)] and call["op"] != "matmul":
                return _register_named(self.worker.register_chip_function, name,
                                       _spyre.ChipFunction.elementwise(call["kernel"]))
        calls = chip.calls

        def run(ctx):
            results = {}  # call index -> where its result is: an argument it was stored to, or its implicit output
            val = lambda r: ctx.args[r[1]] if r[0] == "arg" else results[r[1]]  # noqa: E731
            for i, call in enumerate(calls):
                params = [("in", val(r)) for r in call["operands"]]
                nbytes = int(np.prod(call["shape"])) * call["dtype"].itemsize
                params.append(("out", val(call["out"])) if call["out"][0] == "arg" else ("out", None, nbytes))
                worker = _spyre.WORKER_CUBE if call["op"] == "matmul" else _spyre.WORKER_VECTOR
                tid = ctx.orch.submit(call["kernel"], worker, params)
                # A later op reads a stored result from the argument it went to.
                results[i] = val(call["out"]) if call["out"][0] == "arg" else \
                    ctx.orch.task_output(tid, 0, dtype=call["dtype"])
        return _register_named(self.worker.register_chip_function, name, run)

    def _register_chip(self, f):
        name = f"{type(self.obj).__name__}.{f.name}"
        if any(t is None for _, t, _ in f.params):
            raise _spyre.InvalidArgument(f"{f.name}: CHIP function parameters need Tensor[...] annotations")
        chip = _ChipBuilder(self, functional=True)
        c = _Ctx(self, None, True)
        c.chip = chip
        prev, _tls.ctx = _ctx(), c
        try:
            f.fn(self.obj, *[_ChipArg(i, t) for i, (_, t, _) in enumerate(f.params)])
        except _spyre.Error:
            raise
        except Exception as e:  # noqa: BLE001 (the user's code, traced when compiled: a raw error was untyped)
            raise _spyre.InvalidArgument(f"{f.name}: tracing the CHIP function when the program is compiled raised "
                                         f"{type(e).__name__}: {e}") from e
        finally:
            _tls.ctx = prev
        chip.finish(f.name, "is never stored (return it into the Out parameter, or pass out=)")
        # An Out parameter is not uploaded: an op reading it before one
        # wrote it read zeros, silently (found probing from outside).
        written = set()
        for k, call in enumerate(chip.calls):
            for r in call["operands"]:
                if r[0] == "arg" and f.params[r[1]][2] and r not in written:
                    raise _spyre.InvalidArgument(
                        f"{f.name}: ops.{call['op']} (call {k}) reads the Out parameter '{f.params[r[1]][0]}' "
                        "before an op wrote it; an Out is not uploaded (its bytes start as zeros on the device): "
                        "make it an input (Tensor[...]) and return the result into another Out")
            written.add(call["out"])
        # Nor is one no op writes: it came back zeros, over whatever the
        # caller passed (found probing from outside).
        for i, (n, _, out) in enumerate(f.params):
            if out and ("arg", i) not in written:
                raise _spyre.InvalidArgument(
                    f"{f.name}: no op writes the Out parameter '{n}'; an Out comes back from the device whole "
                    "(zeros where no op wrote it): write it, or drop the parameter")
        return self._chip_function(name, chip, len(f.params), None)

    def _register_sub(self, f):
        name = f"{type(self.obj).__name__}.{f.name}"
        obj = self.obj

        def run(*arrays):
            r = f.fn(obj, *arrays)
            # A result returned instead of written into an Out tensor was
            # dropped without a word (found probing); returning the Out
            # tensors themselves is fine.
            if r is not None and not all(any(x is a for a in arrays) for x in (r if isinstance(r, tuple) else (r,))):
                raise _spyre.InvalidArgument(f"{name}: a WORKER function writes its results into its Out tensors "
                                             f"(f[...] = ...); it returned a {type(r).__name__}, which goes nowhere")
        return _register_named(self.worker.register_sub_worker, name, run)

    def _inline_chip(self, index, hint, chip, dry, line=None):
        """The registered chip function of inline CHIP block `index` and its
        task's name (`<orchestrator>.<hint>`, or `.chip<index>`), the
        function made when the program is compiled. InvalidArgument when the
        block now records other ops or tensors of another shape or dtype
        than it did then: the compiled function would replay those (found
        probing from outside: an op chosen by a global computed the
        compile's op, a larger tensor was computed in part)."""
        key = index
        signature = _block_signature(chip)
        with self._lock:
            if key not in self._inline_chips:
                if not dry:
                    raise _spyre.InvalidArgument(f"spyre.at(CHIP) block {index} was not seen when the program was "
                                                 "compiled (the blocks must not depend on the data)")
                task = f"{self.orchestrator.name}.{hint or 'chip' + str(index)}"
                # Another block of that name (not this one again, in a loop).
                if any(sp["name"] == task for sp in self._inline_subs) or \
                        any(t == task and at_line != line for _, t, _, at_line in self._inline_chips.values()):
                    raise _spyre.InvalidArgument(f"spyre.at(CHIP) block {index}: another block's task is named "
                                                 f"{task} too; give each block a name_hint of its own")
                name = self._chip_function(task, chip, len(chip.args), None)
                self._inline_chips[key] = (name, task, signature, line)
            name, task, compiled, _ = self._inline_chips[key]
        if signature != compiled:
            raise _spyre.InvalidArgument(f"spyre.at(CHIP) block {index}: {_signature_change(compiled, signature)} "
                                         "when the program was compiled; its chip function replays what it "
                                         "recorded then (the blocks must not depend on the data)")
        return name, task

    def _chip_name(self, f):
        return self._registered(self._chip_names, f)

    def _sub_name(self, f):
        return self._registered(self._sub_names, f)

    def _registered(self, names, f):
        # A function outside the compiled program was a raw KeyError.
        if f not in names:
            raise _spyre.InvalidArgument(f"{f.name}: not a function of the compiled program (a functional program "
                                         "is a @spyre.program class; its orchestrator calls that class's functions)")
        return names[f]

    # -- running
    @staticmethod
    def _placeholder(t, name):
        if t is None:
            raise _spyre.InvalidArgument(f"inline orchestrator: parameter '{name}' needs a Tensor[...] annotation")
        return _spyre.HostTensor.zeros(list(t.shape), t.dtype)

    def _trace(self, graph, args, dry):
        c = _Ctx(self, graph, dry)
        prev, _tls.ctx = _ctx(), c
        try:
            if self.obj is not None and self.orchestrator.is_method:
                self._body(self.obj, *args)
            else:
                self._body(*args)
            if c.dropped_block is not None:
                raise c.dropped_block
        finally:
            _tls.ctx = prev

    def _run_graph(self, graph, tensors):
        self._trace(graph, tensors, dry=False)

    def _check(self, args):
        n_in, n_all = len(self.inputs), len(self.inputs) + len(self.outputs)
        if len(args) not in (n_in, n_all):
            raise _spyre.InvalidArgument(f"{self.orchestrator.name} takes {n_in} input(s) and {len(self.outputs)} "
                                         f"output(s): got {len(args)} argument(s)")
        for i, ((n, t), a) in enumerate(zip(self.inputs + self.outputs, args)):
            if t is None:
                continue
            _check_annotated(self.orchestrator.name, n, self._as_array(n, a, output=i >= n_in), t)

    def _as_array(self, name, a, output):
        # What Worker.run makes of the argument (an array, a HostTensor, or
        # a sequence numpy converts), so that a list is checked by its own
        # shape and dtype, and anything else named as the runtime names it.
        # An output must be one the results can land in.
        if isinstance(a, (_spyre.HostTensor, np.ndarray)):
            return a
        what = f"{self.orchestrator.name}: argument '{name}'"
        if output and a is not None:
            raise _spyre.InvalidArgument(f"{what}: the output is a {type(a).__name__}, which results cannot land in: "
                                         "give a numpy array or HostTensor")
        if a is None:
            raise _spyre.InvalidArgument(f"{what}: None is not a numpy array or HostTensor")
        try:
            array = np.asarray(a)
        except Exception:
            array = None
        if array is None or array.dtype == object or array.ndim == 0:
            raise _spyre.InvalidArgument(f"{what}: {type(a).__name__} is not a numpy array or HostTensor")
        return array

    def _bind(self, args, kwargs):
        """The arguments in the orchestrator's order (a call by keyword was
        a TypeError naming this class: found probing from outside)."""
        if not kwargs:
            return args
        return _bind_by_name(self.orchestrator.name, [n for n, _ in self.inputs + self.outputs], args, kwargs)

    def __call__(self, *args, **kwargs):
        args = self._bind(args, kwargs)
        self._check(args)
        return self.worker.run(self.program, list(args))

    def submit(self, *args, **kwargs):
        """Starts a run; returns a RunHandle (wait() gives what __call__ returns)."""
        args = self._bind(args, kwargs)
        self._check(args)
        return self.worker.submit(self.program, list(args))

    def close(self):
        if self._own_worker:
            self.worker.close()
        if self._own_host is not None:
            self._own_host.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def compile(target, config=None, *, host=None, worker=None):  # noqa: A001 (seed 003's ir.compile)
    """Compiles a @spyre.program class (functional style) or a HOST ORCHESTRATOR
    function with spyre.at blocks (inline style) onto a Worker: `worker` when
    given, else a new Worker(host, config) (host: a new embedded mock when None)."""
    return CompiledProgram(target, config, host=host, worker=worker)


def _matrix_shape(shape, what):
    if shape is None:
        raise _spyre.InvalidArgument(f"register_op: matmul needs {what} (rows, columns)")
    dims = _ints(shape, f"register_op: {what}")
    if len(dims) != 2 or not all(isinstance(d, (int, np.integer)) and d >= 1 for d in dims):
        raise _spyre.InvalidArgument(f"register_op: {what} {list(dims)} is not (rows, columns) of at least 1")
    return tuple(dims)


def register_op(worker, name, op, a_shape, b_shape=None, dtype=FP32, *, kernel_id=None):
    """A ready-made chip function `name` over one kernel-builder op (add/sub/mul/div:
    args (a, b, out); matmul: (A, B, C) split over the config's block_dim)."""
    # As the bindings do for a Device or Host: None is InvalidArgument naming
    # the argument, another type a TypeError (not an AttributeError from deep inside).
    if worker is None:
        raise _spyre.InvalidArgument("register_op: the worker is None")
    if not isinstance(worker, _spyre.Worker):
        raise TypeError(f"register_op: worker is a {type(worker).__name__}, not a spyre.Worker")
    if op not in ("add", "sub", "mul", "div", "matmul"):
        raise _spyre.InvalidArgument(f"register_op: op {op!r} is not add, sub, mul, div or matmul")
    kb = _spyre.KernelBuilder()
    if op == "matmul":
        # Shapes as the chip function needs them, checked here: a missing or
        # malformed one was a TypeError, ValueError or IndexError, and an fp16
        # matmul registered and then failed every run (found probing).
        a_dims, b_dims = _matrix_shape(a_shape, "a_shape"), _matrix_shape(b_shape, "b_shape")
        (m, k), (kb_rows, n) = a_dims, b_dims
        if kb_rows != k:
            raise _spyre.InvalidArgument(f"register_op: matmul of {list(a_dims)} by {list(b_dims)}: "
                                         f"b_shape needs {k} rows")
        if _dtype(dtype, "register_op: dtype") != np.dtype(FP32):
            raise _spyre.InvalidArgument("register_op: the matmul chip function computes fp32 only")
        bd = worker.config.block_dim
        if m % bd:
            raise _spyre.InvalidArgument(f"register_op: {m} rows do not split over block_dim {bd}")
        kid = _register_kernel(worker, kb.matmul(m // bd, k, n, dtype=dtype), kernel_id)
        worker.register_chip_function(name, _spyre.ChipFunction.matmul(kid, m // bd, k, n))
    else:
        kid = _register_kernel(worker, getattr(kb, op)(list(a_shape), list(b_shape or a_shape), dtype=dtype), kernel_id)
        worker.register_chip_function(name, _spyre.ChipFunction.elementwise(kid))
    return kid
