#!/usr/bin/env python3
"""Sequoia forward on the CPU: surrogate (sequoia_bench) side by side with the official code of
HySonLab/HierAttention in PyTorch eager, the same random weights (the official module's state_dict written to
a model file by surrogate-export) and the same inputs: batches of B samples of --sample-points points each,
N = B x sample points in all; every sample a normalised Gaussian cloud (pc_normalize).

    VENV/bin/python benchmarks/sequoia_cpu_vs_pytorch.py --build build --official HIERATTENTION_CHECKOUT \\
        [--model seg|cls] [--sizes 2048 8192 32768 131072 262144] [--threads 1 2] [--repeats 2]

VENV: a virtual environment outside the repository with torch 2.x, numpy, h5py, PyYAML and torch_geometric,
best with the compiled torch_scatter and torch_cluster (share/tools/golden/sequoia_golden.py binds PyG's
knn to torch_cluster.knn, and replaces what is missing by its Python stand-ins; the header says which ran);
HIERATTENTION_CHECKOUT: a checkout of github.com/HySonLab/HierAttention (its point_cloud/ folder is imported
at run time; nothing of it is in this repository).

Models. --model seg (default): TreeTransformerSeg (point_cloud/part_segmentation) in the official
ShapeNet-part configuration (config/shapenet/shapenet_config.yaml): c 3 (the positions), dim 128, heads 4,
depth 3, divide 3, layers 4, n_class 16, n_part 50; samples of 2,048 points, each with a one-hot class
vector; output N x 50. --model cls: TreeTransformerCls (point_cloud/classification) in the configuration
read from the checkout's classification/config/config.yaml (ModelNet40: c 3, dim 128, heads 4, depth 3,
divide 3, layers 4, selection root, dim_cls 1024, num_point 1024) and exported from that file; samples of
num_point points whose features are random unit normals (ModelNet's inputs are the surface normals);
output B x 40 logits. Random weights as the golden data draw them (tests/data/sequoia/README.md).

What is timed. surrogate: the voxel hierarchy of every sample, its collation, the neighbour lists (siblings;
for cls also the 16-nearest-point lists of PointConv) and the network (build_hierarchy + Network::forward).
PyTorch: the official model's forward on the collated batch (its _index, sibling kNN, Init with, for cls,
PointConv's kNN, blocks and head); the official hierarchy (util/voxel_fixed.py, numpy, in the data loader)
is built beforehand and not timed.

Agreement, checked before the timing at every size: the neighbour lists are the one defined difference
(share/docs/sequoia.md, "Neighbour order": the official float32 kNN with torch's unstable sort against
the library's exact rule; at voxel levels 40-47 % of the sibling lists differ, and with four blocks that
reaches the outputs at 1e-3). So the check runs the official forward with the library's lists replayed
into its kNN calls (the golden data's `output_exact_rule`; for cls the PointConv lists too, and the number
of PointConv lists on which the official kNN picks another set is printed), then the official forward as it is
is timed. The tolerance is rounding (both printed for the smallest size): seg, the official float32
forward is 1e-6 from its own float64 forward (max|y| 2), the library (float32 Linear layers, the rest in
double) 2e-6 from both, 2.6e-6 at most seen; cls, the logits (max|y| 0.5) 1e-7 and 3e-7 from the float64
forward, 4.8e-7 at most seen. --tolerance 1e-5 x max(max|y|, 1) per row (a point for seg, a sample for
cls) leaves a margin of about eight (seg) and twenty (cls) and still stops at any real difference (a
wrong list or weight moves the outputs by 1e-3 or more).
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
import machine  # noqa: E402
import side_by_side as sbs  # noqa: E402

SEG_CONFIG = dict(c=3, dim=128, heads=4, depth=3, layers=4, n_class=16, n_part=50, n_point=2048, divide=3)
CLS_YAML = Path("point_cloud") / "classification" / "config" / "config.yaml"
CLS_KEYS = ("c", "dim", "heads", "depth", "layers", "divide", "selection", "dim_cls", "num_point")
K_SIBLINGS = {"seg": 16, "cls": 8}  # the official TreeAttentionSiblings' k
K_POINTCONV = 16  # the official GatherLocalInformation's k (cls)


def cls_config(official):
    """The args the official classification script builds from its config.yaml (sections flattened)."""
    import yaml
    with open(Path(official) / CLS_YAML) as f:
        data = yaml.safe_load(f)
    flat = {}
    for section in data.values():
        flat.update(section)
    return {k: flat[k] for k in CLS_KEYS}


def export(state, path, config, source):
    """The official state_dict through surrogate-export (share/python/surrogate_export); config: a JSON
    object or the checkout's YAML file."""
    from surrogate_export.cli import main as export_main
    checkpoint = path.with_suffix(".pt")
    torch.save({"model_state_dict": state}, checkpoint)
    status = export_main(["--family", "sequoia", "--checkpoint", str(checkpoint), "--config", config,
                          "--source", source, "-o", str(path)])
    if status:
        raise SystemExit(f"surrogate-export failed ({status})")


def model_setup(official, kind, sample_points=None):
    """--model seg|cls: (configuration, the exporter's --config, points per sample, description)."""
    if kind == "seg":
        cfg = SEG_CONFIG
        return (cfg, json.dumps({"divide": cfg["divide"]}), sample_points or cfg["n_point"],
                f"TreeTransformerSeg forward (ShapeNet-part configuration: dim {cfg['dim']}, heads {cfg['heads']}, "
                f"depth {cfg['depth']}, divide {cfg['divide']}, {cfg['layers']} blocks)")
    cfg = cls_config(official)
    return (cfg, str(Path(official) / CLS_YAML), sample_points or cfg["num_point"],
            f"TreeTransformerCls forward ({CLS_YAML}: dim {cfg['dim']}, heads {cfg['heads']}, depth "
            f"{cfg['depth']}, divide {cfg['divide']}, {cfg['layers']} blocks, selection {cfg['selection']})")


def source(off):
    """The model file's source attribute (checkouts without .git: the golden data's commit)."""
    return f"HySonLab/HierAttention@{'ec41d29' if off.commit == 'unknown' else off.commit[:7]}"


def batch_of(g, off, kind, cfg, rng, samples, points):
    """Clouds, the official hierarchy of each, the collated batch (golden script's collate) and the
    per-sample class vectors (seg) or the points' normals as features (cls)."""
    clouds = [g.normalised_cloud(rng, points) for _ in range(samples)]
    hier = []
    for cloud in clouds:
        mapping, coords = g.official_hierarchy(off, cloud, cfg["divide"], cfg["depth"])
        hier.append({"n": len(cloud), "mapping": mapping, "coords": coords})
    if kind == "cls":
        normals = [g.unit_normals(rng, points) for _ in range(samples)]
        coords, feats, mapping, offset = g.collate(hier, normals)
        return np.concatenate(clouds), np.concatenate(normals), (coords, feats, mapping, offset, None)
    coords, feats, mapping, offset = g.collate(hier)
    classes = np.zeros((samples, cfg["n_class"]), dtype=np.float32)
    classes[np.arange(samples), rng.integers(0, cfg["n_class"], samples)] = 1
    return np.concatenate(clouds), classes, (coords, feats, mapping, offset, classes)


def levels(batch, g, cfg):
    """Per model level the sorted global node ids, and every node's sample."""
    _, _, mapping, offset, _ = batch
    idx, _, _ = g.level_index(mapping, cfg["depth"] + 1)
    b_nodes = np.repeat(np.arange(len(offset)), np.diff(np.concatenate([[0], offset])))
    return idx, b_nodes


def exact_lists(points, k, device="cpu"):
    """The library's neighbour rule for one sample's points (float32, n x 3): squared distances of the
    coordinates in float64, summed x, y, z in that order, nearest first, equal distances by ascending index
    (golden script's exact_knn); the first min(n, k) of each row, int64, on `device`."""
    p = torch.from_numpy(np.ascontiguousarray(points)).to(device=device, dtype=torch.float64)
    sq = (p[:, None, :] - p[None, :, :]) ** 2
    return torch.sort((sq[..., 0] + sq[..., 1]) + sq[..., 2], dim=1, stable=True).indices[:, :min(k, len(p))]


def exact_rule_calls(batch, g, cfg, k, device="cpu"):
    """The library's sibling lists (exact squared distance, ties by index) in the official call order
    (block, level, sample), each shaped as query_knn_point returns it: (1, n, min(n, k)), on `device`."""
    coords = batch[0]
    idx, b_nodes = levels(batch, g, cfg)
    per_block = []
    for i in range(cfg["depth"]):
        b_level = b_nodes[idx[i]]
        for b in np.unique(b_level):
            per_block.append(exact_lists(coords[idx[i][b_level == b]], k, device)[None])
    return per_block * cfg["layers"]


def pointconv_lists(batch, g, off, cfg, device="cpu"):
    """cls: the library's PointConv lists (edges [query; neighbour] over the point rows, the form PyG's
    knn returns, on `device`), and how many queries the official kNN (real or stand-in) gives another set."""
    idx, b_nodes = levels(batch, g, cfg)
    points, b0 = batch[0][idx[0]], b_nodes[idx[0]]
    rows, cols = [], []
    for b in np.unique(b0):
        members = torch.from_numpy(np.nonzero(b0 == b)[0]).to(device)
        order = exact_lists(points[members.cpu().numpy()], K_POINTCONV, device)
        rows.append(members.repeat_interleave(order.shape[1]))
        cols.append(members[order].reshape(-1))
    ours = torch.stack([torch.cat(rows), torch.cat(cols)])
    p = torch.from_numpy(points).to(device)
    b = torch.from_numpy(b0.astype(np.float32)).to(device)  # the official batch vector is float
    with torch.device(device):  # the stand-in kNN makes tensors
        theirs = off.cls.knn(p, p, K_POINTCONV, b, b)  # the name the official module calls
    sets = []
    for e in (ours, theirs):
        row, col = e[0].cpu().numpy(), e[1].cpu().numpy()
        order = np.lexsort((col, row))  # by query, each query's neighbours as a sorted set
        sets.append(col[order].reshape(len(p), -1))
    return ours, int(np.any(sets[0] != sets[1], axis=1).sum()) if sets[0].shape == sets[1].shape else len(p)


def official_inputs(batch, dtype):
    coords, feats, mapping, offset, classes = batch
    inputs = [torch.from_numpy(coords).to(dtype), torch.from_numpy(feats).to(dtype), torch.from_numpy(offset),
              torch.from_numpy(mapping.astype(np.float32))]
    if classes is not None:
        inputs.append(torch.from_numpy(classes).to(dtype)[:, None, :])
    return inputs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--official", required=True, help="a checkout of HySonLab/HierAttention")
    ap.add_argument("--model", choices=("seg", "cls"), default="seg",
                    help="TreeTransformerSeg (ShapeNet-part configuration) or TreeTransformerCls (ModelNet40's)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 8192, 32768, 131072, 262144],
                    help="points per batch (multiples of --sample-points)")
    ap.add_argument("--sample-points", type=int, default=None,
                    help="points per sample (default: 2048 for seg, the config's num_point, 1024, for cls)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=2, help="timed runs after the warm-up (best reported)")
    ap.add_argument("--tolerance", type=float, default=1e-5, help="agreement: |diff| <= tolerance x max|y|")
    ap.add_argument("--pytorch-max-s", type=float, default=400.0,
                    help="skip PyTorch where its estimated CPU seconds (check, warm-up, timed runs) exceed this")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    kind = args.model
    bench = Path(args.build) / "benchmarks" / "sequoia_bench"
    if not bench.exists():
        sys.exit(f"{bench} not found: build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch_geometric's torch.jit.script notice
    import sequoia_golden as g  # the golden script: official modules, stand-ins, weights, clouds, collation
    off = g.load_official(args.official)
    cfg, export_config, sample_points, what = model_setup(args.official, kind, args.sample_points)
    model = g.new_model(off, kind, cfg, args.seed)
    params = sum(t.numel() for t in model.parameters())
    rng = np.random.default_rng(args.seed)
    backends = g.official_backends()
    limits = machine.machine_limits(args.build)
    sbs.header(f"Sequoia {what}, {params} parameters, samples of {sample_points} points; PyTorch side: official "
               f"model (torch {torch.__version__}; torch_scatter: {backends['torch_scatter']}; kNN: "
               f"{backends['knn']}; substituted: {', '.join(off.stand_ins) or 'nothing'}); best of "
               f"{args.repeats} after a warm-up; agreement (library's neighbour lists replayed): |diff| <= "
               f"{args.tolerance:g} max(max|y|, 1) per {'point' if kind == 'seg' else 'sample'}", limits)
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / f"sequoia_{kind}.h5"
        export(model.state_dict(), model_path, export_config, source(off))
        extrapolate = {t: sbs.Extrapolation(exponent=1.0) for t in args.threads}
        for n in args.sizes:
            samples = max(1, n // sample_points)
            points, extra, batch = batch_of(g, off, kind, cfg, rng, samples, sample_points)
            data = Path(tmp) / f"n{n}"
            data.mkdir()
            points.astype(np.float32).tofile(data / "positions.f32")
            np.full(samples, sample_points, dtype=np.int64).tofile(data / "sizes.i64")
            extra.astype(np.float32).tofile(data / ("classes.f32" if kind == "seg" else "features.f32"))
            replay = None
            for threads in args.threads:
                result = sbs.run_driver([bench, model_path, data, threads, args.repeats], threads)
                ours = (result["best_s"], result["best_cpu_s"])
                share = machine.share_of_limit(result, threads, limits)
                est_s, est_mib = extrapolate[threads].estimate(n)
                first_mib = extrapolate[args.threads[0]].estimate(n)[1]
                if first_mib is not None:  # the process's peak memory grows at the first thread count only
                    est_mib = first_mib
                runs = 2 + min(args.repeats, 1 if est_s is not None and est_s > 20 else args.repeats)
                if est_s is not None and (est_s * runs > args.pytorch_max_s or est_mib > 0.8 * sbs.available_mib()):
                    sbs.row(len(points), threads, ours, share=share)
                    print(f"        PyTorch skipped (estimated {est_s:.0f} CPU s per forward, {runs} runs, and "
                          f"{est_mib:.0f} MiB more memory; limits --pytorch-max-s {args.pytorch_max_s:.0f} s, "
                          f"80% of {sbs.available_mib():.0f} MiB available)")
                    continue
                torch.set_num_threads(threads)
                rss0 = sbs.peak_rss_mib()
                if replay is None:  # the check: official forward with the library's neighbour lists
                    replay = {"sib": exact_rule_calls(batch, g, cfg, K_SIBLINGS[kind]), "knn": []}
                    if kind == "cls":
                        edges, differ = pointconv_lists(batch, g, off, cfg)
                        replay["knn"].append(edges)
                        print(f"        N {n}: PointConv lists on which the official kNN ({backends['knn']}) picks "
                              f"another set than the library: {differ} of {len(points)}")
                    y_check, _ = g.run_model(off, kind, model, batch, torch.float32, replay)
                    y_check = y_check.numpy().astype(np.float64)
                    check = sbs.check_agreement(sbs.read_output(data, y_check.shape), y_check, f"N {n}",
                                                args.tolerance, 1.0)
                    if n == args.sizes[0]:
                        y64, _ = g.run_model(off, kind, model.double(), batch, torch.float64, replay)
                        model.float()
                        y64 = y64.numpy()
                        print(f"        N {n}: official float32 vs float64 {np.abs(y_check - y64).max():.2e}, "
                              f"surrogate vs official float64 "
                              f"{np.abs(sbs.read_output(data, y64.shape) - y64).max():.2e}, max|y| "
                              f"{np.abs(y64).max():.2f}")
                inputs = official_inputs(batch, torch.float32)
                forward = lambda: model([*inputs[:3], inputs[3].clone(), *inputs[4:]])  # noqa: E731 (_index edits m)
                _, wall, cpu, first_cpu = sbs.time_pytorch(forward, threads, args.repeats)
                extrapolate[threads].add(n, first_cpu, max(sbs.peak_rss_mib() - rss0, 1.0))
                sbs.row(len(points), threads, ours, (wall, cpu), check, share=share)


if __name__ == "__main__":
    main()
