#!/usr/bin/env python3
"""HEPT forward on a GPU: surrogate's device forward (hept_gpu_bench) next to the official example/
Transformer of Graph-COM/HEPT on the same GPU, the shipped tracking-60k checkpoint on both sides, the same
synthetic collider event as benchmarks/hept_cpu_vs_pytorch.py (share/tools/golden/hept_golden.py), one
graph of N hits, float32, TF32 off; a row is printed only when the outputs agree. Where it has run:
share/docs/cuda-results.md.

    VENV/bin/python benchmarks/gpu/hept_gpu_vs_pytorch.py --build build --official HEPT_CHECKOUT \\
        [--sizes 10000 60000 240000] [--repeats 5] [--device cuda]

HEPT_CHECKOUT: a checkout of github.com/Graph-COM/HEPT (its example/ folder is imported at run time;
nothing of it is in this repository); VENV: torch 2.x with CUDA, torch_geometric (the official MLP), einops.

surrogate columns (milliseconds): `plan` = the event's geometry built on the device (quantile regions,
codes, padding; checked bit for bit against the CPU's first); `device` = wall time of the device forward on
a kept geometry; `full` = plan + forward, what the official forward does in every call. PyTorch: wall time of model(x, coords, batch) between torch.cuda.synchronize()
calls, best of --repeats after a warm-up. Speed-up = PyTorch / full. Agreement as in the CPU script: the
checkpoint is ill-conditioned in float32 (share/docs/hept.md), so a row agrees within 1e-2 max|y| and at
least 90 % of the rows must (both sides' float32 rows differ from float64 in a few percent).
"""
import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
import hept_cpu_vs_pytorch as cpu_bench  # noqa: E402  (official_model, write_event)
import side_by_side as sbs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--official", required=True,
                    help="a checkout of Graph-COM/HEPT (or a folder holding a copy of its example/)")
    ap.add_argument("--models", default=str(ROOT / "share" / "models" / "hept"),
                    help="the folder of model.h5, config.json and tracking-60k-model.pt")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 60000, 240000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="PyTorch device (cuda, cuda:N, or cpu to check the script)")
    ap.add_argument("--cuda-device", default="0", help="surrogate's device index (or cuda-emulated)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    bench = Path(args.build) / "benchmarks" / "gpu" / "hept_gpu_bench"
    if not bench.exists():
        sys.exit(f"{bench} not found: a CUDA build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    models = Path(args.models)
    model = cpu_bench.official_model(args.official, torch.float32, models, args.device)
    print(sbs.machine.describe(torch) + (f"; GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available()
                                         else "; no CUDA device visible to PyTorch"))
    print(f"HEPT forward, shipped tracking-60k checkpoint, one event, float32; PyTorch: official example/ "
          f"Transformer (torch {torch.__version__}, {args.device}, TF32 off); best of {args.repeats} after a "
          f"warm-up; agreement: |diff| <= 1e-2 max|y| on >= 90 % of the rows")
    print(f"{'N':>8} | {'plan ms':>8} {'device ms':>9} {'full ms':>8} | {'PyTorch ms':>10} | {'speed-up':>8} | "
          f"{'agree':>6} {'max|y|':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            data = Path(tmp) / f"n{n}"
            x, coords = cpu_bench.write_event(data, n, args.seed)
            ours = sbs.run_json([bench, models / "model.h5", data, args.repeats, args.cuda_device])
            if not ours["plan_identical"]:
                sys.exit(f"N {n}: the device plan differs from the CPU's; no timing printed")
            dev = args.device
            xt = torch.from_numpy(x.astype(np.float32)).to(dev)
            ct = torch.from_numpy(coords.astype(np.float32)).to(dev)
            batch = torch.zeros(len(x), dtype=torch.long, device=dev)
            y, best = sbs.time_on_device(lambda: model(xt, ct, batch), args.repeats, dev)
            y = y.detach().cpu().numpy().astype(np.float64)
            check = sbs.check_agreement(sbs.read_output(data, y.shape), y, f"N {n}", 1e-2, 0.9)
            print(f"{len(x):>8} | {ours['device_plan_ms']:>8.2f} {ours['gpu_forward_ms']:>9.2f} {ours['full_ms']:>8.2f} | "
                  f"{1e3 * best:>10.2f} | "
                  f"{1e3 * best / ours['full_ms']:>8.2f} | {check[2]:>6.3f} {check[1]:>8.3g}", flush=True)


if __name__ == "__main__":
    main()
