# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the Python suites: one embedded spyre-mockdev per test file
(2 cards, no VFs), its two PFs as `dev` and `dev2`."""
import signal
import struct
import sys
import threading
import time
import zlib

import numpy as np
import pytest

import spyre


@pytest.fixture(scope="module")
def host():
    h = spyre.Host.embedded_mock(cards=2, vfs=0, mem="2G")
    yield h
    h.close()


@pytest.fixture(scope="module")
def dev(host):
    d = host.open("0")
    yield d
    d.close()


@pytest.fixture(scope="module")
def dev2(host):
    d = host.open("1")
    yield d
    d.close()


def _refused_program(slots):
    """A well-formed device program of `slots` argument slots whose one op
    the device does not know (examples/support/refused_program.hpp):
    registration takes it (it decodes), and the device fails every task of
    it with SPYRE_ERR_UNKNOWN_OP."""
    op = struct.pack("<HHI4H48x", 0x77, 0, 0, 0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF)
    header = struct.pack("<IHHIIIHHHHIII24x", 0x47525053, 1, 64, 64 + len(op), 0, 0, 1, 0, 0, slots, 64, 0, 0)
    image = bytearray(header + op)
    struct.pack_into("<I", image, 12, zlib.crc32(image) & 0xFFFFFFFF)  # the checksum, read as 0 while computed
    return bytes(image)


@pytest.fixture(scope="session")
def refused_program():
    """A program the device refuses when a task runs it: refused_program(slots)."""
    return _refused_program


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def _interrupt_main_once_it_waits_in(test_name):
    """From another thread: SIGINT to the main thread once its innermost
    Python frame is `test_name` (it has called into spyre and waits there)."""
    main = threading.main_thread().ident
    for _ in range(3000):
        frame = sys._current_frames().get(main)
        if frame is not None and frame.f_code.co_name == test_name:
            signal.pthread_kill(main, signal.SIGINT)
            return
        time.sleep(0.01)
    raise AssertionError("the main thread never came to wait")


@pytest.fixture
def interrupt_main_once_it_waits_in():
    """The Ctrl-C of the tests that interrupt a wait (call it from another thread)."""
    return _interrupt_main_once_it_waits_in
