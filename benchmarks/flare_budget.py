#!/usr/bin/env python3
"""FLARE's forward as a budget of its kernels (issue 21 part 1; benchmarks/README.md, "The FLARE forward's
budget"): each kernel's share of the machine limit from bench_kernels (dense 64 -> 64 layers with and
without GELU, the latent encode and decode at head width 8), weighted by how much of the forward's counted
arithmetic it does, gives the share the forward can reach with these kernels, next to the measured one.

  SURROGATE_CPU_ISA=avx2 benchmarks/flare_budget.py [--build build] [--latents 64 256] [--points 65536]
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402

# The official defaults (libsurrogate/include/surrogate/flare.hpp): C = 64, 8 heads of width 8, and per block
# three ResidualMLPs of num_layers 3 (5 Linear layers, 4 with GELU) plus the output projection.
C, H, E = 64, 8, 8
GELU_LAYERS, PLAIN_LAYERS = 12, 4


def kernel_rates(build, env):
    """{benchmark name: (FLOP/s, exp/s)} for the dense layers and the latent encode/decode."""
    program = Path(build) / "benchmarks" / "bench_kernels"
    out = subprocess.run([str(program), "--benchmark_filter=BM_linear/64/[01]$|BM_latent/(64|256)/[012]$",
                          "--benchmark_format=json", "--benchmark_min_time=0.5", "--benchmark_repetitions=3",
                          "--benchmark_report_aggregates_only=true"],
                         env=env, check=True, capture_output=True, text=True).stdout
    rates = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            rates[b["run_name"]] = (b.get("FLOP/s", 0.0), b.get("exp/s", 0.0))
    return rates


def forward_share(build, env, points, latents, limits):
    """The measured forward's share of the limit (bench_flare --json, one thread)."""
    program = Path(build) / "benchmarks" / "bench_flare"
    out = subprocess.run([str(program), "--points", str(points), "--latents", str(latents), "--threads", "1",
                          "--repeats", "3", "--json"], env=env, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["best_cpu_s"] = result["median_cpu_s"]
    return machine.share_of_limit(result, 1, limits)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--latents", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--points", type=int, default=65536, help="for the measured forward (0: skip it)")
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    limits = machine.machine_limits(args.build)
    if limits is None:
        sys.exit(f"flare_budget: {args.build}/benchmarks/machine_limits not built")
    peak, exps = limits["fma_gflops_1t"] * 1e9, limits["exp_gexps_1t"] * 1e9
    print(machine.describe())
    print(machine.limits_line(limits))
    rates = kernel_rates(args.build, env)

    def share(name):
        flops, e = rates[name]
        return flops / peak + e / exps

    for M in args.latents:
        # Limit time per point and block (ns) of each part: the counted FLOPs at the peak, exponentials at
        # the exp rate (as bench_flare counts them), and the kernel's share of its own limit.
        dense = 2.0 * C * C / peak * 1e9
        attend = 4.0 * M * E * H / peak * 1e9 + M * H / exps * 1e9
        parts = [("dense + GELU", GELU_LAYERS * dense, share("BM_linear/64/1")),
                 ("dense", PLAIN_LAYERS * dense, share("BM_linear/64/0")),
                 ("encode (double sums)", attend, share(f"BM_latent/{M}/0")),
                 ("decode", attend, share(f"BM_latent/{M}/1"))]
        print(f"\nM = {M}: per point and block            limit ns   kernel %limit   ns at that share")
        for name, limit, s in parts:
            print(f"  {name:<36} {limit:8.1f}   {100 * s:12.0f}%   {limit / s:14.1f}")

        def bound(items):
            return sum(l for _, l, _ in items) / sum(l / s for _, l, s in items)

        print(f"  the forward at these kernels' shares: {100 * bound(parts):.0f}%")
        free_gelu = [parts[0][:2] + (parts[1][2],)] + parts[1:]
        float_sums = parts[:2] + [(parts[2][0], parts[2][1], share(f"BM_latent/{M}/2"))] + parts[3:]
        both = free_gelu[:2] + float_sums[2:]
        print(f"  with a GELU that cost nothing: {100 * bound(free_gelu):.0f}%; with float encode sums: "
              f"{100 * bound(float_sums):.0f}%; both: {100 * bound(both):.0f}%")
        if args.points:
            print(f"  measured (bench_flare --points {args.points}, one thread): "
                  f"{100 * forward_share(args.build, env, args.points, M, limits):.0f}%")


if __name__ == "__main__":
    main()
