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
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import check_layers_harness  # noqa: E402

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

EXPECTED = {"libspyre/host/a.cpp:2", "libspyre/host/b.cpp:2", "libspyre/host/c.cpp:2", "include/spyre/host/d.hpp:2",
            "driver/e.cpp:2"}
sys.exit(check_layers_harness.run(sys.argv[1], FILES, EXPECTED, "EventCount"))
