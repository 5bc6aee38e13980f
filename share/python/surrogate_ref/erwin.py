"""Reference Erwin model (our own implementation) with the official state_dict layouts.

Erwin (maxxxzdn/erwin, ``models/erwin.py``, class ``ErwinTransformer``) is a U-Net over the levels of
a ball tree: an embedding (Linear, then optional message passing), per level transformer blocks with
ball attention (attention inside consecutive runs of ``ball_size`` nodes, distance bias), pooling of
``stride`` consecutive nodes into one, and on the way back unpooling with U-Net skips. Specification:
docs/reference-models.md §1.3-1.6; our notes: docs/balltree.md.

The model is written with explicit tensor operations (no SDPA, no RMSNorm module, no einops), so it runs
on Debian's torch 1.13 and on torch 2.x, in float32 or float64. It does NOT build the ball tree: the
caller passes ``tree_idx``, ``tree_mask`` and the rotated permutations ``tree_idx_rot`` (one per level,
or None when ``rotate == 0``) as the official ``build_balltree_with_rotations`` (or our C++ builder,
which is bit-identical) returns them. Edges are given explicitly (``edge_index``: row 0 the source /
neighbour j, row 1 the receiver i).

Two checkpoint layouts (``variant``):

* ``erwin`` (``models/erwin.py``): q/k/v interleaved in ``qkv`` (output channel ``3*(h*E+e)+s``,
  s = 0 q, 1 k, 2 v), distance bias ``sigma_att[h] * |p_i - p_j|``, message passing with affine
  LayerNorms under ``embed.mpnn.message_fns.{t}`` / ``update_fns.{t}``;
* ``erwin_flash`` (``models/erwin_flash.py``): q/k/v grouped (rows ``[0,D)`` q, ``[D,2D)`` k,
  ``[2D,3D)`` v), NO distance bias (``sigma_att`` exists but is unused), LayerNorms without affine
  parameters, message modules named ``fused_message_update.{t}``. The official flash variant computes
  the attention in bfloat16 with FlashAttention; this reference computes it in the dtype of the
  weights (float32), i.e. it is the exact-arithmetic version of that model.
"""

import math
from collections import OrderedDict

import torch
from torch import nn

from .compat import FLOAT32_EPS

__all__ = [
    "CONFIG_KEYS",
    "VARIANTS",
    "complete_config",
    "check_config",
    "expected_state_shapes",
    "ErwinModel",
]

VARIANTS = ("erwin", "erwin_flash")

# Canonical configuration (the attribute names of a model file's /config group).
CONFIG_KEYS = (
    "c_in", "c_hidden", "ball_sizes", "enc_num_heads", "enc_depths", "dec_num_heads", "dec_depths",
    "strides", "rotate", "mlp_ratio", "dimensionality", "mp_steps", "variant",
)
_DEFAULTS = {"mlp_ratio": 4, "dimensionality": 3, "mp_steps": 3, "variant": "erwin"}


def complete_config(config):
    """Copy of ``config`` with the defaults of the official constructor filled in."""
    out = dict(_DEFAULTS)
    out.update(config)
    for key in ("c_hidden", "ball_sizes", "enc_num_heads", "enc_depths", "dec_num_heads", "dec_depths",
                "strides"):
        if key in out:
            out[key] = [int(v) for v in out[key]]
    return out


def check_config(config):
    """Raises ValueError naming the first inconsistent field."""
    c = complete_config(config)
    missing = [k for k in CONFIG_KEYS if k not in c]
    if missing:
        raise ValueError(f"erwin config: missing {', '.join(missing)}")
    levels = len(c["ball_sizes"])
    if levels < 1:
        raise ValueError("erwin config: ball_sizes is empty")
    for key in ("c_hidden", "enc_num_heads", "enc_depths"):
        if len(c[key]) != levels:
            raise ValueError(f"erwin config: {key} has {len(c[key])} entries, ball_sizes {levels}")
    for key in ("strides", "dec_num_heads", "dec_depths"):
        if len(c[key]) != levels - 1:
            raise ValueError(f"erwin config: {key} has {len(c[key])} entries, expected {levels - 1}")
    for i in range(levels):
        heads = c["enc_num_heads"][i]
        if heads < 1 or c["c_hidden"][i] % heads:
            raise ValueError(f"erwin config: c_hidden[{i}] = {c['c_hidden'][i]} not divisible by "
                             f"enc_num_heads[{i}] = {heads}")
    for i in range(levels - 1):
        heads = c["dec_num_heads"][i]
        if heads < 1 or c["c_hidden"][i] % heads:
            raise ValueError(f"erwin config: c_hidden[{i}] not divisible by dec_num_heads[{i}] = {heads}")
        if c["strides"][i] == 1 and c["c_hidden"][i] != c["c_hidden"][i + 1]:
            raise ValueError(f"erwin config: strides[{i}] = 1 needs c_hidden[{i}] == c_hidden[{i + 1}]")
    if c["variant"] not in VARIANTS:
        raise ValueError(f"erwin config: variant {c['variant']!r} not in {VARIANTS}")
    return c


def expected_state_shapes(config):
    """OrderedDict key -> shape of the official state_dict (without ``num_batches_tracked``)."""
    c = check_config(config)
    d, r = c["dimensionality"], c["mlp_ratio"]
    ch = c["c_hidden"]
    flash = c["variant"] == "erwin_flash"
    shapes = OrderedDict()

    def linear(name, out, inp):
        shapes[name + ".weight"] = (out, inp)
        shapes[name + ".bias"] = (out,)

    def batchnorm(name, dim):
        for p in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{name}.{p}"] = (dim,)

    def block(prefix, dim, heads):
        shapes[prefix + "norm1.weight"] = (dim,)
        shapes[prefix + "norm2.weight"] = (dim,)
        linear(prefix + "BMSA.qkv", 3 * dim, dim)
        linear(prefix + "BMSA.proj", dim, dim)
        linear(prefix + "BMSA.pe_proj", dim, d)
        shapes[prefix + "BMSA.sigma_att"] = (1, heads, 1, 1)
        linear(prefix + "swiglu.w1", dim * r, dim)
        linear(prefix + "swiglu.w2", dim * r, dim)
        linear(prefix + "swiglu.w3", dim, dim * r)

    D0 = ch[0]
    linear("embed.embed_fn", D0, c["c_in"])
    for t in range(c["mp_steps"]):
        msg = f"embed.mpnn.{'fused_message_update' if flash else 'message_fns'}.{t}"
        linear(msg + ".0", D0, 2 * D0 + d)
        if not flash:
            shapes[msg + ".2.weight"] = (D0,)
            shapes[msg + ".2.bias"] = (D0,)
        linear(f"embed.mpnn.update_fns.{t}.0", D0, 2 * D0)
        if not flash:
            shapes[f"embed.mpnn.update_fns.{t}.1.weight"] = (D0,)
            shapes[f"embed.mpnn.update_fns.{t}.1.bias"] = (D0,)
    levels = len(c["ball_sizes"])
    for i in range(levels - 1):
        for j in range(c["enc_depths"][i]):
            block(f"encoder.{i}.blocks.{j}.", ch[i], c["enc_num_heads"][i])
        s = c["strides"][i]
        linear(f"encoder.{i}.pool.proj", ch[i + 1], s * ch[i] + s * d)
        batchnorm(f"encoder.{i}.pool.norm", ch[i + 1])
    for j in range(c["enc_depths"][-1]):
        block(f"bottleneck.blocks.{j}.", ch[-1], c["enc_num_heads"][-1])
    for k in range(levels - 1):
        i = levels - 2 - k
        s = c["strides"][i]
        linear(f"decoder.{k}.unpool.proj", s * ch[i], ch[i + 1] + s * d)
        batchnorm(f"decoder.{k}.unpool.norm", ch[i])
        for j in range(c["dec_depths"][i]):
            block(f"decoder.{k}.blocks.{j}.", ch[i], c["dec_num_heads"][i])
    return shapes


def _rms_norm(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + FLOAT32_EPS) * weight


def _layer_norm(x, weight, bias):
    mean = x.mean(dim=-1, keepdim=True)
    var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + 1e-5)
    return y if weight is None else y * weight + bias


def _gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _silu(x):
    return x * torch.sigmoid(x)


class ErwinModel(nn.Module):
    """Erwin with the official parameter names; ``forward`` takes the tree explicitly."""

    def __init__(self, config):
        super().__init__()
        self.config = check_config(config)
        # Parameters are kept in one flat dict under their official keys (dots are not allowed in
        # nn.Module attribute names, so they are stored escaped and re-keyed by state_dict()).
        self._shapes = expected_state_shapes(self.config)
        self.params = nn.ParameterDict()
        self._buffers_bn = {}
        for key, shape in self._shapes.items():
            tensor = torch.zeros(shape)
            if key.endswith("running_var"):
                tensor = torch.ones(shape)
            self.params[key.replace(".", "__")] = nn.Parameter(tensor, requires_grad=False)

    # state_dict in the official layout
    def official_state_dict(self):
        return OrderedDict((k, self.params[k.replace(".", "__")].detach().clone()) for k in self._shapes)

    def load_official_state_dict(self, state, strict=True):
        """Loads an official state_dict (prefixes ``_orig_mod.``/``module.`` must already be stripped;
        ``num_batches_tracked`` entries are ignored)."""
        state = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
        missing = [k for k in self._shapes if k not in state]
        extra = [k for k in state if k not in self._shapes]
        if strict and (missing or extra):
            raise KeyError(f"erwin state_dict: missing {missing}, unexpected {extra}")
        for k, shape in self._shapes.items():
            if k in state:
                v = torch.as_tensor(state[k])
                if tuple(v.shape) != tuple(shape):
                    raise ValueError(f"erwin state_dict: {k} has shape {tuple(v.shape)}, expected {shape}")
                with torch.no_grad():
                    self.params[k.replace(".", "__")].copy_(v)

    def p(self, key):
        return self.params[key.replace(".", "__")]

    def _linear(self, name, x):
        return x @ self.p(name + ".weight").t() + self.p(name + ".bias")

    # --- components -------------------------------------------------------------------------------

    def _embed(self, x, pos, edge_index):
        c = self.config
        h = self._linear("embed.embed_fn", x)
        if c["mp_steps"] == 0:
            return h
        flash = c["variant"] == "erwin_flash"
        src, dst = edge_index[0].long(), edge_index[1].long()
        rel = pos[src] - pos[dst]
        n = h.shape[0]
        count = torch.zeros(n, dtype=h.dtype).index_add_(0, dst, torch.ones(dst.shape[0], dtype=h.dtype))
        for t in range(c["mp_steps"]):
            msg = f"embed.mpnn.{'fused_message_update' if flash else 'message_fns'}.{t}"
            m = _gelu_erf(self._linear(msg + ".0", torch.cat([h[src], h[dst], rel], dim=1)))
            m = _layer_norm(m, None if flash else self.p(msg + ".2.weight"), None if flash else self.p(msg + ".2.bias"))
            agg = torch.zeros_like(h).index_add_(0, dst, m) / count.clamp(min=1).unsqueeze(1)
            u = self._linear(f"embed.mpnn.update_fns.{t}.0", torch.cat([h, agg], dim=1))
            upd = f"embed.mpnn.update_fns.{t}.1"
            u = _layer_norm(u, None if flash else self.p(upd + ".weight"), None if flash else self.p(upd + ".bias"))
            h = h + u
        return h

    def _attention(self, prefix, x, pos, heads, ball):
        """Ball multi-head self-attention on a node array (length a multiple of ``ball``)."""
        n, D = x.shape
        E = D // heads
        nb = n // ball
        P = pos.view(nb, ball, -1)
        rel = (P - P.mean(dim=1, keepdim=True)).reshape(n, -1)
        x = x + self._linear(prefix + "pe_proj", rel)
        u = self._linear(prefix + "qkv", x)
        if self.config["variant"] == "erwin":
            u = u.view(nb, ball, heads, E, 3)
            q, k, v = u[..., 0], u[..., 1], u[..., 2]
        else:
            u = u.view(nb, ball, 3, heads, E)
            q, k, v = u[:, :, 0], u[:, :, 1], u[:, :, 2]
        q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))  # (nb, H, ball, E)
        scores = q @ k.transpose(-1, -2) / math.sqrt(E)
        if self.config["variant"] == "erwin":
            diff = P[:, :, None, :] - P[:, None, :, :]
            dist = torch.sqrt((diff * diff).sum(-1))  # exact distances (torch.cdist for <= 25 rows)
            scores = scores + self.p(prefix + "sigma_att").view(1, heads, 1, 1) * dist[:, None]
        att = torch.softmax(scores, dim=-1) @ v  # (nb, H, ball, E)
        out = att.permute(0, 2, 1, 3).reshape(n, D)
        return self._linear(prefix + "proj", out)

    def _block(self, prefix, x, pos, heads, ball):
        x = x + self._attention(prefix + "BMSA.", _rms_norm(x, self.p(prefix + "norm1.weight")), pos, heads, ball)
        h = _rms_norm(x, self.p(prefix + "norm2.weight"))
        return x + self._linear(prefix + "swiglu.w3",
                                self._linear(prefix + "swiglu.w2", h) * _silu(self._linear(prefix + "swiglu.w1", h)))

    def _blocks(self, prefix, depth, x, pos, rot, heads, ball):
        inv = torch.argsort(rot) if (rot is not None and depth > 1) else None
        for j in range(depth):
            if self.config["rotate"] > 0 and j % 2 == 1:
                x = self._block(f"{prefix}blocks.{j}.", x[rot], pos[rot], heads, ball)[inv]
            else:
                x = self._block(f"{prefix}blocks.{j}.", x, pos, heads, ball)
        return x

    def _batchnorm(self, name, x):
        mean, var = self.p(name + ".running_mean"), self.p(name + ".running_var")
        return (x - mean) / torch.sqrt(var + 1e-5) * self.p(name + ".weight") + self.p(name + ".bias")

    def forward(self, features, pos, edge_index, tree_idx, tree_mask, tree_idx_rot=None):
        """features (N, c_in), pos (N, d), edge_index (2, E) or None when mp_steps == 0, tree_idx and
        tree_mask as the ball tree gives them, tree_idx_rot: list of one permutation per level (or None).
        Returns (N, c_hidden[0]) in input order."""
        c = self.config
        levels = len(c["ball_sizes"])
        if c["rotate"] > 0 and (tree_idx_rot is None or len(tree_idx_rot) != levels):
            raise ValueError("erwin: rotate > 0 needs one rotated permutation per level")
        tree_idx = torch.as_tensor(tree_idx).long()
        tree_mask = torch.as_tensor(tree_mask).bool()
        rots = [None] * levels if c["rotate"] <= 0 else [torch.as_tensor(r).long() for r in tree_idx_rot]
        h = self._embed(features, pos, edge_index)
        x, p = h[tree_idx], pos[tree_idx]
        skips = []
        for i in range(levels - 1):
            x = self._blocks(f"encoder.{i}.", c["enc_depths"][i], x, p, rots[i],
                             c["enc_num_heads"][i], c["ball_sizes"][i])
            skips.append((x, p))
            s = c["strides"][i]
            if s > 1:
                n, D = x.shape
                P = p.view(n // s, s, -1)
                centre = P.mean(dim=1)
                inp = torch.cat([x.reshape(n // s, s * D), (P - centre[:, None]).reshape(n // s, -1)], dim=1)
                x = self._batchnorm(f"encoder.{i}.pool.norm", self._linear(f"encoder.{i}.pool.proj", inp))
                p = centre
        x = self._blocks("bottleneck.", c["enc_depths"][-1], x, p, rots[-1], c["enc_num_heads"][-1],
                         c["ball_sizes"][-1])
        for k in range(levels - 1):
            i = levels - 2 - k
            s = c["strides"][i]
            skip_x, skip_p = skips[i]
            rel = (skip_p.view(x.shape[0], s, -1) - p[:, None]).reshape(x.shape[0], -1)
            z = self._linear(f"decoder.{k}.unpool.proj", torch.cat([x, rel], dim=1)).reshape(skip_x.shape[0], -1)
            x = self._batchnorm(f"decoder.{k}.unpool.norm", skip_x + z)
            p = skip_p
            x = self._blocks(f"decoder.{k}.", c["dec_depths"][i], x, p, rots[i], c["dec_num_heads"][i],
                             c["ball_sizes"][i])
        keep = tree_mask.nonzero().flatten()
        out = torch.empty((int(keep.numel()), x.shape[1]), dtype=x.dtype)
        out[tree_idx[keep]] = x[keep]
        return out
