# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the Python suites: one embedded spyre-mockdev per test file
(2 cards, no VFs), its two PFs as `dev` and `dev2`."""
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
