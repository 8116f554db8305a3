#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# spyre-trace summary on a known orchestration DAG (no device): per-core
# utilisation and the DAG's critical path through the dependency arrows,
# checked against values worked out by hand.
# Usage: spyre_trace_dag_test.py SPYRE_TRACE_TOOL
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading

tool = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


PID = 42


def summarise(events, name):
    """spyre-trace summary of `events`, checked to exit 0; its output."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, name)
        with open(path, "w") as f:
            if isinstance(events, str):  # the file's text as it is
                f.write(events)
            else:
                json.dump({"traceEvents": events}, f)
        r = subprocess.run([tool, "summary", path], capture_output=True, text=True, timeout=60)
    print(r.stdout)
    check(r.returncode == 0, f"summary exited {r.returncode}: {r.stderr}")
    return r.stdout


def task(tid, task_id, ts, dur, cat="device"):
    return {"ph": "X", "name": "kernel 7", "cat": cat, "pid": PID, "tid": tid, "ts": ts, "dur": dur,
            "args": {"task": task_id, "kernel": 7}}


def arrow(fid, src_tid, src_end, dst_tid, dst_start):
    return [{"ph": "s", "name": "depends", "cat": "flow", "id": fid, "pid": PID, "tid": src_tid, "ts": src_end - 0.001},
            {"ph": "f", "bp": "e", "name": "depends", "cat": "flow", "id": fid, "pid": PID, "tid": dst_tid,
             "ts": dst_start}]


# A control block of the device ring (category "device" too, no task id)
# is no orchestration task: it must not count.
# core 0: t0 [0,10], t1 [12,42], t3 [50,55]; core 1: t2 [11,16], t4 [20,58]
# arrows t0->t1, t0->t2, t1->t3, t2->t3 (a diamond); t4 depends on nothing.
# DAG critical path: t0 + t1 + t3 = 45 us. Window 0..58: core 0 busy 45
# (77.6%), core 1 busy 43 (74.1%).
events = [
    {"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "spyre: dag"}},
    {"ph": "M", "name": "thread_name", "pid": PID, "tid": 1, "args": {"name": "0000:00:01.0 core 0"}},
    {"ph": "M", "name": "thread_name", "pid": PID, "tid": 2, "args": {"name": "0000:00:01.0 core 1"}},
    {"ph": "M", "name": "thread_name", "pid": PID, "tid": 3, "args": {"name": "0000:00:01.0 device ring"}},
    {"ph": "X", "name": "Launch", "cat": "device", "pid": PID, "tid": 3, "ts": 0, "dur": 100, "args": {"op": 1}},
    task(1, 0, 0, 10), task(2, 2, 11, 5), task(1, 1, 12, 30), task(2, 4, 20, 38), task(1, 3, 50, 5),
]
events += arrow(1, 1, 10, 1, 12) + arrow(2, 1, 10, 2, 11) + arrow(3, 1, 42, 1, 50) + arrow(4, 2, 16, 1, 50)
events.sort(key=lambda e: e.get("ts", -1))

out = summarise(events, "dag.json")
m = re.search(r"DAG critical path: ([\d.]+) us in (\d+) tasks", out)
check(m is not None, "no DAG critical path line")
if m:
    check(abs(float(m.group(1)) - 45.0) < 1e-6, f"DAG critical path {m.group(1)} us, expected 45")
    check(int(m.group(2)) == 3, f"DAG critical path has {m.group(2)} tasks, expected 3")
section = out[out.find("DAG critical path"):].splitlines()[1:4]
ids = [int(re.match(r"\s*task (\d+)", line).group(1)) for line in section if re.match(r"\s*task \d+", line)]
check(ids == [0, 1, 3], f"critical path tasks {ids}, expected [0, 1, 3]")
util = dict(re.findall(r"(core \d+)\s+\d+ tasks\s+busy\s+[\d.]+ us\s+utilisation\s+([\d.]+)%", out))
check(util.get("core 0") == "77.6", f"core 0 utilisation {util.get('core 0')}, expected 77.6")
check(util.get("core 1") == "74.1", f"core 1 utilisation {util.get('core 1')}, expected 74.1")
check(re.search(r"core 0\s+3 tasks", out) is not None, "core 0 should list 3 tasks")
check(re.search(r"device ring\s+\d+ tasks", out) is None, "the device ring's control blocks counted as tasks")

# Host-level tasks (seed 003) of the same shape: chip_add on device A
# [100,110], chip_sub on device B [100,120] (its upload phase, no task id,
# must not count), reduce_sum on SubWorker 0 [121,125] after both. The
# host-level critical path: chip_sub + reduce_sum = 24 us in 2 tasks; over
# the window 100..125 device A is 40.0% busy, device B 80.0%.
def host_task(tid, task_id, name, ts, dur, level="CHIP"):
    return {"ph": "X", "name": name, "cat": "host-level", "pid": PID, "tid": tid, "ts": ts, "dur": dur,
            "args": {"task": task_id, "level": level}}


host_events = [
    {"ph": "M", "name": "thread_name", "pid": PID, "tid": 11, "args": {"name": "host-level 0000:01:00.1"}},
    {"ph": "M", "name": "thread_name", "pid": PID, "tid": 12, "args": {"name": "host-level 0000:02:00.1"}},
    {"ph": "M", "name": "thread_name", "pid": PID, "tid": 13, "args": {"name": "host-level subworker 0"}},
    host_task(11, 0, "chip_add", 100, 10), host_task(12, 1, "chip_sub", 100, 20),
    {"ph": "X", "name": "upload", "cat": "host-level", "pid": PID, "tid": 12, "ts": 100, "dur": 2,
     "args": {"bytes": 4096}},
    host_task(13, 2, "reduce_sum", 121, 4, "HOST"),
] + arrow(11, 11, 110, 13, 121) + arrow(12, 12, 120, 13, 121)
host_events.sort(key=lambda e: e.get("ts", -1))

out = summarise(events + host_events, "host.json")
m = re.search(r"host-level critical path: ([\d.]+) us in (\d+) tasks", out)
check(m is not None, "no host-level critical path line")
if m:
    check(abs(float(m.group(1)) - 24.0) < 1e-6, f"host-level critical path {m.group(1)} us, expected 24")
    check(int(m.group(2)) == 2, f"host-level critical path has {m.group(2)} tasks, expected 2")
util = dict(re.findall(r"host-level (\S+)\s+\d+ tasks\s+busy\s+[\d.]+ us\s+utilisation\s+([\d.]+)%", out))
check(util.get("0000:01:00.1") == "40.0", f"device A utilisation {util.get('0000:01:00.1')}, expected 40.0")
check(util.get("0000:02:00.1") == "80.0", f"device B utilisation {util.get('0000:02:00.1')}, expected 80.0")
m = re.search(r"DAG critical path: ([\d.]+) us", out)
check(m is not None and abs(float(m.group(1)) - 45.0) < 1e-6, "host-level tasks changed the orchestration DAG")

# The HTML timeline's layout of the same trace: lanes in order (device ring,
# cores by number, host-level tracks), a span nested in another one row down,
# each dependency arrow from the producer's lane to the consumer's.
with tempfile.TemporaryDirectory() as d:
    src, page = os.path.join(d, "all.json"), os.path.join(d, "all.html")
    with open(src, "w") as f:
        json.dump({"traceEvents": events + host_events}, f)
    r = subprocess.run([tool, "render", src, "-o", page], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"render exited {r.returncode}: {r.stderr}")
    with open(page) as f:
        text = f.read()
m = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', text, re.S)
data = json.loads(m.group(1))
names = [lane["name"] for lane in data["lanes"]]
check(names == ["0000:00:01.0 device ring", "0000:00:01.0 core 0", "0000:00:01.0 core 1", "host-level 0000:01:00.1",
                "host-level 0000:02:00.1", "host-level subworker 0"], f"lanes {names}")
upload = next(s for s in data["spans"] if s["n"] == "upload")
chip_sub = next(s for s in data["spans"] if s["n"] == "chip_sub")
check(upload["l"] == chip_sub["l"] == 4 and upload["z"] == 1 and chip_sub["z"] == 0, f"nesting {upload} {chip_sub}")
check(data["lanes"][4]["depth"] == 2 and data["lanes"][1]["depth"] == 1, f"lane depths {data['lanes']}")
check(upload["a"] == {"bytes": 4096} and abs(upload["t"] - 100) < 1e-9, f"upload span {upload}")
arrows = sorted((a["l0"], a["t0"], a["l1"], a["t1"]) for a in data["arrows"])
want = sorted([(1, 9.999, 1, 12), (1, 9.999, 2, 11), (1, 41.999, 1, 50), (2, 15.999, 1, 50),
               (3, 109.999, 5, 121), (4, 119.999, 5, 121)])
check(len(arrows) == len(want) and all(a[0] == b[0] and a[2] == b[2] and abs(a[1] - b[1]) < 1e-6 and a[3] == b[3]
                                       for a, b in zip(arrows, want)), f"arrows {arrows}")
check(data["colours"] == {"device": "#e15759", "host-level": "#76b7b2"}, f"colours {data['colours']}")

# Malformed events: a clean "not a readable trace" and exit status 1 from
# every command (summary and render printed a Python traceback).
bad_events = [
    ([5, None, "x"], "event 0 is a int, not an object"),
    ([{"ph": "X", "name": "a", "ts": "x", "dur": 1, "pid": 1, "tid": 1}], "event 0 (X) has a ts that is not a finite number"),
    ([{"ph": "X", "name": "a", "ts": 1, "dur": -5, "pid": 1, "tid": 1}],
     "event 0 has a dur that is not a finite number in [0, 2**63)"),
    # Not JSON, though Python's json reads them: NaN and Infinity (summary
    # printed "nan us", render drew nothing and exited 0).
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": NaN, "dur": 1, "pid": 1, "tid": 1}]}',
     "NaN is not JSON (a number must be finite)"),
    ('[{"ph": "X", "name": "a", "ts": 1, "dur": Infinity, "pid": 1, "tid": 1}]',
     "Infinity is not JSON (a number must be finite)"),
    ('[{"ph": "X", "name": "a", "ts": -Infinity, "dur": 1, "pid": 1, "tid": 1}]',
     "-Infinity is not JSON (a number must be finite)"),
    # JSON, but beyond a double: an infinity once read.
    ('[{"ph": "X", "name": "a", "ts": 1e400, "dur": 1, "pid": 1, "tid": 1}]',
     "event 0 (X) has a ts that is not a finite number"),
    ('[{"ph": "X", "name": "a", "ts": 1, "dur": 1e400, "pid": 1, "tid": 1}]',
     "event 0 has a dur that is not a finite number in [0, 2**63)"),
    ('[{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1e400, "tid": 1}]', "event 0 (X) has no usable pid"),
    ([{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1}], "event 0 (X) has no usable tid"),
    # A span without its length was read as 0; times of 1e308 overflowed
    # the summary's sums (it printed inf and nan) (an outside probe).
    ([{"ph": "X", "name": "a", "ts": 1, "pid": 1, "tid": 1}], "event 0 (X) has no dur"),
    ([{"ph": "X", "name": "a", "ts": 1e308, "dur": 1e308, "pid": 1, "tid": 1}],
     "event 0 (X) has a ts that is not a finite number below 2**63"),
    ([{"ph": "X", "name": "a", "ts": 1, "dur": 1e308, "pid": 1, "tid": 1}],
     "event 0 has a dur that is not a finite number in [0, 2**63)"),
    ([{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": 3}}],
     "event 0 (thread_name) has no args.name string"),
    ([{"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1}], "event 0 (X) has no name"),
    # Integers no float holds (OverflowError), pids of both kinds (sorting:
    # TypeError), a task id that is null (formatting: TypeError): tracebacks before.
    ('[{"ph": "X", "name": "a", "ts": 1' + "0" * 400 + ', "dur": 1, "pid": 1, "tid": 1}]',
     "event 0 (X) has a ts that is not a finite number"),
    ('[{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1' + "0" * 400 + ', "tid": 1}]',
     "event 0 (X) has no usable pid"),
    ([{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1},
      {"ph": "X", "name": "b", "ts": 2, "dur": 1, "pid": "x", "tid": 1}],
     "event 1 has a pid that is a string, event 0 one that is not"),
    ([{"ph": "X", "name": "a", "cat": "host-level", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": {"task": None}}],
     "event 0 has an args.task that is not a number or a string"),
]
with tempfile.TemporaryDirectory() as d:
    for i, (events, want) in enumerate(bad_events):
        path = os.path.join(d, f"bad{i}.json")
        with open(path, "w") as f:
            if isinstance(events, str):  # the file's text as it is
                f.write(events)
            else:
                json.dump({"traceEvents": events}, f)
        for cmd in (["summary", path], ["render", path, "-o", os.path.join(d, "out.html")]):
            r = subprocess.run([tool] + cmd, capture_output=True, text=True, timeout=60)
            check(r.returncode == 1 and "not a readable trace: " + want in r.stderr and "Traceback" not in r.stderr,
                  f"{cmd[0]} of {events}: exit {r.returncode}, {r.stderr.strip()}")

    # JSON nested deeper than Python's stack: the same clean refusal.
    deep = os.path.join(d, "deep.json")
    with open(deep, "w") as f:
        f.write("[" * 100000 + "]" * 100000)
    r = subprocess.run([tool, "summary", deep], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "not a readable trace: " in r.stderr and "Traceback" not in r.stderr,
          f"summary of deep nesting: exit {r.returncode}, {r.stderr.strip()[-200:]}")

# merge replaces its output only once the merge succeeded: an output among
# the inputs is refused and kept, a bad input leaves no output behind.
with tempfile.TemporaryDirectory() as d:
    a, b, out = (os.path.join(d, n) for n in ("a.json", "b.json", "out.json"))
    for path, pid in ((a, 1), (b, 2)):
        with open(path, "w") as f:
            json.dump({"traceEvents": [{"ph": "X", "name": "k", "pid": pid, "tid": 1, "ts": 0, "dur": 5}]}, f)
    before = open(a).read()
    r = subprocess.run([tool, "merge", a, a, b], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "is also an input" in r.stderr and open(a).read() == before,
          f"merge into an input: exit {r.returncode}, {r.stderr.strip()}, kept {open(a).read() == before}")
    # Through a symlink to its target (the link stays), into a pipe (not
    # replaced by a file); a directory or a device that fails is named, and
    # a device is written, not replaced (merge replaced links, pipes and,
    # as root, /dev/full: probe of 5 Dec).
    target, link, fifo = (os.path.join(d, n) for n in ("target.json", "link.json", "fifo"))
    with open(target, "w") as f:
        f.write("old")
    os.symlink(target, link)
    r = subprocess.run([tool, "merge", link, a, b], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and os.path.islink(link) and '"traceEvents"' in open(target).read(),
          f"merge through a symlink: {r.stderr.strip()}, link kept {os.path.islink(link)}")
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    r = subprocess.run([tool, "merge", fifo, a, b], capture_output=True, text=True, timeout=60)
    reader.join(60)
    check(r.returncode == 0 and got and '"traceEvents"' in got[0] and stat.S_ISFIFO(os.stat(fifo).st_mode),
          f"merge into a pipe: {r.stderr.strip()}, read {len(got[0]) if got else 0} bytes")
    r = subprocess.run([tool, "merge", d, a, b], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and f"{d} is a directory" in r.stderr, f"merge into a directory: {r.stderr.strip()}")
    if os.path.exists("/dev/full"):
        r = subprocess.run([tool, "merge", "/dev/full", a, b], capture_output=True, text=True, timeout=60)
        check(r.returncode == 1 and "/dev/full cannot be written: No space left on device" in r.stderr
              and stat.S_ISCHR(os.stat("/dev/full").st_mode), f"merge into /dev/full: {r.stderr.strip()}")
    os.remove(link)
    os.remove(target)
    os.remove(fifo)
    # An output whose directory is missing is named, not the temporary file.
    r = subprocess.run([tool, "merge", os.path.join(d, "nowhere", "x.json"), a, b], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 1 and "nowhere/x.json cannot be written: No such file or directory" in r.stderr
          and ".spyre-trace-" not in r.stderr, f"merge into a missing directory: {r.stderr.strip()}")
    with open(b, "w") as f:
        f.write("{not json")
    r = subprocess.run([tool, "merge", out, a, b], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and not os.path.exists(out) and len(os.listdir(d)) == 2,
          f"failed merge: exit {r.returncode}, left {sorted(os.listdir(d))}")
    r = subprocess.run([tool, "merge", out, a, a], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and len(json.load(open(out))) == 2, f"merge: exit {r.returncode}, {r.stderr.strip()}")

# Files of both pid kinds (one numbers its processes, another names them):
# the merged file mixed them, and the summary refused it; two files naming
# one pid alike crashed the merge (a str plus 1_000_000).
with tempfile.TemporaryDirectory() as d:
    a, b, c, out = (os.path.join(d, n) for n in ("a.json", "b.json", "c.json", "out.json"))
    for path, pid, tid in ((a, 7, 1), (b, "7", "main"), (c, "7", "main")):
        with open(path, "w") as f:
            json.dump({"traceEvents": [{"ph": "X", "name": "k", "pid": pid, "tid": tid, "ts": 0, "dur": 5}]}, f)
    r = subprocess.run([tool, "merge", out, a, b, c], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "Traceback" not in r.stderr, f"merge of both pid kinds: exit {r.returncode}, {r.stderr.strip()}")
    if r.returncode == 0:
        merged = json.load(open(out))["traceEvents"]
        pids = [e["pid"] for e in merged]
        check(len(set(pids)) == 3 and all(isinstance(p, str) for p in pids),
              f"merge of both pid kinds: pids {pids}, expected three distinct strings")
        check(all(isinstance(e["tid"], str) for e in merged), f"merge of both tid kinds: {merged}")
        r = subprocess.run([tool, "summary", out], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"summary of a merge of both pid kinds: exit {r.returncode}, {r.stderr.strip()}")

# Two files of one pid near 2**63: the merge moved one past what the tool
# reads (an outside probe). And threads of one process that share a name
# are told apart in the summary by their tids.
with tempfile.TemporaryDirectory() as d:
    a, out = os.path.join(d, "a.json"), os.path.join(d, "out.json")
    with open(a, "w") as f:
        json.dump({"traceEvents": [{"ph": "X", "name": "k", "pid": 2**63 - 808, "tid": 1, "ts": 0, "dur": 5}]}, f)
    r = subprocess.run([tool, "merge", out, a, a], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"merge of pids near 2**63: exit {r.returncode}, {r.stderr.strip()}")
    r = subprocess.run([tool, "summary", out], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "2 spans" in r.stdout, f"summary of that merge: exit {r.returncode}, {r.stderr.strip()}")
same_name = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": t, "args": {"name": "python3"}} for t in (5, 6)]
out = summarise(same_name + [task(5, 1, 0, 10), task(6, 2, 0, 10)], "same_name.json")
check("python3 (tid 5)" in out and "python3 (tid 6)" in out, f"threads of one name: {out!r}")

# Arrows both ways between two tasks of one start time (a malformed trace):
# the critical path's walk never ended, its list growing without bound.
# Both the dependency arrows and the stream flows; the summary must end.
cycle = [task(0, 1, 0, 10), task(1, 2, 0, 10)] + arrow(91, 0, 5, 1, 0) + arrow(92, 1, 5, 0, 0)
cycle += [dict(e, name="flow") for e in arrow(93, 0, 5, 1, 0) + arrow(94, 1, 5, 0, 0)]
try:
    out = summarise(cycle, "cycle.json")
    check("critical path" in out.lower(), f"cycle: no critical path in {out!r}")
except subprocess.TimeoutExpired:
    check(False, "summary of a trace whose arrows form a cycle did not end within 60 s")

# Spans nested in another of their track (a host-level task's upload and
# download) are part of it: the critical path counted them again after it,
# 180 us of work in a trace 100 us long (an outside probe). Track 5: a task
# [0,100] with an upload [0,30] and a download [90,100] in it, then a task
# [120,140]: 120 us in 2 spans.
nested = [
    {"ph": "X", "name": "chip_add", "cat": "host-level", "pid": PID, "tid": 5, "ts": 0, "dur": 100},
    {"ph": "X", "name": "upload", "cat": "host-level", "pid": PID, "tid": 5, "ts": 0, "dur": 30},
    {"ph": "X", "name": "download", "cat": "host-level", "pid": PID, "tid": 5, "ts": 90, "dur": 10},
    {"ph": "X", "name": "chip_sub", "cat": "host-level", "pid": PID, "tid": 5, "ts": 120, "dur": 20},
]
out = summarise(nested, "nested.json")
m = re.search(r"^critical path: ([\d.]+) us of work in (\d+) spans", out, re.M)
check(m is not None, f"nested: no critical path line in {out!r}")
if m:
    check(abs(float(m.group(1)) - 120.0) < 1e-6 and int(m.group(2)) == 2,
          f"nested: critical path {m.group(1)} us in {m.group(2)} spans, expected 120 us in 2")

# Device tasks with the host's send and reap times: per device, the wait
# from the send to the start on a core and from the end to the reap.
# Device A (cores 0 and 1): waits 1, 2, 3, 10 and reap delays 0.5, 4, 4,
# 20: median (nearest rank) 2 and 4, p90 10 and 20, max 10 and 20. A send
# stamped after the start (clocks a hair apart) counts as 0 on device B;
# a task without the times, or with a string for one, is not counted.
def timed(tid, task_id, ts, dur, sent, reaped):
    e = task(tid, task_id, ts, dur)
    e["args"].update(sent_us=sent, reaped_us=reaped)
    return e


timed_events = [
    {"ph": "M", "name": "thread_name", "pid": PID, "tid": 11, "args": {"name": "0000:00:01.0 core 0"}},
    {"ph": "M", "name": "thread_name", "pid": PID, "tid": 12, "args": {"name": "0000:00:01.0 core 1"}},
    {"ph": "M", "name": "thread_name", "pid": PID, "tid": 13, "args": {"name": "0000:00:02.0 core 0"}},
    timed(11, 1, 10, 5, 9, 15.5), timed(11, 2, 20, 5, 18, 29), timed(12, 3, 30, 5, 27, 39),
    timed(12, 4, 40, 5, 30, 65), timed(13, 5, 50, 5, 50.25, 56),
    task(13, 6, 60, 5), timed(13, 7, 70, 5, "soon", 80),
]
out = summarise(timed_events, "timed.json")
section = out[out.find("device tasks: waits"):]
check(section.startswith("device tasks: waits"), f"timed: no device-task waits section in {out!r}")
for device, n, rows in (("0000:00:01.0", 4, ((2, 10, 10), (4, 20, 20))), ("0000:00:02.0", 1, ((0, 0, 0), (1, 1, 1)))):
    m = re.search(re.escape(device) + r": (\d+) tasks\n +send to start on a core +median +([\d.]+) us +p90 +([\d.]+) us"
                  r" +max +([\d.]+) us\n +end to the host's reap +median +([\d.]+) us +p90 +([\d.]+) us +max +([\d.]+) us",
                  section)
    check(m is not None, f"timed: no rows for {device} in {section!r}")
    if m:
        check(int(m.group(1)) == n, f"timed: {device} counts {m.group(1)} tasks, expected {n}")
        got = [float(x) for x in m.groups()[1:]]
        want = [float(x) for row in rows for x in row]
        check(all(abs(g - w) < 1e-6 for g, w in zip(got, want)), f"timed: {device} waits {got}, expected {want}")
# Two processes whose cards share an address (two ranks, merged): one row
# each, named with its process.
two = [
    {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "rank 0"}},
    {"ph": "M", "name": "process_name", "pid": 8, "tid": 0, "args": {"name": "rank 1"}},
    {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "0000:01:00.0 core 0"}},
    {"ph": "M", "name": "thread_name", "pid": 8, "tid": 1, "args": {"name": "0000:01:00.0 core 0"}},
]
for pid, sent in ((7, 8), (8, 5), (8, 6)):
    e = timed(1, sent, 10, 5, sent, 16)
    e["pid"] = pid
    two.append(e)
section = summarise(two, "two.json")
for name, n, wait in (("0000:01:00.0 (rank 0)", 1, 2.0), ("0000:01:00.0 (rank 1)", 2, 4.0)):
    m = re.search(re.escape(name) + r": (\d+) tasks\n +send to start on a core +median +([\d.]+) us", section)
    check(m is not None and int(m.group(1)) == n and abs(float(m.group(2)) - wait) < 1e-6,
          f"two processes: {name} row {m.groups() if m else None}, expected {n} tasks, median {wait}")
# Without the times (a trace from before they were recorded) there is no such section.
untimed = [task(1, 0, 0, 10), task(2, 1, 11, 5)]
check("device tasks: waits" not in summarise(untimed, "untimed.json"), "untimed: a device-task waits section")

# Back to back on one core (each task starts where its producer ended):
# the arrow's end at the consumer's start was bound to the producer, and
# the chain lost its edges (100 us in 1 task; found probing from outside).
chain = [{"ph": "M", "name": "thread_name", "pid": PID, "tid": 1, "args": {"name": "0000:00:01.0 core 0"}}]
chain += [task(1, i, 100 * i, 100) for i in range(3)] + arrow(1, 1, 100, 1, 100) + arrow(2, 1, 200, 1, 200)
m = re.search(r"DAG critical path: ([\d.]+) us in (\d+) tasks", summarise(chain, "chain.json"))
check(m is not None and abs(float(m.group(1)) - 300.0) < 1e-6 and m.group(2) == "3",
      f"back-to-back chain: {m.groups() if m else None}, expected 300 us in 3 tasks")

# A merged trace: each track is named with its process (two processes'
# "0000:01:00.0 DMA" read as one track listed twice).
merged = [
    {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "rank 0"}},
    {"ph": "M", "name": "process_name", "pid": 8, "tid": 0, "args": {"name": "rank 1"}},
    {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "0000:01:00.0 DMA"}},
    {"ph": "M", "name": "thread_name", "pid": 8, "tid": 1, "args": {"name": "0000:01:00.0 DMA"}},
    {"ph": "X", "name": "copy", "cat": "dma", "pid": 7, "tid": 1, "ts": 0, "dur": 5},
    {"ph": "X", "name": "copy", "cat": "dma", "pid": 8, "tid": 1, "ts": 10, "dur": 5},
]
out = summarise(merged, "merged.json")
for rank in (0, 1):
    check(re.search(rf"\n  0000:01:00.0 DMA \(rank {rank}\) +1 spans", out) is not None,
          f"merged: no per-track row naming rank {rank}'s process in {out!r}")
check(re.search(r"critical path: .*\n.*copy  \(0000:01:00.0 DMA \(rank [01]\)\)", out) is not None,
      f"merged: the critical path does not name the process in {out!r}")
# Two runs of one program (one process name): told apart by pid.
for e in merged:
    if e["name"] == "process_name":
        e["args"]["name"] = "spyre: app"
out = summarise(merged, "same_name.json")
for pid in (7, 8):
    check(re.search(rf"\n  0000:01:00.0 DMA \(spyre: app, pid {pid}\) +1 spans", out) is not None,
          f"same process name: no row naming pid {pid} in {out!r}")

# Render: a span that starts where the one before it ended is beside it,
# not inside it, at the microsecond timestamps of a host up for hours
# (A's end and B's start differ by the doubles' rounding: B was drawn one
# row down, found probing from outside).
back_to_back = [
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "0000:01:00.0 stream 1"}},
    {"ph": "X", "cat": "stream", "name": "A", "ts": 39136638000.0, "dur": 33874.364, "pid": 1, "tid": 7},
    {"ph": "X", "cat": "stream", "name": "B", "ts": 39136671874.364, "dur": 100.0, "pid": 1, "tid": 7},
    # An empty op, then the next starting where it is (a stream's ops).
    {"ph": "X", "cat": "stream", "name": "C", "ts": 39136671974.364, "dur": 0.0, "pid": 1, "tid": 7},
    {"ph": "X", "cat": "stream", "name": "D", "ts": 39136671974.364, "dur": 10.0, "pid": 1, "tid": 7},
]
with tempfile.TemporaryDirectory() as d:
    src, page = os.path.join(d, "b2b.json"), os.path.join(d, "b2b.html")
    with open(src, "w") as f:
        json.dump({"traceEvents": back_to_back}, f)
    r = subprocess.run([tool, "render", src, "-o", page], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"render exited {r.returncode}: {r.stderr}")
    with open(page) as f:
        data = json.loads(re.search(r'id="trace-data">(.*?)</script>', f.read(), re.S).group(1))
    check(data["lanes"][0]["depth"] == 1 and [s["z"] for s in data["spans"]] == [0, 0, 0, 0],
          f"back to back: lane depth {data['lanes'][0]['depth']}, span depths {[s['z'] for s in data['spans']]}")

    # Standard output closed: a message and exit 1 (it was a Python traceback).
    r = subprocess.run([tool, "summary", src], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=60, preexec_fn=lambda: os.close(1))
    check(r.returncode == 1 and r.stderr == "spyre-trace: standard output is closed: nowhere to write the summary\n",
          f"stdout closed: exit {r.returncode}, stderr {r.stderr!r}")

if failures:
    sys.exit(1)
print("spyre-trace DAG summary: all checks passed")
