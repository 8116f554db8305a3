# SPDX-License-Identifier: Apache-2.0
# What the check_layers rule tests share: load scripts/check_layers.py, run
# it on a made-up tree, and compare the places it refuses with the expected
# ones ("path:line"), each message naming the advice.
import importlib.util
import pathlib
import sys
import tempfile


def run(script: str, files: dict, expected: set, advice: str, only: str = "") -> int:
    spec = importlib.util.spec_from_file_location("check_layers", script)
    check_layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_layers)
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        errors = [e for e in check_layers.check(root) if only in e]
    got = {e.split(": ", 1)[0] for e in errors}
    failures = []
    if got != expected:
        failures.append(f"refused {sorted(got)}, expected {sorted(expected)}")
    failures += [f"message does not say '{advice}': {e}" for e in errors if advice not in e]
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    for e in errors:
        print(e)
    return 1 if failures else 0
