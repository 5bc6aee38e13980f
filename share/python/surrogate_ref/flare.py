"""Reference FLARE model (our own implementation) with the official state_dict layouts.

The model is built from the *canonical* configuration of share/docs/model-format.md §4.1 (the same
names as the attributes of the ``/config`` group of a model file), so the exporter, this reference and
the C++ loader share one vocabulary. Two key layouts are supported:

* ``current``: FLARE.py from commit 33108d6 (2026-02) on: ``blocks.{b}.norm1/norm2``,
  ``out_proj.0`` (norm) and ``out_proj.1`` (output MLP);
* ``paper``: FLARE.py 2025-08 ... de5ba64: ``blocks.{b}.ln1/ln2``, ``out_proj.ln``, ``out_proj.mlp``.

The attention is written with explicit softmaxes (no SDPA), so it runs on torch 1.13 and 2.x, in
float32 and float64.
"""

import math
from collections import OrderedDict

import torch
from torch import nn

from .compat import FLOAT32_EPS, RMSNorm, make_activation

__all__ = [
    "CONFIG_KEYS",
    "complete_config",
    "check_config",
    "expected_state_shapes",
    "FLAREModel",
    "predict_batched",
    "normalize_inputs",
    "denormalize_outputs",
    "predict_physical",
    "load_model_file",
]

LAYERNORM_EPS = 1e-5

# Canonical /config attributes (model-format.md §4.1) and their kinds.
CONFIG_KEYS = OrderedDict([
    ("in_dim", "int"),
    ("out_dim", "int"),
    ("channel_dim", "int"),
    ("num_blocks", "int"),
    ("num_heads", "int"),
    ("num_latents", "int"),
    ("act", "str"),
    ("rmsnorm", "bool"),
    ("out_proj_norm", "bool"),
    ("qk_norm", "bool"),
    ("attn_scale", "float"),
    ("num_layers_in_out_proj", "int"),
    ("in_proj_hidden_dim", "int"),
    ("out_proj_hidden_dim", "int"),
    ("num_layers_k_proj", "int"),
    ("num_layers_v_proj", "int"),
    ("num_layers_ffn", "int"),
    ("k_proj_hidden_dim", "int"),
    ("v_proj_hidden_dim", "int"),
    ("ffn_hidden_dim", "int"),
    ("key_layout", "str"),
    ("layernorm_eps", "float"),
    ("rmsnorm_eps", "float"),
])

# Values used when a key is absent (hidden widths default to channel_dim, see complete_config).
_DEFAULTS = {
    "channel_dim": 64,
    "num_blocks": 8,
    "num_heads": 8,
    "num_latents": 64,
    "act": "gelu",
    "rmsnorm": False,
    "out_proj_norm": True,
    "qk_norm": False,
    "attn_scale": 1.0,
    "num_layers_in_out_proj": 2,
    "num_layers_k_proj": 3,
    "num_layers_v_proj": 3,
    "num_layers_ffn": 3,
    "key_layout": "current",
    "layernorm_eps": LAYERNORM_EPS,
    "rmsnorm_eps": FLOAT32_EPS,
}

_WIDTH_KEYS = ("in_proj_hidden_dim", "out_proj_hidden_dim", "k_proj_hidden_dim",
               "v_proj_hidden_dim", "ffn_hidden_dim")


def _as_scalar(value):
    """numpy scalars / 0-d arrays / bytes (as read from HDF5 attributes) -> plain Python values."""
    if hasattr(value, "shape") and getattr(value, "shape", None) == ():
        value = value.item() if hasattr(value, "item") else value
    elif hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    return value


def _coerce(key, kind, value):
    value = _as_scalar(value)
    if kind == "int":
        if isinstance(value, bool) or not float(value).is_integer():
            raise ValueError(f"config {key} must be an integer, got {value!r}")
        return int(value)
    if kind == "float":
        if isinstance(value, bool):
            raise ValueError(f"config {key} must be a number, got {value!r}")
        return float(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if value in (0, 1):
            return bool(value)
        raise ValueError(f"config {key} must be a boolean (0/1), got {value!r}")
    if not isinstance(value, str):
        raise ValueError(f"config {key} must be a string, got {value!r}")
    return value


def complete_config(config):
    """Return a full canonical config: unknown keys are refused, missing ones take the defaults."""
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError("unknown FLARE config key(s): " + ", ".join(unknown))
    for key in ("in_dim", "out_dim"):
        if key not in config:
            raise ValueError(f"FLARE config needs {key}")
    cfg = OrderedDict()
    for key, kind in CONFIG_KEYS.items():
        if key in config and config[key] is not None:
            cfg[key] = _coerce(key, kind, config[key])
        elif key in _DEFAULTS:
            cfg[key] = _DEFAULTS[key]
    channel_dim = cfg["channel_dim"]
    for key in _WIDTH_KEYS:
        if key not in cfg:
            cfg[key] = channel_dim
    cfg = OrderedDict((key, cfg[key]) for key in CONFIG_KEYS)
    check_config(cfg)
    return cfg


def check_config(cfg):
    """Raise ValueError listing every inconsistency of a complete canonical config."""
    errors = []
    for key in ("in_dim", "out_dim", "channel_dim", "num_blocks", "num_heads", "num_latents") + _WIDTH_KEYS:
        if cfg[key] < 1:
            errors.append(f"{key} must be >= 1, got {cfg[key]}")
    if cfg["num_heads"] >= 1 and cfg["channel_dim"] % cfg["num_heads"] != 0:
        errors.append(f"num_heads {cfg['num_heads']} does not divide channel_dim {cfg['channel_dim']}")
    for key in ("num_layers_in_out_proj", "num_layers_k_proj", "num_layers_v_proj", "num_layers_ffn"):
        if cfg[key] < -1:
            errors.append(f"{key} must be >= -1, got {cfg[key]}")
    if cfg["act"] not in ("gelu", "silu"):
        errors.append(f"act must be 'gelu' or 'silu', got {cfg['act']!r}")
    if not (cfg["attn_scale"] > 0.0 and math.isfinite(cfg["attn_scale"])):
        errors.append(f"attn_scale must be a finite number > 0, got {cfg['attn_scale']}")
    for key in ("layernorm_eps", "rmsnorm_eps"):
        if not (cfg[key] > 0.0 and math.isfinite(cfg[key])):
            errors.append(f"{key} must be a finite number > 0, got {cfg[key]}")
    if cfg["key_layout"] not in ("current", "paper"):
        errors.append(f"key_layout must be 'current' or 'paper', got {cfg['key_layout']!r}")
    if cfg["key_layout"] == "paper":
        if cfg["rmsnorm"]:
            errors.append("the paper layout has no rmsnorm option")
        if cfg["qk_norm"]:
            errors.append("the paper layout has no qk_norm option")
        if cfg["attn_scale"] != 1.0:
            errors.append(f"the paper layout uses attn_scale 1.0, got {cfg['attn_scale']}")
    if errors:
        raise ValueError("; ".join(errors))


# --------------------------------------------------------------------------------------------------
# Expected tensors (names and shapes), shared with the exporter's validation.
# --------------------------------------------------------------------------------------------------

def _mlp_shapes(prefix, in_dim, hidden, out_dim, num_layers):
    if num_layers == -1:
        return [(prefix + "fc.weight", (out_dim, in_dim)), (prefix + "fc.bias", (out_dim,))]
    shapes = [(prefix + "fc1.weight", (hidden, in_dim)), (prefix + "fc1.bias", (hidden,))]
    for j in range(num_layers):
        shapes += [(prefix + f"fcs.{j}.weight", (hidden, hidden)), (prefix + f"fcs.{j}.bias", (hidden,))]
    shapes += [(prefix + "fc2.weight", (out_dim, hidden)), (prefix + "fc2.bias", (out_dim,))]
    return shapes


def _norm_shapes(prefix, dim, rms):
    if rms:
        return [(prefix + "weight", (dim,))]
    return [(prefix + "weight", (dim,)), (prefix + "bias", (dim,))]


def expected_state_shapes(config):
    """OrderedDict key -> shape of the official state_dict (registration order of FLARE.py)."""
    cfg = complete_config(config)
    C, E = cfg["channel_dim"], cfg["channel_dim"] // cfg["num_heads"]
    rms, paper = cfg["rmsnorm"], cfg["key_layout"] == "paper"
    L = cfg["num_layers_in_out_proj"]
    shapes = _mlp_shapes("in_proj.", cfg["in_dim"], cfg["in_proj_hidden_dim"], C, L)
    head_norm, head_mlp = ("out_proj.ln.", "out_proj.mlp.") if paper else ("out_proj.0.", "out_proj.1.")
    if cfg["out_proj_norm"]:
        shapes += _norm_shapes(head_norm, C, rms)
    shapes += _mlp_shapes(head_mlp, C, cfg["out_proj_hidden_dim"], cfg["out_dim"], L)
    n1, n2 = ("ln1", "ln2") if paper else ("norm1", "norm2")
    for b in range(cfg["num_blocks"]):
        p = f"blocks.{b}."
        shapes += _norm_shapes(p + n1 + ".", C, rms)
        shapes += _norm_shapes(p + n2 + ".", C, rms)
        shapes.append((p + "att.latent_q", (C, cfg["num_latents"])))
        if cfg["qk_norm"]:
            shapes += _norm_shapes(p + "att.q_norm.", E, rms)
            shapes += _norm_shapes(p + "att.k_norm.", E, rms)
        shapes += _mlp_shapes(p + "att.k_proj.", C, cfg["k_proj_hidden_dim"], C, cfg["num_layers_k_proj"])
        shapes += _mlp_shapes(p + "att.v_proj.", C, cfg["v_proj_hidden_dim"], C, cfg["num_layers_v_proj"])
        shapes += [(p + "att.out_proj.weight", (C, C)), (p + "att.out_proj.bias", (C,))]
        shapes += _mlp_shapes(p + "mlp.", C, cfg["ffn_hidden_dim"], C, cfg["num_layers_ffn"])
    return OrderedDict(shapes)


# --------------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------------

def _make_norm(dim, cfg):
    if cfg["rmsnorm"]:
        return RMSNorm(dim, eps=cfg["rmsnorm_eps"])
    return nn.LayerNorm(dim, eps=cfg["layernorm_eps"])


class ResidualMLP(nn.Module):
    """num_layers = -1: one ``fc``; else ``fc1``, ``fcs.0..L-1``, ``fc2`` with optional residuals."""

    def __init__(self, in_dim, hidden_dim, out_dim, num_layers, act, input_residual, output_residual):
        super().__init__()
        self.num_layers = num_layers
        if num_layers == -1:
            self.fc = nn.Linear(in_dim, out_dim)
            self.residual = bool(input_residual and output_residual and in_dim == out_dim)
            return
        self.fc1 = nn.Linear(in_dim, hidden_dim)
        self.fcs = nn.ModuleList([nn.Linear(hidden_dim, hidden_dim) for _ in range(num_layers)])
        self.fc2 = nn.Linear(hidden_dim, out_dim)
        self.act = make_activation(act)
        self.input_residual = bool(input_residual and in_dim == hidden_dim)
        self.output_residual = bool(output_residual and hidden_dim == out_dim)

    def forward(self, x):
        if self.num_layers == -1:
            y = self.fc(x)
            return x + y if self.residual else y
        h = self.act(self.fc1(x))
        if self.input_residual:
            h = x + h
        for fc in self.fcs:
            h = h + self.act(fc(h))
        y = self.fc2(h)
        return h + y if self.output_residual else y


class FlareAttention(nn.Module):
    """Encode all points of a sample onto M latents per head, decode back (no mask, no padding)."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg["channel_dim"]
        self.num_heads = cfg["num_heads"]
        self.num_latents = cfg["num_latents"]
        self.head_dim = C // self.num_heads
        self.attn_scale = cfg["attn_scale"]
        self.latent_q = nn.Parameter(torch.zeros(C, self.num_latents))
        self.qk_norm = cfg["qk_norm"]
        if self.qk_norm:
            self.q_norm = _make_norm(self.head_dim, cfg)
            self.k_norm = _make_norm(self.head_dim, cfg)
        self.k_proj = ResidualMLP(C, cfg["k_proj_hidden_dim"], C, cfg["num_layers_k_proj"], cfg["act"], True, True)
        self.v_proj = ResidualMLP(C, cfg["v_proj_hidden_dim"], C, cfg["num_layers_v_proj"], cfg["act"], True, True)
        self.out_proj = nn.Linear(C, C)
        self.record_weights = False
        self.last_weights = None

    def forward(self, x):
        B, N, C = x.shape
        H, M, E = self.num_heads, self.num_latents, self.head_dim
        # Raw row-major reinterpretation of the (C, M) parameter as (H, M, E): not a transpose.
        q = self.latent_q.reshape(H, M, E)
        k = self.k_proj(x).reshape(B, N, H, E).permute(0, 2, 1, 3)  # (B, H, N, E), channel = h*E + e
        v = self.v_proj(x).reshape(B, N, H, E).permute(0, 2, 1, 3)
        if self.qk_norm:
            q = self.q_norm(q)
            k = self.k_norm(k)
        logits = torch.matmul(q.unsqueeze(0), k.transpose(-1, -2)) * self.attn_scale  # (B, H, M, N)
        w_encode = torch.softmax(logits, dim=-1)                # over the N points of the sample
        z = torch.matmul(w_encode, v)                           # (B, H, M, E)
        w_decode = torch.softmax(logits.transpose(-1, -2), dim=-1)  # over the M latents
        y = torch.matmul(w_decode, z)                           # (B, H, N, E)
        if self.record_weights:
            self.last_weights = (w_encode.detach(), w_decode.detach())
        y = y.permute(0, 2, 1, 3).reshape(B, N, C)
        return self.out_proj(y)


class FlareBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["channel_dim"]
        self._n1, self._n2 = ("ln1", "ln2") if cfg["key_layout"] == "paper" else ("norm1", "norm2")
        setattr(self, self._n1, _make_norm(C, cfg))
        setattr(self, self._n2, _make_norm(C, cfg))
        self.att = FlareAttention(cfg)
        self.mlp = ResidualMLP(C, cfg["ffn_hidden_dim"], C, cfg["num_layers_ffn"], cfg["act"], True, True)

    def forward(self, x):
        x = x + self.att(getattr(self, self._n1)(x))
        return x + self.mlp(getattr(self, self._n2)(x))


class PaperOutputHead(nn.Module):
    """Paper-era ``FinalLayer``: ``ln`` (LayerNorm or identity) then ``mlp``."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg["channel_dim"]
        self.ln = _make_norm(C, cfg) if cfg["out_proj_norm"] else nn.Identity()
        self.mlp = ResidualMLP(C, cfg["out_proj_hidden_dim"], cfg["out_dim"], cfg["num_layers_in_out_proj"],
                               cfg["act"], True, False)

    def forward(self, x):
        return self.mlp(self.ln(x))


class FLAREModel(nn.Module):
    """FLARE surrogate: ``forward(x)`` maps ``(B, N, in_dim)`` to ``(B, N, out_dim)``.

    Every sample of the batch must have the same N; use :func:`predict_batched` for samples of
    different sizes. Weights are zero-initialised: load a state_dict.
    """

    def __init__(self, config):
        super().__init__()
        cfg = complete_config(config)
        self.config = cfg
        C, L = cfg["channel_dim"], cfg["num_layers_in_out_proj"]
        self.in_proj = ResidualMLP(cfg["in_dim"], cfg["in_proj_hidden_dim"], C, L, cfg["act"], False, True)
        if cfg["key_layout"] == "paper":
            self.out_proj = PaperOutputHead(cfg)
        else:
            self.out_proj = nn.Sequential(
                _make_norm(C, cfg) if cfg["out_proj_norm"] else nn.Identity(),
                ResidualMLP(C, cfg["out_proj_hidden_dim"], cfg["out_dim"], L, cfg["act"], True, False),
            )
        self.blocks = nn.ModuleList([FlareBlock(cfg) for _ in range(cfg["num_blocks"])])

    def forward(self, x):
        if x.dim() != 3 or x.shape[-1] != self.config["in_dim"]:
            raise ValueError(f"expected x of shape (B, N, {self.config['in_dim']}), got {tuple(x.shape)}")
        x = self.in_proj(x)
        for block in self.blocks:
            x = block(x)
        return self.out_proj(x)

    def record_attention(self, flag=True):
        """Keep the softmax weights of the last forward in ``block.att.last_weights`` (diagnostics)."""
        for block in self.blocks:
            block.att.record_weights = flag
            block.att.last_weights = None


# --------------------------------------------------------------------------------------------------
# Helpers: variable-size batches and normalisation
# --------------------------------------------------------------------------------------------------

def _param_dtype(model):
    for p in model.parameters():
        return p.dtype
    return torch.get_default_dtype()


def _sample_slices(batch_idx, n):
    """Contiguous runs of equal ``batch_idx`` (sample-major); refuses unsorted indices."""
    if batch_idx is None:
        return [slice(0, n)]
    idx = torch.as_tensor(batch_idx)
    if idx.dim() != 1 or idx.numel() != n:
        raise ValueError(f"batch_idx must have shape ({n},), got {tuple(idx.shape)}")
    if idx.dtype.is_floating_point:
        raise ValueError("batch_idx must be an integer array")
    idx = idx.to(torch.int64)
    if n > 1 and bool((idx[1:] < idx[:-1]).any()):
        raise ValueError("batch_idx must be sample-major (non-decreasing): the points of each sample contiguous")
    if n == 0:
        return []
    change = torch.nonzero(idx[1:] != idx[:-1]).flatten().tolist()
    bounds = [0] + [i + 1 for i in change] + [n]
    return [slice(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


@torch.no_grad()
def predict_batched(model, x, batch_idx=None):
    """Run every sample on its own: ``x`` is (N_total, in_dim), ``batch_idx`` int64 (N_total,).

    Returns (N_total, out_dim) in the model's dtype. Samples are never padded or mixed.
    """
    dtype = _param_dtype(model)
    x = torch.as_tensor(x)
    if x.dim() != 2:
        raise ValueError(f"x must be (N_total, in_dim), got {tuple(x.shape)}")
    x = x.to(dtype)
    outs = [model(x[s].unsqueeze(0)).squeeze(0) for s in _sample_slices(batch_idx, x.shape[0])]
    if not outs:
        return x.new_zeros((0, model.config["out_dim"]))
    return torch.cat(outs, dim=0)


def _stat(normalization, name):
    if not normalization or normalization.get(name) is None:
        return None
    return torch.as_tensor(normalization[name], dtype=torch.float64)


def normalize_inputs(x, normalization):
    """``(x - input_mean) / input_std`` in float64 (identity when the pair is absent)."""
    x = torch.as_tensor(x).to(torch.float64)
    mean, std = _stat(normalization, "input_mean"), _stat(normalization, "input_std")
    return x if mean is None else (x - mean) / std


def denormalize_outputs(y, normalization):
    """``y * output_std + output_mean`` in float64 (identity when the pair is absent)."""
    y = torch.as_tensor(y).to(torch.float64)
    mean, std = _stat(normalization, "output_mean"), _stat(normalization, "output_std")
    return y if mean is None else y * std + mean


@torch.no_grad()
def predict_physical(model, x, batch_idx=None, normalization=None):
    """Physical inputs -> physical outputs, as the library does: normalise (float64), run the model in
    its own dtype, de-normalise (float64); the result is returned in the model's dtype."""
    dtype = _param_dtype(model)
    xn = normalize_inputs(x, normalization).to(dtype)
    y = predict_batched(model, xn, batch_idx)
    return denormalize_outputs(y, normalization).to(dtype)


def load_model_file(path, dtype=torch.float64):
    """Build the reference from a model file (format v1): returns (model, normalization, fields)."""
    import h5py  # local import: only needed here

    with h5py.File(path, "r") as f:
        if _as_scalar(f.attrs.get("format")) != "surrogate-model":
            raise ValueError(f"{path}: not a surrogate model file")
        if int(_as_scalar(f.attrs["format_version"])) != 1:
            raise ValueError(f"{path}: format_version {f.attrs['format_version']} is not 1")
        if _as_scalar(f.attrs.get("architecture")) != "flare":
            raise ValueError(f"{path}: architecture is not flare")
        config = {key: _as_scalar(value) for key, value in f["config"].attrs.items()}
        state = OrderedDict((key, torch.from_numpy(f["weights"][key][()])) for key in f["weights"])
        normalization = {}
        if "normalization" in f:
            normalization = {key: f["normalization"][key][()] for key in f["normalization"]}
        fields = {}
        if "fields" in f:
            fields = {key: [_as_scalar(s) for s in f["fields"][key][()]] for key in f["fields"]}
    model = FLAREModel(config)
    model.load_state_dict(state, strict=True)
    model.to(dtype).eval()
    return model, normalization, fields
