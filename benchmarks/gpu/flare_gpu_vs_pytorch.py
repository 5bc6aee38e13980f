#!/usr/bin/env python3
"""FLARE forward on one GPU, side by side: surrogate's CUDA forward (bench_flare_gpu) in fp32, tf32 and
bf16, and the official two-SDPA formulation in PyTorch (flare_pytorch_gpu.py) eager in FP32 (TF32 off) and
BF16 and under torch.compile in BF16 and in FP32 with TF32, same configuration. Prints every JSON record,
then a Markdown table of the times and one of the speed-ups over the peer: torch.compile in bf16, what a
PyTorch user would run.

    python3 benchmarks/gpu/flare_gpu_vs_pytorch.py --build build --points 262144 1048576 --latents 64 256

A PyTorch run that fails (no Triton for torch.compile, out of memory) shows as nan; `--no-compile` leaves
the compiled runs out (they compile during their warm-up, about a minute each), `--compile-runs bf16` keeps
only the peer's (where device time is short).
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_json(command):
    print("$ " + " ".join(command), file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout + done.stderr, file=sys.stderr)
        return None
    record = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(record), flush=True)
    return record


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(HERE.parent.parent / "build"))
    ap.add_argument("--points", type=int, nargs="+", default=[1048576])
    ap.add_argument("--latents", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--python", default=sys.executable, help="Python with torch >= 2.1 and CUDA")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile runs")
    ap.add_argument("--compile-runs", nargs="+", choices=["bf16", "tf32"], default=["bf16", "tf32"],
                    help="which torch.compile runs (default both; the peer is bf16)")
    args = ap.parse_args()
    bench = Path(args.build) / "benchmarks" / "gpu" / "bench_flare_gpu"
    if not bench.exists():
        sys.exit(f"{bench} not found: build with -DSURROGATE_ENABLE_CUDA=ON")
    rows = []
    for n in args.points:
        for m in args.latents:
            common = ["--points", str(n), "--latents", str(m), "--heads", str(args.heads), "--blocks", str(args.blocks),
                      "--repeats", str(args.repeats)]
            ours = {}
            for name, extra in (("fp32", []), ("reproducible", ["--reproducible"]), ("tf32", ["--precision", "tf32"]),
                                ("bf16", ["--precision", "bf16"])):
                ours[name] = run_json([str(bench), *common, "--device", str(args.device), "--json", *extra])
            torch_side = {}
            runs = [("eager fp32", ["--dtype", "float32"]), ("eager bf16", ["--dtype", "bfloat16"])]
            compiled = {"bf16": ("compile bf16", ["--dtype", "bfloat16", "--compile"]),
                        "tf32": ("compile tf32", ["--dtype", "float32", "--tf32", "--compile"])}
            if not args.no_compile:
                runs += [compiled[k] for k in ("bf16", "tf32") if k in args.compile_runs]
            for name, extra in runs:
                torch_side[name] = run_json([args.python, str(HERE / "flare_pytorch_gpu.py"), *common, *extra,
                                             "--device", f"cuda:{args.device}"])
            rows.append((n, m, ours, torch_side))

    # A run that was asked for and failed shows as nan; one that was not asked for (--no-compile,
    # --compile-runs) as "-".
    skipped = object()

    def value(record, key):
        return skipped if record is skipped else record[key] if record else float("nan")

    def cell(v, digits=2):
        return "-" if v is skipped else f"{v:.{digits}f}"

    def ratio(a, b):
        return "-" if a is skipped or b is skipped else f"{a / b:.2f}x"

    print()
    print("| N | M | surrogate fp32 ms (compute / +copies) | reproducible | tf32 | bf16 | TFLOP/s (fp32) "
          "| PyTorch eager fp32 | eager bf16 | torch.compile bf16 | torch.compile fp32+TF32 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    torch_runs = ("eager fp32", "eager bf16", "compile bf16", "compile tf32")
    rows = [(n, m, ours, {k: value(t.get(k, skipped), "median_ms") for k in torch_runs}) for n, m, ours, t in rows]
    for n, m, ours, torch_ms in rows:
        print(f"| {n} | {m} | {cell(value(ours['fp32'], 'compute_ms'))} / {cell(value(ours['fp32'], 'total_ms'))} "
              f"| {cell(value(ours['reproducible'], 'compute_ms'))} | {cell(value(ours['tf32'], 'compute_ms'))} "
              f"| {cell(value(ours['bf16'], 'compute_ms'))} | {cell(value(ours['fp32'], 'tflops'), 1)} "
              + "".join(f"| {cell(torch_ms[k])} " for k in torch_runs) + "|")
    print()
    print("Speed-up over the peer, torch.compile in bf16 (its time / ours; > 1: surrogate is faster), and each "
          "precision over PyTorch's own:")
    print()
    print("| N | M | fp32 / compile bf16 | tf32 / compile bf16 | bf16 / compile bf16 | fp32 / eager fp32 "
          "| tf32 / compile fp32+TF32 | bf16 / eager bf16 |")
    print("|---|---|---|---|---|---|---|---|")
    for n, m, ours, torch_ms in rows:
        mine = {k: value(ours[k], "compute_ms") for k in ("fp32", "tf32", "bf16")}
        peer = torch_ms["compile bf16"]
        print(f"| {n} | {m} | {ratio(peer, mine['fp32'])} | {ratio(peer, mine['tf32'])} | {ratio(peer, mine['bf16'])} "
              f"| {ratio(torch_ms['eager fp32'], mine['fp32'])} | {ratio(torch_ms['compile tf32'], mine['tf32'])} "
              f"| {ratio(torch_ms['eager bf16'], mine['bf16'])} |")


if __name__ == "__main__":
    main()
