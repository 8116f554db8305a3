# SPDX-License-Identifier: Apache-2.0
"""spyre.Error and its subclasses: one per spyre::ErrorKind, with the C++
error's message and context, for every call."""
import pytest

import spyre

BUILTIN = {
    "InvalidArgument": ValueError, "WrongDevice": ValueError, "NotFound": LookupError,
    "PermissionDenied": PermissionError, "Unsupported": NotImplementedError, "Timeout": TimeoutError,
    "OutOfMemory": MemoryError,
}


def test_one_class_per_kind():
    assert len(spyre.ERROR_KINDS) == 15
    for name in spyre.ERROR_KINDS:
        cls = getattr(spyre, name)
        assert issubclass(cls, spyre.Error) and issubclass(cls, Exception)
        if name in BUILTIN:
            assert issubclass(cls, BUILTIN[name])
        assert cls.__doc__


@pytest.mark.parametrize("kind", spyre.ERROR_KINDS)
def test_translation_carries_kind_message_and_context(kind):
    with pytest.raises(getattr(spyre, kind)) as info:
        spyre._spyre._raise_for_test(kind, "the message")
    e = info.value
    assert e.kind == kind
    assert e.message == "the message"
    assert "the message" in str(e)
    assert e.device == "0000:01:00.0" and e.context["device"] == "0000:01:00.0"
    assert e.address == 0x1000 and e.stream == 3 and e.op_index == 7 and e.device_code == 5
    assert e.offset is None and e.register == "" and e.sys_errno == 0


def test_other_cpp_exceptions_are_typed_too():
    with pytest.raises(spyre.Internal, match="unexpected C\\+\\+ exception: boom"):
        spyre._spyre._raise_for_test("std::runtime_error", "boom")
    with pytest.raises(spyre.OutOfMemory):
        spyre._spyre._raise_for_test("std::bad_alloc", "")
    with pytest.raises(spyre.InvalidArgument, match="unknown kind 'Nope'"):
        spyre._spyre._raise_for_test("Nope", "")


def test_real_errors_from_the_runtime(host, dev):
    with pytest.raises(spyre.InvalidArgument, match="at least 1 byte") as info:
        dev.alloc(0)
    assert info.value.device == dev.pci_address
    with pytest.raises(spyre.InvalidArgument, match="the pool holds"):
        dev.alloc(1 << 50)
    free = dev.memory_stats().largest_free_block
    whole = dev.alloc(free)
    with pytest.raises(spyre.OutOfMemory, match="no free block") as info:
        dev.alloc(free)
    assert info.value.kind == "OutOfMemory" and isinstance(info.value, MemoryError)
    whole.free()
    with pytest.raises(spyre.NotFound):
        host.find("7")
    with pytest.raises(spyre.InvalidArgument):
        host.find("")
    with pytest.raises(spyre.Busy, match=dev.pci_address):
        host.open("0")
    # Python code catching the builtin still works.
    with pytest.raises(ValueError):
        dev.alloc(-5)
