#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# spyre-trace end to end: two processes (spyre-overlap, two streams and
# events on a private mock) record traces through SPYRE_TRACE; the traces are
# merged, summarised and rendered, and each output is checked as a viewer or
# a script would read it.
# With SPYRE_PTO_EXAMPLES_EXE, the seed 004 examples are traced too: tasks on
# the card's cores, dependency arrows, per-core utilisation, DAG critical path.
# Usage: spyre_trace_test.py SPYRE_TRACE_TOOL SPYRE_OVERLAP_EXE [SPYRE_PTO_EXAMPLES_EXE]
import html.parser
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

from trace_checks import check, failures, run

tool, overlap = sys.argv[1], sys.argv[2]
pto_examples = sys.argv[3] if len(sys.argv) > 3 else None


with tempfile.TemporaryDirectory() as d:
    traces = []
    for n in range(2):
        path = os.path.join(d, f"run{n}.json")
        env = dict(os.environ, SPYRE_TRACE=path)
        run([overlap, "4", "64", "64", "64"], env=env)
        with open(path) as f:
            t = json.load(f)  # a complete, valid JSON document
        events = t["traceEvents"]
        check(any(e["ph"] == "X" and e.get("cat") == "device" for e in events), f"run {n}: no device spans")
        check(any(e["ph"] == "X" and e.get("cat") == "dma" for e in events), f"run {n}: no DMA spans")
        streams = {e["args"]["name"] for e in events if e["ph"] == "M" and " stream " in e["args"].get("name", "")}
        check(len(streams) >= 2, f"run {n}: two streams expected, tracks {sorted(streams)}")
        traces.append((path, t))

    merged_path = os.path.join(d, "merged.json")
    run([tool, "merge", merged_path] + [p for p, _ in traces])
    with open(merged_path) as f:
        merged = json.load(f)["traceEvents"]
    pids = {e["pid"] for e in merged if "pid" in e}
    check(len(pids) == 2, f"merged trace has pids {pids}, expected one per process")
    check(len(merged) == sum(len(t["traceEvents"]) for _, t in traces), "merge lost or added events")
    # Each process's tracks stay its own: a (pid, tid) pair names one track.
    names = {}
    for e in merged:
        if e["ph"] == "M" and e["name"] == "thread_name":
            key = (e["pid"], e["tid"])
            check(key not in names, f"track {key} named twice")
            names[key] = e["args"]["name"]
    starts = {e["id"] for e in merged if e["ph"] == "s"}
    ends = {e["id"] for e in merged if e["ph"] == "f"}
    check(starts == ends and starts, "flow arrows lost an end in the merge")

    r = run([tool, "summary", merged_path])
    for section in ("time per operation kind", "per track", "critical path"):
        check(section in r.stdout, f"summary has no '{section}' section")
    check("CopyToDevice" in r.stdout and "Launch" in r.stdout, "summary names no stream operations")

    svg_path, html_path = os.path.join(d, "t.svg"), os.path.join(d, "t.html")
    run([tool, "render", merged_path, "-o", svg_path])
    root = ET.parse(svg_path).getroot()  # the SVG parses as XML
    rects = [el for el in root.iter() if el.tag.endswith("rect")]
    spans = [e for e in merged if e["ph"] == "X"]
    check(len(rects) == len(spans), f"SVG draws {len(rects)} rects for {len(spans)} spans")
    run([tool, "render", merged_path, "-o", html_path])
    with open(html_path) as f:
        page = f.read()
    check(page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>"),
          "HTML page is not a complete document")

    class Parser(html.parser.HTMLParser):
        """Balanced tags, and the text of the trace-data script."""
        def __init__(self):
            super().__init__()
            self.stack, self.errors, self.data, self.in_data = [], [], "", False

        def handle_starttag(self, tag, attrs):
            if tag in ("meta", "input"):
                return
            self.stack.append(tag)
            self.in_data = tag == "script" and ("id", "trace-data") in attrs

        def handle_endtag(self, tag):
            self.in_data = False
            if not self.stack or self.stack[-1] != tag:
                self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
            else:
                self.stack.pop()

        def handle_data(self, text):
            if self.in_data:
                self.data += text

    parser = Parser()
    parser.feed(page)
    parser.close()
    check(not parser.errors and not parser.stack, f"HTML tags unbalanced: {parser.errors[:3]} open {parser.stack}")
    data = json.loads(parser.data)  # the page's data: valid JSON, nothing cut off
    check(len(data["spans"]) == len(spans), f"HTML timeline has {len(data['spans'])} spans, the trace {len(spans)}")
    tracks = {(e["pid"], e["tid"]) for e in spans}
    check(len(data["lanes"]) == len(tracks), f"HTML timeline has {len(data['lanes'])} lanes for {len(tracks)} tracks")
    flows = [e for e in merged if e["ph"] == "f"]
    check(len(data["arrows"]) == len(flows), f"HTML timeline has {len(data['arrows'])} arrows for {len(flows)} flows")
    check(abs(max(s["t"] + s["d"] for s in data["spans"]) - data["duration"]) < 1e-6, "duration is not the last span's end")

    if pto_examples:
        path = os.path.join(d, "pto.json")
        run([pto_examples, "all", "256", "256", "256"], env=dict(os.environ, SPYRE_TRACE=path))
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        tasks = [e for e in events if e["ph"] == "X" and e.get("cat") == "device" and "task" in e.get("args", {})]
        check(len(tasks) >= 14, f"pto examples: {len(tasks)} device task spans, expected 2 + 12")
        cores = {e["args"]["name"] for e in events if e["ph"] == "M" and " core " in e["args"].get("name", "")}
        check(cores, "pto examples: no core tracks")
        arrows_s = {e["id"] for e in events if e["ph"] == "s" and e.get("name") == "depends"}
        arrows_f = {e["id"] for e in events if e["ph"] == "f" and e.get("name") == "depends"}
        check(arrows_s and arrows_s == arrows_f, "pto examples: dependency arrows missing or without both ends")
        r = run([tool, "summary", path])
        check("per core: orchestration tasks" in r.stdout, "summary of the pto trace has no per-core section")
        check("DAG critical path" in r.stdout, "summary of the pto trace has no DAG critical path")
        # Every device task carries its send and reap times: all are counted.
        m = re.search(r"device tasks: waits.*?\n.*?\n  (\S+): (\d+) tasks\n +send to start on a core +median", r.stdout, re.S)
        check(m is not None and int(m.group(2)) == len(tasks),
              f"summary of the pto trace counts {m.group(2) if m else 'no'} device tasks' waits, expected {len(tasks)}")

    # Bad input: a clear message and status 1, not a traceback; a real
    # trace with a non-finite timestamp too, from every command
    # (spyre_trace_dag_test.py has the malformed events one by one).
    bad = os.path.join(d, "bad.json")
    with open(bad, "w") as f:
        f.write("{not json")
    r = subprocess.run([tool, "summary", bad], capture_output=True, text=True)
    check(r.returncode == 1 and "not a readable trace" in r.stderr and "Traceback" not in r.stderr,
          f"bad trace: status {r.returncode}, stderr {r.stderr!r}")
    real = json.loads(json.dumps(traces[0][1]))  # a copy of run 0's trace
    for ts, want in (("NaN", "NaN is not JSON"), ("1e400", "has a ts that is not a finite number")):
        span = next(e for e in real["traceEvents"] if e["ph"] == "X")
        span["ts"] = "@TS@"
        with open(bad, "w") as f:
            f.write(json.dumps(real).replace('"@TS@"', ts))
        for cmd in (["summary", bad], ["render", bad, "-o", os.path.join(d, "bad.html")],
                    ["merge", os.path.join(d, "bad-merged.json"), bad, traces[1][0]]):
            r = subprocess.run([tool] + cmd, capture_output=True, text=True)
            check(r.returncode == 1 and "not a readable trace" in r.stderr and want in r.stderr
                  and "Traceback" not in r.stderr, f"{cmd[0]} of a trace with ts {ts}: status {r.returncode}, "
                  f"stderr {r.stderr!r}")

    # A truncated recording is said to be one (the summary's figures cover
    # only what was kept: it said nothing), and a process's name without a
    # tid, as the format's own examples write it, is read (it was refused).
    cut = json.loads(json.dumps(traces[0][1]))
    cut["traceEvents"].append({"ph": "i", "name": "trace truncated: 77 record(s) dropped past SPYRE_TRACE_MAX_MB "
                               "(1 MiB); the file holds the first ones", "pid": 1, "tid": 1, "ts": 0, "s": "g",
                               "args": {"dropped": 77}})
    cut["traceEvents"].append({"ph": "M", "name": "process_name", "pid": 4242, "args": {"name": "other tool"}})
    with open(bad, "w") as f:
        json.dump(cut, f)
    r = run([tool, "summary", bad])
    check("warning: trace truncated: 77 record(s) dropped" in r.stdout.split("\n")[1],
          f"summary of a truncated trace does not say so: {r.stdout[:300]!r}")

if failures:
    sys.exit(1)
print("spyre-trace: all checks passed")
