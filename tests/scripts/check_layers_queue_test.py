#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# scripts/check_layers.py's device-queue rule on a made-up tree: above the
# driver, only the Device (libspyre/device/) and its scheduler
# (libspyre/stream/) open a device queue. Including a queue header,
# constructing a queue, or taking a core group's queue through
# DeviceInternals::TakeTaskQueue anywhere else in libspyre/, tools/ or
# python/ is refused (file and line named); the same in the Device, the
# scheduler, a comment or a test is not.
# Usage: check_layers_queue_test.py SCRIPT
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import check_layers_harness  # noqa: E402

FILES = {
    # refused: one per line 2
    "libspyre/orchestration/a.cpp": "int x;\n#include \"spyre/driver/task_queue.hpp\"\n",
    "libspyre/host/b.cpp": "int x;\nauto q = std::make_unique<driver::TaskQueue>(fn, 0);\n",
    "libspyre/orchestration/c.cpp": "int x;\nauto q = DeviceInternals::TakeTaskQueue(dev, 0);\n",
    "tools/d.cpp": "int x;\nspyre::driver::CommandRing ring(fn);\n",
    # allowed
    "include/spyre/driver/task_queue.hpp": "#pragma once\n",
    "include/spyre/driver/command_ring.hpp": "#pragma once\n",
    "libspyre/device/task_port.cpp": "#include \"spyre/driver/task_queue.hpp\"\nauto q = DeviceInternals::TakeTaskQueue(dev, 0);\n",
    "libspyre/stream/e.cpp": "#include \"spyre/driver/command_ring.hpp\"\ndriver::CommandRing ring(fn);\n",
    "libspyre/host/comment.cpp": "// not DeviceInternals::TakeTaskQueue(dev, 0)\nint y;\n",
    "tests/f.cpp": "int x;\nauto q = DeviceInternals::TakeTaskQueue(dev, 0);\n",
}

sys.exit(check_layers_harness.run(sys.argv[1], FILES, {"libspyre/orchestration/a.cpp:2", "libspyre/host/b.cpp:2", "libspyre/orchestration/c.cpp:2", "tools/d.cpp:2"},
                                  "reached through Device", only="device queue"))
