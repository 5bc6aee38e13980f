#!/usr/bin/env python3
"""BSA forward on the CPU: surrogate (bsa_bench) side by side with PyTorch eager, same weights, same
inputs (one sample of N random points in the unit cube, normal features), outputs compared before the
timing. Model (the BSA benchmark's ShapeNet-Car configuration): c_in 64, c_hidden 64, depth 18, 8 heads
(head width 8), block_size 6, mlp_ratio 4, ball_size 256, rotation 45 degrees, NativeSparseAttention
defaults C = G = 8, S = 4 (coarse-q attention and importance, own-ball masking, token gate, compression
MLPs; 1.74 M parameters). With --attention ball the same model with plain ball-256 attention (no coarse
and fine branches).

    VENV/bin/python benchmarks/bsa_cpu_vs_pytorch.py --build build --official DIR \\
        [--sizes 4096 16384 65536 262144] [--threads 1 2] [--repeats 2] [--pytorch-max-s 300]

PyTorch side: the official Transformer when --official names a directory holding its transformer.py and
native_sparse_attention.py (a torch 2.x with nn.RMSNorm and balltree-erwin, e.g. a virtual environment VENV
outside the repository),
otherwise our reference share/python/surrogate_ref/bsa.py (trees from balltree-erwin). Both time the
whole forward including the ball trees, eager (the official layer's torch.compile is for the GPU). A
PyTorch run whose power-law estimate from the smaller sizes exceeds --pytorch-max-s seconds or the
available memory is skipped with the estimate printed; surrogate still runs.
"""
import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "share" / "python"))
sys.path.insert(0, str(HERE))
from surrogate_ref.bsa import BSAModel, CONFIG_KEYS, complete_config, expected_state_shapes  # noqa: E402
import machine  # noqa: E402
import side_by_side as sbs  # noqa: E402

CONFIG = dict(c_in=64, c_hidden=64, depth=18, num_heads=8, block_size=6, mlp_ratio=4, dimensionality=3,
              ball_size=256, should_rotate=True, rotation_angle=45.0, attention_type="sparse")


def write_model(path, config, state):
    flat = complete_config(config)
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "surrogate-model"
        f.attrs["format_version"] = np.int64(1)
        f.attrs["architecture"] = "bsa"
        f.attrs["source"] = "britacatalin/bsa@unknown"
        sbs.write_config_attrs(f.create_group("config"), flat, CONFIG_KEYS)
        w = f.create_group("weights")
        for k, v in state.items():
            w.create_dataset(k, data=v.numpy())


@contextlib.contextmanager
def rotation_as_library(enabled=True):
    """While active, the official tree rotation `torch.matmul(leaves, R)` (float32 leaves with 2 or 3
    columns, R square of that size) is computed with every product and sum rounded on its own, as the
    library and the golden data round it; every other matmul is unchanged. PyTorch's own rounding of that
    product depends on the machine (fused multiply-adds with MKL on Intel AVX-512 CPUs and on GPUs), and
    a rotated coordinate one ulp off can move a point into another rotated ball at large N
    (share/docs/balltree.md, "Rotated trees")."""
    matmul = torch.matmul

    def rotate(a, b, *args, **kwargs):
        if (not args and not kwargs and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dim() == 2 and b.dim() == 2 and a.dtype == torch.float32 and a.shape[1] in (2, 3)
                and tuple(b.shape) == (a.shape[1], a.shape[1])):
            y = a[:, 0:1] * b[0:1, :]
            for i in range(1, a.shape[1]):
                y = y + a[:, i:i + 1] * b[i:i + 1, :]
            return y
        return matmul(a, b, *args, **kwargs)

    if enabled:
        torch.matmul = rotate
    try:
        yield
    finally:
        torch.matmul = matmul


def official_transformer(official_dir, config, state, compile_layers=False):
    """The official Transformer (transformer.py of `official_dir`) in eval mode with `state`. Its sparse
    layers wrap themselves in torch.compile; that is kept only with compile_layers (the state's keys are
    then matched to the wrappers' `_orig_mod.` ones), else the model is eager."""
    if official_dir not in sys.path:
        sys.path.insert(0, official_dir)
    import transformer as official
    kwargs = {"ball_size": 256} if config["attention_type"] == "ball" else None  # attention_ball_size
    compile_ = torch.compile
    if not compile_layers:
        torch.compile = lambda module, *a, **k: module
    try:
        model = official.Transformer(official.TransformerConfig(**dict(config, attention_kwargs=kwargs))).eval()
    finally:
        torch.compile = compile_
    model.load_state_dict({k: state[k.replace("._orig_mod", "")] for k in model.state_dict()})
    return model


def pytorch_model(official_dir, config, state):
    from balltree import build_balltree_with_rotations
    if official_dir:
        model = official_transformer(official_dir, config, state)
        return lambda x, p, b: model(x, p, b), "official Transformer"
    model = BSAModel(config)
    model.load_official_state_dict(state)

    def run(x, p, b):
        idx, mask, rot = build_balltree_with_rotations(p, b, [1], [config["ball_size"]] * 2, config["rotation_angle"])
        return model(x, p, idx, mask, rot[1], 1)
    return run, "surrogate_ref/bsa.py"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384, 65536])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--repeats", type=int, default=2,
                    help="timed runs after the warm-up (best reported; one when a PyTorch warm-up took over "
                         "20 CPU s; 0: the warm-up is the timed run)")
    ap.add_argument("--attention", choices=["sparse", "ball"], default="sparse")
    ap.add_argument("--official", help="directory holding the official transformer.py")
    ap.add_argument("--official-rotation", choices=["torch", "library"], default="torch",
                    help="how the official run rounds its tree rotation: as this machine's torch.matmul does "
                         "(default), or as the library does (see rotation_as_library)")
    ap.add_argument("--pytorch-max-s", type=float, default=300.0,
                    help="skip PyTorch where its estimated CPU seconds (warm-up + timed runs) exceed this")
    ap.add_argument("--tolerance", type=float, default=1e-2,
                    help="a point agrees when its largest output difference is below tolerance * max|y| (the "
                         "official float32 output itself is off from its float64 output by up to about 1e-2 "
                         "max|y| at N = 16384: benchmarks/RESULTS.md)")
    ap.add_argument("--min-agree", type=float, default=0.3,
                    help="smallest fraction of agreeing points accepted. Near-ties in the top-S selections, "
                         "rounded differently by two float32 computations, pick other blocks, and with 18 "
                         "layers this spreads: at N = 65,536 the official float32 output is as far from its "
                         "float64 output as ours (benchmarks/RESULTS.md), 47%% of the points agree; a different "
                         "model would agree nowhere")
    args = ap.parse_args()
    bench = Path(args.build) / "benchmarks" / "bsa_bench"
    if not bench.exists():
        sys.exit(f"{bench} not found: build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    config = dict(CONFIG, attention_type=args.attention)  # ball: attention_ball_size 256 (the default)
    rng = np.random.default_rng(0)
    state = sbs.random_state(expected_state_shapes(config), rng)
    forward, label = pytorch_model(args.official, config, state)
    params = sum(v.numel() for v in state.values())
    limits = machine.machine_limits(args.build)
    sbs.header(f"BSA forward ({args.attention}), one sample, D 64, H 8, P 256, depth 18, {params} parameters; "
               f"PyTorch side: {label} (torch {torch.__version__}; tree rotation rounded as "
               f"{'the library' if args.official_rotation == 'library' else 'torch.matmul here'}); "
               f"best of {args.repeats} after a warm-up",
               limits)
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / "bsa.h5"
        write_model(model_path, config, state)
        for threads in args.threads:
            extrapolate = sbs.Extrapolation(exponent=2.0 if args.attention == "sparse" else 1.0)
            for n in args.sizes:
                data = Path(tmp) / f"n{n}"
                pos = rng.random((n, 3)).astype(np.float32)
                feat = rng.standard_normal((n, 64)).astype(np.float32)
                sbs.write_inputs(data, pos, feat)
                result = sbs.run_driver([bench, model_path, data, threads, args.repeats], threads)
                ours = (result["best_s"], result["best_cpu_s"])
                share = machine.share_of_limit(result, threads, limits)
                est_s, est_mib = extrapolate.estimate(n)
                runs = 1 + min(args.repeats, 1 if est_s is not None and est_s > 20 else args.repeats)
                if est_s is not None and (est_s * runs > args.pytorch_max_s or est_mib > 0.8 * sbs.available_mib()):
                    sbs.row(n, threads, ours, share=share)
                    print(f"        PyTorch skipped (estimated {est_s:.0f} CPU s per forward, {runs} runs, and "
                          f"{est_mib:.0f} MiB more memory; limits --pytorch-max-s {args.pytorch_max_s:.0f} s, "
                          f"80% of {sbs.available_mib():.0f} MiB available)")
                    continue
                rss0 = sbs.peak_rss_mib()
                x, p, b = torch.from_numpy(feat), torch.from_numpy(pos), torch.zeros(n, dtype=torch.long)
                with rotation_as_library(args.official_rotation == "library"):
                    y, wall, cpu, first_cpu = sbs.time_pytorch(lambda: forward(x, p, b), threads, args.repeats)
                theirs = (wall, cpu)
                extrapolate.add(n, first_cpu, max(sbs.peak_rss_mib() - rss0, 1.0))
                check = sbs.check_agreement(sbs.read_output(data, y.shape), y, f"N {n}", args.tolerance,
                                            args.min_agree)
                sbs.row(n, threads, ours, theirs, check, share)


if __name__ == "__main__":
    main()
