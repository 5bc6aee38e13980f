#!/usr/bin/env python3
"""Erwin forward on the CPU: surrogate (erwin_bench) side by side with PyTorch eager, same weights, same
inputs (one sample of N random points in the unit cube, normal features, the kNN graph with k = 8 and
self loops built once by erwin_bench and given to both), outputs compared before the timing. Model: the
ShapeNet-Car configuration of the Erwin/BSA experiments (docs/reference-models.md): c_in 64, c_hidden
[64, 64], ball_sizes [256, 256], enc_num_heads [8, 8], enc_depths [6, 6], dec_num_heads [8], dec_depths
[6], strides [1] (no pooling: 18 blocks of ball-256 attention, head width 8, with the distance bias),
rotate 45, mp_steps 3, mlp_ratio 4; 1.27 M parameters.

    VENV/bin/python benchmarks/erwin_cpu_vs_pytorch.py --build build --official DIR \\
        [--sizes 4096 16384 65536 262144] [--threads 1 2] [--repeats 2] [--pytorch-max-s 300]

PyTorch side: the official ErwinTransformer when --official names a directory holding it as
erwin_official.py or erwin.py (torch 2.x with balltree-erwin, e.g. a virtual environment VENV outside the
repository; its attention is F.scaled_dot_product_attention with the distance bias as the mask), otherwise
our reference share/python/surrogate_ref/erwin.py (explicit tensor ops). Both time the whole forward
including the ball trees (the official forward builds them); the graph is an input, as in the official data loader.
A PyTorch run whose estimate from the smaller sizes exceeds --pytorch-max-s seconds or the available
memory is skipped with the estimate printed; surrogate still runs.
"""
import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "share" / "python"))
sys.path.insert(0, str(HERE))
from surrogate_ref.erwin import CONFIG_KEYS, ErwinModel, complete_config, expected_state_shapes  # noqa: E402
import machine  # noqa: E402
import side_by_side as sbs  # noqa: E402

CONFIG = dict(c_in=64, c_hidden=[64, 64], ball_sizes=[256, 256], enc_num_heads=[8, 8], enc_depths=[6, 6],
              dec_num_heads=[8], dec_depths=[6], strides=[1], rotate=45.0, mlp_ratio=4, dimensionality=3,
              mp_steps=3)
KNN = 8


def write_model(path, state):
    flat = complete_config(dict(CONFIG, variant="erwin"))
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "surrogate-model"
        f.attrs["format_version"] = np.int64(1)
        f.attrs["architecture"] = "erwin"
        f.attrs["source"] = "maxxxzdn/erwin@unknown"
        sbs.write_config_attrs(f.create_group("config"), flat, CONFIG_KEYS)
        w = f.create_group("weights")
        for k, v in state.items():
            w.create_dataset(k, data=v.numpy())


def pytorch_model(official_dir, state):
    if official_dir:
        for name in ("erwin_official.py", "erwin.py"):
            path = Path(official_dir) / name
            if path.exists():
                spec = importlib.util.spec_from_file_location("erwin_official_module", path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
                break
        else:
            sys.exit(f"no erwin_official.py / erwin.py in {official_dir}")
        model = module.ErwinTransformer(**CONFIG).eval()
        model.load_state_dict(state, strict=False)  # num_batches_tracked buffers are not in `state`
        return lambda x, p, b, e: model(x, p, b, edge_index=e), "official ErwinTransformer"
    from balltree import build_balltree_with_rotations
    model = ErwinModel(dict(CONFIG, variant="erwin"))
    model.load_official_state_dict(state)

    def run(x, p, b, e):
        idx, mask, rot = build_balltree_with_rotations(p, b, CONFIG["strides"], CONFIG["ball_sizes"], CONFIG["rotate"])
        return model(x, p, e, idx, mask, rot)
    return run, "surrogate_ref/erwin.py"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384, 65536])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--repeats", type=int, default=2,
                    help="timed runs after the warm-up (best reported; one when a PyTorch warm-up took over "
                         "20 CPU s; 0: the warm-up is the timed run)")
    ap.add_argument("--official", help="directory holding the official erwin_official.py / erwin.py")
    ap.add_argument("--pytorch-max-s", type=float, default=300.0,
                    help="skip PyTorch where its estimated CPU seconds (warm-up + timed runs) exceed this")
    ap.add_argument("--tolerance", type=float, default=1e-3,
                    help="a point agrees when its largest output difference is below tolerance * max|y|")
    ap.add_argument("--min-agree", type=float, default=1.0,
                    help="smallest fraction of agreeing points accepted ")
    args = ap.parse_args()
    bench = Path(args.build) / "benchmarks" / "erwin_bench"
    if not bench.exists():
        sys.exit(f"{bench} not found: build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    rng = np.random.default_rng(0)
    state = sbs.random_state(expected_state_shapes(dict(CONFIG, variant="erwin")), rng)
    forward, label = pytorch_model(args.official, state)
    params = sum(v.numel() for k, v in state.items() if not k.startswith("running") and "running_" not in k)
    limits = machine.machine_limits(args.build)
    sbs.header(f"Erwin forward (ShapeNet-Car config), one sample, kNN {KNN}, {params} parameters; PyTorch side: "
               f"{label} (torch {torch.__version__}); best of {args.repeats} after a warm-up",
               limits)
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / "erwin.h5"
        write_model(model_path, state)
        for threads in args.threads:
            extrapolate = sbs.Extrapolation(exponent=1.0)
            for n in args.sizes:
                data = Path(tmp) / f"n{n}"
                pos = rng.random((n, 3)).astype(np.float32)
                feat = rng.standard_normal((n, 64)).astype(np.float32)
                sbs.write_inputs(data, pos, feat)
                result = sbs.run_driver([bench, model_path, data, threads, args.repeats, KNN], threads)
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
                edges = torch.from_numpy(np.fromfile(data / "edges.i64", dtype=np.int64).reshape(2, -1))
                rss0 = sbs.peak_rss_mib()
                x, p, b = torch.from_numpy(feat), torch.from_numpy(pos), torch.zeros(n, dtype=torch.long)
                y, wall, cpu, first_cpu = sbs.time_pytorch(lambda: forward(x, p, b, edges), threads, args.repeats)
                extrapolate.add(n, first_cpu, max(sbs.peak_rss_mib() - rss0, 1.0))
                check = sbs.check_agreement(sbs.read_output(data, y.shape), y, f"N {n}", args.tolerance,
                                            args.min_agree)
                sbs.row(n, threads, ours, (wall, cpu), check, share)


if __name__ == "__main__":
    main()
