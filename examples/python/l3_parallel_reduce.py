#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Seed 003's L3ParallelReduceProgram: chip_orch_add and chip_orch_sub run in
parallel (two devices), then a SubWorker reduces: f = (a + b) + (a - b) = 2a.
Run from the repository root: PYTHONPATH=build/python python3 examples/python/l3_parallel_reduce.py"""
import time

import numpy as np

import spyre
from spyre import Level, Out, Role, Tensor, ops

T = Tensor[[128, 128], spyre.FP32]


@spyre.program
class L3ParallelReduceProgram:
    @spyre.function(level=Level.CORE_GROUP)
    def tile_add(self, a: T, b: T, f: Out[T]):
        return ops.add(a, b)

    @spyre.function(level=Level.CORE_GROUP)
    def tile_sub(self, a: T, b: T, f: Out[T]):
        return ops.sub(a, b)

    @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
    def chip_orch_add(self, a: T, b: T, f: Out[T]):
        return self.tile_add(a, b, f)

    @spyre.function(level=Level.CHIP, role=Role.ORCHESTRATOR)
    def chip_orch_sub(self, a: T, b: T, f: Out[T]):
        return self.tile_sub(a, b, f)

    @spyre.function(level=Level.HOST, role=Role.WORKER)
    def reduce_sum(self, sum_ab: T, diff_ab: T, f: Out[T]):
        f[:] = sum_ab + diff_ab

    @spyre.function(level=Level.HOST, role=Role.ORCHESTRATOR)
    def host_orch(self, a: T, b: T, f: Out[T]):
        sum_ab = spyre.create_tensor([128, 128], dtype=spyre.FP32)
        diff_ab = spyre.create_tensor([128, 128], dtype=spyre.FP32)
        out_sum = self.chip_orch_add(a, b, sum_ab)
        out_diff = self.chip_orch_sub(a, b, diff_ab)
        self.reduce_sum(out_sum, out_diff, f)
        return f


def main():
    rng = np.random.default_rng(3)
    with spyre.Host.embedded_mock(cards=2, vfs=0, mem="1G") as host:
        config = spyre.DistributedConfig(device_ids=[0, 1], num_sub_workers=1)
        with spyre.compile(L3ParallelReduceProgram, config, host=host) as compiled:
            a = rng.standard_normal((128, 128)).astype(np.float32)
            b = rng.standard_normal((128, 128)).astype(np.float32)
            t0 = time.perf_counter()
            f = compiled(a, b)
            dt = time.perf_counter() - t0
            np.testing.assert_allclose(f, 2 * a, rtol=1e-5, atol=1e-5)
    print(f"OK l3_parallel_reduce: f = (a+b) + (a-b) = 2a over 2 devices in {dt * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
