#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# spyre-trace render's HTML timeline in a real browser: the traces of a real
# run (spyre-overlap's streams, DMA and device ring; the seed 004 examples'
# tasks on the card's cores with their dependency arrows) are merged and
# rendered, and headless Chromium loads the page:
# - with no console message at all (an uncaught error is one) and the page's
#   own status "ok", every span drawn at full scale and none narrower than
#   the minimum width;
# - driven through real wheel, drag, key, hover and click events (#selftest):
#   the view zooms and pans, a hovered and a clicked span show its arguments;
# - a screenshot in which every lane holding spans has pixels of a span colour.
# Skips (exit 77) with a clear message where no Chromium is installed.
# Usage: spyre_trace_browser_test.py SPYRE_TRACE_TOOL SPYRE_OVERLAP_EXE SPYRE_PTO_EXAMPLES_EXE
import html
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import zlib

from trace_checks import check, failures, run

tool, overlap, pto_examples = sys.argv[1:4]


browser = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
if browser is None:
    print("skipped: no Chromium installed (Debian: apt-get install chromium; scripts/install-deps.sh adds it)")
    sys.exit(77)


def chromium(profile, url, *flags):
    """Headless Chromium on `url`, as root too (no sandbox), its own profile,
    bounded in time. (stdout, stderr)."""
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           "--disable-background-networking", "--disable-component-update", "--disable-dev-shm-usage",
           f"--user-data-dir={profile}",
           "--force-device-scale-factor=1", "--hide-scrollbars", "--enable-logging=stderr", "--v=0", *flags, url]
    # Its own process group: on a timeout the browser's helpers go too.
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise SystemExit(f"chromium did not finish {url} within 90 s")
    if p.returncode != 0:
        print(err[-3000:], file=sys.stderr)
        raise SystemExit(f"chromium exited {p.returncode}")
    return out, err


def page_status(dom):
    m = re.search(r'<div id="status" data-status="([a-z]+)"[^>]*>(.*?)</div>', dom, re.S)
    if not m:
        raise SystemExit("the dumped DOM has no #status element")
    return m.group(1), html.unescape(m.group(2))


def console_lines(stderr):
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def decode_png(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        blob = f.read()
    if blob[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path} is not a PNG")
    pos, idat, hdr = 8, b"", None
    while pos < len(blob):
        n, kind = struct.unpack(">I4s", blob[pos:pos + 8])
        body = blob[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, colour_type, _, _, interlace = hdr
    if depth != 8 or colour_type not in (2, 6) or interlace:
        raise SystemExit(f"PNG format {hdr} not handled")
    bpp = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return w, h, rows


with tempfile.TemporaryDirectory() as d:
    # A real run: two programs on private mocks, traced.
    parts = []
    for name, cmd in (("overlap", [overlap, "4", "64", "64", "64"]), ("pto", [pto_examples, "all", "256", "256", "256"])):
        path = os.path.join(d, f"{name}.json")
        run(cmd, env=dict(os.environ, SPYRE_TRACE=path))
        parts.append(path)
    merged = os.path.join(d, "merged.json")
    run([tool, "merge", merged] + parts)
    with open(merged) as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    page = os.path.join(d, "timeline.html")
    run([tool, "render", merged, "-o", page])
    with open(page) as f:
        text = f.read()
    check(not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I) and "@import" not in text,
          "the page loads something from the network")
    url = "file://" + page

    # Load, drive through real events, report.
    dom, err = chromium(os.path.join(d, "profile"), url + "#selftest", "--window-size=1600,1000", "--dump-dom")
    check(not console_lines(err), f"console messages: {console_lines(err)[:5]}")
    state, report = page_status(dom)
    check(state == "ok", f"page status {state}: {report[:300]}")
    report = json.loads(report) if state == "ok" else {}
    if report:
        check(report["spans"] == len(spans), f"page has {report['spans']} spans, the trace {len(spans)}")
        check(report["drawn"] == len(spans), f"{report['drawn']} of {len(spans)} spans drawn at full scale")
        check(report["narrowest_px"] >= report["min_w"] >= 2, f"narrowest span {report['narrowest_px']} px")
        check(report["arrows"] > 0 and report["arrows_drawn"] == report["arrows"],
              f"arrows: {report['arrows_drawn']} of {report['arrows']} drawn")
        names = [lane["name"] for lane in report["lanes"]]
        check(any(" core " in n for n in names) and any(" stream " in n for n in names)
              and any("device ring" in n for n in names) and any(" DMA" in n for n in names),
              f"lanes {names}: per-core, per-stream, device ring and DMA lanes expected")
        check(sum(lane["spans"] for lane in report["lanes"]) == len(spans), "lanes do not hold every span")
        selftest = report.get("selftest", {})
        for step in ("wheel_zoom", "drag_pan", "key_zoom", "fit", "hover", "click", "steady"):
            check(selftest.get(step) is True, f"self-test step {step}: {selftest}")

    # A screenshot of the whole timeline: every lane with spans shows span colours.
    if report:
        c = report["canvas"]
        height = int(c["top"] + c["height"]) + 4
        shot = os.path.join(d, "timeline.png")
        _, err = chromium(os.path.join(d, "profile"), url, f"--window-size=1600,{height}", f"--screenshot={shot}")
        check(not console_lines(err), f"console messages: {console_lines(err)[:5]}")
        w, h, rows = decode_png(shot)
        palette = {tuple(int(v[i:i + 2], 16) for i in (1, 3, 5)) for v in report["colours"].values()}
        x0, x1 = int(c["left"] + report["label_w"]) + 1, min(w, int(c["left"] + c["width"]))
        empty = []
        for lane in report["lanes"]:
            y0 = int(c["top"] + lane["y"])
            band = rows[y0:min(h, y0 + lane["h"])]
            if lane["spans"] and not any(px in palette for row in band for px in row[x0:x1]):
                empty.append(lane["name"])
        check(h >= int(c["top"] + c["height"]), f"screenshot {w}x{h} is shorter than the timeline")
        check(not empty, f"lanes with spans but no span pixels in the screenshot: {empty}")

    # A long trace whose spans with arguments are far narrower than a pixel
    # at full scale and back to back, as a slow run's are (under
    # ThreadSanitizer, CI's run lasted 1.1 s): the self-test zooms onto the
    # span it hovers. At full scale it hovered a neighbour sharing the
    # span's MIN_W pixels, and failed.
    long_trace = os.path.join(d, "long.json")
    events = [{"ph": "X", "name": "idle", "cat": "api", "pid": 1, "tid": 1, "ts": 0, "dur": 2_000_000}]
    for i in range(200):
        events.append({"ph": "X", "name": f"kernel {i}", "cat": "task", "pid": 1, "tid": 2,
                       "ts": 1_000_000 + 2 * i, "dur": 1.5 if i == 100 else 1.0, "args": {"task": i}})
    with open(long_trace, "w") as f:
        json.dump({"traceEvents": events}, f)
    long_page = os.path.join(d, "long.html")
    run([tool, "render", long_trace, "-o", long_page])
    dom, err = chromium(os.path.join(d, "profile"), "file://" + long_page + "#selftest", "--window-size=1600,1000",
                        "--dump-dom")
    check(not console_lines(err), f"long trace: console messages: {console_lines(err)[:5]}")
    state, report = page_status(dom)
    check(state == "ok", f"long trace: page status {state}: {report[:300]}")
    selftest = json.loads(report).get("selftest", {}) if state == "ok" else {}
    for step in ("hover", "click", "steady"):
        check(selftest.get(step) is True, f"long trace: self-test step {step}: {selftest}")

if failures:
    sys.exit(1)
print("spyre-trace render in Chromium: all checks passed")
