#!/usr/bin/env python3
"""HEPT forward on the CPU: surrogate (hept_bench) side by side with the official example/ Transformer of
Graph-COM/HEPT in PyTorch eager, the shipped tracking-60k checkpoint (share/models/hept/) on both sides,
the same synthetic collider event (helix tracks and noise, features and coordinates as the Tracking data
set builds them: share/tools/golden/hept_golden.py), one graph of N hits. Both sides time the whole
forward: region codes, padding, the LSH sorts and the network. Outputs are compared before the timing.

    VENV/bin/python benchmarks/hept_cpu_vs_pytorch.py --build build --official HEPT_CHECKOUT \\
        [--sizes 10000 60000 240000] [--threads 1 2] [--precision fp32 fp64] [--repeats 2]

VENV: a virtual environment outside the repository with torch 2.x, torch_geometric (the official code's
MLP), einops and h5py; HEPT_CHECKOUT: a checkout of github.com/Graph-COM/HEPT (its example/ folder is
imported at run time; nothing of it is in this repository).

Agreement: in fp64 the two sides compute the same buckets (the library sorts stably, the official
argsort does not, which only matters for tied keys: the padding duplicates), so nearly every point
agrees to 1e-6 max|y|. In fp32 the shipped checkpoint is ill-conditioned (share/docs/hept.md): the
official fp32 output is itself off from its fp64 output by up to about 6 (max|y| about 50) in a few
percent of the points, so fp32 agreement is checked at 1e-2 max|y| on most points only.
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "share" / "tools" / "golden"))
import machine  # noqa: E402
import side_by_side as sbs  # noqa: E402

CHECK = {"fp32": (1e-2, 0.9), "fp64": (1e-6, 0.99)}  # tolerance (x max|y|), smallest agreeing fraction


def official_model(root, dtype, models=ROOT / "share" / "models" / "hept", device="cpu"):
    """The official example/ Transformer of a Graph-COM/HEPT checkout (or of a copy of its example/ folder)
    with the shipped checkpoint."""
    root = Path(root).resolve()
    sys.path.insert(0, str(root if (root / "transformer.py").is_file() else root / "example"))
    import transformer as official  # noqa: E402  (the official example/transformer.py)
    cfg = json.loads((Path(models) / "config.json").read_text())
    kw = {k: v for k, v in cfg.items() if k not in ("in_dim", "coords_dim", "num_classes", "dropout")}
    model = official.Transformer(cfg["in_dim"], cfg["coords_dim"], cfg["num_classes"], dropout=cfg["dropout"], **kw)
    state = torch.load(Path(models) / "tracking-60k-model.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)
    return model.to(dtype).to(device).eval()


def write_event(directory, n, seed):
    """The synthetic collider event of n hits (the golden data's generator) as the drivers read it:
    directory/features.f32 and coords.f32. Returns (features, coords), float64."""
    from hept_golden import tracking_event  # numpy only
    x, coords = tracking_event(np.random.default_rng(seed + n), n)
    Path(directory).mkdir(parents=True, exist_ok=True)
    x.astype(np.float32).tofile(Path(directory) / "features.f32")
    coords.astype(np.float32).tofile(Path(directory) / "coords.f32")
    return x, coords


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--official", required=True, help="a checkout of Graph-COM/HEPT")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 60000, 240000])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--precision", nargs="+", choices=["fp32", "fp64"], default=["fp32", "fp64"])
    ap.add_argument("--repeats", type=int, default=2, help="timed runs after the warm-up (best reported)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    bench = Path(args.build) / "benchmarks" / "hept_bench"
    if not bench.exists():
        sys.exit(f"{bench} not found: build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    model_path = ROOT / "share" / "models" / "hept" / "model.h5"
    limits = machine.machine_limits(args.build)  # FP32 limits: the share is printed for fp32 only
    for precision in args.precision:
        dtype = torch.float32 if precision == "fp32" else torch.float64
        model = official_model(args.official, dtype)
        sbs.header(f"HEPT forward, shipped tracking-60k checkpoint, one event, {precision} on both sides; "
                   f"PyTorch side: official example/ Transformer (torch {torch.__version__}); best of "
                   f"{args.repeats} after a warm-up; agreement: |diff| <= {CHECK[precision][0]:g} max|y|",
                   limits if precision == "fp32" else None)
        with tempfile.TemporaryDirectory() as tmp:
            for n in args.sizes:
                data = Path(tmp) / f"n{n}"
                x, coords = write_event(data, n, args.seed)
                xt = torch.from_numpy(x).to(dtype)
                ct = torch.from_numpy(coords).to(dtype)
                batch = torch.zeros(len(x), dtype=torch.long)
                for threads in args.threads:
                    result = sbs.run_driver([bench, model_path, data, threads, args.repeats, precision], threads)
                    ours = (result["best_s"], result["best_cpu_s"])
                    y, wall, cpu, _ = sbs.time_pytorch(lambda: model(xt, ct, batch), threads, args.repeats)
                    check = sbs.check_agreement(sbs.read_output(data, y.shape), y.astype(np.float64),
                                                f"N {n} {precision}", *CHECK[precision])
                    share = machine.share_of_limit(result, threads, limits) if precision == "fp32" else None
                    sbs.row(len(x), threads, ours, (wall, cpu), check, share=share)


if __name__ == "__main__":
    main()
