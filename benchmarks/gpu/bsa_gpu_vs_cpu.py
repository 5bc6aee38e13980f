#!/usr/bin/env python3
"""BSA forward on a GPU: surrogate's device forward (bsa_gpu_bench) next to its CPU forward on all cores,
same model and inputs: the configuration of benchmarks/bsa_cpu_vs_pytorch.py (D 64, H 8, P 256, depth 18,
random weights, seed 0), one sample of N points in the unit cube with normal features; the outputs are
compared first: a point agrees when its outputs are within 1e-2 max|y| of the CPU's, and at least 30 % must,
the rule of benchmarks/bsa_cpu_vs_pytorch.py (near-ties of the top-S block selection, rounded differently by
two float32 computations, pick other blocks and spread through 18 layers: at 65,536 points the official
float32 output is as far from its float64 output); the share within 1e-3 is printed too. Where it has run:
share/docs/cuda-results.md.

    python3 benchmarks/gpu/bsa_gpu_vs_cpu.py --build build [--sizes 16384 65536] [--attention sparse ball]
        [--repeats 5] [--device 0|cuda-emulated] [--threads T] [--precision fp32|tf32|bf16]

Columns (milliseconds): `device` = CUDA-event time of a forward on the kept geometry (features upload, the
network with the top-S selection, result download); `wall` = its wall time; `full` = the trees
built on the host + geometry upload + forward, what the official forward does in every call; `CPU` = the
CPU forward on the same trees. Speed-up = CPU / wall. --precision: the device forward's dense layers (tf32 /
bf16 on the tensor cores; the CPU stays fp32, so the agreement then reads the precision's error too). In tf32
and bf16 the sparse attention's top-S selection picks other blocks wherever the rounded scores reorder
near-ties, so its agreement is printed, not required (the golden tests bound those precisions' errors:
share/docs/cuda.md, "Precision"); the ball attention, which selects nothing, must still agree. No PyTorch
side: the official code needs the balltree-erwin package (bsa_gpu_vs_pytorch.py; benchmarks/bsa_cpu_vs_pytorch.py
runs it on a CPU).
"""
import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "share" / "python"))
sys.path.insert(0, str(HERE.parent))
import bsa_cpu_vs_pytorch as cpu_bench  # noqa: E402  (CONFIG, write_model)
import side_by_side as sbs  # noqa: E402
from surrogate_ref.bsa import expected_state_shapes  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(HERE.parent.parent / "build"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[16384, 65536])
    ap.add_argument("--attention", nargs="+", choices=["sparse", "ball"], default=["sparse", "ball"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="0", help="surrogate's CUDA device index, or cuda-emulated")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: all)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"],
                    help="the device forward's dense layers")
    args = ap.parse_args()
    bench = Path(args.build) / "benchmarks" / "gpu" / "bsa_gpu_bench"
    if not bench.exists():
        sys.exit(f"{bench} not found: a CUDA build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    print(f"device forward in {args.precision}")
    print(f"{'attention':>9} {'N':>8} | {'device ms':>9} {'wall ms':>8} {'full ms':>8} | {'CPU ms':>9} {'thr':>3} | "
          f"{'speed-up':>8} | {'agree':>6} {'(1e-3)':>6} {'max|diff|':>9} {'max|y|':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for attention in args.attention:
            config = dict(cpu_bench.CONFIG, attention_type=attention)
            state = sbs.random_state(expected_state_shapes(config), np.random.default_rng(0))
            model = Path(tmp) / f"bsa_{attention}.h5"
            cpu_bench.write_model(model, config, state)
            rng = np.random.default_rng(1)
            for n in args.sizes:
                data = Path(tmp) / f"{attention}_n{n}"
                sbs.write_inputs(data, rng.random((n, 3)).astype(np.float32),
                                 rng.standard_normal((n, config["c_in"])).astype(np.float32))
                argv = [str(bench), str(model), str(data), str(args.repeats), args.device]
                argv += [str(args.threads), args.precision]
                r = sbs.run_json(argv)
                required = args.precision == "fp32" or attention == "ball"
                if required and not r["agree"] >= 0.3:
                    sys.exit(f"{attention} N {n}: only {100 * r['agree']:.1f} % of the points agree with the CPU "
                             f"within 1e-2 max|y| "
                             f"(max|diff| {r['max_diff']:.3e}, max|y| {r['max_abs_y']:.3e}); not timing different "
                             "models")
                print(f"{attention:>9} {n:>8} | {r['device_ms']:>9.2f} {r['wall_ms']:>8.2f} {r['full_ms']:>8.2f} | "
                      f"{r['cpu_forward_ms']:>9.2f} {r['cpu_threads']:>3} | {r['speedup']:>8.2f} | "
                      f"{r['agree']:>6.3f} {r['agree_1e3']:>6.3f} {r['max_diff']:>9.2e} {r['max_abs_y']:>8.3g}"
                      + ("" if required else f"  ({args.precision}: other blocks selected, agreement not required)"),
                      flush=True)


if __name__ == "__main__":
    main()
