#!/usr/bin/env python3
"""FLARE forward on one GPU, side by side: surrogate's CUDA forward (bench_flare_gpu) and the official
two-SDPA formulation in PyTorch (flare_pytorch_gpu.py) at FP32 (TF32 off) and BF16, same configuration.
Prints every JSON record, then a Markdown table with the speed-ups.

    python3 benchmarks/gpu/flare_gpu_vs_pytorch.py --build build --points 262144 1048576 --latents 64 256

surrogate's BF16 run uses `--precision bf16` (the MLPs on the tensor cores; the attention stays FP32, see
share/docs/cuda.md), compared with PyTorch's BF16 forward; FP32 with FP32.
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
    args = ap.parse_args()
    bench = Path(args.build) / "benchmarks" / "gpu" / "bench_flare_gpu"
    if not bench.exists():
        sys.exit(f"{bench} not found: build with -DSURROGATE_ENABLE_CUDA=ON")
    rows = []
    for n in args.points:
        for m in args.latents:
            common = ["--points", str(n), "--latents", str(m), "--heads", str(args.heads), "--blocks", str(args.blocks),
                      "--repeats", str(args.repeats)]
            ours = run_json([str(bench), *common, "--device", str(args.device), "--json"])
            ours_exact = run_json([str(bench), *common, "--device", str(args.device), "--json", "--reproducible"])
            ours_bf16 = run_json([str(bench), *common, "--device", str(args.device), "--json", "--precision", "bf16"])
            torch_side = {}
            for dtype in ("float32", "bfloat16"):
                torch_side[dtype] = run_json([args.python, str(HERE / "flare_pytorch_gpu.py"), *common, "--dtype", dtype,
                                              "--device", f"cuda:{args.device}"])
            rows.append((n, m, ours, ours_exact, ours_bf16, torch_side))

    def ms(record, key):
        return record[key] if record else float("nan")

    print()
    print("| N | M | surrogate FP32 ms (compute / +copies) | reproducible ms | surrogate BF16 ms | TFLOP/s (FP32) "
          "| activations TB/s | PyTorch FP32 ms | PyTorch BF16 ms | speed-up FP32 | speed-up BF16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, m, ours, exact, ours_bf16, t in rows:
        mine, mine_bf16 = ms(ours, "compute_ms"), ms(ours_bf16, "compute_ms")
        fp32, bf16 = ms(t["float32"], "median_ms"), ms(t["bfloat16"], "median_ms")
        print(f"| {n} | {m} | {mine:.2f} / {ms(ours, 'total_ms'):.2f} | {ms(exact, 'compute_ms'):.2f} | {mine_bf16:.2f} "
              f"| {ms(ours, 'tflops'):.1f} | {ms(ours, 'hbm_tbs_used'):.2f} | {fp32:.2f} | {bf16:.2f} "
              f"| {fp32 / mine:.1f}x | {bf16 / mine_bf16:.1f}x |")


if __name__ == "__main__":
    main()
