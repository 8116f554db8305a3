#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs an example against a mounted spyre-mockdev, as a user would.

Usage: on_mounted_mock.py MOCKDEV CARDS VFS COMMAND... ({root} in COMMAND is the mount)

Starts the daemon (the environment's SPYRE_MOCKDEV, when set, instead of
MOCKDEV, as for the library) on a private mount with CARDS x VFS, runs COMMAND with
{root} replaced by the mount point, prints its output, stops the daemon
and exits with the command's status (a daemon that does not start fails).
"""
import os
import signal
import subprocess
import sys
import tempfile

mockdev, cards, vfs, command = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
mockdev = os.environ.get("SPYRE_MOCKDEV") or mockdev
with tempfile.TemporaryDirectory() as d:
    mount = os.path.join(d, "mnt")
    os.mkdir(mount)
    rfd, wfd = os.pipe()
    daemon = subprocess.Popen([mockdev, "--mount", mount, "--cards", cards, "--vfs", vfs, "--mem", "4G",
                               "--shm-prefix", f"mounted-example-{os.getpid()}", "--log-level", "warn",
                               "--foreground", "--ready-fd", str(wfd)],
                              pass_fds=(wfd,), start_new_session=True)
    os.close(wfd)
    ready = os.read(rfd, 64)
    os.close(rfd)
    try:
        if not ready.startswith(b"ready"):
            print(f"FAIL: spyre-mockdev did not start ({ready!r})")
            sys.exit(1)
        r = subprocess.run([a.replace("{root}", mount) for a in command], timeout=240)
        status = r.returncode
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=30)
print(f"exit {status}")
sys.exit(status)
