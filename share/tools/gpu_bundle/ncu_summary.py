#!/usr/bin/env python3
"""Where a profiled run's GPU time went: reads the text that Nsight Compute (`ncu`, default output) printed
for a run and prints one Markdown row per kernel, heaviest first: launches, summed duration, its share,
and the mean of the Speed Of Light throughputs when the run collected them. Standard library only.

    python3 share/tools/gpu_bundle/ncu_summary.py OUT/ncu_flare.txt [--top 20] [--name-width 70]

The profile itself runs on the GPU machine through the bundle runner (share/docs/cuda.md, "Profiling"):
durations only (one pass a kernel) with `--metrics gpu__time_duration.sum`, or `--section SpeedOfLight`
for the throughputs too. ncu locks the clocks to their base while it measures: the durations are longer
than a timed run's, their shares are what to read.
"""
import argparse
import re
import sys
from collections import OrderedDict

# A kernel's header line: its name and signature, then "(grid)x(block), Context ..., Device ..., CC x.y".
HEADER = re.compile(r"^\s{2}(?P<name>\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context \d+, Stream \d+")
DURATION = re.compile(r"^\s+(?:Duration|gpu__time_duration\.sum)\s+(?P<unit>[a-z]+)\s+(?P<value>[\d,.]+)\s*$")
PERCENT = re.compile(r"^\s+(?P<what>Memory Throughput|Compute \(SM\) Throughput)\s+%\s+(?P<value>[\d,.]+)\s*$")
TO_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3,
         "second": 1e3}


def short_name(signature):
    """The kernel's name without namespaces, return type and parameter list, its template arguments kept."""
    name = signature
    depth, cut = 0, len(name)
    for i in range(len(name) - 1, -1, -1):  # the parameter list: the last top-level parenthesis group
        if name[i] == ")":
            depth += 1
        elif name[i] == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    name = name[:cut]
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"(\(anonymous namespace\)|<?unnamed>)::", "", name)  # how ncu spells an unnamed namespace
    depth, start = 0, 0
    for i, ch in enumerate(name):  # the last '::' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0 and name.startswith("::", i):
            start = i + 2
    return name[start:]


def parse(lines):
    """[{name, ms, memory, compute}] in launch order; a launch without a duration is left out."""
    launches, current = [], None
    for line in lines:
        m = HEADER.match(line)
        if m:
            current = {"name": short_name(m.group("name")), "ms": None, "memory": None, "compute": None}
            launches.append(current)
            continue
        if current is None:
            continue
        m = DURATION.match(line)
        if m and m.group("unit") in TO_MS:
            current["ms"] = float(m.group("value").replace(",", "")) * TO_MS[m.group("unit")]
            continue
        m = PERCENT.match(line)
        if m:
            key = "memory" if m.group("what").startswith("Memory") else "compute"
            current[key] = float(m.group("value").replace(",", ""))
    return [x for x in launches if x["ms"] is not None]


def summary(launches):
    """Per kernel name: launches, total ms, mean memory and compute throughput %, heaviest first."""
    kernels = OrderedDict()
    for x in launches:
        k = kernels.setdefault(x["name"], {"launches": 0, "ms": 0.0, "memory": [], "compute": []})
        k["launches"] += 1
        k["ms"] += x["ms"]
        for key in ("memory", "compute"):
            if x[key] is not None:
                k[key].append(x[key])
    rows = []
    for name, k in kernels.items():
        mean = {key: sum(v) / len(v) if v else None for key, v in ((key, k[key]) for key in ("memory", "compute"))}
        rows.append({"name": name, "launches": k["launches"], "ms": k["ms"], **mean})
    return sorted(rows, key=lambda r: -r["ms"])


def table(rows, top, width):
    total = sum(r["ms"] for r in rows)
    out = [f"{sum(r['launches'] for r in rows)} launches of {len(rows)} kernels, {total:.3f} ms (ncu's clocks)", "",
           "| kernel | launches | ms | share | memory % | compute (SM) % |", "|---|---|---|---|---|---|"]
    pct = lambda v: "" if v is None else f"{v:.1f}"  # noqa: E731
    for r in rows[:top]:
        name = r["name"] if len(r["name"]) <= width else r["name"][: width - 3] + "..."
        share = 100.0 * r["ms"] / total if total > 0 else 0.0
        out.append(f"| `{name}` | {r['launches']} | {r['ms']:.3f} | {share:.1f} % | {pct(r['memory'])} | "
                   f"{pct(r['compute'])} |")
    if len(rows) > top:
        rest = rows[top:]
        out.append(f"| {len(rest)} other kernels | {sum(r['launches'] for r in rest)} | "
                   f"{sum(r['ms'] for r in rest):.3f} | {100.0 * sum(r['ms'] for r in rest) / total:.1f} % | | |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="ncu's text output, one run per file")
    ap.add_argument("--top", type=int, default=20, help="kernels listed (the rest summed in one row)")
    ap.add_argument("--name-width", type=int, default=70)
    args = ap.parse_args(argv)
    status = 0
    for path in args.files:
        with open(path, errors="replace") as f:
            rows = summary(parse(f))
        print(f"## {path}\n")
        if not rows:
            print("no kernel with a duration: was it ncu's default text output with Duration or "
                  "gpu__time_duration.sum?\n")
            status = 1
            continue
        print(table(rows, args.top, args.name_width) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
