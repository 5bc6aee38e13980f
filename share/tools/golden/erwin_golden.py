#!/usr/bin/env python3
"""Golden data for the Erwin forward (tests/data/erwin/*.h5) from the OFFICIAL Erwin model.

Runs the official ``ErwinTransformer`` of maxxxzdn/erwin (``models/erwin.py``; not part of this
repository: pass the directory that holds it as ``erwin_official.py`` or ``erwin.py`` with --official)
with the official ball tree (PyPI ``balltree-erwin``) in a torch 2.x virtual environment, on small
configurations with random weights, and stores weights, inputs and outputs. It also runs our own
reference (share/python/surrogate_ref/erwin.py) on the same weights, in float32 (must agree with the
official output to float32 rounding; the script stops otherwise) and in float64 (stored as
``output_f64``: the exact result the tests measure float32 errors against).

Usage (from the repository root):

    VENV/bin/python share/tools/golden/erwin_golden.py --official ERWIN_DIR \
        tests/data/erwin

Each file is a model file (share/docs/model-format.md: root attributes, /config, /weights; architecture
``erwin``) plus a group /golden:
  features (N x c_in, float32), positions (N x d, float32), sample_sizes (int64; batch_idx is
  0,0,..,1,1,.. with these counts), edge_index (2 x E int64, row 0 source j, row 1 receiver i; absent
  when mp_steps = 0), tree_idx (int64), tree_mask (uint8), rot_0 .. rot_{L-1} (int64, when rotate > 0;
  from balltree.build_balltree_with_rotations), output (N x c_hidden[0], float32, official),
  output_f64 (float64, our reference in double precision).
Case flash_ref is the exception: the erwin_flash layout, whose official model needs flash_attn on a GPU,
so its `output` is our reference in float32 (root attribute golden_source says so).
"""
import argparse
import importlib.util
import os
import platform
import sys

import h5py
import numpy as np
import torch

import balltree
from balltree import build_balltree_with_rotations

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from surrogate_ref.erwin import ErwinModel, expected_state_shapes  # noqa: E402

torch.set_num_threads(1)

CASES = {
    # 3-D, message passing (2 steps, kNN graph), rotated blocks, one pooling level (stride 2), a batch
    # of two samples of unequal size.
    "mpnn_rot": dict(
        config=dict(c_in=4, c_hidden=[16, 24], ball_sizes=[16, 8], enc_num_heads=[2, 3], enc_depths=[2, 2],
                    dec_num_heads=[2], dec_depths=[2], strides=[2], rotate=45, mlp_ratio=2,
                    dimensionality=3, mp_steps=2),
        sizes=[150, 97], knn=6, seed=1),
    # 2-D, no message passing, rotated blocks, three levels (strides 2 and 1), odd depths.
    "plain_rot_2d": dict(
        config=dict(c_in=3, c_hidden=[8, 16, 16], ball_sizes=[8, 8, 8], enc_num_heads=[2, 4, 2],
                    enc_depths=[1, 2, 3], dec_num_heads=[2, 4], dec_depths=[2, 1], strides=[2, 1], rotate=30,
                    mlp_ratio=4, dimensionality=2, mp_steps=0),
        sizes=[200, 60], knn=0, seed=2),
    # 3-D, message passing, no rotation, stride 4, one sample.
    "mpnn_norot": dict(
        config=dict(c_in=3, c_hidden=[12, 16], ball_sizes=[16, 16], enc_num_heads=[3, 2], enc_depths=[1, 1],
                    dec_num_heads=[2], dec_depths=[1], strides=[4], rotate=0, mlp_ratio=2,
                    dimensionality=3, mp_steps=1),
        sizes=[300], knn=5, seed=3),
    # The erwin_flash layout (grouped q/k/v, no distance bias, LayerNorms without parameters). The official
    # flash model needs flash_attn on a GPU and computes in bfloat16, so this case has NO official output:
    # weights are random in the flash key layout and the outputs come from our reference only
    # (reference_only); it checks the layout handling of the C++ loader, not parity with upstream.
    "flash_ref": dict(
        config=dict(c_in=4, c_hidden=[16, 16], ball_sizes=[8, 8], enc_num_heads=[2, 4], enc_depths=[2, 2],
                    dec_num_heads=[4], dec_depths=[2], strides=[2], rotate=60, mlp_ratio=2,
                    dimensionality=3, mp_steps=2, variant="erwin_flash"),
        sizes=[120, 70], knn=4, seed=4, reference_only=True),
}


def load_official(directory):
    for name in ("erwin_official.py", "erwin.py"):
        path = os.path.join(directory, name)
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location("erwin_official_module", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            return module, path
    raise SystemExit(f"no erwin_official.py / erwin.py in {directory}")


def knn_edges(points, sizes, k):
    """kNN graph per sample with self loops (self is one of the k), PyG convention: row 0 neighbour j,
    row 1 receiver i."""
    src, dst = [], []
    start = 0
    for n in sizes:
        p = points[start:start + n].astype(np.float64)
        d2 = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
        order = np.argsort(d2, axis=1, kind="stable")[:, :k]
        for i in range(n):
            for j in order[i]:
                src.append(start + j)
                dst.append(start + i)
        start += n
    return np.array([src, dst], dtype=np.int64)


class _StateView:
    """A dict of tensors seen through the state_dict() interface of randomise()."""

    def __init__(self, state):
        self._state = state

    def state_dict(self):
        return self._state


def randomise(model, rng):
    """Weights of a useful scale (the official init, std 0.02, makes every branch negligible)."""
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            if name.endswith("running_var"):
                t.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, t.shape).astype(np.float32)))
            elif name.endswith("running_mean"):
                t.copy_(torch.from_numpy((0.1 * rng.standard_normal(t.shape)).astype(np.float32)))
            elif name.endswith("sigma_att"):
                t.copy_(torch.from_numpy((-1.0 + 0.5 * rng.standard_normal(t.shape)).astype(np.float32)))
            elif t.dim() == 2:
                t.copy_(torch.from_numpy((rng.standard_normal(t.shape) / np.sqrt(t.shape[1])).astype(np.float32)))
            elif name.endswith("bias"):
                t.copy_(torch.from_numpy((0.1 * rng.standard_normal(t.shape)).astype(np.float32)))
            else:  # norm weights
                t.copy_(torch.from_numpy((1.0 + 0.2 * rng.standard_normal(t.shape)).astype(np.float32)))


def run_case(official, name, spec, out_dir, command):
    cfg = dict(spec["config"])
    rng = np.random.default_rng(spec["seed"])
    torch.manual_seed(spec["seed"])
    d = cfg["dimensionality"]
    sizes = spec["sizes"]
    n = sum(sizes)
    points = rng.random((n, d)).astype(np.float32)
    features = rng.standard_normal((n, cfg["c_in"])).astype(np.float32)
    batch_idx = np.concatenate([np.full(s, b, dtype=np.int64) for b, s in enumerate(sizes)])
    edges = knn_edges(points, sizes, spec["knn"]) if cfg["mp_steps"] > 0 else None

    reference_only = spec.get("reference_only", False)
    variant = cfg.pop("variant", "erwin")
    full = dict(cfg, variant=variant)
    pos_t = torch.from_numpy(points)
    bidx_t = torch.from_numpy(batch_idx)
    tree_idx, tree_mask, rot = build_balltree_with_rotations(pos_t, bidx_t, cfg["strides"], cfg["ball_sizes"],
                                                             cfg["rotate"])
    if reference_only:
        holder = ErwinModel(full)
        state = holder.official_state_dict()
        randomise(_StateView(state), rng)
        out = None
    else:
        model = official.ErwinTransformer(**cfg).eval()
        randomise(model, rng)
        with torch.no_grad():
            out = model(torch.from_numpy(features), pos_t, bidx_t,
                        edge_index=None if edges is None else torch.from_numpy(edges))
        out = out.numpy()
        state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    expected = expected_state_shapes(full)
    assert set(expected) == set(state), (set(expected) ^ set(state))
    for k, shape in expected.items():
        assert tuple(state[k].shape) == tuple(shape), (k, state[k].shape, shape)

    rot_list = None if cfg["rotate"] <= 0 else [r.numpy() for r in rot]
    results = {}
    for dtype in (torch.float32, torch.float64):
        ref = ErwinModel(full)
        ref.load_official_state_dict(state)
        ref = ref.to(dtype)
        with torch.no_grad():
            results[dtype] = ref(torch.from_numpy(features).to(dtype), pos_t.to(dtype),
                                 None if edges is None else torch.from_numpy(edges),
                                 tree_idx, tree_mask, rot_list).numpy()
    if out is None:
        out = results[torch.float32]
    scale = float(np.abs(results[torch.float64]).max())
    err32 = float(np.abs(out - results[torch.float64]).max())
    err_ref = float(np.abs(out - results[torch.float32]).max())
    label = "reference-f32" if reference_only else "official"
    print(f"{name}: N={n} out max|y|={scale:.3g}  {label} vs ref-f32 {err_ref:.3g}  {label} vs ref-f64 {err32:.3g}")
    if err_ref > 1e-4 * max(1.0, scale) or err32 > 1e-4 * max(1.0, scale):
        raise SystemExit(f"{name}: our reference disagrees with the official model")

    path = os.path.join(out_dir, f"erwin_{name}.h5")
    with h5py.File(path, "w") as f:  # default libver: readable by HDF5 1.10
        f.attrs["format"] = "surrogate-model"
        f.attrs["format_version"] = np.int64(1)
        f.attrs["architecture"] = "erwin"
        f.attrs["source"] = "maxxxzdn/erwin@unknown"
        if reference_only:
            f.attrs["golden_source"] = ("share/python/surrogate_ref/erwin.py (our reference; the official flash "
                                        "variant cannot run here): output = reference float32")
        f.attrs["created"] = "share/tools/golden/erwin_golden.py (" + command + ")"
        f.attrs["versions"] = (f"torch {torch.__version__}, balltree-erwin "
                               f"{getattr(balltree, '__version__', '0.1.0')}, numpy {np.__version__}, "
                               f"python {platform.python_version()}")
        c = f.create_group("config")
        for key, value in full.items():
            if isinstance(value, list):
                c.attrs[key] = np.array(value, dtype=np.int64)
            elif isinstance(value, str):
                c.attrs[key] = value
            elif key == "rotate":
                c.attrs[key] = np.float64(value)
            else:
                c.attrs[key] = np.int64(value)
        w = f.create_group("weights")
        for k in expected:
            w.create_dataset(k, data=state[k].numpy().astype(np.float32))
        g = f.create_group("golden")
        g.create_dataset("features", data=features)
        g.create_dataset("positions", data=points)
        g.create_dataset("sample_sizes", data=np.array(sizes, dtype=np.int64))
        if edges is not None:
            g.create_dataset("edge_index", data=edges)
        g.create_dataset("tree_idx", data=tree_idx.numpy().astype(np.int64))
        g.create_dataset("tree_mask", data=tree_mask.numpy().astype(np.uint8))
        if rot_list is not None:
            for i, r in enumerate(rot_list):
                g.create_dataset(f"rot_{i}", data=r.astype(np.int64))
        g.create_dataset("output", data=out.astype(np.float32))
        g.create_dataset("output_f64", data=results[torch.float64])
        g.attrs["max_abs_official_vs_f64"] = err32


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--official", required=True, help="directory holding the official erwin.py")
    ap.add_argument("out_dir")
    ap.add_argument("--cases", nargs="*", help="only these cases (default: all)")
    args = ap.parse_args()
    official, path = load_official(args.official)
    os.makedirs(args.out_dir, exist_ok=True)
    command = "python " + " ".join(sys.argv)
    for name, spec in CASES.items():
        if args.cases and name not in args.cases:
            continue
        run_case(official, name, spec, args.out_dir, command)


if __name__ == "__main__":
    main()
