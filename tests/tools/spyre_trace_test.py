#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# spyre-trace end to end: two processes (spyre-overlap, two streams and
# events on a private mock) record traces through SPYRE_TRACE; the traces are
# merged, summarised and rendered, and each output is checked as a viewer or
# a script would read it.
# Usage: spyre_trace_test.py SPYRE_TRACE_TOOL SPYRE_OVERLAP_EXE
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

tool, overlap = sys.argv[1], sys.argv[2]
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
    check(page.startswith("<!DOCTYPE html>") and "<svg" in page and page.rstrip().endswith("</html>"),
          "HTML page is not a self-contained document")

    # Bad input: a clear message and status 1, not a traceback.
    bad = os.path.join(d, "bad.json")
    with open(bad, "w") as f:
        f.write("{not json")
    r = subprocess.run([tool, "summary", bad], capture_output=True, text=True)
    check(r.returncode == 1 and "not a readable trace" in r.stderr and "Traceback" not in r.stderr,
          f"bad trace: status {r.returncode}, stderr {r.stderr!r}")

if failures:
    sys.exit(1)
print("spyre-trace: all checks passed")
