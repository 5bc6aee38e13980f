#!/usr/bin/env python3
"""FLARE forward on the CPU: surrogate (bench_flare) side by side with PyTorch eager (flare_pytorch.py),
same model configuration, same machine, same script, one configuration per process.

    /usr/bin/python3 benchmarks/flare_cpu_vs_pytorch.py [--build build] [--points 16384 65536 262144]
        [--latents 64 256] [--threads 1 2] [--repeats 3] [--skip-pytorch-above N] [--reproducible]

PyTorch gets a fair chance: the reference model streamed over chunks of 2048 points (flare_pytorch.py),
glibc's allocator kept from unmapping large blocks (MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_), ATen's
kernels chosen by PyTorch itself for the CPU it runs on (the widest it supports; set ATEN_CPU_CAPABILITY
yourself to choose), OMP_NUM_THREADS and torch.set_num_threads set to the thread count, and OPENBLAS_NUM_THREADS set explicitly (Debian's torch calls a pthreads OpenBLAS that
torch.set_num_threads does not limit). Its default here is 1 (--pytorch-blas-threads): with two OpenMP
threads, giving OpenBLAS two threads as well oversubscribes the cores and made PyTorch 2.6x slower
on the development machine (43.7 s instead of 16.5 s at N = 262,144, M = 64), so 1 is PyTorch's best. The table also prints this machine's measured FP32 FMA peak and
exp throughput (one core, from bench_flare --machine, per second of thread CPU time) and the fraction of
that limit each run reaches: limit time = GFLOP / (threads x FMA peak) + Gexp / (threads x exp rate),
divided by the median process CPU time at one thread (robust on a shared machine) or wall time at more.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import machine as machine_info  # noqa: E402


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--points", type=int, nargs="+", default=[16384, 65536, 262144, 1048576])
    ap.add_argument("--latents", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-pytorch-above", type=int, default=1 << 30,
                    help="do not run PyTorch above this many points (it takes minutes at 1M)")
    ap.add_argument("--reproducible", action="store_true", help="also time surrogate's reproducible mode")
    ap.add_argument("--pytorch-blas-threads", type=int, default=1,
                    help="OPENBLAS_NUM_THREADS for PyTorch (0: the thread count)")
    ap.add_argument("--pytorch-repeats", type=int, default=None, help="timed PyTorch runs (default: --repeats)")
    args = ap.parse_args()

    bench = Path(args.build) / "benchmarks" / "bench_flare"
    if not bench.exists():
        sys.exit(f"{bench} not found: build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    base_env = dict(os.environ)
    machine = run_json([str(bench), "--machine"], {**base_env, "OMP_NUM_THREADS": "1"})
    import torch  # only to report the kernels it picks here; the timed PyTorch runs are child processes
    print(machine_info.describe(torch))
    print(f"limits: FP32 FMA peak {machine['fma_gflops_1t']:.0f} GFLOP/s per core, "
          f"softmax exp {machine['exp_gexps_1t']:.2f} Gexp/s per core (bench_flare --machine, one core)")
    header = (f"{'N':>9} {'M':>4} {'thr':>3} | {'surrogate s':>11} {'GFLOP/s':>8} {'%limit':>6} {'MiB':>6} | "
              f"{'PyTorch s':>10} {'GFLOP/s':>8} {'MiB':>6} | {'speed-up':>8}")
    print(header)
    print("-" * len(header))
    for latents in args.latents:
        for points in args.points:
            for threads in args.threads:
                env = {**base_env, "OMP_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads)}
                common = ["--points", str(points), "--latents", str(latents), "--threads", str(threads),
                          "--repeats", str(args.repeats)]
                ours = run_json([str(bench), "--json", *common], env)
                medians = {**ours, "best_s": ours["median_s"], "best_cpu_s": ours["median_cpu_s"]}
                share = machine_info.share_of_limit(medians, threads, machine)
                row = (f"{points:>9} {latents:>4} {threads:>3} | {ours['median_s']:>11.3f} "
                       f"{ours['gflop'] / ours['median_s']:>8.1f} {machine_info.share_text(share)} "
                       f"{ours['peak_rss_mib']:>6.0f} | ")
                if points <= args.skip_pytorch_above:
                    blas = args.pytorch_blas_threads or threads
                    torch_env = {**env, "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "100000000000",
                                 "OPENBLAS_NUM_THREADS": str(blas)}
                    torch_args = list(common)
                    if args.pytorch_repeats:
                        torch_args[-1] = str(args.pytorch_repeats)
                    theirs = run_json([sys.executable, str(HERE / "flare_pytorch.py"), *torch_args], torch_env)
                    row += (f"{theirs['median_s']:>10.3f} {ours['gflop'] / theirs['median_s']:>8.1f} "
                            f"{theirs['peak_rss_mib']:>6.0f} | {theirs['median_s'] / ours['median_s']:>7.2f}x")
                else:
                    row += f"{'(skipped)':>10} {'':>8} {'':>6} | {'':>8}"
                print(row, flush=True)
                if args.reproducible:
                    exact = run_json([str(bench), "--json", "--reproducible", *common], env)
                    print(f"{'':>9} {'':>4} {'':>3} | {exact['median_s']:>11.3f} "
                          f"{exact['gflop'] / exact['median_s']:>8.1f}   (reproducible mode: "
                          f"{exact['median_s'] / ours['median_s']:.2f}x the default)", flush=True)


if __name__ == "__main__":
    main()
