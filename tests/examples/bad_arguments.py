#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Bad command lines of the example programs: each is a usage error (exit
code 2, a message naming the argument, the usage line), never an abort, a
misleading message or a run with a number read wrong (found probing from
outside: `spyre-workflow5 -4 4 4 2` aborted on std::length_error,
`spyre-bringup 99999999999` ran 1.2e9 NOPs, `spyre-l3-examples matmul 16
99999999999 1` aborted on std::bad_alloc).

Usage: bad_arguments.py BRINGUP WORKFLOW5 OVERLAP PTO_EXAMPLES L3_EXAMPLES [L4_EXAMPLES]

The last case opens the embedded mock (FUSE): an M the devices cannot split.
"""
import subprocess
import sys

bringup, workflow5, overlap, pto, l3 = sys.argv[1:6]
l4 = sys.argv[6] if len(sys.argv) > 6 else None
DIM = "is not an integer from 1 to 1048576"

cases = [
    (bringup, ["99999999999"], "NOPS_PER_MODE: '99999999999' is not an integer from 1 to 1000000"),
    (bringup, ["0"], "NOPS_PER_MODE: '0' is not an integer from 1 to 1000000"),
    (bringup, ["10abc"], "NOPS_PER_MODE: '10abc'"),
    (bringup, ["10", "20"], "one argument at most"),
    (workflow5, ["-4", "4", "4", "2"], f"M: '-4' {DIM}"),
    (workflow5, ["abc", "4", "4", "4"], f"M: 'abc' {DIM}"),
    (workflow5, ["4", "4", "4", "99999999999"], f"TILE: '99999999999' {DIM}"),
    (workflow5, ["4", "4", "4"], "give M K N TILE together, or none"),
    (overlap, ["4", "x", "4", "4"], f"ROWS: 'x' {DIM}"),
    (overlap, ["4", "4", "4", "-1"], f"N: '-1' {DIM}"),
    (pto, ["matmul", "0", "5", "5"], f"M: '0' {DIM}"),
    (pto, ["matmul", "5", "x", "5"], f"K: 'x' {DIM}"),
    (pto, ["--cores", "0"], "--cores: '0' is not an integer from 1 to 32"),
    (pto, ["--cores"], "--cores needs a value"),
    (l3, ["matmul", "16", "99999999999", "1"], f"K: '99999999999' {DIM}"),
    (l3, ["matmul", "-8", "1", "1"], f"M: '-8' {DIM}"),
    (l3, ["matmul", "1", "1"], "give M K N together"),
    (l3, ["bogus"], "unknown argument 'bogus' (an example: dependency, parallel, matmul or all)"),
    (l3, ["--verbose"], "unknown argument '--verbose'"),
    (l3, ["dependency", "8", "8", "8"], "M K N size the matmul example; 'dependency' takes none"),
    (l3, ["--device-root"], "--device-root needs a directory"),
    # Parsed, then refused once the devices are known (2 cards x 2 VFs, block_dim 2).
    (l3, ["matmul", "100", "8", "8"], "matmul: M = 100 must be a multiple of devices (4) x block_dim (2) = 8"),
]
if l4:
    cases.append((l4, ["--bogus"], "'--bogus' is not an argument"))

failures = 0
for exe, args, want in cases:
    r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=120)
    name = exe.rsplit("/", 1)[-1]
    if r.returncode != 2 or want not in r.stderr or "usage:" not in r.stderr:
        failures += 1
        print(f"FAIL: {name} {' '.join(args)}: exit {r.returncode}, want 2 and '{want}'; stderr: {r.stderr.strip()!r}")
    else:
        print(f"ok: {name} {' '.join(args)}: exit 2, {r.stderr.splitlines()[0]}")
if failures:
    sys.exit(1)
print(f"all {len(cases)} bad command lines refused with exit code 2")
