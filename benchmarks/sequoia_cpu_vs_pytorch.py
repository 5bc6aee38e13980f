#!/usr/bin/env python3
"""Sequoia segmentation forward on the CPU: surrogate (sequoia_bench) side by side with the official
TreeTransformerSeg of HySonLab/HierAttention (point_cloud/part_segmentation) in PyTorch eager, the same
random weights (the official module's state_dict written to a model file by surrogate-export) and the same
inputs: batches of B samples of --sample-points points each (ShapeNet-part's 2,048 by default), N = B x
sample points in all; every sample a normalised Gaussian cloud (pc_normalize), its class vector one-hot.

    VENV/bin/python benchmarks/sequoia_cpu_vs_pytorch.py --build build --official HIERATTENTION_CHECKOUT \\
        [--sizes 2048 8192 32768 131072 262144] [--threads 1 2] [--repeats 2]

VENV: a virtual environment outside the repository with torch 2.x, numpy, h5py and torch_geometric (the
stand-ins of share/tools/golden/sequoia_golden.py replace torch_scatter and PyG's knn where they are
missing); HIERATTENTION_CHECKOUT: a checkout of github.com/HySonLab/HierAttention (its point_cloud/ folder
is imported at run time; nothing of it is in this repository).

Model: the official ShapeNet-part configuration (config/shapenet/shapenet_config.yaml): c 3 (the
positions), dim 128, heads 4, depth 3, divide 3, layers 4, n_class 16, n_part 50; random weights as the
golden data draw them (tests/data/sequoia/README.md).

What is timed. surrogate: the voxel hierarchy of every sample, its collation, the sibling lists and the
network (build_hierarchy + Network::forward). PyTorch: the official model's forward on the collated batch
(its _index, sibling kNN, Init, blocks and head); the official hierarchy (util/voxel_fixed.py, numpy, in
the data loader) is built beforehand and not timed.

Agreement, checked before the timing at every size: the sibling lists are the one defined difference
(share/docs/sequoia.md, "Neighbour order": the official float32 kNN with torch's unstable sort against
the library's exact rule; at voxel levels 40-47 % of the lists differ, and with four blocks that reaches
the outputs at 1e-3). So the check runs the official forward with the library's lists replayed into its
kNN calls (the golden data's `output_exact_rule`), then the official forward as it is is timed. The
tolerance is rounding: the official float32 forward is 1e-6 from its own float64 forward (max|y| 2;
printed for the smallest size), the library (float32 Linear layers, the rest in double) 2e-6 from both;
--tolerance 1e-5 max|y| leaves a margin of about ten and still stops at any real difference (a wrong
list or weight moves the outputs by 1e-3 or more).
"""
import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "share" / "tools" / "golden"))
sys.path.insert(0, str(ROOT / "share" / "python"))
import side_by_side as sbs  # noqa: E402

CONFIG = dict(c=3, dim=128, heads=4, depth=3, layers=4, n_class=16, n_part=50, n_point=2048, divide=3)
K_SIBLINGS = 16


def export(state, path):
    """The official state_dict through surrogate-export (share/python/surrogate_export)."""
    from surrogate_export.cli import main as export_main
    checkpoint = path.with_suffix(".pt")
    torch.save({"model_state_dict": state}, checkpoint)
    status = export_main(["--family", "sequoia", "--checkpoint", str(checkpoint), "--config",
                          json.dumps({"divide": CONFIG["divide"]}), "--source", "HySonLab/HierAttention@ec41d29",
                          "-o", str(path)])
    if status:
        raise SystemExit(f"surrogate-export failed ({status})")


def batch_of(g, off, rng, samples, points):
    """Clouds, the official hierarchy of each, the collated batch (golden script's collate) and classes."""
    clouds = [g.normalised_cloud(rng, points) for _ in range(samples)]
    hier = []
    for cloud in clouds:
        mapping, coords = g.official_hierarchy(off, cloud, CONFIG["divide"], CONFIG["depth"])
        hier.append({"n": len(cloud), "mapping": mapping, "coords": coords})
    coords, feats, mapping, offset = g.collate(hier)
    classes = np.zeros((samples, CONFIG["n_class"]), dtype=np.float32)
    classes[np.arange(samples), rng.integers(0, CONFIG["n_class"], samples)] = 1
    return np.concatenate(clouds), (coords, feats, mapping, offset, classes)


def exact_rule_calls(batch, g):
    """The library's sibling lists (exact squared distance, ties by index) in the official call order
    (block, level, sample), each shaped as query_knn_point returns it: (1, n, min(n, k))."""
    coords, _, mapping, offset, _ = batch
    ld = CONFIG["depth"] + 1
    idx, _, _ = g.level_index(mapping, ld)
    b_nodes = np.repeat(np.arange(len(offset)), np.diff(np.concatenate([[0], offset])))
    per_block = []
    for i in range(ld - 1):
        b_level = b_nodes[idx[i]]
        for b in np.unique(b_level):
            p = coords[idx[i][b_level == b]].astype(np.float64)
            d = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
            order = np.argsort(d, axis=1, kind="stable")[:, :min(K_SIBLINGS, len(p))]  # ties: lower index
            per_block.append(torch.from_numpy(order.astype(np.int64))[None])
    return per_block * CONFIG["layers"]


def official_inputs(batch, dtype):
    coords, feats, mapping, offset, classes = batch
    return (torch.from_numpy(coords).to(dtype), torch.from_numpy(feats).to(dtype),
            torch.from_numpy(offset), torch.from_numpy(mapping.astype(np.float32)),
            torch.from_numpy(classes).to(dtype)[:, None, :])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--official", required=True, help="a checkout of HySonLab/HierAttention")
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 8192, 32768, 131072, 262144],
                    help="points per batch (multiples of --sample-points)")
    ap.add_argument("--sample-points", type=int, default=2048)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=2, help="timed runs after the warm-up (best reported)")
    ap.add_argument("--tolerance", type=float, default=1e-5, help="agreement: |diff| <= tolerance x max|y|")
    ap.add_argument("--pytorch-max-s", type=float, default=400.0,
                    help="skip PyTorch where its estimated CPU seconds (check, warm-up, timed runs) exceed this")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    bench = Path(args.build) / "benchmarks" / "sequoia_bench"
    if not bench.exists():
        sys.exit(f"{bench} not found: build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch_geometric's torch.jit.script notice
    import sequoia_golden as g  # the golden script: official modules, stand-ins, weights, clouds, collation
    off = g.load_official(args.official)
    model = g.new_model(off, "seg", CONFIG, args.seed)
    params = sum(t.numel() for t in model.parameters())
    rng = np.random.default_rng(args.seed)
    sbs.header(f"Sequoia TreeTransformerSeg forward, dim 128, heads 4, depth 3, divide 3, 4 blocks, {params} "
               f"parameters, samples of {args.sample_points} points; PyTorch side: official model (torch "
               f"{torch.__version__}, stand-ins: {', '.join(off.stand_ins) or 'none'}); best of {args.repeats} "
               f"after a warm-up; agreement (library's sibling lists replayed): |diff| <= {args.tolerance:g} max|y|")
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / "sequoia_seg.h5"
        export(model.state_dict(), model_path)
        extrapolate = {t: sbs.Extrapolation(exponent=1.0) for t in args.threads}
        for n in args.sizes:
            samples = max(1, n // args.sample_points)
            points, batch = batch_of(g, off, rng, samples, args.sample_points)
            data = Path(tmp) / f"n{n}"
            data.mkdir()
            points.astype(np.float32).tofile(data / "positions.f32")
            np.full(samples, args.sample_points, dtype=np.int64).tofile(data / "sizes.i64")
            batch[4].tofile(data / "classes.f32")
            replay = None
            for threads in args.threads:
                result = sbs.run_driver([bench, model_path, data, threads, args.repeats], threads)
                ours = (result["best_s"], result["best_cpu_s"])
                est_s, est_mib = extrapolate[threads].estimate(n)
                first_mib = extrapolate[args.threads[0]].estimate(n)[1]
                if first_mib is not None:  # the process's peak memory grows at the first thread count only
                    est_mib = first_mib
                runs = 2 + min(args.repeats, 1 if est_s is not None and est_s > 20 else args.repeats)
                if est_s is not None and (est_s * runs > args.pytorch_max_s or est_mib > 0.8 * sbs.available_mib()):
                    sbs.row(len(points), threads, ours)
                    print(f"        PyTorch skipped (estimated {est_s:.0f} CPU s per forward, {runs} runs, and "
                          f"{est_mib:.0f} MiB more memory; limits --pytorch-max-s {args.pytorch_max_s:.0f} s, "
                          f"80% of {sbs.available_mib():.0f} MiB available)")
                    continue
                torch.set_num_threads(threads)
                rss0 = sbs.peak_rss_mib()
                if replay is None:  # the check: official forward with the library's sibling lists
                    replay = {"sib": exact_rule_calls(batch, g), "knn": []}
                    y_check, _ = g.run_model(off, "seg", model, batch, torch.float32, replay)
                    y_check = y_check.numpy().astype(np.float64)
                    check = sbs.check_agreement(sbs.read_output(data, y_check.shape), y_check, f"N {n}",
                                                args.tolerance, 1.0)
                    if n == args.sizes[0]:
                        y64, _ = g.run_model(off, "seg", model.double(), batch, torch.float64, replay)
                        model.float()
                        y64 = y64.numpy()
                        print(f"        N {n}: official float32 vs float64 {np.abs(y_check - y64).max():.2e}, "
                              f"surrogate vs official float64 "
                              f"{np.abs(sbs.read_output(data, y64.shape) - y64).max():.2e}, max|y| "
                              f"{np.abs(y64).max():.2f}")
                p, x, o, m, c = official_inputs(batch, torch.float32)
                _, wall, cpu, first_cpu = sbs.time_pytorch(lambda: model([p, x, o, m.clone(), c]), threads,
                                                           args.repeats)
                extrapolate[threads].add(n, first_cpu, max(sbs.peak_rss_mib() - rss0, 1.0))
                sbs.row(len(points), threads, ours, (wall, cpu), check)


if __name__ == "__main__":
    main()
