#!/usr/bin/env python3
"""Golden data for the spherical family (tests/sphere), from the official torch-harmonics package.

Writes tests/data/sphere/quadrature.h5 (latitude rules, colatitudes, longitudes and the attention layer's
quadrature buffers of torch_harmonics.quadrature / AttentionS2 for every grid and a range of sizes) and
tests/data/sphere/attention.h5 (AttentionS2 cases: constructor arguments, state_dict, inputs, the float32
output of the official module and, for the tolerance, the same module evaluated in float64).

tests/data/sphere/neighborhood.h5 (the CSR neighbour lists psi_col_idx / psi_roff_idx that
NeighborhoodAttentionS2 builds, with the cutoff it used) and tests/data/sphere/neighborhood_attention.h5
(NeighborhoodAttentionS2 cases: constructor arguments, state_dict, inputs, the float32 output of the official
module and, for the tolerance, a float64 evaluation of the same formula on the module's own buffers by this
script; the official kernels compute in float32 even for float64 inputs).

Needs torch-harmonics (pip, in a virtual environment outside the repository), torch, numpy and h5py:
    VENV/bin/python share/tools/golden/sphere_golden.py tests/data/sphere \
        [quadrature attention neighborhood neighborhood_attention]
(the optional names select the files to write; default all).
Only the package's public functions and modules are called; nothing of it is copied here.
"""
import math
import sys
from pathlib import Path

import h5py
import numpy as np
import torch
import torch_harmonics
from torch_harmonics import AttentionS2, NeighborhoodAttentionS2
from torch_harmonics.quadrature import (clenshaw_curtiss_weights, legendre_gauss_weights, lobatto_weights,
                                        precompute_latitudes, precompute_longitudes, trapezoidal_weights)

GRIDS = {
    "equiangular": clenshaw_curtiss_weights,
    "legendre-gauss": legendre_gauss_weights,
    "lobatto": lobatto_weights,
    "equiangular-trapezoidal": trapezoidal_weights,
}
SIZES = [2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33, 65, 129]


def write_quadrature(path):
    with h5py.File(path, "w") as f:
        f.attrs["torch_harmonics_version"] = str(torch_harmonics.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        for grid, rule in GRIDS.items():
            g = f.create_group(grid)
            for n in SIZES:
                s = g.create_group(f"n{n}")
                x, w = rule(n, -1.0, 1.0)
                s["rule_x"] = x.numpy().astype(np.float64)
                s["rule_w"] = w.numpy().astype(np.float64)
                lats, wl = precompute_latitudes(n, grid=grid)
                s["colatitude"] = lats.numpy().astype(np.float64)
                s["weight"] = wl.numpy().astype(np.float64)
                nlon = 2 * n
                att = AttentionS2(4, 1, (n, nlon), (n, nlon), grid_in=grid, grid_out=grid)
                s["log_quad_weights"] = att.log_quad_weights.reshape(n, nlon)[:, 0].numpy().astype(np.float32)
                s.attrs["nlon"] = nlon
        lon = f.create_group("longitudes")
        for nlon in [1, 2, 3, 8, 16, 24, 360, 720]:
            lon[f"n{nlon}"] = precompute_longitudes(nlon).numpy().astype(np.float64)


# name, batch, C_in, heads, query grid (nlat, nlon, grid), key grid (nlat, nlon, grid), options
CASES = [
    ("self_eq_8x16", 1, 8, 2, (8, 16, "equiangular"), None, dict(bias=True)),
    ("self_lg_12x24_nobias", 2, 6, 1, (12, 24, "legendre-gauss"), None, dict(bias=False)),
    ("self_lob_8x16_qknorm", 1, 16, 4, (8, 16, "lobatto"), None, dict(bias=True, use_qknorm=True)),
    ("self_trap_9x12_kv_channels", 1, 6, 2, (9, 12, "equiangular-trapezoidal"), None,
     dict(bias=True, k_channels=4, out_channels=10)),
    ("self_eq_12x24_scale_float", 1, 8, 2, (12, 24, "equiangular"), None, dict(bias=True, scale=0.3)),
    ("self_lg_8x16_scale_tensor", 1, 8, 4, (8, 16, "legendre-gauss"), None,
     dict(bias=False, use_qknorm=True, scale="tensor")),
    ("cross_eq_6x8_from_lg_12x24", 2, 8, 2, (6, 8, "equiangular"), (12, 24, "legendre-gauss"),
     dict(bias=True, use_qknorm=True, k_channels=12, out_channels=6)),
    ("self_eq_12x24_e32", 1, 32, 1, (12, 24, "equiangular"), None, dict(bias=True, k_channels=24)),
]


def write_attention(path):
    gen = torch.Generator().manual_seed(20261121)
    with h5py.File(path, "w") as f:
        f.attrs["torch_harmonics_version"] = str(torch_harmonics.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        for name, batch, cin, heads, qgrid, kgrid, opts in CASES:
            opts = dict(opts)
            kgrid = kgrid or qgrid
            scale = opts.pop("scale", None)
            if scale == "tensor":
                scale_arg = torch.tensor(0.45)
            else:
                scale_arg = scale
            mod = AttentionS2(cin, heads, in_shape=kgrid[:2], out_shape=qgrid[:2], grid_in=kgrid[2], grid_out=qgrid[2],
                              scale=scale_arg, **opts)
            with torch.no_grad():
                for p in mod.parameters():  # non-zero biases and norm weights, so that every term matters
                    std = 1.0 / math.sqrt(p.shape[1]) if p.dim() == 4 else 0.5
                    p.copy_(std * torch.randn(p.shape, generator=gen))
            mod.eval()
            self_attention = qgrid == kgrid and name.startswith("self")
            xq = torch.randn(batch, cin, qgrid[0], qgrid[1], generator=gen)
            if self_attention:
                xk = xv = None
            else:
                xk = torch.randn(batch, cin, kgrid[0], kgrid[1], generator=gen)
                xv = torch.randn(batch, cin, kgrid[0], kgrid[1], generator=gen)
            with torch.no_grad():
                out = mod(xq, xk, xv)
                mod64 = mod.double()
                out64 = mod64(xq.double(), None if xk is None else xk.double(), None if xv is None else xv.double())
                mod.float()
            g = f.create_group(name)
            g.attrs["in_channels"] = cin
            g.attrs["num_heads"] = heads
            g.attrs["nlat_out"], g.attrs["nlon_out"], g.attrs["grid_out"] = qgrid
            g.attrs["nlat_in"], g.attrs["nlon_in"], g.attrs["grid_in"] = kgrid
            g.attrs["bias"] = int(opts.get("bias", True))
            g.attrs["use_qknorm"] = int(opts.get("use_qknorm", False))
            g.attrs["k_channels"] = mod.k_channels
            g.attrs["out_channels"] = mod.out_channels
            g.attrs["self_attention"] = int(self_attention)
            if scale is None:
                g.attrs["scale_kind"] = "none"
            elif scale == "tensor":
                g.attrs["scale_kind"] = "tensor"
                g.attrs["scale"] = float(scale_arg)
            else:
                g.attrs["scale_kind"] = "float"
                g.attrs["scale"] = float(scale)
            w = g.create_group("weights")
            for key, value in mod.state_dict().items():
                w[key] = value.float().numpy()
            g["query"] = xq.numpy()
            if not self_attention:
                g["key"] = xk.numpy()
                g["value"] = xv.numpy()
            g["output"] = out.numpy()
            g["output_f64"] = out64.float().numpy()  # float32 copy: only its distance to "output" matters
            err = (out.double() - out64).abs().max().item()
            print(f"{name}: out {tuple(out.shape)}, |float32 - float64| max {err:.3g}")


# name, input grid (nlat, nlon, grid), output grid, theta_cutoff (None: the module's default)
NEIGHBORHOOD_CASES = [
    ("self_eq_8x16_default", (8, 16, "equiangular"), (8, 16, "equiangular"), None),
    ("self_lg_12x24_default", (12, 24, "legendre-gauss"), (12, 24, "legendre-gauss"), None),
    ("self_lob_10x20_cut0.5", (10, 20, "lobatto"), (10, 20, "lobatto"), 0.5),
    ("self_trap_9x18_default", (9, 18, "equiangular-trapezoidal"), (9, 18, "equiangular-trapezoidal"), None),
    ("down_lg_16x32_to_eq_8x16_default", (16, 32, "legendre-gauss"), (8, 16, "equiangular"), None),
    ("down_eq_17x36_to_lg_9x12_cut0.4", (17, 36, "equiangular"), (9, 12, "legendre-gauss"), 0.4),
    ("self_eq_17x32_transformer", (17, 32, "equiangular"), (17, 32, "equiangular"), 7.0 / math.sqrt(math.pi) * math.pi / 16),
    ("self_eq_6x8_whole_sphere", (6, 8, "equiangular"), (6, 8, "equiangular"), math.pi),
    ("self_eq_33x64_cut0.3", (33, 64, "equiangular"), (33, 64, "equiangular"), 0.3),
]


def write_neighborhood(path):
    with h5py.File(path, "w") as f:
        f.attrs["torch_harmonics_version"] = str(torch_harmonics.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        for name, gin, gout, cutoff in NEIGHBORHOOD_CASES:
            mod = NeighborhoodAttentionS2(2, in_shape=gin[:2], out_shape=gout[:2], grid_in=gin[2], grid_out=gout[2],
                                          theta_cutoff=cutoff)
            g = f.create_group(name)
            g.attrs["nlat_in"], g.attrs["nlon_in"], g.attrs["grid_in"] = gin
            g.attrs["nlat_out"], g.attrs["nlon_out"], g.attrs["grid_out"] = gout
            g.attrs["theta_cutoff"] = float(mod.theta_cutoff)
            g.attrs["default_cutoff"] = int(cutoff is None)
            g["col_idx"] = mod.psi_col_idx.numpy().astype(np.int64)
            g["roff_idx"] = mod.psi_roff_idx.numpy().astype(np.int64)
            g["row_idx"] = mod.psi_row_idx.numpy().astype(np.int64)
            print(f"{name}: cutoff {float(mod.theta_cutoff):.6f}, {mod.psi_col_idx.numel()} neighbours")


# name, batch, C_in, heads, query grid (nlat, nlon, grid), key grid (None: self-attention), cutoff
# (None: the module's default), options
NA_CASES = [
    ("self_eq_8x16_default", 1, 8, 2, (8, 16, "equiangular"), None, None, dict(bias=True)),
    ("self_lg_12x24_nobias", 2, 6, 1, (12, 24, "legendre-gauss"), None, None, dict(bias=False)),
    ("self_lob_10x20_qknorm_cut0.5", 1, 8, 2, (10, 20, "lobatto"), None, 0.5, dict(bias=True, use_qknorm=True)),
    ("self_trap_9x18_kv_channels", 1, 6, 2, (9, 18, "equiangular-trapezoidal"), None, None,
     dict(bias=True, k_channels=4, out_channels=10)),
    ("self_eq_16x32_scale_float_transformer_cut", 1, 8, 1, (16, 32, "equiangular"), None,
     7.0 / math.sqrt(math.pi) * math.pi / 15, dict(bias=True, scale=0.3)),
    ("self_lg_8x16_scale_tensor_qknorm", 1, 8, 2, (8, 16, "legendre-gauss"), None, None,
     dict(bias=False, use_qknorm=True, scale="tensor")),
    ("down_lg_16x32_to_eq_8x16_default", 2, 8, 2, (8, 16, "equiangular"), (16, 32, "legendre-gauss"), None,
     dict(bias=True, k_channels=12, out_channels=6)),
    ("down_eq_16x32_to_lg_8x8_cut0.4", 1, 6, 1, (8, 8, "legendre-gauss"), (16, 32, "equiangular"), 0.4,
     dict(bias=False)),
    ("self_eq_6x8_whole_sphere", 1, 4, 2, (6, 8, "equiangular"), None, math.pi, dict(bias=True)),
]


def neighborhood_attention_f64(mod, xq, xk, xv):
    """The formula of docs/reference-models.md §5.4 in float64 on the module's buffers (our own code)."""
    sd = {k: v.double().numpy() for k, v in mod.state_dict().items()}
    H = mod.num_heads
    feps = float(np.finfo(np.float32).eps)

    def proj(x, name):  # x: (B, C, nlat, nlon) -> (B, nlat, nlon, Cout)
        y = np.einsum("oc,bchw->bhwo", sd[name + "_weights"][:, :, 0, 0], x.double().numpy())
        if name + "_bias" in sd:
            y = y + sd[name + "_bias"]
        return y

    def norm(x, name):
        if name not in sd:
            return x
        B, h, w, C = x.shape
        x = x.reshape(B, h, w, H, C // H)
        x = x / np.sqrt((x * x).mean(-1, keepdims=True) + feps) * (1.0 + sd[name])
        return x.reshape(B, h, w, C)

    s = float(mod.scale)
    q = norm(proj(xq, "q"), "q_norm_weights") * s
    k = norm(proj(xk, "k"), "k_norm_weights")
    v = proj(xv, "v")
    col = mod.psi_col_idx.numpy()
    roff = mod.psi_roff_idx.numpy()
    qw = mod.quad_weights.double().numpy()
    B, nlat_out, nlon_out, _ = q.shape
    nlon_in = k.shape[2]
    p = nlon_in // nlon_out
    ek, ev = q.shape[-1] // H, v.shape[-1] // H
    o = np.zeros((B, nlat_out, nlon_out, H * ev))
    for t in range(nlat_out):
        cols = col[roff[t]:roff[t + 1]]
        hi = cols // nlon_in
        for wo in range(nlon_out):
            wi = (cols % nlon_in + p * wo) % nlon_in
            for h in range(H):
                kk = k[:, hi, wi, h * ek:(h + 1) * ek]
                logit = np.einsum("be,bne->bn", q[:, t, wo, h * ek:(h + 1) * ek], kk)
                a = np.exp(logit - logit.max(axis=1, keepdims=True)) * qw[hi]
                vv = v[:, hi, wi, h * ev:(h + 1) * ev]
                o[:, t, wo, h * ev:(h + 1) * ev] = np.einsum("bn,bne->be", a, vv) / a.sum(axis=1, keepdims=True)
    y = np.einsum("oc,bhwc->bohw", sd["proj_weights"][:, :, 0, 0], o)
    if "proj_bias" in sd:
        y = y + sd["proj_bias"][None, :, None, None]
    return y


def write_neighborhood_attention(path):
    gen = torch.Generator().manual_seed(20261122)
    with h5py.File(path, "w") as f:
        f.attrs["torch_harmonics_version"] = str(torch_harmonics.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        for name, batch, cin, heads, qgrid, kgrid, cutoff, opts in NA_CASES:
            opts = dict(opts)
            self_attention = kgrid is None
            kgrid = kgrid or qgrid
            scale = opts.pop("scale", None)
            scale_arg = torch.tensor(0.45) if scale == "tensor" else scale
            mod = NeighborhoodAttentionS2(cin, in_shape=kgrid[:2], out_shape=qgrid[:2], grid_in=kgrid[2],
                                          grid_out=qgrid[2], num_heads=heads, scale=scale_arg, theta_cutoff=cutoff,
                                          **opts)
            with torch.no_grad():
                for prm in mod.parameters():  # non-zero biases and norm weights, so that every term matters
                    std = 1.0 / math.sqrt(prm.shape[1]) if prm.dim() == 4 else 0.5
                    prm.copy_(std * torch.randn(prm.shape, generator=gen))
            mod.eval()
            xq = torch.randn(batch, cin, qgrid[0], qgrid[1], generator=gen)
            if self_attention:
                xk = xv = None
            else:
                xk = torch.randn(batch, cin, kgrid[0], kgrid[1], generator=gen)
                xv = torch.randn(batch, cin, kgrid[0], kgrid[1], generator=gen)
            with torch.no_grad():
                out = mod(xq, xk, xv)
            out64 = neighborhood_attention_f64(mod, xq, xq if xk is None else xk, xq if xv is None else xv)
            g = f.create_group(name)
            g.attrs["in_channels"] = cin
            g.attrs["num_heads"] = heads
            g.attrs["nlat_out"], g.attrs["nlon_out"], g.attrs["grid_out"] = qgrid
            g.attrs["nlat_in"], g.attrs["nlon_in"], g.attrs["grid_in"] = kgrid
            g.attrs["bias"] = int(opts.get("bias", True))
            g.attrs["use_qknorm"] = int(opts.get("use_qknorm", False))
            g.attrs["k_channels"] = mod.k_channels
            g.attrs["out_channels"] = mod.out_channels
            g.attrs["self_attention"] = int(self_attention)
            g.attrs["theta_cutoff"] = float(mod.theta_cutoff)
            g.attrs["default_cutoff"] = int(cutoff is None)
            g.attrs["optimized_kernel"] = int(mod.optimized_kernel)
            if scale is None:
                g.attrs["scale_kind"] = "none"
            elif scale == "tensor":
                g.attrs["scale_kind"] = "tensor"
                g.attrs["scale"] = float(scale_arg)
            else:
                g.attrs["scale_kind"] = "float"
                g.attrs["scale"] = float(scale)
            w = g.create_group("weights")
            for key, value in mod.state_dict().items():
                w[key] = value.float().numpy()
            g["query"] = xq.numpy()
            if not self_attention:
                g["key"] = xk.numpy()
                g["value"] = xv.numpy()
            g["output"] = out.numpy()
            g["output_f64"] = out64.astype(np.float32)  # float32 copy: only its distance to "output" matters
            err = np.abs(out.double().numpy() - out64).max()
            print(f"{name}: out {tuple(out.shape)}, cutoff {float(mod.theta_cutoff):.4f}, "
                  f"{mod.psi_col_idx.numel()} neighbours, |official - float64| max {err:.3g}")


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/sphere")
    which = sys.argv[2:] or ["quadrature", "attention", "neighborhood", "neighborhood_attention"]
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    if "quadrature" in which:
        write_quadrature(out / "quadrature.h5")
    if "attention" in which:
        write_attention(out / "attention.h5")
    if "neighborhood" in which:
        write_neighborhood(out / "neighborhood.h5")
    if "neighborhood_attention" in which:
        write_neighborhood_attention(out / "neighborhood_attention.h5")


if __name__ == "__main__":
    main()
