#!/usr/bin/env python3
"""NeighborhoodAttentionS2 in the upsampling mode: our CPU forward (benchmarks/sphere_upsample_bench) against
torch-harmonics' module with its compiled CPU kernel, same weights and inputs, one sample, equiangular grids
(in: nlat x 2(nlat-1) ... out: (2 nlat - 1) x 2 nlon), bias, default cutoff, channels and heads as given.
Needs the official package (a virtual environment outside the repository):
    VENV/bin/python benchmarks/sphere_upsample_cpu_vs_pytorch.py --bench BUILD/benchmarks/sphere_upsample_bench \
        [--sizes 33x64 65x128 91x180] [--channels 64] [--heads 4] [--threads 1] [--repeats 5]
Prints one line per size: best wall seconds of each, the ratio and max |ours - official|.
"""
import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch_harmonics import NeighborhoodAttentionS2

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--sizes", nargs="+", default=["33x64", "65x128", "91x180"], help="input grids; output 2x finer")
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(machine.describe(torch))
    gen = torch.Generator().manual_seed(7)
    C = a.channels
    for size in a.sizes:
        hi, wi = map(int, size.split("x"))
        ho, wo = 2 * hi - 1, 2 * wi
        mod = NeighborhoodAttentionS2(C, in_shape=(hi, wi), out_shape=(ho, wo), num_heads=a.heads).eval()
        with torch.no_grad():
            for p in mod.parameters():
                std = 1.0 / math.sqrt(p.shape[1]) if p.dim() == 4 else 0.1
                p.copy_(std * torch.randn(p.shape, generator=gen))
        xq = torch.randn(1, C, ho, wo, generator=gen)
        xk = torch.randn(1, C, hi, wi, generator=gen)
        times = []
        with torch.no_grad():
            y = mod(xq, xk, xk)
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                mod(xq, xk, xk)
                times.append(time.perf_counter() - t0)
        with tempfile.TemporaryDirectory() as d:
            for k, v in mod.state_dict().items():
                v.detach().float().reshape(v.shape[0], -1).numpy().tofile(f"{d}/{k}.f32")
            xq[0].permute(1, 2, 0).contiguous().numpy().tofile(f"{d}/query.f32")
            xk[0].permute(1, 2, 0).contiguous().numpy().tofile(f"{d}/key.f32")
            out = subprocess.run([a.bench, str(hi), str(wi), str(ho), str(wo), str(C), str(a.heads), str(a.threads),
                                  str(a.repeats), d], check=True, capture_output=True, text=True).stdout
            ours = json.loads(out.strip().splitlines()[-1])
            yo = np.fromfile(f"{d}/y.f32", dtype=np.float32).reshape(ho, wo, C)
        err = float(np.abs(yo - y[0].permute(1, 2, 0).numpy()).max())
        th = min(times)
        print(f"{hi}x{wi} -> {ho}x{wo}: ours {ours['best_s']:.4f} s (cpu {ours['best_cpu_s']:.4f}), torch-harmonics "
              f"{th:.4f} s, {th / ours['best_s']:.1f}x, max |ours - official| {err:.2e}, threads {a.threads}", flush=True)


if __name__ == "__main__":
    main()
