#!/usr/bin/env python3
"""Compares runs of ex1 (C++ and Fortran, any rank counts) from their printed tables: every run must have
the same steps, the same max q and the same sums of q and q^2 to 1e-12 relative (the prediction is the same
bits on any number of ranks; the sums are reduced in another order). With --rollout, the last step's sums
must also match the prediction digest of sphere_fortran --rollout (the same rollout in another program).

    compare.py --steps 10 [--rollout sphere_fortran_output.txt] ex1_np1.txt ex1_np3.txt ...
"""
import argparse
import math
import re
import sys

NUMBER = r"[-+0-9.eE]+"


def table(path):
    rows = {}
    with open(path) as f:
        for line in f:
            m = re.match(rf"\s*(\d+)\s+({NUMBER})\s+({NUMBER})\s+({NUMBER})\s+({NUMBER})\s*$", line)
            if m:
                rows[int(m.group(1))] = (float(m.group(3)), float(m.group(4)), m.group(5))
    return rows


def close(a, b, rtol=1e-12):
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rtol * max(abs(a), abs(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--rollout", help="output of sphere_fortran --rollout --steps STEPS")
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    errors = []
    tables = {path: table(path) for path in args.runs}
    first = args.runs[0]
    for path, rows in tables.items():
        if sorted(rows) != list(range(1, args.steps + 1)):
            errors.append(f"{path}: steps {sorted(rows)}, expected 1..{args.steps}")
            continue
        for step, (s1, s2, max_q) in rows.items():
            r1, r2, r_max = tables[first][step]
            if not (close(s1, r1) and close(s2, r2) and max_q == r_max):
                errors.append(f"{path} step {step}: {s1!r} {s2!r} {max_q} differs from {first}: {r1!r} {r2!r} {r_max}")
    last = tables[first].get(args.steps)
    print(f"{len(args.runs)} runs, {args.steps} steps; last step of {first}: sum of q {last[0]!r}, "
          f"sum of q^2 {last[1]!r}, max q {last[2]}" if last else f"{first}: no step {args.steps}")
    if args.rollout and last:
        with open(args.rollout) as f:
            m = re.search(rf"prediction digest[^:]*:\s*({NUMBER})\s+({NUMBER})", f.read())
        if not m:
            errors.append(f"{args.rollout}: no prediction digest")
        else:
            digest = (float(m.group(1)), float(m.group(2)))
            print(f"sphere_fortran --rollout digest: {digest[0]!r} {digest[1]!r}")
            if not (close(last[0], digest[0]) and close(last[1], digest[1])):
                errors.append(f"the last step's sums {last[:2]} differ from sphere_fortran's rollout digest {digest}")
    for e in errors:
        print("MISMATCH: " + e)
    print("compare: " + ("OK" if not errors else f"{len(errors)} mismatch(es)"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
