#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Python front end benchmarks, each figure beside its baseline from the same run:

  enqueue   one async FlexStream copy enqueue (8 bytes) from Python beside the
            same call from C++ in this process (spyre._spyre._bench.enqueue_loop):
            1024 enqueues timed together, a synchronize (untimed) between
            batches; target: under 1 us above C++.
  copies    a numpy array to the device and back (16 and 64 MiB), each direction
            synchronized, beside numpy's memcpy (np.copyto) of the same bytes;
            target: 0.9x memcpy bandwidth or better.
  host      host-level (L3) dispatch: Worker.run of a program of N empty chip
            tasks ('chip_empty', a C++ chip function submitting nothing) with its
            orchestration function in Python, beside the same program run by
            C++ in this process (spyre._spyre._bench.host_dispatch); per run
            (N = 1) and per task ((T(16) - T(1)) / 15).

Run by `meson test -C build --benchmark --suite bench python` (or directly with
PYTHONPATH=build/python SPYRE_MOCKDEV=build/mockdev/spyre-mockdev).
"""
import statistics
import sys
import time

import numpy as np

import spyre

BATCH = 1024


def python_enqueue_loop(stream, buf, batches):
    src = np.array([42], np.uint64)
    copy = stream.copy_to_device
    total = 0
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(BATCH):
            copy(src, buf)
        total += time.perf_counter_ns() - t0
        stream.synchronize()
    return total / (batches * BATCH)


def bench_enqueue(dev, rounds=5, batches=100):
    s = dev.create_stream()
    buf = dev.alloc(8)
    python_enqueue_loop(s, buf, 10)  # warm-up
    spyre._spyre._bench.enqueue_loop(s, buf, 10)
    cpp, py = [], []
    for _ in range(rounds):  # interleaved, so both see the same machine
        cpp.append(spyre._spyre._bench.enqueue_loop(s, buf, batches, BATCH))
        py.append(python_enqueue_loop(s, buf, batches))
    c, p = statistics.median(cpp), statistics.median(py)
    print(f"enqueue copy_8B   C++ {c:8.1f} ns   Python {p:8.1f} ns   Python overhead {p - c:8.1f} ns "
          f"(target < 1000 ns above C++: {'met' if p - c < 1000 else 'NOT met'})  [median of {rounds} x "
          f"{batches} x {BATCH}]")


def best(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def bench_copies(dev, reps=7):
    s = dev.create_stream()
    for mib in (16, 64):
        n = mib << 20
        src = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
        dst = np.empty_like(src)
        buf = dev.alloc(n)

        def h2d():
            s.copy_to_device(src, buf)
            s.synchronize()

        def d2h():
            s.copy_from_device(buf, dst)
            s.synchronize()

        def memcpy():
            np.copyto(dst, src)

        h2d(), d2h(), memcpy()  # touch every page once
        assert dst.tobytes() == src.tobytes()
        m_best, m_med = best(memcpy, reps)
        gbs = lambda t: n / t / 1e9  # noqa: E731
        print(f"memcpy {mib:3d} MiB   np.copyto            {gbs(m_best):6.2f} GB/s (median {gbs(m_med):6.2f})")
        for name, fn in (("numpy -> device", h2d), ("device -> numpy", d2h)):
            b, med = best(fn, reps)
            print(f"copy   {mib:3d} MiB   {name}     {gbs(b):6.2f} GB/s (median {gbs(med):6.2f})   "
                  f"{m_best / b:5.2f}x memcpy (target 0.9x: {'met' if m_best / b >= 0.9 else 'NOT met'})")
        rt_best, _ = best(lambda: (h2d(), d2h()), reps)
        print(f"copy   {mib:3d} MiB   round trip           {2 * m_best / rt_best:5.2f}x two memcpys")
        buf.free()


def bench_host_dispatch(host, rounds=5, runs=200):
    with spyre.Worker(host, spyre.DistributedConfig(device_ids=[1])) as w:
        w.register_chip_function("chip_empty", spyre.ChipFunction.empty())
        # HostTensors made once, as the C++ loop does: the same storage each run,
        # so both sides move the same bytes (a numpy array passed to run() is
        # wrapped anew per call, a new storage the device holds no copy of).
        a, out = spyre.HostTensor.zeros([8]), spyre.HostTensor.zeros([8])

        def program(tasks):
            def orch(g, x):
                for _ in range(tasks):
                    g.chip("chip_empty", [("in", x[0])])
            return spyre.HostProgram("bench_empty", 1, [[8]], orch)

        def python_runs(p, n):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                w.run(p, [a, out])
            return (time.perf_counter_ns() - t0) / n / 1000.0

        figures = {}
        for tasks in (1, 16):
            p = program(tasks)
            python_runs(p, 20)
            spyre._spyre._bench.host_dispatch(w, 20, tasks)
            cpp, py = [], []
            for _ in range(rounds):
                cpp.append(spyre._spyre._bench.host_dispatch(w, runs, tasks))
                py.append(python_runs(p, runs))
            figures[tasks] = (statistics.median(cpp), statistics.median(py))
        (c1, p1), (c16, p16) = figures[1], figures[16]
        print(f"host run 1 task   C++ {c1:8.1f} us   Python {p1:8.1f} us   Python overhead {p1 - c1:6.1f} us/run  "
              f"[median of {rounds} x {runs} runs, 1 device, empty chip tasks]")
        ct, pt = (c16 - c1) / 15, (p16 - p1) / 15
        print(f"host per task     C++ {ct:8.2f} us   Python {pt:8.2f} us   Python overhead {pt - ct:6.2f} us/task "
              f"[(T(16 tasks) - T(1 task)) / 15]")


def main():
    with spyre.Host.embedded_mock(cards=2, vfs=0, mem="4G") as host, host.open("0") as dev:
        print(f"spyre {spyre.__version__} python {sys.version.split()[0]} numpy {np.__version__}, "
              f"device {dev.pci_address}, DMA backend {dev.dma_backend}, scheduler {dev.scheduler_policy}")
        bench_enqueue(dev)
        bench_copies(dev)
        bench_host_dispatch(host)
    return 0


if __name__ == "__main__":
    sys.exit(main())
