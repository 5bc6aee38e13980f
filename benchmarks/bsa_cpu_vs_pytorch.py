#!/usr/bin/env python3
"""BSA forward on the CPU: surrogate (bsa_bench) side by side with PyTorch eager, same model configuration
(the BSA benchmark's: c_in 64, c_hidden 64, depth 18, 8 heads, block_size 6, mlp_ratio 4, ball_size 256,
rotation 45 degrees, NativeSparseAttention defaults C = G = 8, S = 4), one sample of random points in the
unit cube, same machine, same script, both on --threads threads (torch.set_num_threads).

    python benchmarks/bsa_cpu_vs_pytorch.py [--build build] [--points 4096 16384] [--threads 1]
        [--repeats 3] [--official DIR]

PyTorch side: the official Transformer when --official names a directory holding its transformer.py and
native_sparse_attention.py (run this script with a torch 2.x that has nn.RMSNorm and the balltree-erwin
package, e.g. /work/venv-official/bin/python), otherwise our reference share/python/surrogate_ref/bsa.py
with the trees from balltree-erwin. Both time the whole forward including the ball trees, eager, no
torch.compile (the official TransformerLayer compiles the sparse module with inductor for the GPU).
Weights are random (the timings do not depend on them); the model file for surrogate is written from the
same weights into a temporary directory.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "share" / "python"))
from surrogate_ref.bsa import BSAModel, CONFIG_KEYS, complete_config, expected_state_shapes  # noqa: E402

CONFIG = dict(c_in=64, c_hidden=64, depth=18, num_heads=8, block_size=6, mlp_ratio=4, dimensionality=3,
              ball_size=256, should_rotate=True, rotation_angle=45.0, attention_type="sparse")


def random_state(rng):
    state = {}
    for k, shape in expected_state_shapes(CONFIG).items():
        fan_in = shape[1] if len(shape) == 2 else 1
        v = rng.standard_normal(shape) / np.sqrt(fan_in)
        if k.endswith("sigma_att"):
            v = -1.0 + 0.1 * v
        state[k] = torch.from_numpy(v.astype(np.float32))
    return state


def write_model(path, state):
    flat = complete_config(CONFIG)
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "surrogate-model"
        f.attrs["format_version"] = np.int64(1)
        f.attrs["architecture"] = "bsa"
        f.attrs["source"] = "britacatalin/bsa@unknown"
        c = f.create_group("config")
        for key in CONFIG_KEYS:
            v = flat[key]
            c.attrs[key] = v if isinstance(v, str) else (np.float64(v) if isinstance(v, float) else np.int64(v))
        w = f.create_group("weights")
        for k, v in state.items():
            w.create_dataset(k, data=v.numpy())


def pytorch_forward(official_dir, state):
    from balltree import build_balltree_with_rotations
    if official_dir:
        sys.path.insert(0, official_dir)
        import transformer as official
        cfg = dict(CONFIG, attention_kwargs=None)
        model = official.Transformer(official.TransformerConfig(**cfg)).eval()
        model.load_state_dict(state)
        return lambda x, p, b: model(x, p, b), "official Transformer"
    model = BSAModel(CONFIG)
    model.load_official_state_dict(state)

    def run(x, p, b):
        idx, mask, rot = build_balltree_with_rotations(p, b, [1], [CONFIG["ball_size"]] * 2, CONFIG["rotation_angle"])
        return model(x, p, idx, mask, rot[1], 1)
    return run, "surrogate_ref/bsa.py"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--points", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--official", help="directory holding the official transformer.py")
    args = ap.parse_args()
    bench = Path(args.build) / "benchmarks" / "bsa_bench"
    if not bench.exists():
        sys.exit(f"{bench} not found: build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    state = random_state(rng)
    forward, label = pytorch_forward(args.official, state)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    print(f"BSA forward, one sample, D 64, H 8, P 256, depth 18, {args.threads} thread(s); PyTorch side: {label} "
          f"(torch {torch.__version__})")
    print(f"{'N':>7} | {'surrogate s':>11} | {'PyTorch s':>9} | {'speed-up':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / "bsa.h5"
        write_model(model_path, state)
        for n in args.points:
            out = subprocess.run([str(bench), str(model_path), str(n), str(args.threads), str(args.repeats)], env=env,
                                 check=True, capture_output=True, text=True).stdout
            ours = json.loads(out.strip().splitlines()[-1])["best_s"]
            x = torch.from_numpy(rng.standard_normal((n, 64)).astype(np.float32))
            p = torch.from_numpy(rng.random((n, 3)).astype(np.float32))
            b = torch.zeros(n, dtype=torch.long)
            times = []
            with torch.no_grad():
                forward(x, p, b)  # warm-up
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    forward(x, p, b)
                    times.append(time.perf_counter() - t0)
            theirs = min(times)
            print(f"{n:>7} | {ours:>11.3f} | {theirs:>9.3f} | {theirs / ours:>7.2f}x")


if __name__ == "__main__":
    main()
