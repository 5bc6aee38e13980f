#!/usr/bin/env python3
"""Golden data for the HEPT family (tests/data/hept/*.h5) from the OFFICIAL HEPT code.

Runs the official code of Graph-COM/HEPT (not part of this repository: pass a checkout of it with
--official; the script imports ``example/transformer.py``, ``example/hept.py``, ``example/hept_utils.py``
and, for the ``src/`` layout, ``src/models/baselines/transformer.py``, ``src/models/attention/hept.py``,
``src/models/model_utils/*.py`` at run time and copies none of them) in a torch 2.x virtual environment
with torch_geometric (for its ``MLP``) and einops, on the CPU, one thread.

Every intermediate is taken from the official forward itself: the script wraps the official module-level
functions (``quantile_partition``, ``pad_and_unpad``, ``prepare_input``, ``lsh_mapping``,
``get_geo_shift``, ``sort_to_buckets``) with recorders that call the original and keep its arguments and
results, and hooks the attention modules for their outputs. Nothing of the model is
re-implemented here; the few derived values (bit widths, sort keys, quantile bin sizes, RBF scales) are
recomputed with the official expressions and checked against what the forward used (the script stops on
any mismatch).

Every case is run four times: float32 and float64 (the module and the inputs converted to double: the
buckets are then computed in float64 too), each with the official sorts as they are (``argsort``, which
is NOT stable on the CPU: introsort) and with every ``argsort`` of the official code replaced by the
stable one (``stable=True``: ties by position, i.e. by the point's index within its graph; the library's
documented order). Datasets equal between runs are stored once and hard-linked.

Usage (from the repository root; the venv holds torch 2.x, torch_geometric, einops, h5py):

    VENV/bin/python share/tools/golden/hept_golden.py --official HEPT_CHECKOUT tests/data/hept

Options: --cases NAME ... (only these), --commit SHA (recorded in @source; default the commit read).
The file layout is documented in tests/data/hept/README.md.
"""
import argparse
import contextlib
import importlib
import os
import platform
import sys
import types

import h5py
import numpy as np
import torch

torch.set_num_threads(1)

DEFAULT_COMMIT = "8d256c1c11c81e24c77d57e80decfeb02df75968"
CHECKPOINT = "example/ckpt/tracking-60k-model.pt"
# The constructor arguments of the shipped checkpoint: example/example.ipynb (model_configs; in_dim,
# coords_dim and num_classes from the Tracking data set: x_dim = 14 + 1, coords_dim = 2 + 4, num_classes
# 0 because data.y is empty) == src/configs/tracking/tracking_trans_hept.yaml (model_kwargs).
CHECKPOINT_CONFIG = dict(in_dim=15, coords_dim=6, num_classes=0, dropout=0.1, block_size=100, n_hashes=3,
                         num_regions=150, num_heads=8, h_dim=24, n_layers=4, num_w_per_dist=10)

SMALL = dict(in_dim=5, coords_dim=4, num_classes=3, dropout=0.1, block_size=32, n_hashes=3,
             num_regions=16, num_heads=2, h_dim=8, n_layers=2, num_w_per_dist=3)
SMALL_SRC = dict(attn_type="hept", in_dim=5, coords_dim=4, task="tracking", block_size=32, n_hashes=3,
                 num_regions=12, num_heads=2, h_dim=8, n_layers=2, num_w_per_dist=3, pe_type="none")
# The pileup task of src/ (pileup_trans_hept.yaml's hyperparameters scaled down): x = [eta, phi, px, py, pt,
# E, rapidity, pid] and coords = [eta, phi, eta, phi] as src/datasets/pileup.py builds them.
SMALL_PILEUP = dict(attn_type="hept", in_dim=8, coords_dim=4, task="pileup", block_size=32, n_hashes=3,
                    num_regions=12, num_heads=2, h_dim=8, n_layers=2, num_w_per_dist=3, pe_type="none")

RUNS = ("f32_official", "f32_stable", "f64_official", "f64_stable")
# which runs keep the bulky arrays: perms everywhere; the sort keys (layer 0) and the attention output
# of layer 0 of the runs a test can be exact against (f32 official, the stable runs)
FULL = dict(perm_runs=RUNS, keys_runs=("f32_official", "f32_stable", "f64_stable"),
            attn_runs=("f32_official", "f32_stable", "f64_stable"), output_runs=RUNS)

CASES = {
    # (a) small random-weight example/ model, batch of two graphs (300 = 9*32 + 12: padded with 20
    #     duplicates; 224 = 7*32: no padding), num_classes 3 (the optional out_proj), a few tied eta/phi
    #     values in graph 0; perms and tie masks of every layer, sort keys and attention output of layer 0.
    "example_small": dict(layout="example", config=SMALL, sizes=[300, 224], seed=101, inputs="uniform",
                          detail_layers=None, policy=FULL),
    # (b) the shipped checkpoint (tracking-60k) on two synthetic collider events (helix tracks + noise,
    #     features and coordinates built as the Tracking data set builds them); 1234 = 12*100 + 34 (66
    #     duplicates), 800 = 8*100. Intermediates of layer 0 only (size).
    "checkpoint_tracking": dict(layout="example", config=CHECKPOINT_CONFIG, sizes=[1234, 800], seed=202,
                                inputs="tracking", detail_layers=[0], checkpoint=True,
                                policy=dict(perm_runs=("f64_official", "f64_stable"), keys_runs=(),
                                            attn_runs=("f64_stable",),
                                            output_runs=("f32_official", "f64_official", "f64_stable"))),
    # (c) the src/ layout (single graph; zero padding with +inf, additive region shift, e2lsh.beta),
    #     random weights, 300 hits (padded to 320).
    "src_small": dict(layout="src", config=SMALL_SRC, sizes=[300], seed=303, inputs="uniform",
                      detail_layers=None, policy=FULL),
    # (e) the src/ layout's pileup task (pids_enc on the last input column, out_proj to 1, sigmoid),
    #     random weights, 250 particles (padded to 256); a few fractional class values (truncated by .long()).
    "src_pileup": dict(layout="src", config=SMALL_PILEUP, sizes=[250], seed=505, inputs="pileup",
                       detail_layers=None, policy=FULL),
    # (d) degenerate inputs on the weights of a small example/ model (sub-cases in /golden/<name>).
    "degenerate": dict(layout="example", config=SMALL, seed=404, inputs="degenerate", detail_layers=[0],
                       policy=dict(perm_runs=RUNS, keys_runs=(), attn_runs=(), output_runs=RUNS)),
}

DEGENERATE = {
    # graph 0 smaller than the block size: its 12 duplicates come from idx -12..-1 of the batch-wide sort
    # (negative indices wrap to the end: graph 1's points, with graph 1's batch bits).
    "small_graph_first": dict(sizes=[20, 150]),
    # graph 1 smaller than the block size: its duplicates come from graph 0's sorted tail.
    "small_graph_last": dict(sizes=[150, 20]),
    # a single graph smaller than the block size.
    "small_graph_alone": dict(sizes=[20]),
    # all hits of a graph identical (coordinates and features).
    "identical_hits": dict(sizes=[70], identical=True),
    # one NaN coordinate (eta of hit 5 of graph 0).
    "nan_coordinate": dict(sizes=[100, 60], nan=True),
    # coordinates of the wrong width (coords_dim + 1 columns).
    "coords_dim_mismatch": dict(sizes=[64, 40], extra_coord=True),
}


# --------------------------------------------------------------------------------------------------
# Loading the official code
# --------------------------------------------------------------------------------------------------

def load_example(root):
    d = os.path.join(root, "example")
    if not os.path.exists(os.path.join(d, "transformer.py")):
        raise SystemExit(f"no example/transformer.py under {root}")
    sys.path.insert(0, d)
    hept_utils = importlib.import_module("hept_utils")
    hept = importlib.import_module("hept")
    transformer = importlib.import_module("transformer")
    return types.SimpleNamespace(utils=hept_utils, attn=hept, model=transformer, path=d)


def load_src(root):
    """src/models/... as package hept_src.models; models/attention/__init__.py and
    models/baselines/__init__.py are NOT executed (they import the other attentions, which need
    fast_transformers and torch_cluster): their namespaces are filled with the real HEPTAttention and
    placeholders for the classes the HEPT model never instantiates."""
    base = os.path.join(root, "src", "models")
    if not os.path.exists(os.path.join(base, "attention", "hept.py")):
        raise SystemExit(f"no src/models/attention/hept.py under {root}")

    def package(name, path):
        m = types.ModuleType(name)
        m.__path__ = [path] if path else []
        sys.modules[name] = m
        return m

    package("hept_src", None)
    package("hept_src.models", base)
    package("hept_src.models.model_utils", os.path.join(base, "model_utils"))
    attention = package("hept_src.models.attention", os.path.join(base, "attention"))
    package("hept_src.models.baselines", os.path.join(base, "baselines"))
    hept = importlib.import_module("hept_src.models.attention.hept")
    attention.HEPTAttention = hept.HEPTAttention
    for name in ("PerformerAttention", "ReformerAttention", "SmyrfAttention", "SBAttention", "FLTAttention",
                 "PCTAttention", "FlatformerAttention"):
        attention.__dict__[name] = type(name, (), {"__init__": _not_available(name)})
    transformer = importlib.import_module("hept_src.models.baselines.transformer")
    utils = importlib.import_module("hept_src.models.model_utils.hash_utils")
    return types.SimpleNamespace(utils=utils, attn=hept, model=transformer, path=base)


def _not_available(name):
    def init(self, *a, **k):
        raise RuntimeError(f"{name} is not loaded by hept_golden.py")
    return init


# --------------------------------------------------------------------------------------------------
# Recording the official forward
# --------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def patched(module, name, wrapper_factory):
    original = getattr(module, name)
    setattr(module, name, wrapper_factory(original))
    try:
        yield
    finally:
        setattr(module, name, original)


@contextlib.contextmanager
def argsort_mode(stable):
    """stable=True: every torch.argsort / Tensor.argsort of the official code becomes stable."""
    if not stable:
        yield
        return
    fn, method = torch.argsort, torch.Tensor.argsort

    def argsort(input, dim=-1, descending=False, stable=False):
        return fn(input, dim=dim, descending=descending, stable=True)

    def argsort_method(self, dim=-1, descending=False, stable=False):
        return fn(self, dim=dim, descending=descending, stable=True)

    torch.argsort, torch.Tensor.argsort = argsort, argsort_method
    try:
        yield
    finally:
        torch.argsort, torch.Tensor.argsort = fn, method


class Recorder:
    """Wraps the official functions for one forward and keeps what they were given and returned."""

    def __init__(self, official, layout, model):
        self.o, self.layout, self.model = official, layout, model
        self.qp = []          # quantile_partition calls: (sorted_indices, num_regions, result)
        self.pad = None       # pad_and_unpad: (region_indices, pad_seq, unpad_seq, argsort of region_indices)
        self.prep = None      # prepare_input results
        self.lsh = []         # lsh_mapping results per layer: (q_hashed, k_hashed, hash_shift)
        self.geo = []         # src: get_geo_shift results per layer
        self.perms = []       # sort_to_buckets perms, 3 calls per layer (q, k, k)
        self.denoms = []      # qkv_res denominators per layer
        self.attn_out = {}
        self.stack = contextlib.ExitStack()

    def __enter__(self):
        s, m, a = self.stack, self.o.model, self.o.attn

        def rec_qp(orig):
            def f(sorted_indices, num_regions):
                r = orig(sorted_indices, num_regions)
                self.qp.append((sorted_indices, num_regions, r))
                return r
            return f
        s.enter_context(patched(m, "quantile_partition", rec_qp))

        if self.layout == "example":
            def rec_pad(orig):
                def f(batch, block_size, region_indices, raw_sizes):
                    pad_seq, unpad_seq = orig(batch, block_size, region_indices, raw_sizes)
                    self.pad = (region_indices, pad_seq, unpad_seq, region_indices.argsort())
                    return pad_seq, unpad_seq
                return f
            s.enter_context(patched(m, "pad_and_unpad", rec_pad))

            def rec_prep(orig):
                def f(x, coords, batch, helper_params):
                    r = orig(x, coords, batch, helper_params)
                    self.prep = r
                    return r
                return f
        else:
            def rec_prep(orig):
                def f(x, coords, edge_index, batch, attn_type, helper_funcs):
                    r = orig(x, coords, edge_index, batch, attn_type, helper_funcs)
                    self.prep = r
                    return r
                return f

            def rec_geo(orig):
                def f(regions_h, hash_shift, region_indices, num_or_hashes):
                    r = orig(regions_h, hash_shift, region_indices, num_or_hashes)
                    self.geo.append(r)
                    return r
                return f
            s.enter_context(patched(a, "get_geo_shift", rec_geo))
        s.enter_context(patched(m, "prepare_input", rec_prep))

        def rec_lsh(orig):
            def f(e2lsh, queries, keys):
                r = orig(e2lsh, queries, keys)
                self.lsh.append(r)  # references: src sets the pad entries to +inf in place afterwards
                return r
            return f
        s.enter_context(patched(a, "lsh_mapping", rec_lsh))

        def rec_sort(orig):
            def f(x, perm, bucketsz):
                self.perms.append(perm)
                return orig(x, perm, bucketsz)
            return f
        s.enter_context(patched(a, "sort_to_buckets", rec_sort))

        def rec_qkv(orig):
            def f(s_query, s_key, s_value):
                denom, so = orig(s_query, s_key, s_value)
                self.denoms.append(denom)
                return denom, so
            return f
        s.enter_context(patched(a, "qkv_res", rec_qkv))

        for i, block in enumerate(self.model.attns):
            s.callback(block.attn.register_forward_hook(self._keep(self.attn_out, i)).remove)
        return self

    @staticmethod
    def _keep(store, i):
        def hook(module, inputs, output):
            store[i] = output
        return hook

    def __exit__(self, *exc):
        return self.stack.__exit__(*exc)


def run_official(official, layout, model, x, coords, batch, stable):
    rec = Recorder(official, layout, model)
    error = None
    out = None
    with torch.no_grad(), argsort_mode(stable), rec:
        try:
            if layout == "example":
                out = model(x, coords, batch)
            else:
                out = model({"x": x, "edge_index": None, "coords": coords, "batch": batch})
        except Exception as e:  # the degenerate cases record what the official code does
            error = f"{type(e).__name__}: {e}"
    return out, rec, error


# --------------------------------------------------------------------------------------------------
# Turning a record into arrays
# --------------------------------------------------------------------------------------------------

def bits_of(v):
    """ceil(log2(max + 1)) per row, as the official bit_shift computes it (torch.log2 of the int64 maximum
    is float32 in both precisions; exact for the values that occur)."""
    return torch.ceil(torch.log2(v.max(dim=1, keepdim=True).values + 1)).long()[:, 0]


def sorted_ties(keys, perm, block_size, graph_of):
    """keys, perm (..., n): per row and graph the number of adjacent equal keys in sorted order, and how
    many of those pairs straddle a bucket boundary (where the tie order decides bucket membership).
    graph_of: graph of each padded position (a pair counts for the graph of its first element)."""
    sk = torch.gather(keys, -1, perm)
    eq = sk[..., 1:] == sk[..., :-1]
    boundary = torch.zeros_like(eq)
    boundary[..., block_size - 1::block_size] = True
    g = graph_of[perm[..., :-1]]
    G = int(graph_of.max()) + 1
    ties = torch.stack([(eq & (g == k)).sum(-1) for k in range(G)], -1)
    at_boundary = torch.stack([(eq & boundary & (g == k)).sum(-1) for k in range(G)], -1)
    return ties.numpy().astype(np.int64), at_boundary.numpy().astype(np.int64)


def bin_size(sorted_indices, num_regions):
    """The quantile bin size of quantile_partition, by its own expression."""
    return torch.ceil(sorted_indices.shape[-1] / num_regions)[:, 0].numpy()


def tie_mask(keys, perm):
    """uint8 (..., n): 1 at sorted position i when the key there equals the key at sorted position i - 1."""
    sk = torch.gather(keys, -1, perm)
    m = torch.zeros(sk.shape, dtype=torch.uint8)
    m[..., 1:] = (sk[..., 1:] == sk[..., :-1]).to(torch.uint8)
    return m.numpy()


def extract(rec, layout, cfg, sizes, detail_layers, x_in):
    """Arrays of one recorded forward (see README for every name)."""
    d = {}
    H, C, bs = cfg["num_heads"], cfg["n_hashes"], cfg["block_size"]
    L = cfg["n_layers"]
    rows = C * H
    ties = {}
    if layout == "example":
        x_pad, kwargs, unpad = rec.prep
        n_graphs = len(sizes)
        assert len(rec.qp) == 2 * n_graphs
        eta = torch.cat([rec.qp[2 * g][2] for g in range(n_graphs)], dim=-1)
        phi = torch.cat([rec.qp[2 * g + 1][2] for g in range(n_graphs)], dim=-1)
        assert torch.equal(eta, eta.round()) and torch.equal(phi, phi.round())
        eta_l, phi_l = eta.long(), phi.long()
        d["region_eta"] = eta_l.numpy()
        d["region_phi"] = phi_l.numpy()
        # quantile bin sizes ceil(n_g / R) per graph and row, as quantile_partition computes them
        # (int / tensor is tensor.reciprocal() * int in torch: ceil(n * fl(1/R)) in the run's precision)
        d["bin_size_eta"] = np.stack([bin_size(*rec.qp[2 * g][:2]) for g in range(n_graphs)])
        d["bin_size_phi"] = np.stack([bin_size(*rec.qp[2 * g + 1][:2]) for g in range(n_graphs)])
        bits_eta = bits_of(eta_l)
        code1 = (phi_l << bits_eta[:, None]) | eta_l
        bits_code1 = bits_of(code1)
        batch_t = torch.repeat_interleave(torch.arange(n_graphs), torch.tensor(sizes))
        code = (batch_t[None] << bits_code1[:, None]) | code1
        padded_codes = kwargs["combined_shifts"]
        codes = padded_codes[..., unpad]
        assert torch.equal(codes.reshape(rows, -1), code), "bit widths do not reproduce the official codes"
        d["bits_eta"] = bits_eta.numpy()
        d["bits_code1"] = bits_code1.numpy()
        d["codes"] = codes.numpy()
        region_indices, pad_seq, unpad_seq, pad_order = rec.pad
        d["pad_seq"] = pad_seq.numpy()
        d["padded_sizes"] = np.array([((n + bs - 1) // bs) * bs for n in sizes], dtype=np.int64)
        d["unpad"] = unpad_seq.numpy().astype(np.uint8)
        d["pad_sort_order"] = pad_order.numpy()
        n_pad = pad_seq.shape[0]
        # which duplicates depend on tie-breaking: the window of sorted positions [S+n-bs, S+n-bs+d)
        # whose codes tie with codes just outside it
        sorted_codes = region_indices[pad_order]
        dep = []
        start = 0
        for n in sizes:
            p = ((n + bs - 1) // bs) * bs
            dpad = p - n
            if dpad:
                lo, hi = start + n - bs, start + n - bs + dpad
                total = len(sorted_codes)
                lo_tie = lo - 1 >= -total and bool(sorted_codes[lo - 1] == sorted_codes[lo])
                hi_tie = hi != total and bool(sorted_codes[hi - 1] == sorted_codes[hi % total])
                dep.append(int(lo_tie or hi_tie))
            else:
                dep.append(0)
            start += n
        ties["pad_choice_tie_dependent"] = np.array(dep, dtype=np.int64)
    else:
        x_pad, mask, kwargs = rec.prep
        raw = kwargs["raw_size"]
        eta, phi = kwargs["region_indices"]
        assert torch.equal(eta, eta.round()) and torch.equal(phi, phi.round())
        d["region_eta"] = eta.long().numpy()
        d["region_phi"] = phi.long().numpy()
        d["bin_size_eta"] = bin_size(*rec.qp[0][:2])[None]
        d["bin_size_phi"] = bin_size(*rec.qp[1][:2])[None]
        d["padded_coords"] = kwargs["coords"].numpy()
        n_pad = x_pad.shape[0]
        d["raw_size"] = np.int64(raw)

    # equal eta / phi values within a graph (ties of the quantile ranks)
    start = 0
    te, tp = [], []
    for n in sizes:
        for col, lst in ((0, te), (1, tp)):
            v = np.sort(x_in[start:start + n, col])
            lst.append(int(np.sum(v[1:] == v[:-1])))
        start += n
    ties["eta_ties"] = np.array(te, dtype=np.int64)
    ties["phi_ties"] = np.array(tp, dtype=np.int64)

    assert len(rec.lsh) == L and len(rec.perms) == 3 * L
    if layout == "example":
        padded_sizes = [((n + bs - 1) // bs) * bs for n in sizes]
        graph_of = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(padded_sizes))
        dup = torch.nonzero(~unpad_seq)[:, 0]
        dup_orig = torch.nonzero(unpad_seq)[:, 0][pad_seq[dup]]
    else:
        graph_of = torch.zeros(n_pad, dtype=torch.long)
        dup = None
    dup_differs = []
    layers = {}
    tq, tk, tqb, tkb = [], [], [], []
    den_small = []
    for l in range(L):
        qh, kh, shift = rec.lsh[l]
        if layout == "example":
            comb = kwargs["combined_shifts"] * shift
            kq, kk = qh + comb, kh + comb
            delta = shift[..., 0]
        else:
            qs, ks = rec.geo[l]
            kq, kk = qh + qs, kh + ks
            delta = shift[..., 0]
        pq, pk = rec.perms[3 * l], rec.perms[3 * l + 1]
        assert torch.equal(pk, rec.perms[3 * l + 2])
        assert torch.equal(kq.argsort(dim=-1), pq) or _stable_equal(kq, pq), "query keys do not give the perm"
        assert torch.equal(kk.argsort(dim=-1), pk) or _stable_equal(kk, pk), "key keys do not give the perm"
        a, b = sorted_ties(kq, pq, bs, graph_of)
        c_, e = sorted_ties(kk, pk, bs, graph_of)
        tq.append(a), tqb.append(b), tk.append(c_), tkb.append(e)
        if dup is not None:
            # duplicates whose keys are not bitwise those of their originals (BLAS rounding by row position)
            dup_differs.append(int(((kq[..., dup] != kq[..., dup_orig]) | (kk[..., dup] != kk[..., dup_orig]))
                                   .any(0).any(0).sum()))
        den = rec.denoms[l]
        den_small.append(float((den < 1e-10).double().mean()))
        lay = {}
        if detail_layers is None or l in detail_layers:
            lay.update(attn_out=rec.attn_out[l].numpy(), delta=delta.numpy(), keys_q=kq.numpy(),
                       keys_k=kk.numpy(), perm_q=pq.numpy(), perm_k=pk.numpy(), tie_q=tie_mask(kq, pq),
                       tie_k=tie_mask(kk, pk))
            if layout == "src":
                lay.update(shift_q=qs.numpy(), shift_k=ks.numpy())
        layers[l] = lay
    ties["lsh_ties_q"] = np.stack(tq)
    ties["lsh_ties_k"] = np.stack(tk)
    ties["lsh_ties_q_at_boundary"] = np.stack(tqb)
    ties["lsh_ties_k_at_boundary"] = np.stack(tkb)
    if dup is not None:
        ties["duplicates_with_unequal_keys"] = np.array(dup_differs, dtype=np.int64)
    d["layers"] = layers
    d["ties"] = ties
    d["den_tiny_fraction"] = np.array(den_small)
    d["n_padded"] = n_pad
    return d


def _stable_equal(keys, perm):
    return torch.equal(keys.argsort(dim=-1, stable=True), perm)


def rbf_scales(official, model, dtype, cfg):
    """sqrt(2 w') per layer (H, coords_dim): the factor prep_qk multiplies the coordinates by, obtained by
    calling the official prep_qk on unit coordinates and empty queries and keys."""
    H, D, K = cfg["num_heads"], cfg["h_dim"], cfg["num_w_per_dist"]
    from einops import rearrange
    out = []
    for block in model.attns:
        w = rearrange(block.w_rpe.weight, "(h d) (r k) -> h d r k", h=H, d=D, k=K)
        empty = torch.zeros((1, H, 0), dtype=dtype)
        q_hat, _ = official.attn.prep_qk(empty, empty, w, torch.ones((1, cfg["coords_dim"]), dtype=dtype))
        out.append(q_hat[0].detach().numpy())
    return np.stack(out)


# --------------------------------------------------------------------------------------------------
# Models, weights, inputs
# --------------------------------------------------------------------------------------------------

def build_model(official, layout, cfg):
    if layout == "example":
        kw = {k: v for k, v in cfg.items() if k not in ("in_dim", "coords_dim", "num_classes", "dropout")}
        return official.model.Transformer(cfg["in_dim"], cfg["coords_dim"], cfg["num_classes"],
                                          dropout=cfg["dropout"], **kw).eval()
    kw = {k: v for k, v in cfg.items() if k not in ("attn_type", "in_dim", "coords_dim", "task")}
    return official.model.Transformer(cfg["attn_type"], cfg["in_dim"], cfg["coords_dim"], cfg["task"], **kw).eval()


def randomise(model, rng, cfg):
    """Weights of a useful scale. regions, e2lsh.alpha (and e2lsh.beta) keep the official draws of the
    constructor (seeded). q/k projections are small and the RBF weights near log(1/K) per channel so that
    the Gaussian kernel -1/2|q^ - k^|^2 stays in a range where buckets see non-negligible weights.
    Every value is a multiple of 1/64 and the three 256 x 256 hidden layers of the output MLP (the
    official MLP's width is fixed at 256) are 97 % zeros: the files stay small under gzip."""
    D, K = cfg["h_dim"], cfg["num_w_per_dist"]
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name == "regions" or ".e2lsh." in name:
                continue
            if name.endswith("w_rpe.weight"):
                v = (np.log(1.0 / K) + 0.5 * rng.standard_normal(t.shape)) / D + 0.05 * rng.standard_normal(t.shape)
            elif name.endswith("w_q.weight") or name.endswith("w_k.weight"):
                v = 0.35 * rng.standard_normal(t.shape) / np.sqrt(t.shape[1])
            elif t.dim() == 2 and t.shape == (256, 256):
                v = (rng.random(t.shape) < 0.03) * rng.standard_normal(t.shape) / np.sqrt(0.03 * t.shape[1])
            elif t.dim() == 2:
                v = rng.standard_normal(t.shape) / np.sqrt(t.shape[1])
            elif name.endswith("bias"):
                v = 0.1 * rng.standard_normal(t.shape)
            else:  # norm weights
                v = 1.0 + 0.2 * rng.standard_normal(t.shape)
            t.copy_(torch.from_numpy((np.round(v * 64.0) / 64.0).astype(np.float32)))


def uniform_inputs(rng, cfg, sizes, ties=True):
    n = sum(sizes)
    coords = np.empty((n, cfg["coords_dim"]), dtype=np.float32)
    coords[:, 0] = rng.uniform(-2.5, 2.5, n)
    coords[:, 1] = rng.uniform(-np.pi, np.pi, n)
    coords[:, 2:] = rng.uniform(0.0, 1.0, (n, cfg["coords_dim"] - 2))
    x = rng.standard_normal((n, cfg["in_dim"])).astype(np.float32)
    # a few exact ties in eta and phi inside graph 0 (the quantile ranks' argsort sees equal values)
    if ties:
        m = min(sizes[0], 40)
        coords[10:m:7, 0] = coords[3, 0]
        coords[11:m:9, 1] = coords[4, 1]
    return x, coords


def pileup_inputs(rng, sizes):
    """Particles as src/datasets/pileup.py stores them: x = [eta, phi, px, py, pt, E, rapidity, pid] with the
    class pid in 0..6 (a few values fractional or in (-1, 0): torch's .long() truncates them), coords =
    [eta, phi, eta, phi]; a few tied eta and phi values."""
    n = sum(sizes)
    eta = rng.uniform(-2.5, 2.5, n).astype(np.float32)
    phi = rng.uniform(-np.pi, np.pi, n).astype(np.float32)
    eta[10:40:7], phi[11:40:9] = eta[3], phi[4]
    pt = (0.5 + rng.exponential(1.0, n)).astype(np.float32)
    pid = rng.choice(7, n, p=[0.55, 0.25, 0.08, 0.04, 0.04, 0.02, 0.02]).astype(np.float32)
    pid[[5, 17, 60, 99, 200]] = [2.75, 0.5, 6.9, -0.5, 3.25]
    x = np.stack([eta, phi, pt * np.cos(phi), pt * np.sin(phi), pt, pt * np.cosh(eta), 0.95 * eta, pid], 1)
    return x.astype(np.float32), np.stack([eta, phi, eta, phi], 1).astype(np.float32)


# Synthetic collider event: helices from the interaction region in a 2 T solenoid through the TrackML
# pixel detector (4 barrel layers, 7 end-cap disks per side), plus noise hits. Features and coordinates
# as data/tracking/raw/preprocessing/point_cloud_builder.py and src/datasets/tracking.py build them.
BARREL_R = [32.0, 72.0, 116.0, 172.0]
BARREL_HALF_Z = 491.0
DISK_Z = [600.0, 700.0, 820.0, 960.0, 1100.0, 1300.0, 1500.0]
DISK_R = (30.0, 175.0)
PITCH_U, PITCH_V, THICK = 0.05, 0.05625, 0.15
FEATURE_SCALE = np.array([1000.0, np.pi, 1000.0, 1, 1 / 1000.0, 1 / 1000.0] + [1.0] * 8)


def _layer_index(kind, k, side):
    # sorted (volume_id, layer_id): (7, 2..14) -> 0..6 (z = -1500 .. -600), (8, 2..8) -> 7..10,
    # (9, 2..14) -> 11..17 (z = +600 .. +1500)
    if kind == "barrel":
        return 7 + k
    return 6 - k if side < 0 else 11 + k


def tracking_event(rng, n_hits):
    B = 2.0
    hits = []  # (x, y, z, layer, dir_x, dir_y, dir_z, kind)
    while len(hits) < int(1.6 * n_hits):
        pt = 0.5 + rng.exponential(1.5)
        eta = rng.uniform(-3.5, 3.5)
        phi0 = rng.uniform(-np.pi, np.pi)
        q = rng.choice([-1.0, 1.0])
        z0 = rng.normal(0.0, 55.0)
        R = 1000.0 * pt / (0.3 * B)  # mm
        cot = np.sinh(eta)

        def point(s):  # transverse path length s
            a = phi0 - q * s / R
            x = (R / q) * (np.sin(phi0) - np.sin(a))
            y = (R / q) * (np.cos(a) - np.cos(phi0))
            z = z0 + s * cot
            d = np.array([np.cos(a), np.sin(a), cot])
            return x, y, z, d / np.linalg.norm(d)

        for k, r in enumerate(BARREL_R):
            if r >= 2 * R:
                break
            s = 2 * R * np.arcsin(r / (2 * R))
            x, y, z, d = point(s)
            if abs(z) < BARREL_HALF_Z:
                hits.append((x, y, z, _layer_index("barrel", k, 0), *d, "barrel"))
        for k, zd in enumerate(DISK_Z):
            side = 1.0 if cot > 0 else -1.0
            if abs(cot) < 1e-6:
                break
            s = (side * zd - z0) / cot
            if s <= 0 or s / R >= np.pi:
                continue
            x, y, z, d = point(s)
            rr = np.hypot(x, y)
            if DISK_R[0] < rr < DISK_R[1]:
                hits.append((x, y, z, _layer_index("disk", k, side), *d, "disk"))
    n_noise = int(0.1 * n_hits)
    hits = [hits[i] for i in sorted(rng.choice(len(hits), n_hits - n_noise, replace=False))]
    for _ in range(n_noise):
        if rng.random() < 0.5:
            k = int(rng.integers(4))
            a = rng.uniform(-np.pi, np.pi)
            x, y, z = BARREL_R[k] * np.cos(a), BARREL_R[k] * np.sin(a), rng.uniform(-BARREL_HALF_Z, BARREL_HALF_Z)
            hits.append((x, y, z, _layer_index("barrel", k, 0), np.cos(a), np.sin(a), 0.0, "barrel"))
        else:
            k = int(rng.integers(7))
            side = rng.choice([-1.0, 1.0])
            a = rng.uniform(-np.pi, np.pi)
            rr = np.sqrt(rng.uniform(DISK_R[0] ** 2, DISK_R[1] ** 2))
            hits.append((rr * np.cos(a), rr * np.sin(a), side * DISK_Z[k], _layer_index("disk", k, side),
                         0.3 * np.cos(a), 0.3 * np.sin(a), side, "disk"))
    n = len(hits)
    pos = np.array([h[:3] for h in hits]) + rng.normal(0.0, 0.02, (n, 3))
    layer = np.array([h[3] for h in hits], dtype=np.int64)
    dirs = np.array([h[4:7] for h in hits], dtype=np.float64)
    barrel = np.array([h[7] == "barrel" for h in hits])
    # hit order of the data set: grouped by layer (restrict_to_subdetectors concatenates per layer)
    order = np.lexsort((rng.random(n), layer))
    pos, layer, dirs, barrel = pos[order], layer[order], dirs[order], barrel[order]

    # TrackML stores positions in float32; r, phi, eta_rz, u, v computed by pandas in float32
    xyz = pos.astype(np.float32)
    hx, hy, hz = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    r = np.sqrt(hx ** 2 + hy ** 2)
    phi = np.arctan2(hy, hx)
    theta = np.arctan2(r, hz)
    eta_rz = -np.log(np.tan(theta / 2.0))
    u = hx / (hx ** 2 + hy ** 2)
    v = hy / (hx ** 2 + hy ** 2)
    # module frame: w normal (radial in the barrel, along z on the disks), u along phi, v the third axis
    ph = np.arctan2(pos[:, 1], pos[:, 0])
    e_phi = np.stack([-np.sin(ph), np.cos(ph), np.zeros(n)], 1)
    e_r = np.stack([np.cos(ph), np.sin(ph), np.zeros(n)], 1)
    e_z = np.tile([0.0, 0.0, 1.0], (n, 1))
    w_hat = np.where(barrel[:, None], e_r, e_z)
    v_hat = np.where(barrel[:, None], e_z, e_r)
    u_hat = e_phi
    du, dv, dw = (dirs * u_hat).sum(1), (dirs * v_hat).sum(1), (dirs * w_hat).sum(1)
    dw = np.where(np.abs(dw) < 0.05, 0.05, np.abs(dw))
    nb_u = np.minimum(1 + np.floor(THICK * np.abs(du) / dw / PITCH_U + rng.random(n)), 30)
    nb_v = np.minimum(1 + np.floor(THICK * np.abs(dv) / dw / PITCH_V + rng.random(n)), 30)
    l_u, l_v, l_w = nb_u * PITCH_U, nb_v * PITCH_V, np.full(n, 2 * THICK)
    charge_frac = rng.uniform(0.1, 0.45, n)

    def spherical(a, b, c):
        r3 = np.sqrt(a ** 2 + b ** 2 + c ** 2)
        return np.arccos(c / r3), np.arctan2(b, a)

    l_theta, l_phi = spherical(l_u, l_v, l_w)
    g = l_u[:, None] * u_hat + l_v[:, None] * v_hat + l_w[:, None] * w_hat
    g_theta, g_phi = spherical(g[:, 0], g[:, 1], g[:, 2])
    leta, geta = -np.log(np.tan(0.5 * l_theta)), -np.log(np.tan(0.5 * g_theta))
    raw = np.stack([r, phi, hz, eta_rz, u, v, charge_frac, leta, l_phi, l_u, l_v, l_w, geta, g_phi], 1)
    raw = raw.astype(np.float64).astype(np.float32)                       # to_pyg_data: .float()
    x14 = (raw.astype(np.float64) / FEATURE_SCALE).astype(np.float32)   # Tracking: (x / scale).float()
    # pos = [eta, phi] from the unscaled r, z, phi (float32 arithmetic, calc_eta of tracking.py)
    eta = -1.0 * np.log(np.tan(np.arctan2(raw[:, 0], raw[:, 2]) / 2.0))
    pos2 = np.stack([eta.astype(np.float32), raw[:, 1]], 1)
    x = np.concatenate([x14, (layer.astype(np.float32) / np.float32(10.0))[:, None]], 1)  # TrackingTransform
    coords = np.concatenate([pos2, x14[:, :4]], 1)
    return x.astype(np.float32), coords.astype(np.float32)


def tracking_inputs(rng, sizes):
    xs, cs = [], []
    for n in sizes:
        x, c = tracking_event(rng, n)
        xs.append(x), cs.append(c)
    return np.concatenate(xs), np.concatenate(cs)


# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------

class Writer:
    """Stores a dataset once; an identical later dataset becomes a hard link to the first."""

    def __init__(self):
        self.seen = {}

    def put(self, group, name, array):
        array = np.asarray(array)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key in self.seen:
            group[name] = self.seen[key]
            return
        kw = {"compression": "gzip", "compression_opts": 9, "shuffle": True} if array.size > 64 else {}
        self.seen[key] = group.create_dataset(name, data=array, **kw)


def write_run(w, g, d, run, policy):
    """One run's arrays; policy (per case) says which runs keep the bulky per-layer arrays."""
    for k, v in d.items():
        if k in ("layers", "ties") or (k == "output" and run not in policy["output_runs"]):
            continue
        if isinstance(v, (float, int, np.integer, np.floating)) and np.ndim(v) == 0:
            g.attrs[k] = v
        else:
            w.put(g, k, v)
    t = g.create_group("ties")
    for k, v in d["ties"].items():
        w.put(t, k, v)
    for l, lay in d["layers"].items():
        if not lay:
            continue
        gl = g.create_group(f"layer_{l}")
        for k, v in lay.items():
            if k in ("perm_q", "perm_k", "tie_q", "tie_k") and run not in policy["perm_runs"]:
                continue
            if k in ("keys_q", "keys_k", "shift_q", "shift_k") and (l != 0 or run not in policy["keys_runs"]):
                continue
            if k == "attn_out" and (l != 0 or run not in policy["attn_runs"]):
                continue
            w.put(gl, k, v)


def write_header(f, cfg, layout, state, command, commit, checkpoint):
    f.attrs["format"] = "surrogate-model"
    f.attrs["format_version"] = np.int64(1)
    f.attrs["architecture"] = "hept"
    f.attrs["source"] = f"Graph-COM/HEPT@{commit}"
    f.attrs["created"] = "share/tools/golden/hept_golden.py (" + command + ")"
    f.attrs["versions"] = (f"torch {torch.__version__}, numpy {np.__version__}, "
                           f"torch_geometric {importlib.import_module('torch_geometric').__version__}, "
                           f"einops {importlib.import_module('einops').__version__}, "
                           f"python {platform.python_version()}")
    if checkpoint:
        f.attrs["checkpoint"] = CHECKPOINT
    c = f.create_group("config")
    for k, v in cfg.items():
        if isinstance(v, str):
            c.attrs[k] = v
        elif isinstance(v, float):
            c.attrs[k] = np.float64(v)
        else:
            c.attrs[k] = np.int64(v)
    c.attrs["layout"] = layout
    wg = f.create_group("weights")
    for k, t in state.items():
        a = t.detach().contiguous().numpy().astype(np.float32)
        kw = {"compression": "gzip", "compression_opts": 9, "shuffle": True} if a.size > 1024 else {}
        wg.create_dataset(k, data=a, **kw)


def compare(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    diff = np.where(both_nan, 0.0, np.abs(a - b))
    diff = np.where(np.isnan(diff), np.inf, diff)
    return float(diff.max()) if diff.size else 0.0, int((diff.max(axis=-1) > 0).sum()) if diff.ndim > 1 else 0


# --------------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------------

def prepare_model(official, name, spec, root):
    layout, cfg = spec["layout"], dict(spec["config"])
    torch.manual_seed(spec["seed"])
    model = build_model(official, layout, cfg)
    if spec.get("checkpoint"):
        state = torch.load(os.path.join(root, CHECKPOINT), map_location="cpu", weights_only=True)
        model.load_state_dict(state, strict=True)
    else:
        randomise(model, np.random.default_rng(spec["seed"]), cfg)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    return model, cfg, state


def model_in(official, layout, cfg, state, dtype):
    m = build_model(official, layout, cfg)
    m.load_state_dict(state, strict=True)
    return m.to(dtype).eval()


def run_all(official, layout, cfg, state, x, coords, sizes, detail_layers, stats, label):
    """The four runs of one input; returns {run_name: (arrays or None, output or None, error)}."""
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    runs = {}
    for prec, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        model = model_in(official, layout, cfg, state, dtype)
        xt, ct = torch.from_numpy(x).to(dtype), torch.from_numpy(coords).to(dtype)
        for variant, stable in (("official", False), ("stable", True)):
            out, rec, err = run_official(official, layout, model, xt, ct, batch, stable)
            arrays = None
            if err is None:
                arrays = extract(rec, layout, cfg, sizes, detail_layers, coords)
                arrays["output"] = out.numpy()
                arrays["rbf_scale"] = rbf_scales(official, model, dtype, cfg)
                # repeat: the official forward is deterministic run to run
                out2, _, _ = run_official(official, layout, model, xt, ct, batch, stable)
                same = np.array_equal(out.numpy(), out2.numpy(), equal_nan=True)
                arrays["repeat_bitwise"] = np.int64(same)
            runs[f"{prec}_{variant}"] = (arrays, err)
    s = summarise(runs, sizes, cfg) if all(v[0] is not None for v in runs.values()) else {}
    errs = {k: v[1] for k, v in runs.items() if v[1] is not None}
    print(f"  {label}:")
    for k, v in s.items():
        text = np.array2string(np.asarray(v), precision=4) if np.ndim(v) else (
            f"{v:.4g}" if isinstance(v, float) else str(v))
        print(f"    {k} = {text}")
    for k, e in errs.items():
        print(f"  {label}: {k} raised {e}")
    stats.update(s)
    return runs


def summarise(runs, sizes, cfg):
    """Comparisons between the four runs, per graph (arrays of length #graphs) where it matters."""
    o = {k: v[0]["output"].astype(np.float64) for k, v in runs.items()}
    gid = np.repeat(np.arange(len(sizes)), sizes)
    G = len(sizes)

    def rowdiff(a, b):
        d = np.abs(a - b)
        d = np.where(np.isnan(a) & np.isnan(b), 0.0, d)
        return np.where(np.isnan(d), np.inf, d).max(axis=1)

    def per_graph(d, thr):
        return np.array([int((d[gid == k] > thr).sum()) for k in range(G)], dtype=np.int64)

    s = {"max_abs_output_f64": float(np.nanmax(np.abs(o["f64_stable"])))}
    for name, (a, b) in {"f32_vs_f64": ("f32_official", "f64_official"),
                         "f32_vs_f64_stable": ("f32_stable", "f64_stable"),
                         "f32_official_vs_stable": ("f32_official", "f32_stable"),
                         "f64_official_vs_stable": ("f64_official", "f64_stable")}.items():
        d = rowdiff(o[a], o[b])
        s[f"max_abs_{name}"] = np.array([float(d[gid == k].max()) for k in range(G)])
        s[f"rows_{name}_above_0"] = per_graph(d, 0.0)
        s[f"rows_{name}_above_1e-3"] = per_graph(d, 1e-3)
        s[f"rows_{name}_above_1e-1"] = per_graph(d, 1e-1)
    for prec in ("f32", "f64"):
        a, b = runs[f"{prec}_official"][0], runs[f"{prec}_stable"][0]
        s[f"region_codes_{prec}_official_eq_stable"] = int(np.array_equal(a["region_eta"], b["region_eta"]) and
                                                          np.array_equal(a["region_phi"], b["region_phi"]))
        if "pad_seq" in a:
            s[f"pad_seq_{prec}_official_eq_stable"] = int(np.array_equal(a["pad_seq"], b["pad_seq"]))
    a, b = runs["f32_official"][0], runs["f64_official"][0]
    s["region_codes_f32_eq_f64"] = int(np.array_equal(a["region_eta"], b["region_eta"]) and
                                       np.array_equal(a["region_phi"], b["region_phi"]))
    s["bin_sizes_f32_eq_f64"] = int(np.array_equal(a["bin_size_eta"], b["bin_size_eta"]) and
                                    np.array_equal(a["bin_size_phi"], b["bin_size_phi"]))
    if "pad_seq" in a:
        s["pad_seq_f32_eq_f64"] = int(np.array_equal(a["pad_seq"], b["pad_seq"]))
    # bucket membership (layers with perms) between runs with the same padded order
    bs = cfg["block_size"]
    for name, (ra, rb) in {"f32_vs_f64": ("f32_official", "f64_official"),
                           "f32_vs_f64_stable": ("f32_stable", "f64_stable"),
                           "f32_official_vs_stable": ("f32_official", "f32_stable"),
                           "f64_official_vs_stable": ("f64_official", "f64_stable")}.items():
        a, b = runs[ra][0], runs[rb][0]
        if "pad_seq" in a and not np.array_equal(a["pad_seq"], b["pad_seq"]):
            continue
        if not (np.array_equal(a["region_eta"], b["region_eta"]) and np.array_equal(a["region_phi"], b["region_phi"])):
            continue
        nd = 0
        for l, lay in a["layers"].items():
            if "perm_q" in lay:
                for kk in ("perm_q", "perm_k"):
                    nd += int((np.argsort(lay[kk], -1) // bs != np.argsort(b["layers"][l][kk], -1) // bs).sum())
        s[f"bucket_moves_{name}"] = nd
    for run, (arr, _) in runs.items():
        t = arr["ties"]
        s[f"lsh_tie_pairs_{run}"] = (t["lsh_ties_q"] + t["lsh_ties_k"]).sum(axis=(0, 1, 2))
        s[f"lsh_tie_pairs_at_boundary_{run}"] = (t["lsh_ties_q_at_boundary"] +
                                                 t["lsh_ties_k_at_boundary"]).sum(axis=(0, 1, 2))
        if "duplicates_with_unequal_keys" in t:
            s[f"duplicates_with_unequal_keys_{run}"] = t["duplicates_with_unequal_keys"]
    s["eta_ties"] = runs["f32_official"][0]["ties"]["eta_ties"]
    s["phi_ties"] = runs["f32_official"][0]["ties"]["phi_ties"]
    s["den_tiny_fraction_f32"] = runs["f32_official"][0]["den_tiny_fraction"]
    s["den_tiny_fraction_f64"] = runs["f64_official"][0]["den_tiny_fraction"]
    s["repeat_bitwise_all"] = int(all(v[0]["repeat_bitwise"] for v in runs.values()))
    return s


def write_runs(w, g, runs, policy):
    for name, (arrays, err) in runs.items():
        rg = g.create_group(name)
        if err is not None:
            rg.attrs["official_error"] = err
        else:
            write_run(w, rg, arrays, name, policy)


def run_case(official, name, spec, root, out_dir, command, commit):
    print(f"{name}:")
    model, cfg, state = prepare_model(official, name, spec, root)
    layout = spec["layout"]
    rng = np.random.default_rng(spec["seed"] + 1)
    path = os.path.join(out_dir, f"hept_{name}.h5")
    w = Writer()
    with h5py.File(path, "w", libver=("v110", "v110")) as f:  # readable by HDF5 1.10 (Debian 12)
        write_header(f, cfg, layout, state, command, commit, spec.get("checkpoint", False))
        g = f.create_group("golden")
        if spec["inputs"] == "degenerate":
            for sub, dspec in DEGENERATE.items():
                sizes = dspec["sizes"]
                x, coords = uniform_inputs(rng, cfg, sizes, ties=False)
                if dspec.get("identical"):
                    x[:] = x[0]
                    coords[:] = coords[0]
                if dspec.get("nan"):
                    coords[5, 0] = np.nan
                if dspec.get("extra_coord"):
                    coords = np.concatenate([coords, coords[:, :1]], 1)
                sg = g.create_group(sub)
                stats = {}
                runs = run_all(official, layout, cfg, state, x, coords, sizes, spec["detail_layers"], stats, sub)
                write_inputs(w, sg, x, coords, sizes)
                write_runs(w, sg, runs, spec["policy"])
                for k, v in stats.items():
                    sg.attrs[k] = v
            return
        sizes = spec["sizes"]
        if spec["inputs"] == "tracking":
            x, coords = tracking_inputs(rng, sizes)
        elif spec["inputs"] == "pileup":
            x, coords = pileup_inputs(rng, sizes)
        else:
            x, coords = uniform_inputs(rng, cfg, sizes)
        stats = {}
        runs = run_all(official, layout, cfg, state, x, coords, sizes, spec["detail_layers"], stats, name)
        write_inputs(w, g, x, coords, sizes)
        write_runs(w, g, runs, spec["policy"])
        for k, v in stats.items():
            g.attrs[k] = v


def write_inputs(w, g, x, coords, sizes):
    w.put(g, "coords", coords)
    w.put(g, "x", x)
    w.put(g, "batch", np.repeat(np.arange(len(sizes), dtype=np.int64), sizes))
    w.put(g, "sample_sizes", np.array(sizes, dtype=np.int64))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--official", required=True, help="checkout of Graph-COM/HEPT (holds example/ and src/)")
    ap.add_argument("--commit", default=DEFAULT_COMMIT, help="commit of that checkout (recorded in @source)")
    ap.add_argument("out_dir")
    ap.add_argument("--cases", nargs="*", help="only these cases (default: all)")
    args = ap.parse_args()
    root = os.path.abspath(args.official)
    example = load_example(root)
    src = load_src(root)
    os.makedirs(args.out_dir, exist_ok=True)
    command = "python share/tools/golden/hept_golden.py --official HEPT_CHECKOUT " + args.out_dir
    if args.cases:
        command += " --cases " + " ".join(args.cases)
    for name, spec in CASES.items():
        if args.cases and name not in args.cases:
            continue
        official = example if spec["layout"] == "example" else src
        run_case(official, name, spec, root, args.out_dir, command, args.commit)


if __name__ == "__main__":
    main()
