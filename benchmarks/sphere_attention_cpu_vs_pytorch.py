#!/usr/bin/env python3
"""S^2 attention on the CPU: surrogate (sphere_attention_bench) side by side with PyTorch, same weights and
input, same machine, same script. NeighborhoodAttentionS2 (default cutoff and the SphericalTransformer's
cutoff (7/sqrt(pi)) pi/(nlat-1)) and global AttentionS2, self-attention on equiangular grids, one sample,
bias, --channels channels and --heads heads.

    python benchmarks/sphere_attention_cpu_vs_pytorch.py [--build build] [--grids 64x128 128x256 181x360 361x720]
        [--threads 1 2] [--repeats 3] [--ops neighborhood global] [--cutoffs default transformer]

PyTorch side, both timed when available, eager, torch.inference_mode(), torch.set_num_threads(T) with
OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / MKL_NUM_THREADS = T set before torch is imported:
  official  torch-harmonics' NeighborhoodAttentionS2 (its compiled CPU kernel, optimized_kernel=True) and
            AttentionS2 (scaled_dot_product_attention with the log-weight mask), when torch_harmonics is
            importable (e.g. VENV/bin/python with torch 2.x and torch-harmonics 0.9.3);
  plain     the same mathematics written with plain PyTorch ops (runs on Debian's torch 1.13): 1x1
            convolutions for the projections; per output latitude row the neighbours' keys and values
            gathered (longitude blocks of bounded size), logits, softmax of logits + log w_lat, weighted sum;
            global attention as softmax(s q k^T + log w) v over blocks of queries.
Outputs are compared (max |ours - theirs|) before timing. The neighbour lists and quadrature weights of the
plain formulation are surrogate's (sphere_attention_bench lists); with torch-harmonics present they are
checked equal to the module's buffers. Global attention is O(N^2): it runs only up to --global-max-points
points ("skipped" beyond), the plain neighbourhood formulation up to --plain-max-points. Times: the best of --repeats runs after one warm-up (build of the operator and
its neighbour lists not timed, on either side). Each side's time is also taken as process CPU time (time.process_time
on the PyTorch side, CLOCK_PROCESS_CPUTIME_ID in sphere_attention_bench), the robust figure on a shared machine at one
thread (at two threads it adds both threads' time, spin-waiting included). --rounds R runs the pair (surrogate, PyTorch)
R times one after the other and keeps each side's best, so both sides see the same load; "load" is the 1-minute load
average when the line is printed.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--grids", nargs="+", default=["64x128", "128x256", "181x360", "361x720"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1, help="(surrogate, PyTorch) pairs run one after the other, best kept")
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ops", nargs="+", default=["neighborhood", "global"], choices=["neighborhood", "global"])
    ap.add_argument("--cutoffs", nargs="+", default=["default", "transformer"], choices=["default", "transformer"])
    ap.add_argument("--references", nargs="+", default=["official", "plain"], choices=["official", "plain"])
    ap.add_argument("--global-max-points", type=int, default=8192)
    ap.add_argument("--plain-max-points", type=int, default=65160,
                    help="largest grid (points) for the plain formulation of neighbourhood attention")
    ap.add_argument("--plain-block", type=int, default=1 << 21,
                    help="gathered (longitude x neighbour) pairs per block of the plain formulation")
    return ap.parse_args()


ARGS = parse_args()
if len(ARGS.threads) == 1:  # threads of the PyTorch side, before torch starts its pools
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.threads[0])
else:
    os.environ["OPENBLAS_NUM_THREADS"] = "1"  # torch.set_num_threads does not limit OpenBLAS's pthreads

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402

try:
    import torch_harmonics as th  # noqa: E402
except ImportError:
    th = None


def transformer_cutoff(nlat):
    return (7.0 / math.sqrt(math.pi)) * math.pi / (nlat - 1)


def random_weights(c, gen):
    w = {}
    for name in ("q", "k", "v", "proj"):
        w[f"{name}_weights"] = torch.randn(c, c, 1, 1, generator=gen) / math.sqrt(c)
        w[f"{name}_bias"] = 0.1 * torch.randn(c, generator=gen)
    return w


def write_inputs(d, w, x):
    for k, v in w.items():
        v.reshape(-1).numpy().astype(np.float32).tofile(d / f"{k}.f32")
    # channels last: (nlat * nlon, C)
    x[0].permute(1, 2, 0).contiguous().numpy().astype(np.float32).tofile(d / "x.f32")


def run_ours(bench, op, nlat, nlon, cutoff, threads, d):
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": "1"}
    cmd = [str(bench), op, str(nlat), str(nlon), str(ARGS.channels), str(ARGS.heads), repr(cutoff), str(threads),
           str(ARGS.repeats), str(d)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result.setdefault("best_cpu_s", float("nan"))  # (a bench built before it reported CPU time)
    return result


def read_ours(d, nlat, nlon):
    y = np.fromfile(d / "y.f32", dtype=np.float32).reshape(nlat, nlon, ARGS.channels)
    return torch.from_numpy(y).permute(2, 0, 1).unsqueeze(0)


def timed(fn, x):
    """Best wall and best process CPU seconds of --repeats calls after one warm-up, and the output."""
    with torch.inference_mode():
        y = fn(x)  # warm-up
        times, cpu_times = [], []
        for _ in range(ARGS.repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
    return min(times), min(cpu_times), y


class PlainNeighborhood:
    """NeighborhoodAttentionS2's forward (self-attention, gather mode p = 1) in plain PyTorch ops."""

    def __init__(self, w, heads, row_offsets, columns, quad_w, nlat, nlon):
        self.w, self.heads, self.nlat, self.nlon = w, heads, nlat, nlon
        self.roff, self.cols = row_offsets, columns
        self.log_w = torch.log(quad_w)
        self.scale = 1.0 / math.sqrt(w["q_weights"].shape[0] // heads)

    def __call__(self, x):
        w, H, nlat, nlon = self.w, self.heads, self.nlat, self.nlon
        q = F.conv2d(x, w["q_weights"], w["q_bias"])
        k = F.conv2d(x, w["k_weights"], w["k_bias"])
        v = F.conv2d(x, w["v_weights"], w["v_bias"])
        B, C, _, _ = q.shape
        E = C // H
        # (B, H, points, E)
        q = q.reshape(B, H, E, nlat * nlon).transpose(2, 3) * self.scale
        k = k.reshape(B, H, E, nlat * nlon).transpose(2, 3)
        v = v.reshape(B, H, E, nlat * nlon).transpose(2, 3)
        out = torch.empty_like(v)
        lon = torch.arange(nlon)
        for t in range(nlat):
            cols = self.cols[self.roff[t]:self.roff[t + 1]]
            lat_in, lon_in = cols // nlon, cols % nlon
            log_w = self.log_w[lat_in]
            n = cols.numel()
            step = max(1, min(nlon, ARGS.plain_block // max(n, 1)))
            for w0 in range(0, nlon, step):
                wo = lon[w0:w0 + step]
                idx = lat_in[None, :] * nlon + (lon_in[None, :] + wo[:, None]) % nlon  # (lons, n)
                kg = k[:, :, idx]  # (B, H, lons, n, E)
                vg = v[:, :, idx]
                qs = q[:, :, t * nlon + w0:t * nlon + w0 + wo.numel()]  # (B, H, lons, E)
                logits = torch.einsum("bhle,bhlne->bhln", qs, kg) + log_w
                out[:, :, t * nlon + w0:t * nlon + w0 + wo.numel()] = torch.einsum(
                    "bhln,bhlne->bhle", torch.softmax(logits, dim=-1), vg)
        out = out.transpose(2, 3).reshape(B, C, nlat, nlon)
        return F.conv2d(out, w["proj_weights"], w["proj_bias"])


class PlainGlobal:
    """AttentionS2's forward (self-attention) in plain PyTorch ops, queries in blocks."""

    def __init__(self, w, heads, quad_w, nlat, nlon):
        self.w, self.heads, self.nlat, self.nlon = w, heads, nlat, nlon
        self.log_w = torch.log(quad_w).repeat_interleave(nlon)  # per key point
        self.scale = 1.0 / math.sqrt(w["q_weights"].shape[0] // heads)

    def __call__(self, x):
        w, H, nlat, nlon = self.w, self.heads, self.nlat, self.nlon
        q = F.conv2d(x, w["q_weights"], w["q_bias"])
        k = F.conv2d(x, w["k_weights"], w["k_bias"])
        v = F.conv2d(x, w["v_weights"], w["v_bias"])
        B, C, _, _ = q.shape
        E, P = C // H, nlat * nlon
        q = q.reshape(B, H, E, P).transpose(2, 3) * self.scale
        k = k.reshape(B, H, E, P).transpose(2, 3)
        v = v.reshape(B, H, E, P).transpose(2, 3)
        out = torch.empty_like(v)
        step = max(1, (1 << 24) // (H * P))
        for p0 in range(0, P, step):
            logits = torch.matmul(q[:, :, p0:p0 + step], k.transpose(2, 3)) + self.log_w
            out[:, :, p0:p0 + step] = torch.matmul(torch.softmax(logits, dim=-1), v)
        out = out.transpose(2, 3).reshape(B, C, nlat, nlon)
        return F.conv2d(out, w["proj_weights"], w["proj_bias"])


def official_module(op, w, nlat, nlon, cutoff):
    c, H = ARGS.channels, ARGS.heads
    if op == "neighborhood":
        m = th.NeighborhoodAttentionS2(in_channels=c, num_heads=H, in_shape=(nlat, nlon), out_shape=(nlat, nlon),
                                       theta_cutoff=cutoff if cutoff > 0 else None, bias=True)
    else:
        m = th.AttentionS2(in_channels=c, num_heads=H, in_shape=(nlat, nlon), out_shape=(nlat, nlon), bias=True)
    m.load_state_dict(w, strict=False)
    return m.eval()


def main():
    bench = Path(ARGS.build) / "benchmarks" / "sphere_attention_bench"
    if not bench.exists():
        sys.exit(f"{bench} not found: build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    refs = [r for r in ARGS.references if r != "official" or th is not None]
    limits = machine.machine_limits(ARGS.build)
    print(machine.describe(torch))
    if limits:
        print(machine.limits_line(limits))
    print(f"S2 attention, self-attention, one sample, {ARGS.channels} channels, {ARGS.heads} heads, equiangular, bias; "
          f"torch {torch.__version__}" + (f", torch-harmonics {th.__version__}" if th is not None else
                                          ", torch-harmonics not importable (plain PyTorch only)"))
    print("times: best of %d after one warm-up%s, milliseconds (wall, and process CPU time); speed-up = PyTorch / "
          "surrogate" % (ARGS.repeats, f" over {ARGS.rounds} rounds" if ARGS.rounds > 1 else ""))
    header = f"{'op':<13} {'grid':>8} {'cutoff':<11} {'entries':>8} {'thr':>3} | {'surrogate':>9} {'cpu':>8} {'%limit':>6} |"
    for r in refs:
        header += f" {r + ' ms':>11} {'cpu':>8} {'x':>6} {'x cpu':>6} {'max|diff|':>9} |"
    print(header + " load")
    gen = torch.Generator().manual_seed(0)
    w = random_weights(ARGS.channels, gen)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for grid in ARGS.grids:
            nlat, nlon = (int(s) for s in grid.split("x"))
            x = torch.randn(1, ARGS.channels, nlat, nlon, generator=gen)
            write_inputs(d, w, x)
            cases = []
            if "neighborhood" in ARGS.ops:
                for cut in ARGS.cutoffs:
                    cases.append(("neighborhood", cut, 0.0 if cut == "default" else transformer_cutoff(nlat)))
            if "global" in ARGS.ops:
                cases.append(("global", "-", 0.0))
            for op, cut_name, cutoff in cases:
                info = run_ours(bench, "lists", nlat, nlon, cutoff, 1, d)
                roff = torch.from_numpy(np.fromfile(d / "row_offsets.i64", dtype=np.int64))
                cols = torch.from_numpy(np.fromfile(d / "columns.i64", dtype=np.int64))
                quad_w = torch.from_numpy(np.fromfile(d / "quad_w.f32", dtype=np.float32))
                entries = str(info["entries"]) if op == "neighborhood" else "all"
                if op == "global" and nlat * nlon > ARGS.global_max_points:
                    print(f"{op:<13} {grid:>8} {cut_name:<11} {entries:>8} {'-':>3} | skipped (O(N^2): "
                          f"{nlat * nlon} points > --global-max-points {ARGS.global_max_points})")
                    continue
                modules = {}
                for r in refs:
                    if r == "official":
                        m = official_module(op, w, nlat, nlon, cutoff)
                        if op == "neighborhood" and not (torch.equal(m.psi_roff_idx.cpu(), roff) and
                                                         torch.equal(m.psi_col_idx.cpu(), cols)):
                            print(f"  note: {grid} {cut_name}: torch-harmonics' neighbour lists differ from ours")
                        modules[r] = m
                    elif op == "neighborhood":
                        modules[r] = PlainNeighborhood(w, ARGS.heads, roff, cols, quad_w, nlat, nlon)
                    else:
                        modules[r] = PlainGlobal(w, ARGS.heads, quad_w, nlat, nlon)
                for threads in ARGS.threads:
                    torch.set_num_threads(threads)
                    best = {}  # side -> [wall, cpu], the best over the rounds
                    diffs = {}
                    for _ in range(ARGS.rounds):
                        ours = run_ours(bench, op, nlat, nlon, cutoff, threads, d)
                        y_ours = read_ours(d, nlat, nlon)
                        best["ours"] = [min(a, b) for a, b in zip(best.get("ours", [math.inf] * 2),
                                                                    (ours["best_s"], ours["best_cpu_s"]))]
                        for r in refs:
                            if r == "plain" and op == "neighborhood" and nlat * nlon > ARGS.plain_max_points:
                                continue
                            t, c, y = timed(modules[r], x)
                            best[r] = [min(a, b) for a, b in zip(best.get(r, [math.inf] * 2), (t, c))]
                            diffs[r] = max(diffs.get(r, 0.0), (y.float() - y_ours).abs().max().item())
                    t_ours, c_ours = best["ours"]
                    share = machine.share_of_limit({**ours, "best_s": t_ours, "best_cpu_s": c_ours}, threads, limits)
                    line = (f"{op:<13} {grid:>8} {cut_name:<11} {entries:>8} {threads:>3} | {t_ours * 1e3:>9.2f} "
                            f"{c_ours * 1e3:>8.2f} {machine.share_text(share)} |")
                    for r in refs:
                        if r not in best:
                            line += f" {'skipped':>11} {'':>8} {'':>6} {'':>6} {'':>9} |"
                            continue
                        t, c = best[r]
                        line += (f" {t * 1e3:>11.2f} {c * 1e3:>8.2f} {t / t_ours:>5.2f}x {c / c_ours:>5.2f}x "
                                 f"{diffs[r]:>9.2e} |")
                    print(line + f" {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
