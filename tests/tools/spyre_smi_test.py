#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# spyre-smi end to end: a spyre-mockdev with 2 cards x 3 VFs, three other
# processes (smi_worker) each holding a VF and doing known work (stream and
# DMA copies of known sizes, orchestration tasks on the device's cores). The
# table, -q and --json must report exactly that work and the holders' pids;
# a non-holder must not see the holders' addresses; the new attribute
# refuses writes; bad usage gives the documented exit codes.
# stats.json is the contract's (uapi/spyre_stats.h): schema, version and
# counter names as the header declares them, the same counts as the text
# form; a stats.json of another version, or garbage, is a clear error.
# Usage: spyre_smi_test.py SPYRE_SMI SMI_WORKER SPYRE_MOCKDEV SPYRE_STATS_H (the
# environment's SPYRE_MOCKDEV, when set, wins, as for the library: the TSan
# job sets it)
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

smi, worker_exe = sys.argv[1], sys.argv[2]
mockdev = os.environ.get("SPYRE_MOCKDEV") or sys.argv[3]
failures = []
MIB = 1 << 20

# The contract, read from the header as a device vendor's tool would.
with open(sys.argv[4]) as f:
    header = f.read()
CONTRACT_VERSION = int(re.search(r"#define SPYRE_STATS_JSON_VERSION\s+(\d+)", header).group(1))
CONTRACT_SCHEMA = re.search(r'#define SPYRE_STATS_JSON_SCHEMA\s+"([^"]+)"', header).group(1)
CONTRACT_COUNTERS = re.findall(r"^\s*X\((\w+), SPYRE_REG_CNT_\w+\)", header, re.M)


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
        r = run_smi(["-q", address.split(":", 1)[1], "--sample-ms", "0"], env)  # the short form, 01:00.1
        check(r.stdout.startswith(address) and r.stdout.count("\n0000:") == 0, f"-q short form: {r.stdout[:200]!r}")
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

        # stats.json as served: the contract's schema, version and counters,
        # the same counts as the text form (the holder is idle now), and no
        # addresses for us (not the holder) while an unheld function shows them.
        fn_dir = os.path.join(mount, "bus/pci/devices", address)
        with open(os.path.join(fn_dir, "stats.json")) as f:
            doc = json.load(f)
        with open(os.path.join(fn_dir, "stats")) as f:
            text = dict(line.split(" ", 1) for line in f.read().splitlines())
        check(len(CONTRACT_COUNTERS) >= 19 and CONTRACT_SCHEMA == "spyre-stats", f"header parsed: {CONTRACT_COUNTERS}")
        check(doc["schema"] == CONTRACT_SCHEMA and doc["version"] == CONTRACT_VERSION,
              f"stats.json schema {doc.get('schema')} version {doc.get('version')}")
        check(list(doc["counters"]) == CONTRACT_COUNTERS, f"stats.json counters {list(doc['counters'])}")
        check([k for k in text if k in doc["counters"]] == CONTRACT_COUNTERS, "text stats lack a contract counter")
        for name in CONTRACT_COUNTERS:
            check(int(text[name]) == doc["counters"][name], f"{name}: text {text[name]}, JSON {doc['counters'][name]}")
        check(doc["address"] == address and doc["kind"] == "VF" and doc["index"] == 1, f"identity {doc['address']}")
        check(doc["holder"] == {"pid": workers[0].pid, "name": "smi_worker"}, f"stats.json holder {doc['holder']}")
        check(doc["counters"]["tasks_done"] == tasks and doc["counters"]["dma_to_device_bytes"] == to_mib * MIB,
              f"stats.json counters {doc['counters']}")
        check(doc["private_visible"] is False and all(r["base"] is None for r in doc["memory"]["regions"])
              and doc["errors"]["addr"] is None and doc["errors"]["user_data"] is None,
              "stats.json shows the holder's addresses to a non-holder")
        check(len(doc["memory"]["regions"]) == granted, f"stats.json regions {doc['memory']['regions']}")
        check(doc["errors"]["name"] == "NONE" and "READY" in doc["status"]["decoded"], f"decoded {doc['errors']}")
        with open(os.path.join(mount, "bus/pci/devices/0000:02:00.2/stats.json")) as f:
            unheld = json.load(f)
        check(unheld["holder"] is None and unheld["private_visible"] is True and unheld["errors"]["addr"] == 0,
              f"an unheld function's stats.json: {unheld['holder']} {unheld['private_visible']}")
        check(sorted(os.listdir(fn_dir)).count("stats.json") == 1, "stats.json is not listed")

        # Hostile writes to the new attributes are refused.
        for stats in (os.path.join(fn_dir, "stats"), os.path.join(fn_dir, "stats.json")):
            for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
                try:
                    fd = os.open(stats, flags)
                    os.close(fd)
                    check(False, f"{stats} opened for writing (flags {flags})")
                except OSError as e:
                    check(e.errno in (errno.EACCES, errno.EPERM), f"stats write open: {e}")
            try:
                os.truncate(stats, 0)
                check(False, f"{stats} truncated")
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
        # An index is ASCII digits: '²' was a traceback (exit 1), '\u0661' index 1.
        for bad in ("\u00b2", "\u0661"):
            r = run_smi(["-q", bad, "--sample-ms", "0"], env, expect=3)
            check(f"no spyre function '{bad}'" in r.stderr and "Traceback" not in r.stderr, f"-q {bad!r}: {r.stderr!r}")
        # A tail shorter than bus:device.function named one function of each
        # card; a query's control characters were echoed raw to the terminal.
        r = run_smi(["-q", "00.1", "--sample-ms", "0"], env, expect=3)
        check("no spyre function '00.1'" in r.stderr, f"-q 00.1: {r.stderr!r}")
        r = run_smi(["-q", "\x1b[2J\x07x", "--sample-ms", "0"], env, expect=3)
        check("no spyre function '\\x1b[2J\\x07x'" in r.stderr and "\x1b" not in r.stderr, f"-q ESC: {r.stderr!r}")
        # An empty name was taken as -q alone (every function), as --root ''
        # is not (found probing from outside).
        r = run_smi(["-q", "", "--sample-ms", "0"], env, expect=2)
        check("-q/--query is empty" in r.stderr, f"-q '': {r.stderr!r}")
        r = run_smi(["--root", os.path.join(d, "nowhere")], env, expect=1)
        check("does not exist" in r.stderr, f"missing root message: {r.stderr!r}")
        run_smi(["--loop", "0"], env, expect=2)
        # An interval that redrew without a pause, and a bound that is no
        # count of ms (taken as 2000 without a word): usage errors.
        r = run_smi(["--loop", "1e-9"], env, expect=2)
        check("the interval must be at least 0.1 seconds" in r.stderr, f"--loop 1e-9: {r.stderr.strip()}")
        # The driver's rule: ASCII digits, 0 or 300..86400000 (1 ms was taken,
        # and a healthy daemon was then "stopped or hung").
        for bad in ("abc", "-5", "1", "299", " +500", "500 ", "\uff11\uff10\uff10\uff10", "86400001",
                    "99999999999999999999"):
            r = run_smi(["--sample-ms", "0"], dict(env, SPYRE_HEARTBEAT_TIMEOUT_MS=bad), expect=2)
            check(f"SPYRE_HEARTBEAT_TIMEOUT_MS={bad!r} is not 0 (never) or a number of milliseconds from 300 to "
                  f"86400000" in r.stderr, f"SPYRE_HEARTBEAT_TIMEOUT_MS={bad}: {r.stderr.strip()}")
        for good in ("", "0", "300"):
            run_smi(["--json", "--sample-ms", "0"], dict(env, SPYRE_HEARTBEAT_TIMEOUT_MS=good))
        r = run_smi(["--root", ""], env, expect=2)
        check("--root is empty" in r.stderr, f"--root '': {r.stderr.strip()}")
        # Standard output unwritable or closed: one line and exit 1, no traceback.
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, smi, "--sample-ms", "0"], stdout=full, stderr=subprocess.PIPE,
                               text=True, timeout=120, env=env)
        check(r.returncode == 1 and "cannot write to standard output" in r.stderr and "Traceback" not in r.stderr,
              f"stdout /dev/full: exit {r.returncode}, {r.stderr!r}")
        r = subprocess.run([sys.executable, smi, "--sample-ms", "0"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=120, env=env,
                           preexec_fn=lambda: os.close(1))
        check(r.returncode == 1 and "standard output is closed" in r.stderr and "Traceback" not in r.stderr,
              f"stdout closed: exit {r.returncode}, {r.stderr!r}")
        # Numbers past what the tool can wait: usage errors, not tracebacks.
        for bad in (["--loop", "inf"], ["--loop", "1e400"], ["--sample-ms", "99999999999999999999"], ["--sample-ms", "-1"]):
            r = run_smi(bad, env, expect=2)
            check("Traceback" not in r.stderr and "interval must be" in r.stderr, f"{bad}: {r.stderr.strip()}")
        run_smi(["--mock", "2y3"], env, expect=2)

        # A stopped daemon: a call on its tree blocks in the kernel, where
        # no signal handler runs; even SIGTERM did not end the tool (more
        # than 10 minutes). Its watchdog ends it at the bound, exit 1.
        os.killpg(daemon.pid, signal.SIGSTOP)
        try:
            r = subprocess.run([sys.executable, smi, "--json", "--sample-ms", "0"], capture_output=True, text=True,
                               timeout=120, env=dict(env, SPYRE_HEARTBEAT_TIMEOUT_MS="1000"))
            check(r.returncode == 1 and "did not answer within 1000 ms" in r.stderr and "Traceback" not in r.stderr
                  and r.stdout == "", f"stopped daemon: exit {r.returncode}, stderr {r.stderr!r}")
        finally:
            os.killpg(daemon.pid, signal.SIGCONT)
        run_smi(["--json", "--sample-ms", "0"], env)  # answering again
    finally:
        for p in workers:
            if p.poll() is None:
                p.stdin.close()
                p.wait(timeout=30)
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=30)

# A stats.json that is not the contract's: a clear error naming the file and
# what is wrong, exit 1, never a traceback. The same tree with the daemon's
# own document reads fine, so the content is what fails.
with tempfile.TemporaryDirectory() as d:
    fn_dir = os.path.join(d, "bus/pci/devices/0000:01:00.0")
    os.makedirs(fn_dir)
    os.makedirs(os.path.join(d, "bus/pci/devices/0000:00:1f.0"))  # another device: no stats.json, skipped
    stats_path = os.path.join(fn_dir, "stats.json")
    good = dict(doc, address="0000:01:00.0", kind="PF", index=0, holder=None)

    def smi_on(content):
        with open(stats_path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return subprocess.run([sys.executable, smi, "--root", d, "--json", "--sample-ms", "0"],
                              capture_output=True, text=True, timeout=60)

    r = smi_on(good)
    check(r.returncode == 0, f"a good stats.json: exit {r.returncode} {r.stderr}")
    if r.returncode == 0:
        fns = [f for c in json.loads(r.stdout)["cards"] for f in c["functions"]]
        check([f["address"] for f in fns] == ["0000:01:00.0"], f"fake tree functions {fns}")
        check(fns and fns[0]["counters"] == good["counters"], "counters not taken from stats.json as they are")
    no_counter = json.loads(json.dumps(good))
    del no_counter["counters"]["tasks_done"]
    negative = json.loads(json.dumps(good))
    negative["counters"]["cb_done"] = -1
    huge = json.loads(json.dumps(good))
    huge["memory"]["used_bytes"] = 10**400
    region = json.loads(json.dumps(good))
    region["memory"]["regions"] = [{"index": 0, "size_bytes": "big"}]
    cases = [
        ("{not json", "not JSON"),
        ("", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (dict(good, version=CONTRACT_VERSION + 1), f"version {CONTRACT_VERSION + 1}: a newer or older device contract"),
        (dict(good, version="1"), "version '1'"),
        (dict(good, version=True), "version True"),
        ("[" * 100000 + "]" * 100000, "not JSON this tool can read: nested too deep"),
        (dict(good, schema="other"), "schema 'other'"),
        ({k: v for k, v in good.items() if k != "ring"}, "no field 'ring.state'"),
        (dict(good, timestamp_ns="soon"), "field 'timestamp_ns' is \"soon\", not a 64-bit non-negative integer"),
        # 10**400 passed as a non-negative integer and ended the tool in
        # fmt_bytes with OverflowError and a traceback.
        (huge, "field 'memory.used_bytes' is 1000000000000000000000000000000000000000, not a 64-bit"),
        (dict(good, timestamp_ns=1 << 64), "field 'timestamp_ns' is 18446744073709551616"),
        (dict(good, kind="XF"), "kind 'XF'"),
        (no_counter, "no counter 'tasks_done'"),
        (negative, "counter 'cb_done' is -1"),
        (region, "a region is"),
        (dict(good, address="0000:09:00.0"), "describes function '0000:09:00.0'"),
    ]
    for content, message in cases:
        r = smi_on(content)
        check(r.returncode == 1 and f"spyre-smi: error: {stats_path}: {message}" in r.stderr
              and "Traceback" not in r.stderr and r.stdout == "",
              f"bad stats.json ({message}): exit {r.returncode}, stderr {r.stderr!r}")
        if message not in ("describes function '0000:09:00.0'",):
            check(f"(this spyre-smi reads {CONTRACT_SCHEMA} version {CONTRACT_VERSION})" in r.stderr,
                  f"bad stats.json ({message}): the message does not say what the tool reads: {r.stderr!r}")

    # What is not a file of a few KiB: a FIFO hung the tool and /dev/zero
    # filled memory until the OOM killer came (a hostile --root).
    def smi_on_file(make):
        os.remove(stats_path)
        make()
        return subprocess.run([sys.executable, smi, "--root", d, "--json", "--sample-ms", "0"],
                              capture_output=True, text=True, timeout=60)

    for make, message in [(lambda: os.mkfifo(stats_path), "not a regular file"),
                          (lambda: os.symlink("/dev/zero", stats_path), "not a regular file"),
                          (lambda: open(stats_path, "w").write(" " * (2 << 20)), "more than 1048576 bytes")]:
        r = smi_on_file(make)
        check(r.returncode == 1 and f"spyre-smi: error: cannot read {stats_path}: {message}" in r.stderr
              and "Traceback" not in r.stderr, f"stats.json {message}: exit {r.returncode}, stderr {r.stderr!r}")

# A daemon killed with SIGKILL leaves its mount behind (ENOTCONN): said so,
# not "does not exist" (an outside probe).
with tempfile.TemporaryDirectory() as d:
    mount = os.path.join(d, "mnt")
    os.mkdir(mount)
    rfd, wfd = os.pipe()
    daemon = subprocess.Popen([mockdev, "--mount", mount, "--cards", "1", "--vfs", "0", "--mem", "1G",
                               "--shm-prefix", f"smi-killed-{os.getpid()}", "--log-level", "warn", "--foreground",
                               "--ready-fd", str(wfd)], pass_fds=(wfd,), start_new_session=True)
    os.close(wfd)
    ready = os.read(rfd, 64)
    os.close(rfd)
    try:
        check(ready.startswith(b"ready"), f"spyre-mockdev did not start ({ready!r})")
        # Killed under a --loop that has drawn a table: said the same way
        # (it said only "cannot list ...: Transport endpoint is not connected").
        lp = subprocess.Popen([sys.executable, smi, "--root", mount, "--loop", "0.3", "--sample-ms", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = lp.stdout.readline()
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait(timeout=30)
        out, err = lp.communicate(timeout=60)
        check(first.startswith("spyre-smi ") and lp.returncode == 1
              and "Transport endpoint is not connected: its spyre-mockdev is gone" in err,
              f"killed under --loop: first line {first!r}, exit {lp.returncode}, stderr {err!r}")
        r = run_smi(["--root", mount, "--sample-ms", "0"], dict(os.environ), expect=1)
        check("Transport endpoint is not connected: its spyre-mockdev is gone" in r.stderr
              and "does not exist" not in r.stderr, f"killed daemon: {r.stderr!r}")
    finally:
        subprocess.run(["fusermount3", "-u", "-q", mount], check=False)
        for name in os.listdir("/dev/shm"):  # what the killed daemon left
            if name.startswith(f"smi-killed-{os.getpid()}"):
                path = os.path.join("/dev/shm", name)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)

# --mock: a private daemon for one run, gone afterwards.
env = dict(os.environ, SPYRE_MOCKDEV=mockdev)
env.pop("SPYRE_DEV_ROOT", None)
r = run_smi(["--mock", "1x2", "--json", "--sample-ms", "0"], env)
report = json.loads(r.stdout)
check([f["kind"] for f in report["cards"][0]["functions"]] == ["PF", "VF", "VF"], "--mock 1x2 functions")
check(not os.path.exists(report["root"]), f"--mock left its mount {report['root']}")


# --mock's daemon ends with the tool however the tool ends: killed (SIGKILL,
# or SIGHUP when a terminal closes) it left the daemon running and mounted.
def mock_daemons_of(smi_pid):
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--shm-prefix" in argv:
            prefix = argv[argv.index(b"--shm-prefix") + 1].decode()
            if prefix.startswith(f"spyre-smi-{smi_pid}-"):
                found[int(pid)] = argv[argv.index(b"--mount") + 1].decode()
    return found


for sig in (signal.SIGKILL, signal.SIGHUP):
    p = subprocess.Popen([sys.executable, smi, "--mock", "1x1", "--loop", "1"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    daemons = {}
    for _ in range(300):  # up to 15 s for the daemon and its first table
        daemons = mock_daemons_of(p.pid)
        if daemons:
            break
        time.sleep(0.05)
    check(daemons, f"--mock --loop started no daemon (signal {sig.name})")
    p.stdout.readline()  # a table: the tool runs
    p.send_signal(sig)
    p.wait(timeout=30)
    for _ in range(200):  # up to 10 s
        if not any(os.path.exists(f"/proc/{d}") for d in daemons):
            break
        time.sleep(0.05)
    for d, mnt in daemons.items():
        alive = os.path.exists(f"/proc/{d}") and "zombie" not in open(f"/proc/{d}/status").read()
        check(not alive, f"--mock's daemon {d} outlived spyre-smi killed by {sig.name}")
        check(not os.path.ismount(mnt), f"--mock's mount {mnt} outlived spyre-smi killed by {sig.name}")
        if os.path.exists(f"/proc/{d}"):
            os.kill(d, signal.SIGKILL)
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], stderr=subprocess.DEVNULL, timeout=10)
        # The killed tool's empty mount point: the next --mock run removes it
        # (it stayed in the temporary directory for good).
        run_smi(["--mock", "1x0", "--sample-ms", "0"], env)
        check(not os.path.exists(mnt), f"--mock's mount point {mnt} outlived the next --mock run ({sig.name})")
        try:
            os.rmdir(mnt)
        except OSError:
            pass

for f in failures:
    print("FAIL:", f)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
