# SPDX-License-Identifier: Apache-2.0
"""The package itself: every public name of spyre._spyre is declared in the
type stubs (so editors complete it) and re-exported by spyre."""
import ast
import pathlib

import spyre


def stub_names():
    stub = pathlib.Path(spyre.__file__).with_name("_spyre.pyi")
    tree = ast.parse(stub.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_stubs_declare_every_public_name():
    public = {n for n in dir(spyre._spyre) if not n.startswith("__")} - {"_bench"}
    missing = public - stub_names()
    assert not missing, f"not in _spyre.pyi: {sorted(missing)}"


def stub_classes():
    """Each class of the stubs: the names its body declares and its bases' names."""
    stub = pathlib.Path(spyre.__file__).with_name("_spyre.pyi")
    classes = {}
    for node in ast.parse(stub.read_text()).body:
        if not isinstance(node, ast.ClassDef):
            continue
        names = set()
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(item.name)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
            elif isinstance(item, ast.Assign):
                names.update(t.id for t in item.targets if isinstance(t, ast.Name))
        bases = [ast.unparse(b) for b in node.bases]
        classes[node.name] = (names, bases)
    return classes


# What a stub class gets from a base outside the stubs.
OUTSIDE_BASES = {"enum.Enum": {"name", "value"}, "Enum": {"name", "value"}}


def test_stubs_declare_every_public_attribute_of_every_class():
    """Every public attribute of every class of spyre._spyre (its own and its
    spyre bases', not what object or Exception give) is declared in the
    class's stub or a stub base: a field the docs name but the stubs lack
    (TaskFailureInfo.skipped, SchedulerStats.tasks_sent, DeviceId.tree) fails here."""
    classes = stub_classes()

    def declared(name):
        names, bases = classes.get(name, (set(), []))
        out = set(names)
        for b in bases:
            out |= declared(b) if b in classes else OUTSIDE_BASES.get(b, set())
        return out

    missing = {}
    for name in dir(spyre._spyre):
        cls = getattr(spyre._spyre, name)
        if name.startswith("_") or not isinstance(cls, type):
            continue
        public = set()
        for klass in cls.__mro__:
            if klass.__module__.startswith("spyre"):
                public |= {n for n in vars(klass) if not n.startswith("_")}
        lacking = public - declared(name)
        if lacking:
            missing[name] = sorted(lacking)
    assert not missing, f"attributes not in _spyre.pyi: {missing}"


def test_reexports_and_docstrings():
    for name in dir(spyre._spyre):
        if name.startswith("_"):
            continue
        assert getattr(spyre, name) is getattr(spyre._spyre, name), name
    assert spyre.SpyreTensor.from_numpy.__doc__ and "GIL" in spyre.FlexStream.synchronize.__doc__
    assert spyre.__version__
