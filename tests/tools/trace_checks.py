# SPDX-License-Identifier: Apache-2.0
# What the spyre-trace test scripts share: checks that collect failures
# instead of stopping at the first, and a command that must succeed.
import subprocess
import sys

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, **kw)
    if r.returncode != 0:
        print(r.stdout, r.stderr, file=sys.stderr)
        raise SystemExit(f"{cmd[0]} exited {r.returncode}")
    return r
