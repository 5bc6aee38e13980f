#!/usr/bin/env python3
"""Golden data for the ShapeNet-Car wrapper of Erwin (tests/data/erwin/erwin_shapenet_car.h5).

Runs the OFFICIAL ``ShapenetCarModel`` (maxxxzdn/erwin ``experiments/wrappers/shapenet.py``: random
Fourier features of the positions, ErwinTransformer, prediction head Linear -> GELU -> Linear) around
the official ``ErwinTransformer`` (``models/erwin.py``) with random weights, on a batch of two small
clouds with the kNN graph of the ShapeNet data loader (k 8, self loops). Neither official file is part
of this repository: --official names a directory holding ``erwin_official.py`` (or ``erwin.py``) and
``shapenet.py``. The float64 result is our own computation: share/python/surrogate_ref/erwin.py in
double precision on the same weights and trees, with the wrapper's Fourier features and head written
from their specification (docs/reference-models.md §1.4.8).

Usage (from the repository root, torch 2.x virtual environment with balltree-erwin):

    VENV/bin/python share/tools/golden/erwin_shapenet_golden.py --official ERWIN_DIR \
        tests/data/erwin

The file is a model file (architecture erwin, /config with wrapper = shapenet_car, graph = knn,
graph_k = 8; /weights: the ErwinTransformer keys without ``main_model.`` plus pos_enc.linear.weight,
pred_head.0.*, pred_head.2.*) and a group /golden: positions (N x 3 f32), sample_sizes, edge_index
(2 x E int64), output (N x 1 f32, official), output_f64 (our reference in float64).
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
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from erwin_golden import knn_edges, load_official, randomise  # noqa: E402
from surrogate_ref.erwin import ErwinModel, expected_state_shapes  # noqa: E402

torch.set_num_threads(1)

CONFIG = dict(c_in=8, c_hidden=[16, 16], ball_sizes=[16, 16], enc_num_heads=[2, 2], enc_depths=[2, 2],
              dec_num_heads=[2], dec_depths=[2], strides=[1], rotate=45, mlp_ratio=2, dimensionality=3,
              mp_steps=2)
SIZES = [180, 76]
KNN = 8
SEED = 7


def load_wrapper(directory):
    path = os.path.join(directory, "shapenet.py")
    if not os.path.exists(path):
        raise SystemExit(f"no shapenet.py (the official experiments/wrappers/shapenet.py) in {directory}")
    spec = importlib.util.spec_from_file_location("shapenet_official", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(state, positions, edges, tree_idx, tree_mask, rot, dtype):
    """Our computation of the wrapper: Fourier features, ErwinModel, head (exact GELU)."""
    core = {k[len("main_model."):]: v for k, v in state.items() if k.startswith("main_model.")}
    model = ErwinModel(dict(CONFIG, variant="erwin"))
    model.load_official_state_dict(core)
    model = model.to(dtype)
    pos = torch.from_numpy(positions).to(dtype)
    a = state["pos_enc.linear.weight"].to(dtype)
    proj = pos @ a.T
    features = torch.cat([torch.cos(proj), torch.sin(proj)], dim=-1)
    with torch.no_grad():
        y = model(features, pos, torch.from_numpy(edges), tree_idx, tree_mask, rot)
        h = y @ state["pred_head.0.weight"].to(dtype).T + state["pred_head.0.bias"].to(dtype)
        h = 0.5 * h * (1.0 + torch.erf(h / np.sqrt(2.0)))
        out = h @ state["pred_head.2.weight"].to(dtype).T + state["pred_head.2.bias"].to(dtype)
    return out.numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--official", required=True, help="directory with erwin_official.py and shapenet.py")
    ap.add_argument("out_dir")
    args = ap.parse_args()
    official, _ = load_official(args.official)
    wrapper = load_wrapper(args.official)
    command = "python " + " ".join(sys.argv)

    rng = np.random.default_rng(SEED)
    torch.manual_seed(SEED)
    n = sum(SIZES)
    # ShapeNet positions after the data set's normalisation are O(1); a box of side 4 around 0.
    positions = (4.0 * rng.random((n, 3)) - 2.0).astype(np.float32)
    batch_idx = np.concatenate([np.full(s, b, dtype=np.int64) for b, s in enumerate(SIZES)])
    edges = knn_edges(positions, SIZES, KNN)

    main_model = official.ErwinTransformer(**CONFIG)
    main_model.in_dim, main_model.out_dim = CONFIG["c_in"], CONFIG["c_hidden"][0]
    model = wrapper.ShapenetCarModel(main_model).eval()
    randomise(model, rng)
    pos_t, bidx_t = torch.from_numpy(positions), torch.from_numpy(batch_idx)
    with torch.no_grad():
        out = model(node_positions=pos_t, batch_idx=bidx_t, edge_index=torch.from_numpy(edges)).numpy()
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}

    tree_idx, tree_mask, rot = build_balltree_with_rotations(pos_t, bidx_t, CONFIG["strides"], CONFIG["ball_sizes"],
                                                             CONFIG["rotate"])
    rot_list = [r.numpy() for r in rot]
    ref32 = reference(state, positions, edges, tree_idx, tree_mask, rot_list, torch.float32)
    ref64 = reference(state, positions, edges, tree_idx, tree_mask, rot_list, torch.float64)
    scale = float(np.abs(ref64).max())
    err64 = float(np.abs(out - ref64).max())
    err32 = float(np.abs(out - ref32).max())
    print(f"shapenet_car: N={n} max|y|={scale:.3g} official vs ref-f32 {err32:.3g} official vs ref-f64 {err64:.3g}")
    if err32 > 1e-4 * max(1.0, scale) or err64 > 1e-4 * max(1.0, scale):
        raise SystemExit("our reference disagrees with the official wrapper")

    full = dict(CONFIG, variant="erwin")
    core_keys = list(expected_state_shapes(full))
    wrapper_keys = ["pos_enc.linear.weight", "pred_head.0.weight", "pred_head.0.bias", "pred_head.2.weight",
                    "pred_head.2.bias"]
    assert set("main_model." + k for k in core_keys) | set(wrapper_keys) == set(state)
    path = os.path.join(args.out_dir, "erwin_shapenet_car.h5")
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "surrogate-model"
        f.attrs["format_version"] = np.int64(1)
        f.attrs["architecture"] = "erwin"
        f.attrs["source"] = "maxxxzdn/erwin@unknown"
        f.attrs["created"] = "share/tools/golden/erwin_shapenet_golden.py (" + command + ")"
        f.attrs["versions"] = (f"torch {torch.__version__}, balltree-erwin {getattr(balltree, '__version__', '0.1.0')}, "
                               f"numpy {np.__version__}, python {platform.python_version()}")
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
        c.attrs["wrapper"] = "shapenet_car"
        c.attrs["graph"] = "knn"
        c.attrs["graph_k"] = np.int64(KNN)
        w = f.create_group("weights")
        for k in core_keys:
            w.create_dataset(k, data=state["main_model." + k].numpy().astype(np.float32))
        for k in wrapper_keys:
            w.create_dataset(k, data=state[k].numpy().astype(np.float32))
        g = f.create_group("golden")
        g.create_dataset("positions", data=positions)
        g.create_dataset("sample_sizes", data=np.array(SIZES, dtype=np.int64))
        g.create_dataset("edge_index", data=edges)
        g.create_dataset("output", data=out.astype(np.float32))
        g.create_dataset("output_f64", data=ref64)
        g.attrs["max_abs_official_vs_f64"] = err64
    # The training container of the official script (torch.compile prefix), for the exporter test.
    torch.save({"model_state_dict": {"_orig_mod." + k: v for k, v in model.state_dict().items()}},
               os.path.join(args.out_dir, "erwin_shapenet_car_checkpoint.pt"))


if __name__ == "__main__":
    main()
