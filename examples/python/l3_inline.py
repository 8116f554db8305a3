#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Seed 003's L3DependencyInlineProgram: all levels inside one HOST orchestrator
with spyre.at blocks (CHIP -> CORE_GROUP add, then a HOST WORKER block that
verifies; its inputs are found from the variables it reads).
Run from the repository root: PYTHONPATH=build/python python3 examples/python/l3_inline.py"""
import sys
import time

import numpy as np

import spyre
from spyre import Level, Out, Role, Tensor, ops

T = Tensor[[128, 128], spyre.FP32]


@spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
def host_orch(a: T, b: T, f: Out[T]):
    with spyre.at(level=Level.CHIP, role=Role.ORCHESTRATOR):
        with spyre.at(level=Level.CORE_GROUP):
            out = ops.add(a, b)
        out_f = spyre.assemble(f, out)
    with spyre.at(level=Level.HOST, role=Role.WORKER):
        expected = np.full((128, 128), 5.0, dtype=np.float32)
        if not np.allclose(out_f, expected):
            raise AssertionError(f"SubWorker verify failed: expected 5.0, got max={out_f.max()}, min={out_f.min()}")
    return out_f


def main():
    with spyre.Host.embedded_mock(cards=1, vfs=0, mem="1G") as host:
        config = spyre.DistributedConfig(device_ids=[0], num_sub_workers=1)
        with spyre.compile(host_orch, config, host=host) as compiled:
            a = np.full((128, 128), 2.0, np.float32)
            b = np.full((128, 128), 3.0, np.float32)
            t0 = time.perf_counter()
            f = compiled(a, b)
            dt = time.perf_counter() - t0
            # An explicit check: `python -O` drops assert statements.
            if not np.allclose(f, 5.0):
                sys.exit(f"FAILED l3_inline: f = {f.ravel()[:4]}..., want a + b = 5")
    print(f"OK l3_inline: f = a + b verified inside the host function's WORKER block in {dt * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
