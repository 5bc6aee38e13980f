"""Shared part of the model benchmarks bsa_cpu_vs_pytorch.py and erwin_cpu_vs_pytorch.py: random
weights, inputs written as raw float32 for the C++ driver, the PyTorch timing (warm-up, best of k), the
output check, the skip rule for PyTorch runs that would take too long or need too much memory, and the
table with each run's share of the machine limit.

PyTorch is run as the FLARE benchmark tunes it (flare_cpu_vs_pytorch.py): torch.set_num_threads(T),
torch.inference_mode, the official modules as they are (they call F.scaled_dot_product_attention
themselves), one warm-up run, then the best of the timed runs.
"""
import json
import math
import os
import resource
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

import machine


def random_state(shapes, rng):
    """Weights of a useful scale for the official state_dict shapes (fan-in scaled matrices, distance
    bias sigma around -1, BatchNorm statistics near the identity)."""
    state = {}
    for k, shape in shapes.items():
        if k.endswith("running_var"):
            v = rng.uniform(0.5, 1.5, shape)
        elif k.endswith("running_mean") or (k.endswith("bias") and len(shape) == 1):
            v = 0.1 * rng.standard_normal(shape)
        elif k.endswith("sigma_att"):
            v = -1.0 + 0.1 * rng.standard_normal(shape)
        elif len(shape) == 2:
            v = rng.standard_normal(shape) / np.sqrt(shape[1])
        else:
            v = 1.0 + 0.1 * rng.standard_normal(shape)  # norm weights
        state[k] = torch.from_numpy(np.asarray(v, dtype=np.float32))
    return state


def write_config_attrs(group, config, keys):
    for key in keys:
        v = config[key]
        if isinstance(v, str):
            group.attrs[key] = v
        elif isinstance(v, (list, tuple)):
            group.attrs[key] = np.array(v, dtype=np.int64)
        elif isinstance(v, bool) or isinstance(v, (int, np.integer)):
            group.attrs[key] = np.int64(v)
        else:
            group.attrs[key] = np.float64(v)


def write_inputs(directory, positions, features):
    directory.mkdir(parents=True, exist_ok=True)
    positions.astype(np.float32).tofile(directory / "positions.f32")
    features.astype(np.float32).tofile(directory / "features.f32")


def run_driver(command, threads):
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([str(c) for c in command], env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def available_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024.0
    return float("inf")


def time_pytorch(forward, threads, repeats, long_run_s=20.0):
    """Warm-up (its output returned for the check), then `repeats` timed runs (one when the warm-up took
    longer than long_run_s CPU seconds; none with repeats = 0: the warm-up is then the timed run).
    Returns (output, best wall seconds, best process CPU seconds, warm-up CPU seconds)."""
    torch.set_num_threads(threads)
    with torch.inference_mode():
        t0, c0 = time.perf_counter(), time.process_time()
        out = forward()
        first_cpu, first = time.process_time() - c0, time.perf_counter() - t0
        times, cpu = [], []
        for _ in range(repeats if first_cpu < long_run_s else min(repeats, 1)):
            t0, c0 = time.perf_counter(), time.process_time()
            forward()
            cpu.append(time.process_time() - c0)
            times.append(time.perf_counter() - t0)
    if not times:
        return out.detach().numpy(), first, first_cpu, first_cpu
    return out.detach().numpy(), min(times), min(cpu), first_cpu


def run_json(argv):
    """Runs a benchmark driver and returns the JSON record of its last output line; stops with the
    driver's own message when it fails."""
    out = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{Path(str(argv[0])).name} failed (exit status {out.returncode}): "
                         f"{out.stderr.strip() or out.stdout.strip()}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def time_on_device(forward, repeats, device):
    """Best wall seconds of `repeats` runs after a warm-up, synchronising a CUDA device around each (the
    GPU side-by-side scripts); with repeats = 0 the warm-up is the timed run. Returns (output, seconds)."""
    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    best = float("inf")
    with torch.no_grad():
        for r in range(repeats + 1):
            sync()
            t0 = time.perf_counter()
            y = forward()
            sync()
            if r > 0 or repeats == 0:
                best = min(best, time.perf_counter() - t0)
    return y, best


class Extrapolation:
    """Power-law estimate of PyTorch's CPU time and peak memory at a larger N from the sizes measured so
    far (exponent from the last two; `exponent` when only one is known). CPU seconds rather than wall
    seconds: on a machine shared with other jobs the wall time says more about the other jobs."""

    def __init__(self, exponent):
        self.exponent = exponent
        self.points = []  # (n, seconds, extra MiB)

    def add(self, n, seconds, mib):
        self.points.append((n, seconds, mib))

    def estimate(self, n):
        if not self.points:
            return None, None
        if len(self.points) >= 2:
            (n0, t0, m0), (n1, t1, m1) = self.points[-2], self.points[-1]
            p_t = math.log(t1 / t0) / math.log(n1 / n0) if t0 > 0 and t1 > 0 else self.exponent
            p_m = math.log(m1 / m0) / math.log(n1 / n0) if m0 > 0 and m1 > 0 else self.exponent
        else:
            n1, t1, m1 = self.points[-1]
            p_t = p_m = self.exponent
        return t1 * (n / n1) ** p_t, m1 * (n / n1) ** p_m


def header(title, limits=None):
    print(machine.describe(torch))
    if limits:
        print(machine.limits_line(limits))
    print(title)
    print(f"{'N':>7} {'thr':>3} | {'surrogate s':>11} {'cpu s':>8} {'%limit':>6} | {'PyTorch s':>10} {'cpu s':>8} | "
          f"{'speed-up':>8} {'(cpu)':>7} | {'max|diff|':>9} {'max|y|':>8} {'agree':>7} | load")


def row(n, threads, ours, theirs=None, check=None, share=None):
    """ours / theirs: (wall seconds, CPU seconds); check: check_agreement's result; share: share_of_limit's
    result; load: the 1-minute load average after the row."""
    load = os.getloadavg()[0]
    left = f"{n:>7} {threads:>3} | {ours[0]:>11.3f} {ours[1]:>8.3f} {machine.share_text(share)} | "
    if theirs is None:
        print(left + f"{'-':>10} {'-':>8} | {'-':>8} {'-':>7} | {'-':>9} {'-':>8} {'-':>7} | {load:.1f}", flush=True)
        return
    print(left + f"{theirs[0]:>10.3f} {theirs[1]:>8.3f} | {theirs[0] / ours[0]:>7.2f}x {theirs[1] / ours[1]:>6.2f}x | "
          f"{check[0]:>9.2e} {check[1]:>8.2f} {100 * check[2]:>6.2f}% | {load:.1f}", flush=True)


def check_agreement(ours, theirs, label, tolerance, min_fraction):
    """max |ours - theirs|, max |theirs| and the fraction of points whose outputs agree to
    tolerance * max |theirs|. Stops the benchmark when that fraction is below min_fraction (the two
    sides would not be computing the same model)."""
    ours = ours.reshape(theirs.shape).astype(np.float64)
    per_point = np.abs(ours - theirs).reshape(theirs.shape[0], -1).max(axis=1)
    diff = float(per_point.max())
    ymax = float(np.max(np.abs(theirs)))
    fraction = float(np.mean(per_point <= tolerance * max(ymax, 1.0)))
    if not fraction >= min_fraction:
        raise SystemExit(f"{label}: only {100 * fraction:.2f}% of the points agree to {tolerance:g} max|y| (max|diff| "
                         f"{diff:.3e}, max|y| {ymax:.3e}); not timing different models")
    return diff, ymax, fraction


def read_output(directory, shape):
    return np.fromfile(Path(directory) / "surrogate_out.f32", dtype=np.float32).reshape(shape)
