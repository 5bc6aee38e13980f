"""Small compatibility layer so the reference runs on torch 1.13 (Debian) and torch 2.x.

torch 1.13 has no ``nn.RMSNorm`` and no ``F.scaled_dot_product_attention``; the reference does
not use the latter (softmax is written out) and brings its own RMSNorm below.
"""

import inspect

import torch
from torch import nn

__all__ = [
    "TORCH_VERSION",
    "RMSNorm",
    "FLOAT32_EPS",
    "make_activation",
    "load_supports_weights_only",
]


def _parse_version(text):
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = ""
        for ch in piece:
            if ch.isdigit():
                digits += ch
            else:
                break
        parts.append(int(digits) if digits else 0)
    while len(parts) < 3:
        parts.append(0)
    return tuple(parts)


TORCH_VERSION = _parse_version(torch.__version__)

# PyTorch's RMSNorm default (eps=None) is finfo(dtype).eps of the *input*; a model trained in
# float32 therefore used this value, and the library keeps it whatever the compute precision.
FLOAT32_EPS = float(torch.finfo(torch.float32).eps)


class RMSNorm(nn.Module):
    """``y = x / sqrt(mean(x^2) + eps) * weight`` over the last dimension; state_dict: ``weight`` only."""

    def __init__(self, dim, eps=FLOAT32_EPS):
        super().__init__()
        self.dim = int(dim)
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(self.dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight

    def extra_repr(self):
        return f"{self.dim}, eps={self.eps}"


def make_activation(name):
    """``gelu`` is the tanh approximation (as in FLARE.py), ``silu`` is x * sigmoid(x)."""
    if name == "gelu":
        return nn.GELU(approximate="tanh")
    if name == "silu":
        return nn.SiLU()
    raise ValueError(f"unknown activation {name!r} (expected 'gelu' or 'silu')")


def load_supports_weights_only():
    """Whether this torch's ``torch.load`` takes ``weights_only=`` (1.13 does, older ones do not)."""
    try:
        return "weights_only" in inspect.signature(torch.load).parameters
    except (TypeError, ValueError):  # pragma: no cover - exotic builds
        return False
