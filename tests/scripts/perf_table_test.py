#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# scripts/perf_table.py on two checked-in benchmark outputs (tests/scripts/perf_table/):
# the table it writes between the markers, word for word; the text around
# the markers untouched; a second run identical; --filter; bad input refused
# with exit 2 and a message naming the problem.
# Usage: perf_table_test.py SCRIPT FIXTURE_DIR
import os
import subprocess
import sys
import tempfile

script, fixtures = sys.argv[1], sys.argv[2]
inputs = [os.path.join(fixtures, f) for f in ("dma_bench.json", "orchestration_bench.json")]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(*args):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True)


EXPECTED = """\
Conditions of each run:

- `dma_bench`: 2026-11-28 01:20:00+00:00, host `vm`, 2 CPUs at 1996 MHz, load 2.50 / 3.25 / 4.00 (1/5/15 min)
- `orchestration_bench`: 2026-11-28 01:25:30+00:00, host `vm`, 2 CPUs at 1996 MHz, load 1.00 / 1.50 / 2.00 (1/5/15 min)

| program | benchmark | figure | counters | against its baseline (same run) |
|---|---|---|---|---|
| dma_bench | `baseline/memcpy/16777216` | 1.6 ms, 10 GiB/s |  | baseline |
| dma_bench | `dma/host_to_device/16777216` | 2 ms, 8 GiB/s |  | 0.80x memcpy (`baseline/memcpy/16777216`: 1.6 ms, 10 GiB/s); vs memcpy |
| dma_bench | `baseline/pwrite_tmpfs/64` | 1.14 us |  | baseline |
| dma_bench | `dma/small_host_to_device/64` | 25 us |  | 0.0456x pwrite_tmpfs (`baseline/pwrite_tmpfs/64`: 1.14 us); vs pwrite |
| dma_bench | `allocator/alloc_free_at_100k_live` | 412 ns | live_blocks 100,000 |  |
| orchestration_bench | `baseline/gomp_task_depend/chain` | 5 ms | tasks_per_s 2M | baseline |
| orchestration_bench | `baseline/gomp_task_depend/fanout` | 4 ms | tasks_per_s 2.5M | baseline |
| orchestration_bench | `pto_submit/chain` | 1.75 ms (median of 3) | tasks_per_s 5.75M | 2.88x gomp (`baseline/gomp_task_depend/chain`: 5 ms; tasks_per_s 2M) |
| orchestration_bench | `pto_submit/fanout` | error: task ring full |  |  |
"""

BEFORE = "# Performance\n\nText before.\n\n<!-- begin perf_table -->\n"
AFTER = "<!-- end perf_table -->\n\n## 27 Nov 2026: history\n\nText after.\n"

with tempfile.TemporaryDirectory() as d:
    doc = os.path.join(d, "performance.md")
    with open(doc, "w") as f:
        f.write(BEFORE + "| an old table |\n" + AFTER)
    r = run("--doc", doc, *inputs)
    check(r.returncode == 0, f"--doc exits 0 (got {r.returncode}: {r.stderr})")
    written = open(doc).read()
    check(written == BEFORE + EXPECTED + AFTER, "the document holds the expected table between the markers:\n" + written)

    r = run("--doc", doc, *inputs)
    check(r.returncode == 0 and open(doc).read() == written, "a second run writes the same document")

    r = run("--stdout", *inputs)
    check(r.returncode == 0 and r.stdout == EXPECTED, "--stdout prints the same table:\n" + r.stdout)

    r = run("--stdout", "--filter", "^orchestration_bench pto_", *inputs)
    rows = [line for line in r.stdout.splitlines() if line.startswith("| orchestration") or line.startswith("| dma")]
    check(r.returncode == 0 and [row.split(" | ")[1] for row in rows] == ["`pto_submit/chain`", "`pto_submit/fanout`"],
          "--filter keeps the matching rows only:\n" + r.stdout)
    check(r.returncode == 0 and "- `dma_bench`:" in r.stdout, "--filter keeps every run's conditions")

    # Bad input: a clear message and exit 2, the document left alone.
    no_markers = os.path.join(d, "plain.md")
    with open(no_markers, "w") as f:
        f.write("# no table here\n")
    r = run("--doc", no_markers, *inputs)
    check(r.returncode == 2 and "no '<!-- begin perf_table -->'" in r.stderr, f"no markers: exit 2, named ({r.stderr})")
    check(open(no_markers).read() == "# no table here\n", "no markers: the document is unchanged")

    not_json = os.path.join(d, "console.txt")
    with open(not_json, "w") as f:
        f.write("Run on (2 X 1996 MHz CPU s)\n")
    r = run("--doc", doc, not_json)
    check(r.returncode == 2 and "console.txt" in r.stderr and "Traceback" not in r.stderr,
          f"console output instead of JSON: exit 2, the file named ({r.stderr})")
    wrong_shape = os.path.join(d, "wrong.json")
    with open(wrong_shape, "w") as f:
        f.write('{"benchmarks": {}}')
    r = run("--stdout", wrong_shape)
    check(r.returncode == 2 and "not Google Benchmark JSON" in r.stderr, f"JSON of another shape: exit 2 ({r.stderr})")
    bad_time = os.path.join(d, "bad_time.json")
    with open(bad_time, "w") as f:
        f.write('{"context": {}, "benchmarks": [{"name": "a", "real_time": "fast"}]}')
    r = run("--stdout", bad_time)
    check(r.returncode == 2 and "numeric 'real_time'" in r.stderr and "Traceback" not in r.stderr,
          f"a non-numeric time: exit 2, named ({r.stderr})")
    r = run("--stdout", "--filter", "nothing matches this", *inputs)
    check(r.returncode == 2 and "no benchmark matched" in r.stderr, f"an empty selection: exit 2 ({r.stderr})")
    check(open(doc).read() == written, "failed runs leave the document unchanged")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("perf_table OK")
