#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# spyre-smi end to end: a spyre-mockdev with 2 cards x 3 VFs, three other
# processes (smi_worker) each holding a VF and doing known work (stream and
# DMA copies of known sizes, orchestration tasks on the device's cores). The
# table, -q and --json must report exactly that work and the holders' pids;
# a non-holder must not see the holders' addresses; the new attribute
# refuses writes; bad usage gives the documented exit codes.
# Usage: spyre_smi_test.py SPYRE_SMI SMI_WORKER SPYRE_MOCKDEV (the environment's
# SPYRE_MOCKDEV, when set, wins, as for the library: the TSan job sets it)
import errno
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

smi, worker_exe = sys.argv[1], sys.argv[2]
mockdev = os.environ.get("SPYRE_MOCKDEV") or sys.argv[3]
failures = []
MIB = 1 << 20


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run_smi(args, env, expect=0):
    r = subprocess.run([sys.executable, smi] + args, capture_output=True, text=True, timeout=120, env=env)
    if r.returncode != expect:
        print(r.stdout, r.stderr, file=sys.stderr)
        check(False, f"spyre-smi {' '.join(args)} exited {r.returncode}, expected {expect}")
    return r


# (address, MiB to device, MiB from device, tasks)
WORK = [("0000:01:00.1", 3, 1, 25), ("0000:01:00.2", 2, 5, 0), ("0000:02:00.3", 0, 4, 40)]

with tempfile.TemporaryDirectory() as d:
    mount = os.path.join(d, "mnt")
    os.mkdir(mount)
    prefix = f"smi-test-{os.getpid()}"
    rfd, wfd = os.pipe()
    daemon = subprocess.Popen([mockdev, "--mount", mount, "--cards", "2", "--vfs", "3", "--mem", "8G",
                               "--shm-prefix", prefix, "--log-level", "warn", "--foreground", "--ready-fd", str(wfd)],
                              pass_fds=(wfd,), start_new_session=True)
    os.close(wfd)
    ready = os.read(rfd, 64)
    os.close(rfd)
    workers = []
    try:
        if not ready.startswith(b"ready"):
            raise SystemExit(f"spyre-mockdev did not start ({ready!r})")
        env = dict(os.environ, SPYRE_DEV_ROOT=mount)
        for address, to_mib, from_mib, tasks in WORK:
            p = subprocess.Popen([worker_exe, address, str(to_mib), str(from_mib), str(tasks)], env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            workers.append(p)
        done = {}
        for (address, *_), p in zip(WORK, workers):
            line = p.stdout.readline()
            if not line.startswith("ready"):
                raise SystemExit(f"smi_worker on {address} failed: {line!r} (exit {p.poll()})")
            done[address] = dict(kv.split("=", 1) for kv in line.split()[1:])
            check(int(done[address]["pid"]) == p.pid, f"{address}: worker reports pid {done[address]['pid']}")

        # --json: the whole tree, exact figures.
        r = run_smi(["--json", "--sample-ms", "100"], env)
        report = json.loads(r.stdout)
        check(report["schema_version"] == 1, "schema_version is not 1")
        check(len(report["cards"]) == 2, f"{len(report['cards'])} cards, expected 2")
        fns = {f["address"]: f for c in report["cards"] for f in c["functions"]}
        check(len(fns) == 8, f"{len(fns)} functions, expected 8 (2 PFs + 6 VFs)")
        check([f["kind"] for f in report["cards"][1]["functions"]] == ["PF", "VF", "VF", "VF"], "card 1 kinds")
        for (address, to_mib, from_mib, tasks), p in zip(WORK, workers):
            f = fns[address]
            c = f["counters"]
            check(f["holder"] == {"pid": p.pid, "name": "smi_worker"}, f"{address}: holder {f['holder']}, pid {p.pid}")
            check(c["dma_to_device_bytes"] == to_mib * MIB, f"{address}: to device {c['dma_to_device_bytes']}, did {to_mib} MiB")
            check(c["dma_from_device_bytes"] == from_mib * MIB,
                  f"{address}: from device {c['dma_from_device_bytes']}, did {from_mib} MiB")
            check(c["tasks_done"] == tasks, f"{address}: tasks_done {c['tasks_done']}, ran {tasks}")
            check(c["task_errors"] == 0 and c["cb_errors"] == 0 and c["watchdog"] == 0, f"{address}: errors {c}")
            check(c["dma_busy_ns"] > 0 if to_mib + from_mib else True, f"{address}: no DMA busy time")
            check(c["task_busy_ns"] > 0 if tasks else c["task_busy_ns"] == 0, f"{address}: task busy {c['task_busy_ns']}")
            # The allocator grows its pool in 64 MiB regions; the holder read how many it got.
            granted = len(done[address]["region_bases"].split(","))
            check(granted >= 2 and f["memory"]["used_bytes"] == granted * 64 * MIB and f["memory"]["regions"] == granted,
                  f"{address}: memory {f['memory']}, the holder has {granted} regions of 64 MiB")
            check(f["ring"]["state"] in ("polling", "sleeping", "busy"), f"{address}: ring {f['ring']}")
            check(f["utilization"]["compute_percent"] is not None, f"{address}: no utilisation")
            check("detail" not in f, f"{address}: details without -q")
        for address, f in fns.items():
            if address not in dict((w[0], w) for w in WORK):
                check(f["holder"] is None, f"{address}: unheld function shows holder {f['holder']}")
                check(all(v == 0 for k, v in f["counters"].items() if k != "resets"), f"{address}: counters {f['counters']}")

        # The table: one row per function, the holders, the Processes section.
        r = run_smi(["--sample-ms", "100"], env)
        out = r.stdout
        check("\x1b" not in out, "table has terminal control codes")
        for (address, to_mib, from_mib, tasks), p in zip(WORK, workers):
            row = next((l for l in out.splitlines() if l.startswith(address)), "")
            check(f"{p.pid} smi_worker" in row, f"table row of {address} lacks the holder: {row!r}")
            check(row.split()[-3] == str(tasks), f"table row of {address}: TASKS column is not {tasks}: {row!r}")
            granted = len(done[address]["region_bases"].split(","))
            check(f" {granted * 64} / 2048 " in row, f"table row of {address}: memory used is not {granted * 64} MiB: {row!r}")
            proc = next((l for l in out.splitlines() if l.split()[:1] == [str(p.pid)]), "")
            check(address in proc and f"{to_mib}.0 MiB" in proc if to_mib else address in proc,
                  f"Processes line of pid {p.pid}: {proc!r}")
        check(out.count("\nCard ") == 2, "table does not show two cards")

        # -q: every counter and the regions, addresses hidden from us (not the holder).
        address, to_mib, from_mib, tasks = WORK[0]
        r = run_smi(["-q", address, "--sample-ms", "0"], env)
        q = r.stdout
        check(f"pid {workers[0].pid} (smi_worker)" in q, "-q lacks the holder")
        check(re.search(rf"\n    tasks_done +: {tasks}\n", q), "-q lacks tasks_done")
        check(re.search(rf"\n    dma_to_device_bytes +: {to_mib * MIB}\n", q), "-q lacks dma_to_device_bytes")
        check(re.search(rf"\n    dma_from_device_bytes +: {from_mib * MIB}\n", q), "-q lacks dma_from_device_bytes")
        check("base hidden" in q and "0x0000" not in q.split("regions")[1].split("error registers")[0],
              "-q shows region bases to a non-holder")
        check(re.search(r"\n    code +: 0 \(NONE\)\n", q), "-q does not decode the error code")
        check(q.count("\n0000:") == 0 and q.startswith(address), "-q FUNCTION shows other functions")
        r = run_smi(["-q", address, "--json", "--sample-ms", "0"], env)
        detail = json.loads(r.stdout)["cards"][0]["functions"][0]["detail"]
        check(detail["private_visible"] is False, "non-holder marked private_visible")
        granted = len(done[address]["region_bases"].split(","))
        check([g["size_bytes"] for g in detail["regions"]] == [64 * MIB] * granted, f"regions {detail['regions']}")
        check(all(g["base"] is None for g in detail["regions"]), "region bases in -q --json for a non-holder")
        check(detail["error_registers"]["addr"] is None and detail["error_registers"]["user_data"] is None,
              "error address shown to a non-holder")
        # The device redacts, not only the tool: the holder read a non-zero
        # base of its second region, we read 0 at the same register.
        holder_bases = [int(b) for b in done[address]["region_bases"].split(",")]
        check(len(holder_bases) >= 2 and holder_bases[1] != 0, f"holder's own region bases {holder_bases}")
        with open(os.path.join(mount, "bus/pci/devices", address, "regs")) as f:
            ours = [l.split() for l in f if l.startswith("REGION1_BASE")]
        check(ours and int(ours[0][3], 16) == 0, f"a non-holder reads REGION1_BASE {ours}")
        with open(os.path.join(mount, "bus/pci/devices", address, "resource0"), "rb") as f:
            f.seek(0x240 + 16)  # SPYRE_REG_REGION_BASE(1)
            check(f.read(8) == bytes(8), "a non-holder reads the region base through resource0")

        # Hostile writes to the new attribute are refused.
        stats = os.path.join(mount, "bus/pci/devices", address, "stats")
        for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
            try:
                fd = os.open(stats, flags)
                os.close(fd)
                check(False, f"stats opened for writing (flags {flags})")
            except OSError as e:
                check(e.errno in (errno.EACCES, errno.EPERM), f"stats write open: {e}")
        try:
            os.truncate(stats, 0)
            check(False, "stats truncated")
        except OSError as e:
            check(e.errno in (errno.EACCES, errno.EPERM), f"stats truncate: {e}")

        # --loop in a pipe: successive plain tables; SIGINT exits 0.
        lp = subprocess.Popen([sys.executable, smi, "--loop", "0.3", "--sample-ms", "50"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2.5)
        lp.send_signal(signal.SIGINT)
        out, err = lp.communicate(timeout=30)
        check(lp.returncode == 0, f"--loop interrupted exited {lp.returncode}: {err}")
        check(out.count("spyre-smi ") >= 2, f"--loop printed {out.count('spyre-smi ')} tables")
        check("\x1b" not in out, "--loop in a pipe wrote terminal control codes")

        # Errors: unknown function (3), missing root (1), bad usage (2).
        r = run_smi(["-q", "0000:09:00.0", "--sample-ms", "0"], env, expect=3)
        check("no spyre function '0000:09:00.0'" in r.stderr, f"unknown function message: {r.stderr!r}")
        r = run_smi(["--root", os.path.join(d, "nowhere")], env, expect=1)
        check("does not exist" in r.stderr, f"missing root message: {r.stderr!r}")
        run_smi(["--loop", "0"], env, expect=2)
        run_smi(["--mock", "2y3"], env, expect=2)
    finally:
        for p in workers:
            if p.poll() is None:
                p.stdin.close()
                p.wait(timeout=30)
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=30)

# --mock: a private daemon for one run, gone afterwards.
env = dict(os.environ, SPYRE_MOCKDEV=mockdev)
env.pop("SPYRE_DEV_ROOT", None)
r = run_smi(["--mock", "1x2", "--json", "--sample-ms", "0"], env)
report = json.loads(r.stdout)
check([f["kind"] for f in report["cards"][0]["functions"]] == ["PF", "VF", "VF"], "--mock 1x2 functions")
check(not os.path.exists(report["root"]), f"--mock left its mount {report['root']}")

for f in failures:
    print("FAIL:", f)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
