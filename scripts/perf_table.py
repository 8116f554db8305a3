#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the current-figures table of docs/performance.md from benchmark JSON.

Each input is the JSON that a bench/ binary writes with
`--benchmark_out=FILE --benchmark_out_format=json` (Google Benchmark). Every
row gives a benchmark's figures and, for each `x_NAME` ratio it reports, the
ratio and the figure of the `baseline/NAME...` benchmark of the same run.
Above the table, one line per input names its conditions: date, machine,
CPUs, load average. The table replaces what lies between the markers

    <!-- begin perf_table -->
    <!-- end perf_table -->

in the document (--doc), or goes to stdout (--stdout).

Usage: perf_table.py [--doc docs/performance.md | --stdout] [--filter REGEX] RUN.json...
"""
import argparse
import json
import os
import re
import sys

BEGIN = "<!-- begin perf_table -->"
END = "<!-- end perf_table -->"

# Keys of a Google Benchmark run that are not user counters.
STANDARD_KEYS = {
    "name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
    "repetition_index", "threads", "iterations", "real_time", "cpu_time", "time_unit",
    "bytes_per_second", "items_per_second", "label", "aggregate_name", "aggregate_unit",
    "error_occurred", "error_message",
}
# Run options Google Benchmark appends to a name; they say nothing about the figure.
OPTION_PART = re.compile(r"^(min_time|min_warmup_time|iterations|repeats|threads):|^(real_time|manual_time|process_time)$")


class PerfTableError(Exception):
    """A bad input: the message says which file and what is wrong."""


def short_name(name):
    return "/".join(p for p in name.split("/") if not OPTION_PART.match(p))


def number(value):
    """Three significant figures, with thousands separators above 1,000."""
    if value == 0:
        return "0"
    for scale, suffix in ((1e9, "G"), (1e6, "M")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def duration(value, unit):
    """A time in the unit that keeps it between 1 and 1000 (seconds at most)."""
    seconds = value * UNITS.get(unit, 1e-9)
    for name in ("ns", "us", "ms"):
        if abs(seconds) < 1000 * UNITS[name]:
            return number(seconds / UNITS[name]) + " " + name
    return number(seconds) + " s"


def ratio_text(ratio):
    return f"{ratio:.2f}x" if abs(ratio) >= 0.1 else f"{ratio:.3g}x"


def throughput(run):
    if "bytes_per_second" in run:
        return number(run["bytes_per_second"] / 2**30) + " GiB/s"
    if "items_per_second" in run:
        return number(run["items_per_second"] / 1e6) + " M/s"
    return ""


def display_name(run):
    """The name without run options; an aggregate by its run's name."""
    if run.get("run_type") == "aggregate":
        return short_name(run.get("run_name", run["name"]))
    return short_name(run["name"])


def figure(run):
    """What the benchmark measured: its time per iteration and its rate."""
    if run.get("error_occurred"):
        return "error: " + run.get("error_message", "")
    text = duration(run["real_time"], run.get("time_unit", "ns"))
    if run.get("run_type") == "aggregate":
        text += f" ({run['aggregate_name']} of {run.get('repetitions', '?')})"
    rate = throughput(run)
    return text + (", " + rate if rate else "")


def counters(run):
    return {k: v for k, v in run.items() if k not in STANDARD_KEYS and isinstance(v, (int, float))}


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise PerfTableError(f"{path}: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list) or not isinstance(doc.get("context"), dict):
        raise PerfTableError(f"{path}: not Google Benchmark JSON (needs 'context' and 'benchmarks')")
    runs = []
    with_aggregates = {b.get("run_name") for b in doc["benchmarks"] if b.get("run_type") == "aggregate"}
    for b in doc["benchmarks"]:
        if not isinstance(b, dict) or not isinstance(b.get("name"), str) or (
                not isinstance(b.get("real_time"), (int, float)) and not b.get("error_occurred")):
            raise PerfTableError(f"{path}: a benchmark entry lacks a 'name' or a numeric 'real_time': {b!r}")
        # With repetitions, the median stands for the run (the mean when there is no median).
        if b.get("run_name") in with_aggregates:
            if b.get("run_type") != "aggregate" or b.get("aggregate_name") not in ("median", "mean"):
                continue
            if b.get("aggregate_name") == "mean" and any(
                    o.get("run_name") == b["run_name"] and o.get("aggregate_name") == "median" for o in doc["benchmarks"]):
                continue
        runs.append(b)
    return doc["context"], runs


def conditions(path, context):
    program = os.path.basename(context.get("executable", "")) or os.path.basename(path)
    load_avg = context.get("load_avg")
    if isinstance(load_avg, list) and load_avg and all(isinstance(x, (int, float)) for x in load_avg):
        load_text = "load " + " / ".join(f"{x:.2f}" for x in load_avg) + " (1/5/15 min)"
    else:
        load_text = "load not reported"
    date = context.get("date", "no date").replace("T", " ")
    return (program, f"`{program}`: {date}, host `{context.get('host_name', '?')}`, "
            f"{context.get('num_cpus', '?')} CPUs at {context.get('mhz_per_cpu', '?')} MHz, {load_text}")


def find_baseline(name, baseline, runs):
    """The run of `baseline/<baseline>` that matches `name`'s arguments best."""
    prefix = "baseline/" + baseline
    # x_gomp names baseline/gomp_task_depend/...: the first part may go on.
    candidates = [r for r in runs if display_name(r).startswith(prefix)]
    if not candidates:
        return None
    parts = name.split("/")

    def shared_tail(run):
        other = display_name(run).split("/")[2:]
        n = 0
        while n < min(len(parts), len(other)) and parts[-1 - n] == other[-1 - n]:
            n += 1
        return n

    best = max(candidates, key=shared_tail)
    if shared_tail(best) == 0 and len(candidates) > 1:
        return None
    return best


def against_baselines(run, runs):
    name = display_name(run)
    parts = []
    for key, ratio in sorted(counters(run).items()):
        if not key.startswith("x_"):
            continue
        base = find_baseline(name, key[2:], runs)
        text = f"{ratio_text(ratio)} {key[2:]}"
        if base is not None:
            extra = other_counters(base)
            text += f" (`{display_name(base)}`: {figure(base)}{'; ' + extra if extra else ''})"
        parts.append(text)
    if name.startswith("baseline/"):
        parts.append("baseline")
    if run.get("label"):  # what the benchmark says its ratios are against
        parts.append(str(run["label"]))
    return "; ".join(parts)


def other_counters(run):
    return ", ".join(f"{k} {number(v)}" for k, v in sorted(counters(run).items()) if not k.startswith("x_"))


def table(paths, name_filter=None):
    pattern = re.compile(name_filter) if name_filter else None
    lines, rows = [], []
    for path in paths:
        context, runs = load(path)
        program, cond = conditions(path, context)
        lines.append("- " + cond)
        for run in runs:
            name = display_name(run)
            if pattern and not pattern.search(f"{program} {name}"):
                continue
            cells = [program, f"`{name}`", figure(run), other_counters(run), against_baselines(run, runs)]
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if not rows:
        raise PerfTableError("no benchmark matched" + (f" --filter {name_filter!r}" if name_filter else ""))
    return "\n".join(["Conditions of each run:", ""] + lines + [
        "", "| program | benchmark | figure | counters | against its baseline (same run) |",
        "|---|---|---|---|---|"] + rows)


def replace_in(doc_path, new_table):
    with open(doc_path) as f:
        text = f.read()
    begin, end = text.find(BEGIN), text.find(END)
    if begin < 0 or end < begin:
        raise PerfTableError(f"{doc_path}: no '{BEGIN}' ... '{END}' markers")
    with open(doc_path, "w") as f:
        f.write(text[:begin + len(BEGIN)] + "\n" + new_table + "\n" + text[end:])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    out = parser.add_mutually_exclusive_group(required=True)
    out.add_argument("--doc", help="the document whose table to replace (between the markers)")
    out.add_argument("--stdout", action="store_true", help="print the table instead")
    parser.add_argument("--filter", help="keep only rows whose 'program benchmark' matches this regex")
    parser.add_argument("json", nargs="+", help="--benchmark_out JSON files, one per benchmark program")
    args = parser.parse_args(argv)
    try:
        text = table(args.json, args.filter)
        if args.stdout:
            print(text)
        else:
            replace_in(args.doc, text)
    except (PerfTableError, re.error) as e:
        print(f"perf_table: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
