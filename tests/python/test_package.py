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


def test_reexports_and_docstrings():
    for name in dir(spyre._spyre):
        if name.startswith("_"):
            continue
        assert getattr(spyre, name) is getattr(spyre._spyre, name), name
    assert spyre.SpyreTensor.from_numpy.__doc__ and "GIL" in spyre.FlexStream.synchronize.__doc__
    assert spyre.__version__
