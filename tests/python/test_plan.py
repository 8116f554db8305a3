# SPDX-License-Identifier: Apache-2.0
"""CompilerOutput and ExecutionPlan: parse, save and read back, load on a
device (cached by content), errors."""
import json

import numpy as np
import pytest

import spyre


def two_ops():
    kb = spyre.KernelBuilder()
    return spyre.compiler_output_from_kernels("pair", [("add", kb.add([8, 64])), ("mm", kb.matmul(8, 64, 16))])


def test_parse_and_fields():
    out = two_ops()
    assert "plan.json" not in out.blobs and {"add.bin", "mm.bin"} <= set(out.blobs)
    json.loads(out.manifest)
    plan = spyre.ExecutionPlan(out)
    assert plan.name == "pair" and not plan.loaded and plan.device is None
    assert [op.name for op in plan.operations] == ["add", "mm"]
    assert plan.operations[1].has_compute and plan.operations[1].has_correction
    assert [t.role for t in plan.operations[0].tensors] == [spyre.TensorRole.Input] * 2 + [spyre.TensorRole.Output]
    assert len(plan.tensor_input_metadata) == 6
    assert plan.tensor_input_metadata[3].shape == [8, 64] and plan.tensor_input_metadata[3].dtype == spyre.DType.FP32
    assert plan.content_hash == out.content_hash()


def test_save_and_read_back(tmp_path):
    plan = spyre.ExecutionPlan(two_ops())
    plan.save(tmp_path / "p")
    assert (tmp_path / "p" / "plan.json").is_file()
    again = spyre.ExecutionPlan.read(tmp_path / "p")
    assert again.content_hash == plan.content_hash and again.name == "pair"
    with pytest.raises(spyre.InvalidArgument):  # not empty
        plan.save(tmp_path / "p")
    out = spyre.CompilerOutput.read_directory(tmp_path / "p")
    assert out.content_hash() == plan.content_hash


def test_load_on_device_and_cache(dev, tmp_path):
    ss = spyre.SpyreStream(dev)
    progress = []
    plan = spyre.load_execution_plan(ss, two_ops(), progress=lambda *p: progress.append(p))
    assert plan.loaded and plan.device is dev
    assert progress and progress[-1][1] == progress[-1][2] and progress[-1][3] == "binaries"
    spyre.ExecutionPlan(two_ops()).save(tmp_path / "d")
    from_dir = spyre.ExecutionPlan.load(ss, tmp_path / "d")
    assert from_dir.content_hash == plan.content_hash
    stats = dev.memory_stats().allocations
    spyre.load_execution_plan(ss, spyre.ExecutionPlan(two_ops()))  # the cache: no new device memory
    assert dev.memory_stats().allocations == stats


def test_errors(dev, tmp_path):
    ss = spyre.SpyreStream(dev)
    with pytest.raises(spyre.NotFound):
        spyre.load_execution_plan(ss, tmp_path / "missing")
    for wrong in (None, 3):  # was pybind11's cast text naming std::filesystem::path
        with pytest.raises(spyre.InvalidArgument, match="load_execution_plan: source is a .*, not a directory path"):
            spyre.load_execution_plan(ss, wrong)
    bad = two_ops()
    assert '"add.bin"' in bad.manifest
    bad.manifest = bad.manifest.replace('"add.bin"', '"nope.bin"')
    with pytest.raises(spyre.InvalidArgument, match="nope.bin"):
        spyre.ExecutionPlan(bad)
    broken = spyre.CompilerOutput()
    broken.manifest = "{ not json"
    with pytest.raises(spyre.InvalidArgument):
        spyre.ExecutionPlan(broken)
    other = spyre.CompilerOutput()
    other.blobs = {"../escape": b"x"}
    other.manifest = two_ops().manifest
    with pytest.raises(spyre.InvalidArgument):
        other.write_directory(tmp_path / "w")
    # A blob that is not bytes (or a name that is not str) is refused whole,
    # typed, and leaves the blobs as they were.
    for bad_blobs in ({"a.bin": 7}, {"a.bin": "text"}, {3: b"x"}, {"a.bin": b"x", "b.bin": None}):
        with pytest.raises(spyre.InvalidArgument, match="CompilerOutput.blobs: entry"):
            other.blobs = bad_blobs
        assert other.blobs == {"../escape": b"x"}
    other.blobs = {"a.bin": bytearray(b"\x01\x02")}
    assert other.blobs == {"a.bin": b"\x01\x02"}


def test_blobs_is_a_live_view_that_item_assignment_changes():
    # blobs was a dict copy: out.blobs["x"] = data changed only the copy and
    # was lost without a word.
    out = two_ops()
    mm = out.blobs["mm.bin"]
    out.blobs["mm.bin"] = b"\x00" * len(mm)
    assert out.blobs["mm.bin"] == b"\x00" * len(mm)
    out.blobs["extra.bin"] = bytearray(b"\x05\x06")
    assert out.blobs["extra.bin"] == b"\x05\x06"
    del out.blobs["extra.bin"]
    names = set(out.blobs)
    assert "extra.bin" not in names and {"add.bin", "mm.bin"} <= names
    with pytest.raises(KeyError):
        out.blobs["absent.bin"]
    with pytest.raises(KeyError):
        del out.blobs["absent.bin"]
    assert out.blobs.get("absent.bin") is None and len(out.blobs) == len(names)
    for name, data in (("a.bin", 7), ("a.bin", "text"), (3, b"x")):
        with pytest.raises(spyre.InvalidArgument, match="CompilerOutput.blobs: entry"):
            out.blobs[name] = data
    assert set(out.blobs) == names
    # The changed blob is what the plan is built from and what is written.
    out.blobs["mm.bin"] = mm
    assert spyre.ExecutionPlan(out).content_hash == spyre.ExecutionPlan(two_ops()).content_hash
    # A view assigned whole is copied; anything but a mapping is refused typed.
    other = spyre.CompilerOutput()
    other.blobs = out.blobs
    other.blobs["mm.bin"] = b"changed"
    assert out.blobs["mm.bin"] == mm and other.blobs["mm.bin"] == b"changed"
    with pytest.raises(spyre.InvalidArgument, match="give a mapping of file names"):
        other.blobs = [("a.bin", b"x")]
    assert dict(other.blobs) == dict(out.blobs, **{"mm.bin": b"changed"})
