#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Seed 003's L3DependencyProgram in the functional style: a chip task computes
f = a + b (a kernel-builder add on the device), then a SubWorker verifies it.
Run from the repository root: PYTHONPATH=build/python python3 examples/python/l3_dependency.py"""
import sys
import time

import numpy as np

import spyre
from spyre import Level, Out, Role, Tensor, ops

T = Tensor[[128, 128], spyre.FP32]


@spyre.program
class L3DependencyProgram:
    @spyre.function(level=Level.CORE_GROUP)
    def tile_add(self, a: T, b: T, f: Out[T]):
        return ops.add(a, b)

    @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
    def chip_orch(self, a: T, b: T, f: Out[T]):
        return self.tile_add(a, b, f)

    @spyre.function(level=Level.HOST, role=Role.WORKER)
    def verify(self, f: T):
        if not np.allclose(f, 5.0):
            raise AssertionError(f"SubWorker verify failed: expected 5.0, got max={f.max()}, min={f.min()}")

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: T, b: T, f: Out[T]):
        out_f = self.chip_orch(a, b, f)
        self.verify(out_f)
        return out_f


def main():
    with spyre.Host.embedded_mock(cards=1, vfs=0, mem="1G") as host:
        config = spyre.DistributedConfig(device_ids=[0], num_sub_workers=1)
        with spyre.compile(L3DependencyProgram, config, host=host) as compiled:
            a = np.full((128, 128), 2.0, np.float32)
            b = np.full((128, 128), 3.0, np.float32)
            f = np.zeros((128, 128), np.float32)
            t0 = time.perf_counter()
            compiled(a, b, f)      # in place
            f2 = compiled(a, b)    # return style
            dt = time.perf_counter() - t0
            # An explicit check: `python -O` drops assert statements.
            if not (np.allclose(f, a + b) and np.allclose(f2, a + b)):
                sys.exit(f"FAILED l3_dependency: f = {f.ravel()[:4]}..., f2 = {f2.ravel()[:4]}..., want a + b = 5")
    print(f"OK l3_dependency: f = a + b verified by the SubWorker, 2 runs in {dt * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
