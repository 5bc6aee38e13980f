#!/usr/bin/env python3
"""BSA forward on a GPU: surrogate's device forward (bsa_gpu_bench) next to the official BSA Transformer on the
same GPU, same weights and inputs: the configuration of benchmarks/bsa_cpu_vs_pytorch.py (D 64, H 8, P 256,
depth 18, random weights, seed 0), one sample of N points in the unit cube with normal features (seed 1),
float32, TF32 off; the outputs are compared before any timing is printed.

    VENV/bin/python benchmarks/gpu/bsa_gpu_vs_pytorch.py --build build --official BSA_DIR \\
        [--sizes 100000 1000000] [--attention sparse ball] [--repeats 5] [--device cuda] [--cuda-device 0]

BSA_DIR: the folder holding the official transformer.py and native_sparse_attention.py, as for
benchmarks/bsa_cpu_vs_pytorch.py (imported at run time; nothing of it is in this repository); VENV: torch 2.x
with CUDA, einops and balltree-erwin (the official forward builds its ball trees with it, on the host).
The official sparse layers wrap themselves in torch.compile (inductor); that is kept (--eager: without), and
a compile that fails falls back to eager (a line before that size's row says so).

surrogate columns (milliseconds, bsa_gpu_bench): `tree` = the ball trees built on the host; `device` =
CUDA-event time of a forward on the kept geometry (plan reused); `wall` = its wall time; `full` = trees +
geometry upload + forward, what the official forward does in every call (it builds its trees inside).
PyTorch: wall time of model(x, pos, batch) between torch.cuda.synchronize() calls, best of --repeats after
a warm-up. Speed-up = PyTorch / full (and PyTorch / wall for a reused plan).

Agreement, before the timing: a point agrees when its outputs are within --tolerance (1e-2) max|y| of the
official ones and at least --min-agree (30 %) of the points must: the rule of bsa_cpu_vs_pytorch.py.
Near-ties of the top-S block selection, rounded differently by two float32 computations, pick other
blocks and the difference spreads through 18 layers (at 65,536 points the official float32 output is as
far from its float64 output as ours); a different model agrees nowhere. Ball attention has no selection:
there only float32 rounding separates the two (1.1e-3 at most on max|y| 61, 2e-5 of it, with --device cpu
--cuda-device cuda-emulated at 2,000 and 4,096 points), and --attention ball --min-agree 1.0 --tolerance
1e-3 checks that tighter. bsa_gpu_bench checks its device forward against its CPU forward first by the same
1e-2 rule (its share is printed as `dev/cpu`).

The official sparse layer's importance scores hold H (N_pad / 8)^2 floats (N_pad: N rounded up to 256
times a power of two): 8.6 GB at 100,000 points, 550 GB at 1,000,000. A size whose estimate exceeds the
free device memory is not run on the PyTorch side; the line says so and gives surrogate's figures alone.
"""
import argparse
import contextlib
import io
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "share" / "python"))
sys.path.insert(0, str(HERE.parent))
import bsa_cpu_vs_pytorch as cpu_bench  # noqa: E402  (CONFIG, write_model, official_transformer)
import side_by_side as sbs  # noqa: E402
from surrogate_ref.bsa import expected_state_shapes  # noqa: E402


def importance_bytes(n, config):
    """Bytes of one official sparse layer's importance scores (float32, H x blocks x blocks) for n points."""
    ball = config["ball_size"]
    padded = ball * 2 ** max(0, math.ceil(math.log2(n / ball)))
    return 4 * config["num_heads"] * (padded // 8) ** 2


def free_bytes(device):
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    return sbs.available_mib() * 2**20


def official(official_dir, config, state, device, compiled):
    with contextlib.redirect_stdout(io.StringIO()):  # the official layers print their attention type
        return cpu_bench.official_transformer(official_dir, config, state, compile_layers=compiled).to(device)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(HERE.parent.parent / "build"))
    ap.add_argument("--official", required=True, help="folder of the official transformer.py and "
                    "native_sparse_attention.py")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100000, 1000000])
    ap.add_argument("--attention", nargs="+", choices=["sparse", "ball"], default=["sparse", "ball"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="PyTorch device (cuda, cuda:N, or cpu to check the script)")
    ap.add_argument("--cuda-device", default="0", help="surrogate's device index (or cuda-emulated)")
    ap.add_argument("--eager", action="store_true", help="without the official sparse layers' torch.compile")
    ap.add_argument("--official-rotation", choices=["torch", "library"], default="library",
                    help="how the official run rounds its tree rotation: as the library does (default: the "
                         "GPU's fused multiply-adds move a few points into other rotated balls at large N, and "
                         "the sparse selection spreads that), or as torch.matmul on the device does")
    ap.add_argument("--tolerance", type=float, default=1e-2)
    ap.add_argument("--min-agree", type=float, default=0.3)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    bench = Path(args.build) / "benchmarks" / "gpu" / "bsa_gpu_bench"
    if not bench.exists():
        sys.exit(f"{bench} not found: a CUDA build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    dev = args.device
    print(sbs.machine.describe(torch) + (f"; GPU {torch.cuda.get_device_name(dev)}" if dev.startswith("cuda")
                                         else "; PyTorch on the CPU (a check of the script)"))
    print(f"BSA forward, one sample, D 64, H 8, P 256, depth 18, random weights; PyTorch: official Transformer "
          f"(torch {torch.__version__}, {dev}, TF32 off, sparse layers {'eager' if args.eager else 'torch.compile'}, "
          f"tree rotation rounded as {'the library' if args.official_rotation == 'library' else 'torch.matmul'}); "
          f"surrogate device {args.cuda_device}; best of {args.repeats} after a warm-up; agreement: |diff| <= "
          f"{args.tolerance:g} max|y| on >= {100 * args.min_agree:g} % of the points")
    print(f"{'attention':>9} {'N':>8} | {'tree ms':>8} {'device ms':>9} {'wall ms':>8} {'full ms':>8} {'dev/cpu':>7} | "
          f"{'PyTorch ms':>10} | {'x full':>6} {'x wall':>6} | {'agree':>6} {'max|diff|':>9} {'max|y|':>8}")
    disagreed = False
    with tempfile.TemporaryDirectory() as tmp:
        for attention in args.attention:
            config = dict(cpu_bench.CONFIG, attention_type=attention)
            state = sbs.random_state(expected_state_shapes(config), np.random.default_rng(0))
            model_path = Path(tmp) / f"bsa_{attention}.h5"
            cpu_bench.write_model(model_path, config, state)
            compiled = attention == "sparse" and not args.eager
            model = official(args.official, config, state, dev, compiled)
            rng = np.random.default_rng(1)
            for n in args.sizes:
                data = Path(tmp) / f"{attention}_n{n}"
                pos = rng.random((n, 3)).astype(np.float32)
                feat = rng.standard_normal((n, config["c_in"])).astype(np.float32)
                sbs.write_inputs(data, pos, feat)
                r = sbs.run_json([bench, model_path, data, args.repeats, args.cuda_device])
                if not r["agree"] >= 0.3:
                    sys.exit(f"{attention} N {n}: only {100 * r['agree']:.1f} % of the points of surrogate's device "
                             f"forward agree with its CPU forward within 1e-2 max|y|; no timing printed")
                ours = (f"{r['tree_ms']:>8.2f} {r['device_ms']:>9.2f} {r['wall_ms']:>8.2f} {r['full_ms']:>8.2f} "
                        f"{r['agree']:>7.3f}")
                alone = (f"{attention:>9} {n:>8}: surrogate alone, full {r['full_ms']:.2f} ms, wall {r['wall_ms']:.2f} "
                         f"ms, device {r['device_ms']:.2f} ms; PyTorch not run: ")
                need = importance_bytes(n, config) if attention == "sparse" else 0
                if need > 0.8 * free_bytes(dev):
                    print(alone + f"its importance scores need {need / 2**30:.0f} GiB, "
                          f"{free_bytes(dev) / 2**30:.0f} GiB free", flush=True)
                    continue
                x, p = torch.from_numpy(feat).to(dev), torch.from_numpy(pos).to(dev)
                b = torch.zeros(n, dtype=torch.long, device=dev)
                def timed():
                    with cpu_bench.rotation_as_library(args.official_rotation == "library"):
                        return sbs.time_on_device(lambda: model(x, p, b), args.repeats, dev)
                try:
                    y, best = timed()
                except torch.cuda.OutOfMemoryError as e:
                    print(alone + f"out of device memory ({str(e).splitlines()[0][:100]})", flush=True)
                    torch.cuda.empty_cache()
                    continue
                except Exception as e:  # noqa: BLE001  (inductor missing or failing on this machine)
                    if not compiled:
                        raise
                    print(f"  torch.compile of the official sparse layers failed ({type(e).__name__}: "
                          f"{str(e).splitlines()[0][:120]}); eager from here on", flush=True)
                    compiled = False
                    model = official(args.official, config, state, dev, False)
                    y, best = timed()
                y = y.detach().cpu().numpy().astype(np.float64)
                try:
                    check = sbs.check_agreement(sbs.read_output(data, y.shape), y, f"{attention} N {n}",
                                                args.tolerance, args.min_agree)
                except SystemExit as e:  # reported, no timing; the other sizes and attentions still run
                    print(f"  {e}", flush=True)
                    disagreed = True
                    continue
                print(f"{attention:>9} {n:>8} | {ours} | {1e3 * best:>10.2f} | {1e3 * best / r['full_ms']:>6.2f} "
                      f"{1e3 * best / r['wall_ms']:>6.2f} | {check[2]:>6.3f} {check[0]:>9.2e} {check[1]:>8.3g}",
                      flush=True)
    if disagreed:
        sys.exit("some sizes disagreed with the official outputs (above); they were not timed")


if __name__ == "__main__":
    main()
