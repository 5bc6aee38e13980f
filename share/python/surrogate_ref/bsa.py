"""Reference BSA (Ball Sparse Attention) model: our own implementation with the official state_dict layout.

BSA (``erwinxnsa/models/transformer.py``, class ``Transformer`` with ``TransformerConfig``; the operator is
``NativeSparseAttention``) is a flat transformer over the leaves of Erwin's ball tree. Its attention
(``attention_type = "sparse"``) has three branches per head, fused by a gate:

* local: attention inside each ball of ``ball_size`` consecutive tokens with the distance bias
  ``sigma_att[h] * |p_i - p_j|`` (Erwin's ball attention on the shared q/k/v);
* coarse: attention to the ``n / C`` compressed blocks (``C`` consecutive tokens, compressed by an MLP or
  by the mean), from the compressed query of the token's block (``use_coarse_q_attn``) or from the token;
* fine: attention to the tokens of the ``S`` blocks with the largest importance scores outside the
  token's own ball, chosen per group of ``G`` tokens (or per token).

Specification: docs/reference-models.md §1.7; our notes: share/docs/balltree.md (section "BSA").

Written with explicit tensor operations (no SDPA, no RMSNorm module, no einops), so it runs on Debian's
torch 1.13 and on torch 2.x, in float32 or float64. The caller passes the ball tree (``tree_idx``,
``tree_mask``) and the rotated permutation used by the odd layers (``rot``, ``None`` without rotation), as
``balltree.build_balltree_with_rotations(pos, batch_idx, [1], [P, P], angle)[2][1]`` (or our C++ builder).

Top-S selection: the official code calls ``torch.topk``, whose choice among EQUAL scores is
implementation-defined (on the CPU it is neither the lowest nor the highest index). This reference takes
the blocks in descending score order with ties broken by the LOWER block index (a stable sort): this is
our documented rule, and it fixes the degenerate case in which fewer than S blocks lie outside the
token's ball (the masked blocks, all scored -inf, then come in ascending index order). ``min_gap`` records
the smallest margin between the S-th and the (S+1)-th score of every selection of the last forward, so
that golden data can be checked to be far from ties.
"""

import math
from collections import OrderedDict

import torch
from torch import nn

from .compat import FLOAT32_EPS

__all__ = ["CONFIG_KEYS", "ATTENTION_TYPES", "complete_config", "check_config", "expected_state_shapes",
           "BSAModel"]

ATTENTION_TYPES = ("sparse", "ball", "global")

# Canonical configuration (the attribute names of a model file's /config group): the TransformerConfig
# fields, the NativeSparseAttention keyword options, the ball size of attention_type "ball"
# (attention_kwargs["ball_size"] there) and the task wrapper.
CONFIG_KEYS = (
    "c_in", "c_hidden", "depth", "num_heads", "block_size", "mlp_ratio", "dimensionality", "ball_size",
    "should_rotate", "rotation_angle", "attention_type",
    "compress_block_size", "selected_blocks_number", "use_compress_mlp", "compress_mlp_expand_factor",
    "use_group_selection", "group_selection_size", "should_mask_blocks_in_ball", "use_token_gated_attention",
    "use_coarse_q_attn", "use_coarse_q_importance", "attention_ball_size", "wrapper",
)
SPARSE_OPTIONS = (
    "compress_block_size", "selected_blocks_number", "use_compress_mlp", "compress_mlp_expand_factor",
    "use_group_selection", "group_selection_size", "should_mask_blocks_in_ball", "use_token_gated_attention",
    "use_coarse_q_attn", "use_coarse_q_importance",
)
_DEFAULTS = {
    "block_size": 6, "mlp_ratio": 4, "dimensionality": 3, "ball_size": 256, "should_rotate": True,
    "rotation_angle": 45.0, "attention_type": "global",
    "compress_block_size": 8, "selected_blocks_number": 4, "use_compress_mlp": True,
    "compress_mlp_expand_factor": 2.0, "use_group_selection": True, "group_selection_size": 8,
    "should_mask_blocks_in_ball": True, "use_token_gated_attention": True, "use_coarse_q_attn": True,
    "use_coarse_q_importance": True, "attention_ball_size": 256, "wrapper": "none",
}
_BOOLS = ("should_rotate", "use_compress_mlp", "use_group_selection", "should_mask_blocks_in_ball",
          "use_token_gated_attention", "use_coarse_q_attn", "use_coarse_q_importance")
WRAPPERS = ("none", "shapenet_car")


def complete_config(config):
    """Copy of ``config`` with the official defaults filled in and the types normalised."""
    out = dict(_DEFAULTS)
    out.update(config)
    for key in _BOOLS:
        out[key] = bool(out[key])
    out["rotation_angle"] = float(out["rotation_angle"])
    out["compress_mlp_expand_factor"] = float(out["compress_mlp_expand_factor"])
    return out


def compress_hidden(c):
    """Hidden width of the compression MLPs: int(expand * C * E) as the official constructor."""
    return int(c["compress_mlp_expand_factor"] * c["compress_block_size"] * (c["c_hidden"] // c["num_heads"]))


def check_config(config):
    """Raises ValueError naming the first inconsistent field (the official asserts plus ours)."""
    c = complete_config(config)
    missing = [k for k in CONFIG_KEYS if k not in c]
    if missing:
        raise ValueError(f"bsa config: missing {', '.join(missing)}")
    for key in ("c_in", "c_hidden", "depth", "num_heads", "block_size", "mlp_ratio", "dimensionality", "ball_size"):
        if int(c[key]) < 1:
            raise ValueError(f"bsa config: {key} = {c[key]} must be at least 1")
    if c["c_hidden"] % c["num_heads"]:
        raise ValueError(f"bsa config: c_hidden = {c['c_hidden']} is not divisible by num_heads = {c['num_heads']}")
    if c["attention_type"] not in ATTENTION_TYPES:
        raise ValueError(f"bsa config: attention_type {c['attention_type']!r} not supported (expected one of "
                         f"{', '.join(ATTENTION_TYPES)})")
    if c["wrapper"] not in WRAPPERS:
        raise ValueError(f"bsa config: wrapper {c['wrapper']!r} not in {WRAPPERS}")
    if c["attention_type"] == "sparse":
        C, G, S, P = c["compress_block_size"], c["group_selection_size"], c["selected_blocks_number"], c["ball_size"]
        if C < 1 or S < 1 or G < 1:
            raise ValueError("bsa config: compress_block_size, selected_blocks_number and group_selection_size "
                             "must be at least 1")
        if P % C:
            raise ValueError(f"bsa config: ball_size = {P} is not a multiple of compress_block_size = {C}")
        if c["use_coarse_q_attn"] and not c["use_coarse_q_importance"]:
            raise ValueError("bsa config: use_coarse_q_attn needs use_coarse_q_importance (official assert)")
        if c["use_coarse_q_attn"] and not c["use_group_selection"]:
            raise ValueError("bsa config: use_coarse_q_attn needs use_group_selection (official assert)")
        block_level = c["use_coarse_q_attn"] or c["use_coarse_q_importance"]
        if block_level and not c["use_group_selection"]:
            raise ValueError("bsa config: block-level importance (use_coarse_q_importance) without "
                             "use_group_selection is not supported (the official code reshapes the per-block "
                             "selection to S keys per token, mixing blocks)")
        if block_level and c["use_group_selection"] and G != C:
            raise ValueError(f"bsa config: group_selection_size = {G} must equal compress_block_size = {C} "
                             "with block-level importance (official assert)")
        if c["use_compress_mlp"] and compress_hidden(c) < 1:
            raise ValueError("bsa config: compress_mlp_expand_factor gives an empty compression MLP")
    return c


def expected_state_shapes(config):
    """OrderedDict key -> shape of the official state_dict (without the ``_orig_mod.`` of the compiled
    sparse module; with the ShapeNet-Car wrapper's keys when ``wrapper = "shapenet_car"``)."""
    c = check_config(config)
    D, H, d, r = c["c_hidden"], c["num_heads"], c["dimensionality"], c["mlp_ratio"]
    E = D // H
    shapes = OrderedDict()

    def linear(name, out, inp, bias=True):
        shapes[name + ".weight"] = (out, inp)
        if bias:
            shapes[name + ".bias"] = (out,)

    linear("embed", D, c["c_in"])
    for layer in range(c["depth"]):
        p = f"layers.{layer}."
        shapes[p + "norm1.weight"] = (D,)
        shapes[p + "norm2.weight"] = (D,)
        a = p + "attn."
        linear(a + "qkv", 3 * D, D)
        linear(a + "out_proj", D, D)
        linear(a + "position_proj", D, d)
        if c["attention_type"] in ("sparse", "ball"):
            shapes[a + "sigma_att"] = (1, H, 1, 1)
        if c["attention_type"] == "sparse":
            CE, h = c["compress_block_size"] * E, compress_hidden(c)
            mlps = ["k", "v"]
            if c["use_coarse_q_attn"] or c["use_coarse_q_importance"]:
                mlps.append("q")
            if c["use_compress_mlp"]:
                for s in mlps:
                    linear(f"{a}{s}_compress_mlp.0", h, CE)
                    linear(f"{a}{s}_compress_mlp.2", E, h)
            if c["use_token_gated_attention"]:
                linear(a + "gated_attention.to_strategy.0", 3 * H, D)
            else:
                shapes[a + "gated_attention.gates"] = (1, H, 2, 1, 1)
        linear(p + "mlp.w1", D * r, D)
        linear(p + "mlp.w2", D * r, D)
        linear(p + "mlp.w3", D, D * r)
    if c["wrapper"] == "shapenet_car":
        linear("pos_enc.linear", c["c_in"] // 2, d, bias=False)
        linear("pred_head.0", D, D)
        linear("pred_head.2", 1, D)
    return shapes


def _rms_norm(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + FLOAT32_EPS) * weight


def _softmax_attention(q, k, v, bias=None):
    """SDPA with the default scale 1/sqrt(E) and an optional additive bias."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias
    return torch.softmax(scores, dim=-1) @ v


def _ball_mean_rel(pos, ball):
    n = pos.shape[0]
    p = pos.view(n // ball, ball, -1)
    return (p - p.mean(dim=1, keepdim=True)).reshape(n, -1)


def _ball_distances(pos, ball):
    """|p_i - p_j| inside each ball, by differences (exact; torch.cdist's matmul route for more than 25
    rows differs by float32 rounding of |p|^2)."""
    n = pos.shape[0]
    p = pos.view(n // ball, ball, -1)
    diff = p[:, :, None, :] - p[:, None, :, :]
    return torch.sqrt((diff * diff).sum(-1))


class BSAModel(nn.Module):
    """BSA with the official parameter names; ``forward`` takes the tree explicitly."""

    def __init__(self, config):
        super().__init__()
        self.config = check_config(config)
        self._shapes = expected_state_shapes(self.config)
        self.params = nn.ParameterDict()
        for key, shape in self._shapes.items():
            self.params[key.replace(".", "__")] = nn.Parameter(torch.zeros(shape), requires_grad=False)
        self.min_gap = math.inf
        self.degenerate_selections = 0

    def official_state_dict(self):
        return OrderedDict((k, self.params[k.replace(".", "__")].detach().clone()) for k in self._shapes)

    def load_official_state_dict(self, state, strict=True):
        """Loads an official state_dict (``_orig_mod.``/``main_model.`` components already removed)."""
        missing = [k for k in self._shapes if k not in state]
        extra = [k for k in state if k not in self._shapes]
        if strict and (missing or extra):
            raise KeyError(f"bsa state_dict: missing {missing}, unexpected {extra}")
        for k, shape in self._shapes.items():
            if k in state:
                v = torch.as_tensor(state[k])
                if tuple(v.shape) != tuple(shape):
                    raise ValueError(f"bsa state_dict: {k} has shape {tuple(v.shape)}, expected {shape}")
                with torch.no_grad():
                    self.params[k.replace(".", "__")].copy_(v)

    def p(self, key):
        return self.params[key.replace(".", "__")]

    def _linear(self, name, x):
        return x @ self.p(name + ".weight").t() + self.p(name + ".bias")

    # --- selection ----------------------------------------------------------------------------------

    def _top_blocks(self, scores, S):
        """Indices (rows x S, ascending) of the S largest scores per row; ties -> lower index."""
        order = torch.sort(scores, dim=-1, descending=True, stable=True)
        values, idx = order.values, order.indices
        if scores.shape[-1] > S:
            kth, nxt = values[..., S - 1], values[..., S]
            finite = torch.isfinite(kth)
            self.degenerate_selections += int((~finite).sum())
            both = finite & torch.isfinite(nxt)
            if bool(both.any()):
                self.min_gap = min(self.min_gap, float((kth[both] - nxt[both]).min()))
        return torch.sort(idx[..., :S], dim=-1).values

    # --- attention types ----------------------------------------------------------------------------

    def _qkv(self, a, x, H):
        n, D = x.shape
        u = self._linear(a + "qkv", x).view(n, 3, H, D // H).permute(1, 2, 0, 3)  # (3, H, n, E)
        return u[0], u[1], u[2]

    def _global(self, a, x, pos, B):
        c = self.config
        H = c["num_heads"]
        n, D = x.shape
        outs = []
        for b in range(B):
            rows = slice(b * (n // B), (b + 1) * (n // B))
            q, k, v = self._qkv(a, x[rows], H)
            outs.append(_softmax_attention(q, k, v).permute(1, 0, 2).reshape(-1, D))
        return self._linear(a + "out_proj", torch.cat(outs, 0))

    def _ball(self, a, x, pos):
        c = self.config
        H, ball = c["num_heads"], c["attention_ball_size"]
        n, D = x.shape
        x = x + self._linear(a + "position_proj", _ball_mean_rel(pos, ball))
        q, k, v = self._qkv(a, x, H)
        out = self._local(a, q, k, v, pos, ball)
        return self._linear(a + "out_proj", out.permute(1, 0, 2).reshape(n, D))

    def _local(self, a, q, k, v, pos, ball):
        H, n, E = q.shape
        m = n // ball
        bias = self.p(a + "sigma_att").view(1, H, 1, 1) * _ball_distances(pos, ball)[:, None]
        split = [t.view(H, m, ball, E).permute(1, 0, 2, 3) for t in (q, k, v)]
        out = _softmax_attention(*split, bias=bias)  # (m, H, ball, E)
        return out.permute(1, 0, 2, 3).reshape(H, n, E)

    def _compress(self, a, t, which):
        """(H, n, E) -> (H, nb, E): the compression MLP of the block flattened token-major, or the mean."""
        c = self.config
        H, n, E = t.shape
        C = c["compress_block_size"]
        blocks = t.reshape(H, n // C, C, E)
        if not c["use_compress_mlp"]:
            return blocks.mean(dim=2)
        h = torch.relu(self._linear(f"{a}{which}_compress_mlp.0", blocks.reshape(H, n // C, C * E)))
        return self._linear(f"{a}{which}_compress_mlp.2", h)

    def _sparse_sample(self, a, x, pos):
        """One sample: x (n, D) after the position encoding, pos (n, d) -> fused heads (H, n, E)."""
        c = self.config
        H, P, C = c["num_heads"], c["ball_size"], c["compress_block_size"]
        S, G = c["selected_blocks_number"], c["group_selection_size"]
        n = x.shape[0]
        nb, bpb = n // C, P // C
        q, k, v = self._qkv(a, x, H)
        E = q.shape[-1]
        block_level = c["use_coarse_q_attn"] or c["use_coarse_q_importance"]
        kc, vc = self._compress(a, k, "k"), self._compress(a, v, "v")
        qc = self._compress(a, q, "q") if block_level else None
        # Coarse branch.
        if c["use_coarse_q_attn"]:
            coarse = _softmax_attention(qc, kc, vc).repeat_interleave(C, dim=1)
        else:
            coarse = _softmax_attention(q, kc, vc)
        # Importance scores and selection.
        scores = (qc if block_level else q) @ kc.transpose(-1, -2) / math.sqrt(E)  # (H, nb or n, nb)
        if c["should_mask_blocks_in_ball"]:
            rows = torch.arange(scores.shape[1])
            row_ball = rows // bpb if block_level else rows // P
            own = row_ball[:, None] == (torch.arange(nb) // bpb)[None, :]
            scores = scores.masked_fill(own[None], float("-inf"))
        if c["use_group_selection"]:
            if not block_level:
                scores = scores.view(H, n // G, G, nb).mean(dim=2)
            top = self._top_blocks(scores, S).repeat_interleave(G, dim=1)  # (H, n, S)
        else:
            top = self._top_blocks(scores, S)
        keys = (top[..., None] * C + torch.arange(C)).reshape(H, n, S * C)
        gather = keys.reshape(H, n * S * C, 1).expand(-1, -1, E)
        fk = k.gather(1, gather).view(H, n, S * C, E)
        fv = v.gather(1, gather).view(H, n, S * C, E)
        fine = _softmax_attention(q[:, :, None, :], fk, fv)[:, :, 0, :]
        local = self._local(a, q, k, v, pos, P)
        # Gate.
        if c["use_token_gated_attention"]:
            g = torch.sigmoid(self._linear(a + "gated_attention.to_strategy.0", x)).view(n, H, 3).permute(1, 0, 2)
            return g[..., 0:1] * local + g[..., 1:2] * coarse + g[..., 2:3] * fine
        gates = torch.sigmoid(self.p(a + "gated_attention.gates").view(H, 2))
        return local + gates[:, 0, None, None] * coarse + gates[:, 1, None, None] * fine

    def _sparse(self, a, x, pos, B):
        c = self.config
        n, D = x.shape
        x = x + self._linear(a + "position_proj", _ball_mean_rel(pos, c["ball_size"]))
        per = n // B
        outs = []
        for b in range(B):
            rows = slice(b * per, (b + 1) * per)
            outs.append(self._sparse_sample(a, x[rows], pos[rows]).permute(1, 0, 2).reshape(per, D))
        return self._linear(a + "out_proj", torch.cat(outs, 0))

    def _layer(self, layer, x, pos, B):
        p = f"layers.{layer}."
        h = _rms_norm(x, self.p(p + "norm1.weight"))
        kind = self.config["attention_type"]
        if kind == "sparse":
            x = x + self._sparse(p + "attn.", h, pos, B)
        elif kind == "ball":
            x = x + self._ball(p + "attn.", h, pos)
        else:
            x = x + self._global(p + "attn.", h, pos, B)
        h = _rms_norm(x, self.p(p + "norm2.weight"))
        return x + self._linear(p + "mlp.w3", self._linear(p + "mlp.w2", h) * torch.nn.functional.silu(
            self._linear(p + "mlp.w1", h)))

    def forward(self, features, pos, tree_idx, tree_mask, rot=None, samples=1):
        """features (N, c_in), pos (N, d), tree_idx / tree_mask of the ball tree (all samples padded to the
        same size), rot: the rotated permutation of the leaves (None when should_rotate is False),
        samples: number of samples. Returns (N, c_hidden) in input order."""
        c = self.config
        self.min_gap, self.degenerate_selections = math.inf, 0
        tree_idx = torch.as_tensor(tree_idx).long()
        tree_mask = torch.as_tensor(tree_mask).bool()
        if tree_idx.numel() % samples:
            raise ValueError("bsa: the samples' padded sizes differ")
        if c["should_rotate"] and rot is None:
            raise ValueError("bsa: should_rotate needs the rotated permutation")
        x = self._linear("embed", features)[tree_idx]
        p = pos[tree_idx]
        if c["should_rotate"]:
            rot = torch.as_tensor(rot).long()
            inv = torch.argsort(rot)
        residual = x
        for layer in range(c["depth"]):
            if c["should_rotate"] and layer % 2 == 1:
                x = self._layer(layer, x[rot], p[rot], samples)[inv]
            else:
                x = self._layer(layer, x, p, samples)
            if (layer + 1) % c["block_size"] == 0 or layer + 1 == c["depth"]:
                x = x + residual
                residual = x
        keep = tree_mask.nonzero().flatten()
        out = torch.empty((int(keep.numel()), x.shape[1]), dtype=x.dtype)
        out[tree_idx[keep]] = x[keep]
        return out

    def forward_shapenet(self, pos, tree_idx, tree_mask, rot=None, samples=1):
        """The ShapeNet-Car wrapper: random Fourier features of the positions, the model, the head."""
        proj = pos @ self.p("pos_enc.linear.weight").t()
        feats = torch.cat([torch.cos(proj), torch.sin(proj)], dim=-1)
        y = self.forward(feats, pos, tree_idx, tree_mask, rot, samples)
        h = self._linear("pred_head.0", y)
        h = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
        return self._linear("pred_head.2", h)
