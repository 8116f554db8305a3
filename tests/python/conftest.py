# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the Python suites: one embedded spyre-mockdev per test file
(2 cards, no VFs), its two PFs as `dev` and `dev2`."""
import signal
import sys
import threading
import time

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
