#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# scripts/check_layers.py's sleep/wake rule on a made-up tree: a condition
# variable, a semaphore, an atomic wait and a futex call in libspyre/ or
# include/spyre/ are refused (file and line named, EventCount advised); the
# same words in a comment, in eventcount.hpp or futex.hpp, or outside
# libspyre/, include/spyre/ and driver/ are not. In driver/ a condition
# variable is refused too, but a futex call (a doorbell or interrupt word of
# the hardware contract) is not.
# Usage: check_layers_sleep_wake_test.py SCRIPT
import importlib.util
import pathlib
import sys
import tempfile

spec = importlib.util.spec_from_file_location("check_layers", sys.argv[1])
check_layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_layers)

FILES = {
    # refused: one per line 2
    "libspyre/host/a.cpp": "#include <mutex>\nstd::condition_variable cv;\n",
    "libspyre/host/b.cpp": "int x;\nstd::counting_semaphore<4> s{1};\n",
    "libspyre/host/c.cpp": "int x;\nvoid f(std::atomic<int>& w) { w.wait(0); }\n",
    "include/spyre/host/d.hpp": "#pragma once\ninline void g(uint32_t* w) { spyre::FutexWake(w); }\n",
    # allowed
    "libspyre/host/comment.cpp": "// a cv.wait( would cost a futex_waitv here\n/* FutexWait( */ int y;\n",
    "include/spyre/common/eventcount.hpp": "void h() { FutexWait(&seq_, 0, t, FutexScope::Private); }\n",
    "include/spyre/common/futex.hpp": "long rc = ::syscall(SYS_futex, word, FUTEX_WAIT, 0);\n",
    "driver/e.cpp": "int x;\nstd::condition_variable cv;\n",
    "driver/ring.cpp": "void ring(uint32_t* w) { spyre::FutexWake(w); }\n",
    "mockdev/m.cpp": "std::condition_variable cv;\n",
    "libspyre/host/f.cpp": "void k(spyre::EventCount& ec) { ec.SleepUnless([] { return true; }, 1s); ec.Notify(); }\n",
}

with tempfile.TemporaryDirectory() as tmp:
    root = pathlib.Path(tmp)
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    errors = check_layers.check(root)

expected = {"libspyre/host/a.cpp:2", "libspyre/host/b.cpp:2", "libspyre/host/c.cpp:2", "include/spyre/host/d.hpp:2",
            "driver/e.cpp:2"}
got = {e.split(": ", 1)[0] for e in errors}
failures = []
if got != expected:
    failures.append(f"refused {sorted(got)}, expected {sorted(expected)}")
for e in errors:
    if "EventCount" not in e:
        failures.append(f"message does not point at EventCount: {e}")
for f in failures:
    print("FAIL:", f, file=sys.stderr)
for e in errors:
    print(e)
sys.exit(1 if failures else 0)
