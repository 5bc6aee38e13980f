#!/usr/bin/env python3
"""Golden data for the Sequoia family (tests/data/sequoia/*.h5) from the OFFICIAL Sequoia code.

The reference is HySonLab/HierAttention (TMLR 2024, "Sequoia"), directory point_cloud/: the voxel
hierarchy builder ``util/voxel_fixed.py`` (class ``Voxel``), the per-point segmentation model
``part_segmentation/model/TreeTransformerSeg.py`` and the classification model
``classification/model/TreeTransformerCls.py``. None of it is part of this repository (it has no licence):
pass a checkout with --official; this script imports those modules at run time and runs them.

What the official code needs and this environment lacks (torch 2.x CPU from PyPI, torch_geometric 2.8 from
PyPI, no compiled PyG extensions):
  * ``torch_scatter`` (segment_coo, scatter_softmax, scatter_max, scatter_sum, scatter_mean). When the real
    package is importable it is used; otherwise a module with the same functions and semantics (written
    here on torch's own scatter/index_add) is registered under that name. ``--check-ops`` compares the two
    (when both exist) and compares the stand-in with torch_geometric.utils.
  * ``torch_geometric.nn.knn`` (PyG 2.8 needs pyg-lib for it): bound to the compiled ``torch_cluster.knn``
    when that is installed, as earlier PyG releases did; otherwise replaced by a brute-force kNN with the
    distances torch_cluster computes (float32 sum of squared differences, per sample); only the neighbour
    SET matters (PointConv aggregates with max), and the golden inputs have no tie at the k-th neighbour.
    The recorded forwards of the golden data use that brute-force rule in either case (Recorder).
  * ``torch_geometric.nn.PointConv``: the alias of ``PointNetConv`` that PyG 2.8 no longer exports.

Every hierarchy is also rebuilt by this script's own implementation of the specification (docs
reference-models.md §2.2-2.3) and must agree exactly with the official builder (the script stops
otherwise); that implementation provides the intermediates the official function does not return
(bounding box, steps, voxel coordinates, hashes, ...).

Usage (from the repository root):

    VENV/bin/python share/tools/golden/sequoia_golden.py --official OFFICIAL_DIR tests/data/sequoia
    VENV/bin/python share/tools/golden/sequoia_golden.py --official OFFICIAL_DIR --stats   # tie statistics
    VENV/bin/python share/tools/golden/sequoia_golden.py --official OFFICIAL_DIR --check-ops

The files and their datasets are described in tests/data/sequoia/README.md.
"""
import argparse
import hashlib
import importlib.util
import os
import platform
import subprocess
import sys
import types

import h5py
import numpy as np
import torch

torch.set_num_threads(1)

FNV_OFFSET = np.uint64(14695981039346656037)
FNV_PRIME = np.uint64(1099511628211)


# ---------------------------------------------------------------------------------------------------------
# Stand-ins for the compiled PyG extensions
# ---------------------------------------------------------------------------------------------------------

def _expand_index(index, src, dim):
    """The index broadcast of torch_scatter: a 1-D index is aligned with ``dim``, missing trailing
    dimensions are added, then it is expanded to the shape of ``src``."""
    dim = dim + src.dim() if dim < 0 else dim
    if index.dim() == 1:
        index = index.view([1] * dim + [-1])
    while index.dim() < src.dim():
        index = index.unsqueeze(-1)
    return index.expand(src.shape)


def _out_size(src, index, dim, dim_size):
    dim = dim + src.dim() if dim < 0 else dim
    shape = list(src.shape)
    shape[dim] = int(dim_size) if dim_size is not None else (int(index.max()) + 1 if index.numel() else 0)
    return shape, dim


def stand_in_scatter_sum(src, index, dim=-1, out=None, dim_size=None):
    index = _expand_index(index, src, dim)
    shape, dim = _out_size(src, index, dim, dim_size)
    if out is None:
        out = torch.zeros(shape, dtype=src.dtype)
    return out.scatter_add_(dim, index, src)


def stand_in_scatter_mean(src, index, dim=-1, out=None, dim_size=None):
    total = stand_in_scatter_sum(src, index, dim, out, dim_size)
    count = stand_in_scatter_sum(torch.ones_like(src), index, dim, None, total.shape[dim])
    count = count.clamp(min=1)
    return total / count if total.is_floating_point() else total.div(count, rounding_mode="floor")


def stand_in_scatter_max(src, index, dim=-1, out=None, dim_size=None):
    """torch_scatter.scatter_max: the maximum per target; a target that receives nothing holds 0; a NaN
    source never wins (the compiled kernel compares with '>'), neither does -inf (it starts at the lowest
    finite value and turns what is still that value into 0). The arg output (not used by Sequoia) is the
    index of a maximum, or src.size(dim) for an empty target."""
    index = _expand_index(index, src, dim)
    shape, dim = _out_size(src, index, dim, dim_size)
    lowest = torch.finfo(src.dtype).min
    clean = torch.where(torch.isnan(src) | (src < lowest), torch.full_like(src, lowest), src)
    res = torch.full(shape, lowest, dtype=src.dtype).scatter_reduce_(dim, index, clean, reduce="amax",
                                                                    include_self=True)
    res = torch.where(res == lowest, torch.zeros_like(res), res)
    hit = (clean == res.gather(dim, index)) & (clean != lowest)
    positions = torch.arange(src.shape[dim]).view([-1 if d == dim else 1 for d in range(src.dim())])
    positions = torch.where(hit, positions.expand(src.shape), torch.full_like(index, src.shape[dim]))
    arg = torch.full(shape, src.shape[dim], dtype=torch.long).scatter_reduce_(dim, index, positions,
                                                                             reduce="amin", include_self=True)
    if out is not None:
        out.copy_(res)
        res = out
    return res, arg


def stand_in_scatter_softmax(src, index, dim=-1, dim_size=None):
    """torch_scatter.scatter_softmax: subtract the per-target maximum, exp, divide by the per-target sum
    (sum by scatter_add_, in row order); no epsilon."""
    index = _expand_index(index, src, dim)
    top = stand_in_scatter_max(src, index, dim, dim_size=dim_size)[0]
    shifted = (src - top.gather(dim, index)).exp_()
    total = stand_in_scatter_sum(shifted, index, dim, dim_size=dim_size)
    return shifted.div(total.gather(dim, index))


def stand_in_segment_coo(src, index, out=None, dim_size=None, reduce="sum"):
    """torch_scatter.segment_coo for the forms Sequoia uses: a 1-D sorted index over the rows of src,
    reduce 'sum' (rows added one after another, in row order, starting from 0)."""
    if reduce not in ("sum", "add"):
        raise NotImplementedError(f"segment_coo stand-in: reduce={reduce}")
    if index.dim() != 1:
        raise NotImplementedError("segment_coo stand-in: 1-D index only")
    size = int(dim_size) if dim_size is not None else (int(index.max()) + 1 if index.numel() else 0)
    res = torch.zeros((size,) + tuple(src.shape[1:]), dtype=src.dtype).index_add_(0, index, src)
    if out is not None:
        out.copy_(res)
        res = out
    return res


def knn_float32_rule(x, y, k, batch_x=None, batch_y=None, cosine=False, num_workers=1, batch_size=None):
    """The kNN of torch_cluster (PyG ``knn``): for each row of y the k nearest rows of x of the same sample,
    distance = sum over coordinates of (x - y)^2 accumulated in the input dtype, nearest first; fewer than k
    when the sample has fewer rows. Equal distances: lower index first (torch_cluster's CPU KD-tree leaves
    that order to its traversal; only the set matters for PointConv's max, and golden inputs have no tie at
    the k-th place). Returns [2, E]: row 0 = index into y, row 1 = index into x."""
    assert not cosine
    bx = torch.zeros(x.shape[0]) if batch_x is None else batch_x
    by = torch.zeros(y.shape[0]) if batch_y is None else batch_y
    rows, cols = [], []
    for b in torch.unique(by).tolist():
        xi = torch.nonzero(bx == b).flatten()
        yi = torch.nonzero(by == b).flatten()
        diff = y[yi][:, None, :] - x[xi][None, :, :]
        sq = diff * diff
        dist = sq[..., 0]
        for c in range(1, sq.shape[-1]):
            dist = dist + sq[..., c]
        order = torch.sort(dist, dim=1, stable=True)[1][:, :k]
        rows.append(yi[:, None].expand_as(order).reshape(-1))
        cols.append(xi[order].reshape(-1))
    return torch.stack([torch.cat(rows), torch.cat(cols)], dim=0)


def install_stand_ins():
    """Registers the stand-ins where the real packages are missing; returns what was substituted."""
    used = []
    try:
        import torch_scatter  # noqa: F401
    except ImportError:
        module = types.ModuleType("torch_scatter")
        module.segment_coo = stand_in_segment_coo
        module.scatter_softmax = stand_in_scatter_softmax
        module.scatter_max = stand_in_scatter_max
        module.scatter_sum = stand_in_scatter_sum
        module.scatter_add = stand_in_scatter_sum
        module.scatter_mean = stand_in_scatter_mean
        module.__sequoia_stand_in__ = True
        sys.modules["torch_scatter"] = module
        used.append("torch_scatter")
    import torch_geometric.nn as gnn
    if not hasattr(gnn, "PointConv"):
        gnn.PointConv = gnn.PointNetConv
        used.append("torch_geometric.nn.PointConv=PointNetConv")
    try:
        gnn.knn(torch.zeros(2, 3), torch.zeros(2, 3), 1)
    except (ImportError, AttributeError):  # PyG 2.8 serves knn from pyg-lib only; 2.3 calls a missing
        # torch_cluster (AttributeError); the releases between forwarded it to torch_cluster
        try:
            import torch_cluster
            gnn.knn = torch_cluster.knn  # the compiled kNN, with the signature the official call uses
            used.append("torch_geometric.nn.knn=torch_cluster.knn")
        except ImportError:
            gnn.knn = knn_float32_rule
            used.append("torch_geometric.nn.knn")
    return used


def official_backends():
    """Which torch_scatter and kNN the official modules run with: 'real X.Y.Z' or 'stand-in'."""
    scatter = sys.modules.get("torch_scatter")
    import torch_geometric.nn as gnn
    out = {"torch_scatter": "stand-in" if getattr(scatter, "__sequoia_stand_in__", False)
           else f"real {getattr(scatter, '__version__', '?')}"}
    if gnn.knn is knn_float32_rule:
        out["knn"] = "stand-in"
    elif getattr(gnn.knn, "__module__", "").startswith("torch_cluster"):
        import torch_cluster
        out["knn"] = f"real torch_cluster {torch_cluster.__version__}"
    else:
        out["knn"] = f"real {getattr(gnn.knn, '__module__', '?')}"
    return out


# ---------------------------------------------------------------------------------------------------------
# The official modules
# ---------------------------------------------------------------------------------------------------------

def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _digest(path, normalise=False):
    with open(path, "rb") as f:
        data = f.read()
    if normalise:
        data = b"\n".join(line.rstrip() for line in data.splitlines() if line.strip())
    return hashlib.sha256(data).hexdigest()[:16]


def load_official(directory):
    base = os.path.join(directory, "point_cloud")
    cls_dir = os.path.join(base, "classification")
    seg_dir = os.path.join(base, "part_segmentation")
    for a, b in (("model/lib.py", "model/lib.py"), ("util/voxel_fixed.py", "util/voxel_fixed.py")):
        if _digest(os.path.join(cls_dir, a), True) != _digest(os.path.join(seg_dir, b), True):
            raise SystemExit(f"{a} differs between classification/ and part_segmentation/")
    stand_ins = install_stand_ins()
    sys.path.insert(0, cls_dir)  # the models import model.lib (identical in both directories)
    off = types.SimpleNamespace()
    off.voxel = _load(os.path.join(cls_dir, "util", "voxel_fixed.py"), "sequoia_official_voxel")
    off.cls = _load(os.path.join(cls_dir, "model", "TreeTransformerCls.py"), "sequoia_official_cls")
    off.seg = _load(os.path.join(seg_dir, "model", "TreeTransformerSeg.py"), "sequoia_official_seg")
    off.lib = sys.modules["model.lib"]
    off.stand_ins = stand_ins
    try:
        off.commit = subprocess.run(["git", "-C", directory, "rev-parse", "HEAD"], capture_output=True,
                                    text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        off.commit = "unknown"
    off.files = {rel: _digest(os.path.join(base, rel)) for rel in (
        "classification/util/voxel_fixed.py", "classification/model/TreeTransformerCls.py",
        "classification/model/lib.py", "part_segmentation/model/TreeTransformerSeg.py")}
    return off


# ---------------------------------------------------------------------------------------------------------
# Our own implementation of the hierarchy (the specification), with every intermediate
# ---------------------------------------------------------------------------------------------------------

def fnv64(rows):
    """64-bit FNV over the columns of an integer array: start at the offset basis, per column multiply by
    the prime (wrapping mod 2^64) THEN xor the column value (as uint64; int32 values are sign-extended)."""
    h = np.full(rows.shape[0], FNV_OFFSET, dtype=np.uint64)
    cols = rows.astype(np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        for j in range(rows.shape[1]):
            h = h * FNV_PRIME
            h = h ^ cols[:, j]
    return h


class HierarchyError(Exception):
    """The input has no valid hierarchy (the official builder fails); .partial holds what was computed."""

    def __init__(self, message, partial):
        super().__init__(message)
        self.partial = partial


def build_hierarchy(points, divide, depth):
    """One sample: points (n, 3) float32. Returns a dict of intermediates (see README)."""
    pts = np.asarray(points, dtype=np.float32)
    n = pts.shape[0]
    with np.errstate(invalid="ignore"):
        lo = (pts.min(axis=0) - np.float32(1e-6)).astype(np.float32)
        hi = (pts.max(axis=0) + np.float32(1e-6)).astype(np.float32)
        steps = np.stack([(hi - lo) / np.float32(divide ** lvl) for lvl in range(depth)]).astype(np.float32)
        shifted = (pts - lo).astype(np.float32)
        vox = np.stack([np.trunc(shifted / steps[lvl]) for lvl in range(depth)])  # (depth, n, 3) float32
        vox = vox.astype(np.int32)
    rows = np.concatenate([np.concatenate([vox[lvl], np.full((n, 1), lvl, np.int32)], axis=1)
                           for lvl in range(depth)])  # level-major (depth*n, 4)
    hashes = fnv64(rows)
    unique_hashes, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    virtual_rows = rows[first]
    vlevel = virtual_rows[:, 3]
    sigma = steps[vlevel]  # float32 (V, 3)
    vpos64 = virtual_rows[:, :3].astype(np.float64) * sigma.astype(np.float64) \
        + (sigma / np.float32(2)).astype(np.float64)
    node_of = (inverse.reshape(depth, n) + n).astype(np.int64)  # node id of point j's voxel at level l
    roots = np.nonzero(vlevel == 0)[0] + n
    level1 = np.nonzero(vlevel == 1)[0] + n
    if len(roots) != 1:
        raise HierarchyError(f"{len(roots)} level-0 voxels (the official builder fails on this input)",
                             dict(n=n, lo=lo, hi=hi, steps=steps, voxel_coords=vox))
    blocks = [np.stack([np.repeat(roots, len(level1)), level1, np.zeros_like(level1),
                        np.ones_like(level1)], axis=1)]
    pair_hashes = []
    for lvl in range(1, depth):
        if lvl == depth - 1:
            child = np.arange(n, dtype=np.int64)
            blocks.append(np.stack([node_of[lvl], child, np.full(n, lvl), np.full(n, lvl + 1)], axis=1))
        else:
            pair = np.stack([node_of[lvl], node_of[lvl + 1]], axis=1)
            ph = fnv64(pair)
            uh, keep = np.unique(ph, return_index=True)
            pair_hashes.append(uh)
            blocks.append(np.stack([pair[keep, 0], pair[keep, 1], np.full(len(keep), lvl),
                                    np.full(len(keep), lvl + 1)], axis=1))
    mapping = np.concatenate(blocks).astype(np.int64)
    return dict(n=n, lo=lo, hi=hi, steps=steps, voxel_coords=vox, rows=rows, hashes=hashes,
                unique_hashes=unique_hashes, first_index=first.astype(np.int64), inverse=inverse.astype(np.int64),
                virtual_rows=virtual_rows, virtual_positions_f64=vpos64,
                virtual_positions=vpos64.astype(np.float32), node_of=node_of, mapping=mapping,
                pair_hashes=pair_hashes, coords=np.concatenate([pts.astype(np.float64), vpos64]))


def official_hierarchy(off, points, divide, depth):
    """Runs the official builder; returns (mapping, coords) or raises what it raises."""
    return off.voxel.Voxel(divide=divide, depth=depth).get_mappings(np.asarray(points, dtype=np.float32))


def checked_hierarchy(off, points, divide, depth):
    """Our hierarchy, verified equal to the official one (integers exactly, positions bitwise)."""
    ours = build_hierarchy(points, divide, depth)
    mapping, coords = official_hierarchy(off, points, divide, depth)
    if mapping.dtype != np.int64 or coords.dtype != np.float64:
        raise SystemExit(f"official dtypes changed: {mapping.dtype}, {coords.dtype}")
    if not np.array_equal(mapping, ours["mapping"]):
        raise SystemExit("our hierarchy's mapping differs from the official one")
    if not np.array_equal(coords.view(np.uint64), ours["coords"].view(np.uint64)):
        raise SystemExit("our node positions differ from the official ones")
    # the official hash function on the same rows (independent check of fnv64)
    if not np.array_equal(off.voxel.fnv_hash_vec(ours["rows"]), ours["hashes"]):
        raise SystemExit("fnv64 differs from the official fnv_hash_vec")
    return ours


def collate(samples, features=None):
    """The training scripts' collate_fn: concatenate node positions (float32, as torch.Tensor makes them),
    features, and mappings with node ids shifted by the nodes (real + virtual) of the samples before."""
    coords, feats, maps, offset = [], [], [], []
    count = 0
    for b, h in enumerate(samples):
        c32 = h["coords"].astype(np.float32)
        coords.append(c32)
        if features is None:  # segmentation: feat = coord
            feats.append(c32)
        else:
            f = np.zeros_like(c32)
            f[:h["n"]] = features[b]
            feats.append(f)
        m = h["mapping"].copy()
        m[:, :2] += count
        maps.append(m)
        count += c32.shape[0]
        offset.append(count)
    return (np.concatenate(coords), np.concatenate(feats), np.concatenate(maps),
            np.array(offset, dtype=np.int32))


def level_index(mapping, ld):
    """§2.3: per tree level the sorted global ids (model level i = tree level ld-1-i), the local mapping,
    and the pooling targets of Init (child row r of model level i -> parent local id at level i+1)."""
    ids_by_level = []
    local = np.zeros(int(mapping[:, :2].max()) + 1, dtype=np.int64)
    for t in range(ld):
        ids = np.concatenate([mapping[mapping[:, 2] == t, 0], mapping[mapping[:, 3] == t, 1]])
        u = np.unique(ids)
        local[u] = np.arange(len(u))
        ids_by_level.append(u)
    idx = ids_by_level[::-1]
    m_local = mapping.copy()
    m_local[:, 0] = local[mapping[:, 0]]
    m_local[:, 1] = local[mapping[:, 1]]
    pool = []
    for i in range(ld - 1):
        rows = mapping[mapping[:, 2] == ld - i - 2]
        keep = np.ones(len(rows), dtype=bool)
        if len(rows) != len(idx[i]):  # a child with more than one parent row: keep its first row
            seen = set()
            for r, c in enumerate(rows[:, 1]):
                if c in seen:
                    keep[r] = False
                seen.add(c)
        pool.append(local[rows[keep, 0]])
    return idx, m_local, pool


# ---------------------------------------------------------------------------------------------------------
# Models: construction, weights, recorded forward
# ---------------------------------------------------------------------------------------------------------

def randomise(model, rng):
    """Weights of a useful scale (the training init leaves the attention nearly uniform): Linear
    N(0, 1/fan_in) (queries and keys 3x that, so that the attention is far from uniform), biases
    N(0, 0.1^2), norm weights 1 + N(0, 0.2^2), BatchNorm running means N(0, 0.1^2) and variances
    U(0.5, 1.5), the mixing logits N(0, 1)."""
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            if name.endswith("running_var"):
                v = rng.uniform(0.5, 1.5, t.shape)
            elif name.endswith("running_mean"):
                v = 0.1 * rng.standard_normal(t.shape)
            elif name.endswith("attn2a.weight"):
                v = rng.standard_normal(t.shape)
            elif t.dim() == 2:
                v = rng.standard_normal(t.shape) / np.sqrt(t.shape[1])
                if any(s in name for s in ("linearQ", "linearK", "expands_K", "shrinks_K")):
                    v = 3.0 * v
            elif name.endswith("bias"):
                v = 0.1 * rng.standard_normal(t.shape)
            else:
                v = 1.0 + 0.2 * rng.standard_normal(t.shape)
            t.copy_(torch.from_numpy(np.asarray(v, dtype=np.float32)))


class Recorder:
    """Wraps the official kNN functions and hooks the modules of block 0 while a forward runs."""

    def __init__(self, off, module, model, replay=None):
        self.module, self.model, self.replay = module, model, replay
        self.sibling_calls, self.own_sibling_calls, self.knn_calls = [], [], []
        self.acts = {}
        self.handles = []
        self._orig_query = module.query_knn_point
        self._orig_knn = getattr(module, "knn", None)

    def _query(self, k, xyz, new_xyz, cuda=False):
        own = self._orig_query(k, xyz, new_xyz, cuda)
        self.own_sibling_calls.append(own.clone())
        if self.replay is not None:
            out = self.replay["sib"][len(self.sibling_calls)].clone()
        else:
            out = own
        self.sibling_calls.append(out.clone())
        return out

    def _knn(self, x, y, k, batch_x=None, batch_y=None, *a, **kw):
        if self.replay is not None:
            out = self.replay["knn"][len(self.knn_calls)].clone()
        else:
            out = knn_float32_rule(x, y, k, batch_x, batch_y)
        self.knn_calls.append(out.clone())
        return out

    @staticmethod
    def _copy(obj):
        # deep copy: the official blocks overwrite the entries of the lists they receive
        if torch.is_tensor(obj):
            return obj.detach().clone()
        if isinstance(obj, (list, tuple)):
            return [Recorder._copy(o) for o in obj]
        return obj

    def _hook(self, key):
        def fn(_mod, _inp, out):
            self.acts[key] = self._copy(out)
        return fn

    def __enter__(self):
        self.module.query_knn_point = self._query
        if self._orig_knn is not None:
            self.module.knn = self._knn
        m = self.model
        self.handles.append(m._init.register_forward_hook(self._hook("init")))
        blk = m.enc[0]
        self.handles.append(blk.register_forward_hook(self._hook("block0")))
        self.handles.append(blk.attn2a.register_forward_hook(self._hook("attn")))
        for i in range(m.depth):
            self.handles.append(blk.mlp1s[i].register_forward_hook(self._hook(f"y{i}")))
            for kind in ("parents", "children", "siblings"):
                mod = getattr(blk.attn2a, kind + "_attns")[i]
                self.handles.append(mod.register_forward_hook(self._hook(f"{kind}{i}")))
        self.handles.append(m.enc[len(m.enc) - 1].register_forward_hook(self._hook("last")))
        return self

    def __exit__(self, *exc):
        self.module.query_knn_point = self._orig_query
        if self._orig_knn is not None:
            self.module.knn = self._orig_knn
        for h in self.handles:
            h.remove()
        return False


def run_model(off, kind, model, batch, dtype, replay=None):
    """Runs the official forward on the collated batch; returns (output, recorder)."""
    coords, feats, mapping, offset, sample_vec = batch
    module = off.seg if kind == "seg" else off.cls
    p = torch.from_numpy(coords).to(dtype)
    x = torch.from_numpy(feats).to(dtype)
    m = torch.from_numpy(mapping.astype(np.float32))  # the data loaders hand over float32 mappings
    o = torch.from_numpy(offset)
    with Recorder(off, module, model, replay) as rec, torch.no_grad():
        if kind == "seg":
            c = torch.from_numpy(sample_vec).to(dtype)[:, None, :]  # to_categorical(cls) is (B, 1, n_class)
            out = model([p, x, o, m, c])
        else:
            out = model([p, x, o, m])
    return out, rec


def sibling_lists(rec, b_levels, ld, k):
    """The neighbour lists of block 0 per level as level-local ids, padded as the official code pads them
    (copies of the first entry up to k). Calls come level 0..ld-2, sample by sample; each official list
    (shape (1, n, min(n, k))) indexes the sample's nodes of that level."""
    lists = {}
    call = 0
    for i in range(ld - 1):
        rows = []
        for b in np.unique(b_levels[i]):
            members = np.nonzero(b_levels[i] == b)[0]
            raw = rec.sibling_calls[call]
            r = raw.reshape(-1, raw.shape[-1]).numpy()
            if r.shape[1] < k:
                r = np.concatenate([r, np.repeat(r[:, :1], k - r.shape[1], axis=1)], axis=1)
            rows.append(members[r])
            call += 1
        lists[i] = np.concatenate(rows).astype(np.int64)
    return lists


# ---------------------------------------------------------------------------------------------------------
# Neighbour analysis (ties)
# ---------------------------------------------------------------------------------------------------------

def exact_knn(pos32, k):
    """The library's rule: squared distance of the float32 coordinates computed exactly (float64 of float32
    differences), nearest first, equal distances by ascending index."""
    p = pos32.astype(np.float64)
    d = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(np.arange(len(p)), d.shape), d), axis=-1)
    return order[:, :k], np.take_along_axis(d, order, axis=1)


def tie_report(pos32, ref_lists, k):
    """Per query: whether the k-th and (k+1)-th exact distances are equal (the set is decided by a tie),
    whether the reference set differs from the exact rule's set, whether the reference's first entry is
    not the query itself; plus the smallest gap between the k-th and (k+1)-th exact distance."""
    n = len(pos32)
    kk = min(k, n)
    ours, dsorted = exact_knn(pos32, n)
    tie = np.zeros(n, dtype=bool)
    gap = np.inf
    if n > k:
        tie = dsorted[:, k - 1] == dsorted[:, k]
        gap = float((dsorted[:, k] - dsorted[:, k - 1]).min())
    ref = ref_lists[:, :kk]
    differs = np.array([set(ref[q].tolist()) != set(ours[q, :kk].tolist()) for q in range(n)])
    not_self = ref[:, 0] != np.arange(n)
    return tie, differs, not_self, gap


# ---------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------

def normalised_cloud(rng, n):
    """pc_normalize of the data loaders: centre by the mean, divide by the largest radius (float32)."""
    p = rng.standard_normal((n, 3)).astype(np.float32)
    p = p - p.mean(axis=0)
    p = p / np.max(np.sqrt((p ** 2).sum(axis=1)))
    return p.astype(np.float32)


def clustered_cloud(rng, n):
    """A normalised cloud of 2 or 3 tight clusters (few occupied voxels, so that voxel levels stay small)."""
    centres = rng.standard_normal((int(rng.integers(2, 4)), 3))
    p = centres[rng.integers(0, len(centres), n)] + 0.15 * rng.standard_normal((n, 3))
    p = (p - p.mean(axis=0)).astype(np.float32)
    return (p / np.max(np.sqrt((p ** 2).sum(axis=1)))).astype(np.float32)


def with_nesting_pair(rng, n, divide, depth):
    """A normalised cloud of n points whose last two points share a level-2 voxel but, in float32, lie in
    different level-1 voxels (a level-2 voxel with two parent rows; §2.4.1's duplicate-child path)."""
    for _ in range(100):
        cloud = normalised_cloud(rng, n - 2)
        lo = cloud.min(axis=0) - np.float32(1e-6)
        hi = cloud.max(axis=0) + np.float32(1e-6)
        for axis in range(3):
            xs = nesting_breakers(lo[axis], hi[axis], divide, 1, 1)
            if not len(xs):
                continue
            step1 = np.float32((hi[axis] - lo[axis]) / np.float32(divide))
            step2 = np.float32((hi[axis] - lo[axis]) / np.float32(divide * divide))
            q = cloud[0].copy()
            q[axis] = xs[0]
            c2 = int(np.trunc(np.float32(xs[0] - lo[axis]) / step2))
            r = q.copy()
            r[axis] = np.float32(lo[axis] + np.float32(c2 + 0.5) * step2)
            assert int(np.trunc(np.float32(r[axis] - lo[axis]) / step1)) == c2 // divide
            out = np.concatenate([cloud, q[None], r[None]]).astype(np.float32)
            m = build_hierarchy(out, divide, depth)["mapping"]
            kids = m[m[:, 3] == 2, 1]
            if len(kids) != len(np.unique(kids)):
                return out
    raise SystemExit("no cloud with a nesting pair found")


def unit_normals(rng, n):
    v = rng.standard_normal((n, 3))
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def lattice_cloud(rng, n, cells):
    """Points on a regular lattice of the unit cube (many exactly equidistant neighbours), with repeats."""
    g = rng.integers(0, cells + 1, size=(n, 3)).astype(np.float32) / np.float32(cells)
    return (2 * g - 1).astype(np.float32)


def nesting_breakers(lo, hi, divide, level, count):
    """Values x of one coordinate inside [lo, hi] (the bounding box with margins, float32) whose voxel at
    level+1 does not lie inside their voxel at `level` in float32 arithmetic (trunc((x-lo)/step) per level):
    found by scanning the float32 values next to the level's voxel boundaries."""
    steps = [np.float32((hi - lo) / np.float32(divide ** lvl)) for lvl in (level, level + 1)]
    found = []
    for j in range(1, divide ** level):
        x0 = np.float32(lo + np.float32(j) * steps[0])
        xs = (x0 + np.arange(-400, 400, dtype=np.float32) * np.spacing(x0)).astype(np.float32)
        u = (xs - lo).astype(np.float32)
        c0 = np.trunc(u / steps[0]).astype(np.int64)
        c1 = np.trunc(u / steps[1]).astype(np.int64)
        bad = np.nonzero(c1 // divide != c0)[0]
        if len(bad):
            found.append(xs[bad[0]])
        if len(found) == count:
            break
    return np.array(found, dtype=np.float32)


# ---------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------

def write_common_attrs(f, off, command, what):
    f.attrs["source"] = f"HySonLab/HierAttention@{off.commit}"
    f.attrs["created"] = "share/tools/golden/sequoia_golden.py (" + command + ")"
    f.attrs["golden_source"] = what
    import torch_geometric
    f.attrs["versions"] = (f"torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, "
                           f"numpy {np.__version__}, h5py {h5py.__version__}, python {platform.python_version()}")
    f.attrs["stand_ins"] = ", ".join(off.stand_ins) if off.stand_ins else "none"
    f.attrs["official_files_sha256_16"] = "; ".join(f"{k} {v}" for k, v in off.files.items())


LIBVER = ("v110", "v110")  # object formats of HDF5 1.10 (Debian 12): smaller headers than h5py's default


def put(g, name, data, compress=False):
    """Integer data other than hashes are stored as int32 (readers convert to int64 on read)."""
    data = np.asarray(data)
    if data.dtype.kind in "iu" and data.dtype != np.uint64 and data.size:
        assert -2 ** 31 <= data.min() and data.max() < 2 ** 31
        data = data.astype(np.int32)
    kw = dict(compression="gzip", compression_opts=9, shuffle=True) if compress and data.nbytes > 2048 else {}
    g.create_dataset(name, data=data, **kw)


def write_hierarchy_group(g, h, compress=True):
    put(g, "points", h["coords"][:h["n"]].astype(np.float32))
    put(g, "bbox_lo", h["lo"])
    put(g, "bbox_hi", h["hi"])
    put(g, "steps", h["steps"])
    put(g, "voxel_coords", h["voxel_coords"], compress)
    put(g, "voxel_hashes", h["unique_hashes"], compress)
    put(g, "voxel_rows", h["virtual_rows"], compress)
    put(g, "virtual_positions", h["virtual_positions"], compress)
    for lvl, ph in enumerate(h["pair_hashes"], start=1):
        put(g, f"pair_hashes_{lvl}", ph, compress)
    put(g, "mapping", h["mapping"], compress)


def write_batch_group(g, samples, mapping, coords, offset, ld, full=False):
    """The collated batch; `full` adds the local mapping and the batch id per level node (the hierarchy
    file; the model files leave them out: both follow from mapping, offset and level_ids)."""
    idx, m_local, pool = level_index(mapping, ld)
    put(g, "coords", coords, full)
    put(g, "offset", offset.astype(np.int64))
    put(g, "mapping", mapping, full)
    b_nodes = np.repeat(np.arange(len(offset)), np.diff(np.concatenate([[0], offset])))
    if full:
        put(g, "mapping_local", m_local, full)
    for i in range(ld):
        put(g, f"level_ids_{i}", idx[i], full)
        if full:
            put(g, f"level_batch_{i}", b_nodes[idx[i]], full)
    for i in range(ld - 1):
        put(g, f"pool_parent_{i}", pool[i], full)
    return idx, m_local, pool, b_nodes


def error_text(exc):
    return f"{type(exc).__name__}: {exc}".strip()


# ---------------------------------------------------------------------------------------------------------
# The hierarchy file
# ---------------------------------------------------------------------------------------------------------

def hierarchy_cases():
    """name -> (divide, depth, [(points, note) per sample], note)."""
    rng = np.random.default_rng(7)
    cases = {}
    cases["random_1024"] = (3, 3, [(normalised_cloud(rng, 1024), "normalised Gaussian cloud")],
                            "one sample of the official size and configuration")
    plane = normalised_cloud(rng, 80)
    plane[:, 2] = np.float32(0.25)
    line = normalised_cloud(rng, 30)
    line[:, 1] = np.float32(-0.5)
    line[:, 2] = np.float32(0.125)
    base = normalised_cloud(rng, 50)
    dup = base[rng.integers(0, 50, 150)]
    cloud = normalised_cloud(rng, 40)
    lo = cloud.min(axis=0) - np.float32(1e-6)
    hi = cloud.max(axis=0) + np.float32(1e-6)
    extra = []
    for axis in range(3):
        step1 = np.float32((hi[axis] - lo[axis]) / np.float32(3))
        step2 = np.float32((hi[axis] - lo[axis]) / np.float32(9))
        for x in nesting_breakers(lo[axis], hi[axis], 3, 1, 3):
            q = cloud[rng.integers(0, 40)].copy()
            q[axis] = x
            extra.append(q.copy())
            # a companion inside the same level-2 voxel, away from the boundary: its level-1 voxel is the
            # geometric parent, the breaker's is another one
            c2 = int(np.trunc(np.float32(x - lo[axis]) / step2))
            q[axis] = np.float32(lo[axis] + np.float32(c2 + 0.5) * step2)
            assert int(np.trunc(np.float32(q[axis] - lo[axis]) / step1)) == c2 // 3
            extra.append(q)
    nesting = np.concatenate([cloud, np.array(extra, dtype=np.float32)])
    x0 = np.float32(0.3)
    tiny = np.stack([x0 + np.arange(10, dtype=np.float32) * np.spacing(x0)] * 3, axis=1).astype(np.float32)
    tiny[:, 1] = tiny[::-1, 1]
    cases["mixed_batch"] = (3, 3, [
        (plane, "a plane (z constant)"),
        (line, "a line (y and z constant)"),
        (dup, "150 points drawn with replacement from 50 (the ShapeNet loader resamples so): duplicates"),
        (nesting, "40 points plus pairs next to level-1 voxel boundaries: in float32 a level-2 voxel that "
                  "lies in two level-1 voxels (two parent rows)"),
        (np.array([[0.1, -0.2, 0.3]], dtype=np.float32), "one point"),
        (np.tile(np.array([[0.1, -0.2, 0.3]], dtype=np.float32), (6, 1)), "six identical points"),
        (tiny, "ten distinct points within 9 ulps of 0.3: one voxel at level 1"),
    ], "seven samples in one batch: collation, node offsets, local ids, pooling targets")
    cases["divide2_depth4"] = (2, 4, [(normalised_cloud(rng, 120), "normalised Gaussian cloud"),
                                      (normalised_cloud(rng, 50), "normalised Gaussian cloud")],
                               "divide 2, depth 4 (two middle levels), two samples")
    cases["depth2"] = (3, 2, [(normalised_cloud(rng, 60), "normalised Gaussian cloud")],
                       "depth 2 (no middle level)")
    cases["large_coords"] = (3, 3, [((rng.random((50, 3)) * 100).astype(np.float32), "uniform in [0, 100)^3")],
                             "coordinates in [0, 100): the 1e-6 margin vanishes in float32 (official: error)")
    nan = normalised_cloud(rng, 10)
    nan[3, 1] = np.nan
    cases["nan"] = (3, 3, [(nan, "one NaN coordinate")], "one NaN coordinate (official: no error)")
    return cases


def make_hierarchy_file(off, path, command):
    with h5py.File(path, "w", libver=LIBVER) as f:
        f.attrs["format"] = "sequoia-golden-hierarchy"
        write_common_attrs(f, off, command, "official Voxel.get_mappings (util/voxel_fixed.py), intermediates "
                                            "from this script's implementation, verified equal")
        gold = f.create_group("golden")
        for name, (divide, depth, members, note) in hierarchy_cases().items():
            clouds = [c for c, _ in members]
            g = gold.create_group(name)
            g.attrs["divide"] = np.int64(divide)
            g.attrs["depth"] = np.int64(depth)
            g.attrs["note"] = note
            put(g, "sample_sizes", np.array([len(c) for c in clouds], dtype=np.int64))
            samples = []
            status = "ok"
            for b, cloud in enumerate(clouds):
                s = g.create_group(f"sample_{b}")
                s.attrs["note"] = members[b][1]
                try:
                    with np.errstate(invalid="ignore"):
                        h = checked_hierarchy(off, cloud, divide, depth)
                except HierarchyError as e:
                    try:
                        official_hierarchy(off, cloud, divide, depth)
                        raise SystemExit(f"{name}: official builder accepted what ours refuses")
                    except SystemExit:
                        raise
                    except Exception as official_error:  # noqa: BLE001 - record whatever it raises
                        s.attrs["status"] = "error"
                        s.attrs["error"] = error_text(official_error)
                        s.attrs["diagnosis"] = str(e)
                        put(s, "points", cloud)
                        for key in ("lo", "hi", "steps", "voxel_coords"):
                            put(s, {"lo": "bbox_lo", "hi": "bbox_hi"}.get(key, key), e.partial[key])
                        status = "error"
                        print(f"  {name}/sample_{b}: official error: {error_text(official_error)[:100]}")
                        continue
                s.attrs["status"] = "ok"
                write_hierarchy_group(s, h)
                samples.append(h)
                nchild = int((h["mapping"][:, 3] == 2).sum()) if depth >= 3 else 0
                nuniq = len(np.unique(h["mapping"][h["mapping"][:, 3] == 2, 1])) if depth >= 3 else 0
                s.attrs["children_with_two_parents"] = np.int64(nchild - nuniq)
                s.attrs["voxels_per_level"] = np.bincount(h["virtual_rows"][:, 3], minlength=depth).astype(np.int64)
                print(f"  {name}/sample_{b}: n={h['n']} voxels={len(h['unique_hashes'])} "
                      f"rows={len(h['mapping'])} multi-parent={nchild - nuniq}")
            g.attrs["status"] = status
            if status == "ok" and len(samples) > 1:
                coords, _, mapping, offset = collate(samples)
                write_batch_group(g.create_group("batch"), samples, mapping, coords, offset, depth + 1, True)


# ---------------------------------------------------------------------------------------------------------
# The model files
# ---------------------------------------------------------------------------------------------------------

SEG_CONFIG = dict(c=3, dim=4, heads=2, depth=3, divide=3, layers=1, n_class=4, n_part=6, n_point=12)
CLS_CONFIG = dict(c=3, dim=4, heads=2, depth=2, divide=3, layers=2, selection="root", dim_cls=16, num_point=8)
K_SIBLINGS = {"seg": 16, "cls": 8}
K_POINTCONV = 16


def model_cases(kind):
    """name -> dict(clouds, normals (cls), classes (seg), note, expect ('clean'|'ties'|'degenerate'))."""
    rng = np.random.default_rng(101 if kind == "seg" else 202)
    cases = {}

    def add(name, clouds, note, expect, classes=None, **extra):
        normals = None if clouds is None else [unit_normals(rng, len(c)) for c in clouds]
        cases[name] = dict(clouds=clouds, normals=normals, classes=classes, note=note, expect=expect, **extra)

    one_point = np.array([[0.1, -0.2, 0.3]], dtype=np.float32)
    ident = lambda n: np.tile(np.array([[0.2, -0.1, 0.05]], dtype=np.float32), (n, 1))  # noqa: E731
    x0 = np.float32(0.3)
    tiny = np.stack([x0 + np.arange(6, dtype=np.float32) * np.spacing(x0)] * 3, axis=1).astype(np.float32)
    tiny[:, 2] = tiny[::-1, 2]
    if kind == "seg":
        add("small", [normalised_cloud(rng, 12), with_nesting_pair(rng, 12, 3, 3)],
            "2 x 12 points: every level <= 16 nodes per sample, the sibling kNN takes all nodes; sample 1 has "
            "a level-2 voxel with two parents (float32 nesting failure, duplicate-child path of Init)", "clean",
            classes=[1, 3])
        lat = lattice_cloud(rng, 20, 4), lattice_cloud(rng, 20, 4)
        add("ties", list(lat), "2 x 20 lattice points with repeats: ties in the sibling kNN at every level",
            "ties", classes=[0, 2])
        add("single_point", [one_point], "one point", "degenerate", classes=[2])
        add("identical", [ident(6)], "six identical points", "degenerate", classes=[2])
        add("tiny_span", [tiny], "six distinct points within 5 ulps of 0.3: one voxel at every level "
            "(voxels_per_level)", "degenerate", classes=[2])
        add("one_voxel_sample", [normalised_cloud(rng, 12), ident(12)],
            "a normal sample and one of 12 identical points (one voxel at levels 1 and 2)", "degenerate",
            classes=[1, 2])
        cloud = normalised_cloud(rng, 12)
        cloud[5, 0] = np.nan
        add("nan", [cloud], "one NaN coordinate", "degenerate", classes=[1])
        add("unequal_sizes", [normalised_cloud(rng, 12), normalised_cloud(rng, 8)],
            "samples of 12 and 8 points (the head assumes equal sizes)", "degenerate", classes=[1, 3])
        add("class_vector_wrong_length", [normalised_cloud(rng, 12), normalised_cloud(rng, 12)],
            "per-sample vector of n_class + 1 entries", "degenerate", classes=[1, 3], vector_length=5)
        add("class_vector_missing", [normalised_cloud(rng, 12), normalised_cloud(rng, 12)],
            "forward called without the per-sample vector", "degenerate", classes=[1, 3], no_vector=True)
    else:
        add("small", [normalised_cloud(rng, 8), normalised_cloud(rng, 5), normalised_cloud(rng, 8)],
            "8, 5, 8 points: every level <= 8 nodes per sample, the sibling kNN (k 8) and PointConv (k 16) "
            "take all nodes", "clean")
        add("medium", None, "2 x 16 clustered points: the point-level sibling kNN (k 8) selects among 16; no "
            "near-tie at the 8th neighbour (min_gap_kth_neighbour)",
            "margin", sizes=[16, 16])
        add("single_point", [one_point], "one point", "degenerate")
        add("identical", [ident(6)], "six identical points", "degenerate")
        add("tiny_span", [tiny], "six distinct points within 5 ulps of 0.3: one voxel at every level "
            "(voxels_per_level)", "degenerate")
        add("one_voxel_sample", [normalised_cloud(rng, 8), ident(5)],
            "a normal sample and one of 5 identical points (one voxel at level 1)", "degenerate")
        cloud = normalised_cloud(rng, 8)
        cloud[5, 0] = np.nan
        add("nan", [cloud], "one NaN coordinate", "degenerate")
    return cases


def new_model(off, kind, cfg, seed):
    torch.manual_seed(seed)
    args = types.SimpleNamespace(**cfg)
    model = (off.seg.TreeTransformerSeg(args) if kind == "seg" else off.cls.TreeTransformerCls(args)).eval()
    randomise(model, np.random.default_rng(seed))
    return model


def prepare(off, kind, cfg, case):
    """Hierarchies (checked against the official builder), collated batch, per-sample vector."""
    samples = [checked_hierarchy(off, c, cfg["divide"], cfg["depth"]) for c in case["clouds"]]
    normals = None if kind == "seg" else case["normals"]
    coords, feats, mapping, offset = collate(samples, normals)
    vec = None
    if kind == "seg":
        n = case.get("vector_length", cfg["n_class"])
        vec = np.zeros((len(samples), n), dtype=np.float32)
        vec[np.arange(len(samples)), case["classes"]] = 1
    return samples, (coords, feats, mapping, offset, vec)


def per_sample_lists(lists, b_level):
    """Split level-local neighbour lists into per-sample local lists (what the official call returns)."""
    out = []
    for b in np.unique(b_level):
        members = np.nonzero(b_level == b)[0]
        pos = np.full(b_level.shape[0], -1)
        pos[members] = np.arange(len(members))
        out.append(pos[lists[members]])
    return out


def exact_rule_replay(batch, idx, b_nodes, ld, layers, k_sib):
    """Neighbour lists by the library's rule (exact distance, ties by index) in the official call order,
    in the shape the official query_knn_point returns (1, n, min(n, k))."""
    coords = batch[0]
    calls = []
    for _ in range(layers):
        for i in range(ld - 1):
            b_level = b_nodes[idx[i]]
            for b in np.unique(b_level):
                pos = coords[idx[i][b_level == b]]
                order, _ = exact_knn(pos, min(k_sib, len(pos)))
                calls.append(torch.from_numpy(order.astype(np.int64))[None])
    return calls


def exact_pointconv_edges(batch, idx, b_nodes, k):
    coords = batch[0]
    pts = coords[idx[0]]
    b0 = b_nodes[idx[0]]
    rows, cols = [], []
    for b in np.unique(b0):
        members = np.nonzero(b0 == b)[0]
        order, _ = exact_knn(pts[members], min(k, len(members)))
        rows.append(np.repeat(members, order.shape[1]))
        cols.append(members[order].reshape(-1))
    return torch.from_numpy(np.stack([np.concatenate(rows), np.concatenate(cols)]).astype(np.int64))


def margin_ok(batch, idx, b_nodes, ld, k_sib, need):
    """Smallest gap between the k-th and (k+1)-th exact squared distance over all sibling and PointConv
    queries (inf where a sample level has <= k nodes)."""
    coords = batch[0]
    gap = np.inf
    for i in range(ld - 1):
        b_level = b_nodes[idx[i]]
        for b in np.unique(b_level):
            pos = coords[idx[i][b_level == b]]
            for k in ((k_sib, K_POINTCONV) if i == 0 else (k_sib,)):
                if len(pos) > k:
                    _, d = exact_knn(pos, len(pos))
                    gap = min(gap, float((d[:, k] - d[:, k - 1]).min()))
    return gap >= need, gap


def run_case(off, kind, cfg, model, name, case, g):
    ld = cfg["depth"] + 1
    k_sib = K_SIBLINGS[kind]
    g.attrs["note"] = case["note"]
    if case["expect"] == "margin":  # search clouds until no near-tie at the k-th neighbour
        rng = np.random.default_rng(303)
        for attempt in range(200):
            case["clouds"] = [clustered_cloud(rng, n) for n in case["sizes"]]
            samples, batch = prepare(off, kind, cfg, case)
            idx, _, _ = level_index(batch[2], ld)
            b_nodes = np.repeat(np.arange(len(batch[3])), np.diff(np.concatenate([[0], batch[3]])))
            ok, gap = margin_ok(batch, idx, b_nodes, ld, k_sib, 1e-4)
            if ok:
                break
        else:
            raise SystemExit(f"{name}: no cloud without near-ties found")
        case["normals"] = [unit_normals(rng, len(c)) for c in case["clouds"]]
        g.attrs["min_gap_kth_neighbour"] = gap
        g.attrs["search_attempts"] = np.int64(attempt + 1)
    put(g, "sample_sizes", np.array([len(c) for c in case["clouds"]], dtype=np.int64))
    put(g, "positions", np.concatenate(case["clouds"]))
    if kind == "cls":
        put(g, "features", np.concatenate(case["normals"]))
    if case["expect"] == "degenerate":
        return run_degenerate(off, kind, cfg, model, name, case, g)

    samples, batch = prepare(off, kind, cfg, case)
    coords, feats, mapping, offset, vec = batch
    if kind == "seg":
        put(g, "features", np.concatenate(case["clouds"]))
        put(g, "sample_features", vec)
    idx, m_local, pool, b_nodes = write_batch_group(g, samples, mapping, coords, offset, ld)
    per_level = [np.bincount(b_nodes[idx[i]]).max() for i in range(ld)]
    g.attrs["max_nodes_per_sample_level"] = np.array(per_level, dtype=np.int64)
    if case["expect"] == "clean" and max(per_level[:-1]) > k_sib:
        raise SystemExit(f"{name}: a level holds more than k = {k_sib} nodes per sample")

    out, rec = run_model(off, kind, model, batch, torch.float32)
    sib = sibling_lists(rec, [b_nodes[idx[i]] for i in range(ld)], ld, k_sib)
    replay = dict(sib=rec.sibling_calls, knn=rec.knn_calls)
    out64, rec64 = run_model(off, kind, model.double(), batch, torch.float64, replay)
    model.float()
    # the float64 run's own neighbour choice (before the replay substituted the float32 lists)
    own_diff = 0
    for a, b in zip(rec.sibling_calls, rec64.own_sibling_calls):
        a2, b2 = a.reshape(-1, a.shape[-1]).numpy(), b.reshape(-1, b.shape[-1]).numpy()
        own_diff += sum(set(x) != set(y) or x[0] != y[0] for x, y in zip(a2.tolist(), b2.tolist()))
    g.attrs["f64_own_sibling_lists_differing"] = np.int64(own_diff)

    acts = rec.acts
    for i in range(ld):
        put(g, f"init_{i}", acts["init"][1][i].numpy())
        put(g, f"block0_y_{i}", acts[f"y{i}"].numpy())
        for kind_ in ("parents", "children", "siblings"):
            if f"{kind_}{i}" in acts:
                put(g, f"block0_{kind_}_{i}", acts[f"{kind_}{i}"].numpy())
        put(g, f"block0_out_{i}", acts["block0"][i].numpy())
        put(g, f"block0_out_{i}_f64", rec64.acts["block0"][i].numpy())
        if cfg["layers"] > 1:
            put(g, f"last_out_{i}", acts["last"][i].numpy())
    for i in range(ld - 1):
        put(g, f"sibling_knn_{i}", sib[i])
    if rec.knn_calls:
        e = rec.knn_calls[0].numpy()
        put(g, "pointconv_edges", np.stack([e[0], e[1]]))
    put(g, "output", out.numpy())
    put(g, "output_f64", out64.numpy())
    diff = float(np.abs(out.numpy().astype(np.float64) - out64.numpy()).max())
    diff_blk = max(float(np.abs(acts["block0"][i].numpy().astype(np.float64) - rec64.acts["block0"][i].numpy()).max())
                   for i in range(ld))
    g.attrs["max_abs_output_f32_vs_f64"] = diff
    g.attrs["max_abs_block0_f32_vs_f64"] = diff_blk
    scale = float(np.abs(out64.numpy()).max())
    check_pooling(model, acts, pool, idx)

    # neighbours: the reference's decision against the library's rule (exact distance, ties by index)
    ties_total = differs_total = notself_total = 0
    for i in range(ld - 1):
        b_level = b_nodes[idx[i]]
        pos = coords[idx[i]]
        ref_local = per_sample_lists(sib[i], b_level)
        tie_all, diff_all, ns_all, exact_all = [], [], [], []
        for b, ref in zip(np.unique(b_level), ref_local):
            members = np.nonzero(b_level == b)[0]
            tie, differs, not_self, _ = tie_report(pos[members], ref, k_sib)
            order, _ = exact_knn(pos[members], min(k_sib, len(members)))
            if order.shape[1] < k_sib:
                order = np.concatenate([order, np.repeat(order[:, :1], k_sib - order.shape[1], axis=1)], axis=1)
            exact_all.append(members[order])
            tie_all.append(tie)
            diff_all.append(differs)
            ns_all.append(not_self)
        if case["expect"] == "ties":
            put(g, f"sibling_knn_exact_{i}", np.concatenate(exact_all).astype(np.int64))
            put(g, f"sibling_tie_{i}", np.concatenate(tie_all).astype(np.uint8))
            put(g, f"sibling_differs_{i}", np.concatenate(diff_all).astype(np.uint8))
        ties_total += int(np.concatenate(tie_all).sum())
        differs_total += int(np.concatenate(diff_all).sum())
        notself_total += int(np.concatenate(ns_all).sum())
    g.attrs["sibling_queries_with_tie_at_k"] = np.int64(ties_total)
    g.attrs["sibling_queries_reference_set_differs_from_exact_rule"] = np.int64(differs_total)
    g.attrs["sibling_queries_first_entry_not_self"] = np.int64(notself_total)
    msg = (f"{kind}/{name}: out {tuple(out.shape)} max|y|={scale:.3g} f32-vs-f64 {diff:.3g} (block0 {diff_blk:.3g})"
           f" f64-own-lists-differ {own_diff} ties {ties_total} differs {differs_total} not-self {notself_total}")
    if case["expect"] != "ties":
        if differs_total or notself_total:
            raise SystemExit(msg + ": a clean case depends on a tie")
        if own_diff:
            raise SystemExit(msg + ": float64 chooses other neighbours")
    else:
        # the same weights and inputs with the library's neighbour rule (exact, ties by index)
        replay_exact = dict(sib=exact_rule_replay(batch, idx, b_nodes, ld, cfg["layers"], k_sib),
                            knn=[exact_pointconv_edges(batch, idx, b_nodes, K_POINTCONV)] if kind == "cls" else [])
        out_exact, _ = run_model(off, kind, model, batch, torch.float32, replay_exact)
        out_exact64, _ = run_model(off, kind, model.double(), batch, torch.float64, replay_exact)
        model.float()
        put(g, "output_exact_rule", out_exact.numpy())
        put(g, "output_exact_rule_f64", out_exact64.numpy())
        d = np.abs(out.numpy() - out_exact.numpy())
        g.attrs["max_abs_output_vs_exact_rule"] = float(d.max())
        rows = d.reshape(d.shape[0], -1).max(axis=1) > 1e-5
        g.attrs["output_rows_changed_by_rule"] = np.int64(rows.sum())
        msg += f" | exact-rule output differs by {d.max():.3g} in {rows.sum()}/{len(rows)} rows"
    print("  " + msg)
    if diff > 1e-4 * max(1.0, scale):
        raise SystemExit(f"{name}: float32 and float64 disagree")


def check_pooling(model, acts, pool, idx):
    """Init level i+1 must be the projection of the children max-pooled by our pooling targets (the
    reference's quirk, §2.4.1) — a check of pool_parent_i."""
    x = acts["init"][1]
    with torch.no_grad():
        for i in range(len(idx) - 1):
            target = torch.from_numpy(pool[i])
            pooled = torch.zeros(len(idx[i + 1]), x[i].shape[1]).scatter_reduce_(
                0, target[:, None].expand(-1, x[i].shape[1]), x[i], reduce="amax", include_self=False)
            again = model._init.projections[i + 1](pooled)
            if not torch.equal(again, x[i + 1]):
                raise SystemExit(f"pool_parent_{i} does not reproduce Init level {i + 1}")


def run_degenerate(off, kind, cfg, model, name, case, g):
    stage = "hierarchy"
    try:
        for c in case["clouds"]:  # the official builder first: its error is what the golden records
            official_hierarchy(off, c, cfg["divide"], cfg["depth"])
        with np.errstate(invalid="ignore"):
            per_level = [np.bincount(build_hierarchy(c, cfg["divide"], cfg["depth"])["virtual_rows"][:, 3],
                                     minlength=cfg["depth"]) for c in case["clouds"]]
        g.attrs["voxels_per_level"] = np.array(per_level, dtype=np.int64)
        _, batch = prepare(off, kind, cfg, case)
        if kind == "seg":
            put(g, "sample_features", batch[4])
        stage = "model"
        coords, feats, mapping, offset, vec = batch
        args = [torch.from_numpy(coords), torch.from_numpy(feats), torch.from_numpy(offset),
                torch.from_numpy(mapping.astype(np.float32))]
        if kind == "seg" and not case.get("no_vector"):
            args.append(torch.from_numpy(vec)[:, None, :])
        with torch.no_grad(), np.errstate(invalid="ignore"):
            out = model(args)
    except Exception as e:  # noqa: BLE001 - the golden records what the official code raises
        g.attrs["status"] = "error"
        g.attrs["stage"] = stage
        g.attrs["error"] = error_text(e)
        print(f"  {kind}/{name}: error in {stage}: {error_text(e)[:110]}")
        return
    g.attrs["status"] = "ok"
    put(g, "output", out.numpy())
    finite = bool(np.isfinite(out.numpy()).all())
    g.attrs["output_finite"] = np.int64(finite)
    print(f"  {kind}/{name}: ok, output {tuple(out.shape)}, finite={finite}")


def make_model_file(off, kind, path, command, only=None):
    cfg = SEG_CONFIG if kind == "seg" else CLS_CONFIG
    model = new_model(off, kind, cfg, 1 if kind == "seg" else 2)
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    with h5py.File(path, "w", libver=LIBVER) as f:
        f.attrs["format"] = "surrogate-model"
        f.attrs["format_version"] = np.int64(1)
        f.attrs["architecture"] = "sequoia"
        f.attrs["model_class"] = "TreeTransformerSeg" if kind == "seg" else "TreeTransformerCls"
        write_common_attrs(f, off, command, "official forward (eval, CPU, one thread) with the stand-ins listed "
                                            "in stand_ins; hierarchy by the official Voxel.get_mappings")
        c = f.create_group("config")
        for key, value in cfg.items():
            c.attrs[key] = value if isinstance(value, str) else np.int64(value)
        w = f.create_group("weights")
        for k, v in state.items():
            w.create_dataset(k, data=v.numpy().astype(np.float32))
        gold = f.create_group("golden")
        for name, case in model_cases(kind).items():
            if only and name not in only:
                continue
            run_case(off, kind, cfg, model, name, case, gold.create_group(name))



# ---------------------------------------------------------------------------------------------------------
# Tie statistics on realistic clouds, and the check of the stand-ins
# ---------------------------------------------------------------------------------------------------------

def tie_statistics(off):
    """Sibling kNN on clouds of the papers' sizes: how often a tie decides the neighbour set, how often the
    reference's set differs from the exact rule (ties by index) by index and by the positions it names
    (duplicate points are interchangeable), and what that does to the golden models' outputs."""
    configs = [("cls ModelNet-like: 1024 distinct points, divide 3, depth 3, k 8", 1024, None, 3, 3, 8),
               ("seg ShapeNet-like: 2048 drawn with replacement from 2500, divide 3, depth 3, k 16", 2048, 2500,
                3, 3, 16)]
    rng = np.random.default_rng(404)
    for title, n, pool, divide, depth, k in configs:
        print(title + " (3 clouds)")
        print("  level  nodes/sample  queries  tie-at-k  ref!=exact: by index (tie / no tie)  by position  "
              "first!=self")
        acc = {}
        for _ in range(3):
            cloud = normalised_cloud(rng, pool or n)
            if pool:
                cloud = cloud[rng.integers(0, pool, n)]
            h = checked_hierarchy(off, cloud, divide, depth)
            coords = h["coords"].astype(np.float32)
            ld = depth + 1
            idx, _, _ = level_index(h["mapping"], ld)
            for i in range(ld - 1):
                pos = coords[idx[i]]
                ref = off.lib.query_knn_point(k, torch.from_numpy(pos)[None], torch.from_numpy(pos)[None])[0]
                ref = ref.numpy()
                tie, differs, not_self, _ = tie_report(pos, ref, k)
                ours, _ = exact_knn(pos, min(k, len(pos)))
                by_pos = np.array([sorted(map(tuple, pos[a].tolist())) != sorted(map(tuple, pos[b].tolist()))
                                   for a, b in zip(ref[:, :k], ours)])
                a = acc.setdefault(i, np.zeros(7))
                a += [len(pos), len(pos), tie.sum(), (differs & tie).sum(), (differs & ~tie).sum(), by_pos.sum(),
                      not_self.sum()]
        for i, a in sorted(acc.items()):
            print(f"  {i:5d}  {a[0] / 3:12.0f}  {a[1]:7.0f}  {a[2]:8.0f}  {a[3]:17.0f} / {a[4]:7.0f}"
                  f"  {a[5]:20.0f}  {a[6]:11.0f}")
    # effect on the outputs of the golden models (their weights) at these sizes
    for kind, n, pool in (("seg", 2048, 2500), ("cls", 1024, None)):
        cfg = dict(SEG_CONFIG if kind == "seg" else CLS_CONFIG)
        model = new_model(off, kind, cfg, 1 if kind == "seg" else 2)
        cloud = normalised_cloud(rng, pool or n)
        if pool:
            cloud = cloud[rng.integers(0, pool, n)]
        case = dict(clouds=[cloud], normals=[unit_normals(rng, n)], classes=[1])
        samples, batch = prepare(off, kind, cfg, case)
        ld = cfg["depth"] + 1
        idx, _, _ = level_index(batch[2], ld)
        b_nodes = np.zeros(batch[0].shape[0], dtype=np.int64)
        out_ref, _ = run_model(off, kind, model, batch, torch.float32)
        replay = dict(sib=exact_rule_replay(batch, idx, b_nodes, ld, cfg["layers"], K_SIBLINGS[kind]),
                      knn=[exact_pointconv_edges(batch, idx, b_nodes, K_POINTCONV)] if kind == "cls" else [])
        out_exact, _ = run_model(off, kind, model, batch, torch.float32, replay)
        d = (out_ref - out_exact).abs().reshape(out_ref.shape[0], -1).max(dim=1)[0]
        print(f"{kind} golden model on {n} points: output reference vs exact rule: max |diff| "
              f"{float(d.max()):.3g} (max |y| {float(out_ref.abs().max()):.3g}), rows changed > 1e-5: "
              f"{int((d > 1e-5).sum())} / {len(d)}")


def check_ops(off):
    """The stand-ins against the real torch_scatter (when it is installed) and against torch_geometric."""
    from torch_geometric.utils import scatter as pyg_scatter, softmax as pyg_softmax
    rng = np.random.default_rng(5)
    real = None
    if not getattr(sys.modules.get("torch_scatter"), "__sequoia_stand_in__", False):
        real = sys.modules["torch_scatter"]
    for trial in range(20):
        e = int(rng.integers(1, 300))
        n = int(rng.integers(1, 40))
        index = torch.from_numpy(np.sort(rng.integers(0, n, e)))
        src = torch.from_numpy(rng.standard_normal((e, 4, 1)).astype(np.float32) * 5)
        feat = torch.from_numpy(rng.standard_normal((e, 6)).astype(np.float32))
        ours = [stand_in_scatter_softmax(src, index[:, None], dim=0),
                stand_in_segment_coo(feat, index, reduce="sum", dim_size=n + 2),
                stand_in_scatter_max(feat, index[:, None], dim=0)[0]]
        pyg = [pyg_softmax(src, index, dim=0), pyg_scatter(feat, index, 0, n + 2, reduce="sum"),
               pyg_scatter(feat, index, 0, int(index.max()) + 1, reduce="max")]
        for a, b, what in zip(ours, pyg, ("scatter_softmax", "segment_coo", "scatter_max")):
            if not torch.equal(a, b):
                raise SystemExit(f"stand-in {what} differs from torch_geometric.utils by "
                                 f"{(a - b).abs().max():.3g}")
        if real is not None:
            theirs = [real.scatter_softmax(src, index[:, None], dim=0),
                      real.segment_coo(feat, index, reduce="sum", dim_size=n + 2),
                      real.scatter_max(feat, index[:, None], dim=0)[0]]
            for a, b, what in zip(ours, theirs, ("scatter_softmax", "segment_coo", "scatter_max")):
                if not torch.equal(a, b):
                    raise SystemExit(f"stand-in {what} differs from torch_scatter")
        pos = torch.from_numpy(rng.random((50, 3)).astype(np.float32))
        batch = torch.from_numpy(np.repeat([0.0, 1.0], [30, 20]).astype(np.float32))
        e1 = knn_float32_rule(pos, pos, 16, batch, batch)
        for b, members in ((0, np.arange(30)), (1, np.arange(30, 50))):
            order, _ = exact_knn(pos.numpy()[members], 16)
            got = e1[1][np.isin(e1[0].numpy(), members)].numpy().reshape(len(members), -1)
            if any(set(x) != set(members[y]) for x, y in zip(got.tolist(), order.tolist())):
                raise SystemExit("knn stand-in differs from the exact kNN")
    print("stand-ins: equal to torch_geometric.utils (bitwise)" +
          (" and to torch_scatter (bitwise)" if real is not None else "; torch_scatter not installed") +
          "; knn equal to the exact kNN on tie-free clouds")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--official", required=True, help="checkout of HySonLab/HierAttention")
    ap.add_argument("out_dir", nargs="?", help="where the .h5 files go (tests/data/sequoia)")
    ap.add_argument("--files", nargs="*", choices=["hierarchy", "seg", "cls"], help="only these files")
    ap.add_argument("--cases", nargs="*", help="only these model cases")
    ap.add_argument("--stats", action="store_true", help="print tie statistics on realistic clouds")
    ap.add_argument("--check-ops", action="store_true", help="check the stand-ins")
    args = ap.parse_args()
    off = load_official(args.official)
    print(f"official HySonLab/HierAttention@{off.commit}; stand-ins: {', '.join(off.stand_ins) or 'none'}")
    if args.check_ops:
        check_ops(off)
    if args.stats:
        tie_statistics(off)
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
        command = "python share/tools/golden/sequoia_golden.py --official OFFICIAL_DIR " + " ".join(
            a for a in sys.argv[1:] if not a.startswith("--official") and a != args.official)
        files = args.files or ["hierarchy", "seg", "cls"]
        if "hierarchy" in files:
            print("sequoia_hierarchy.h5")
            make_hierarchy_file(off, os.path.join(args.out_dir, "sequoia_hierarchy.h5"), command)
        for kind in ("seg", "cls"):
            if kind in files:
                print(f"sequoia_{kind}.h5")
                make_model_file(off, kind, os.path.join(args.out_dir, f"sequoia_{kind}.h5"), command, args.cases)


if __name__ == "__main__":
    main()
