#!/usr/bin/env python3
"""Golden data of NeighborhoodAttentionS2's upsampling (scatter) mode, from the official torch-harmonics package.

Writes tests/data/sphere/neighborhood_upsample.h5: one group per case (query grid finer than the key grid,
nlon_out a multiple of nlon_in) with the constructor arguments as attributes (as neighborhood_attention.h5:
in_channels, num_heads, nlat_in, nlon_in, grid_in, nlat_out, nlon_out, grid_out, bias, use_qknorm,
k_channels, out_channels, scale_kind / scale, theta_cutoff, default_cutoff, optimized_kernel), the module's
non-persistent lists roff_idx (psi_roff_idx) and col_idx (psi_col_idx), int64, its state_dict under
weights/, query (on the output grid), key and value (on the input grid), output (the module's float32
output in eval mode), output_torch (the same module with optimized_kernel=False: the package's pure-PyTorch
reference kernel) and output_f64 (the formula of docs/reference-models.md §5.4 evaluated in float64 by this
script on the module's own weights, lists and quad_weights, in the scatter formulation; stored as float32).

Needs torch-harmonics (pip, in a virtual environment outside the repository), torch, numpy and h5py:
    VENV/bin/python share/tools/golden/sphere_upsample_golden.py tests/data/sphere
Only the package's public modules are called; nothing of it is copied here.
"""
import math
import sys
from pathlib import Path

import h5py
import numpy as np
import torch
import torch_harmonics
from torch_harmonics import NeighborhoodAttentionS2

# name, batch, C_in, heads, query (output) grid, key (input) grid, cutoff (None: the module's default), options
CASES = [
    ("up_eq_17x32_to_eq_33x64_default", 1, 8, 2, (33, 64, "equiangular"), (17, 32, "equiangular"), None,
     dict(bias=True)),
    ("up_eq_9x16_to_lg_16x32_qknorm", 2, 6, 2, (16, 32, "legendre-gauss"), (9, 16, "equiangular"), None,
     dict(bias=True, use_qknorm=True, k_channels=4, out_channels=10)),
    ("up_lg_8x12_to_lob_13x36_p3_cut0.5", 1, 6, 1, (13, 36, "lobatto"), (8, 12, "legendre-gauss"), 0.5,
     dict(bias=False, scale=0.7)),
    ("up_trap_7x10_to_eq_12x20_tensor_scale", 1, 8, 2, (12, 20, "equiangular"), (7, 10, "equiangular-trapezoidal"),
     None, dict(bias=True, use_qknorm=True, scale="tensor")),
    ("up_eq_5x8_to_eq_9x32_p4_small_cutoff", 1, 4, 1, (9, 32, "equiangular"), (5, 8, "equiangular"), 0.3,
     dict(bias=True)),
]


def upsample_f64(mod, xq, xk, xv):
    """§5.4 in float64 from the scatter lists (our own code): every (input, output) pair of the module's
    psi_col_idx / psi_roff_idx, logits and softmax per output point."""
    sd = {k: v.double().numpy() for k, v in mod.state_dict().items()}
    H = mod.num_heads
    feps = float(np.finfo(np.float32).eps)

    def proj(x, name):  # (B, C, nlat, nlon) -> (B, nlat*nlon, Cout)
        y = np.einsum("oc,bchw->bhwo", sd[name + "_weights"][:, :, 0, 0], x.double().numpy())
        if name + "_bias" in sd:
            y = y + sd[name + "_bias"]
        return y.reshape(y.shape[0], -1, y.shape[-1])

    def norm(x, name):
        if name not in sd:
            return x
        B, n, C = x.shape
        x = x.reshape(B, n, H, C // H)
        x = x / np.sqrt((x * x).mean(-1, keepdims=True) + feps) * (1.0 + sd[name])
        return x.reshape(B, n, C)

    q = norm(proj(xq, "q"), "q_norm_weights") * float(mod.scale)
    k = norm(proj(xk, "k"), "k_norm_weights")
    v = proj(xv, "v")
    nlat_in, nlon_in, nlat_out, nlon_out = mod.nlat_in, mod.nlon_in, mod.nlat_out, mod.nlon_out
    p = nlon_out // nlon_in
    col = mod.psi_col_idx.numpy()
    roff = mod.psi_roff_idx.numpy()
    qw = mod.quad_weights.double().numpy()
    src, dst = [], []
    for hi in range(nlat_in):
        cols = col[roff[hi]:roff[hi + 1]]
        ho, woc = cols // nlon_out, cols % nlon_out
        for wi in range(nlon_in):
            src.append(np.full(cols.shape, hi * nlon_in + wi))
            dst.append(ho * nlon_out + (woc + p * wi) % nlon_out)
    src, dst = np.concatenate(src), np.concatenate(dst)
    B = q.shape[0]
    ek, ev = q.shape[-1] // H, v.shape[-1] // H
    o = np.full((B, nlat_out * nlon_out, H * ev), np.nan)
    for h in range(H):
        logit = np.einsum("bne,bne->bn", q[:, dst, h * ek:(h + 1) * ek], k[:, src, h * ek:(h + 1) * ek])
        mx = np.full((B, nlat_out * nlon_out), -np.inf)
        for b in range(B):
            np.maximum.at(mx[b], dst, logit[b])
        a = np.exp(logit - mx[:, dst]) * qw[src // nlon_in]
        den = np.zeros((B, nlat_out * nlon_out))
        num = np.zeros((B, nlat_out * nlon_out, ev))
        for b in range(B):
            np.add.at(den[b], dst, a[b])
            np.add.at(num[b], dst, a[b][:, None] * v[b, src, h * ev:(h + 1) * ev])
        with np.errstate(invalid="ignore", divide="ignore"):
            o[:, :, h * ev:(h + 1) * ev] = num / den[:, :, None]
    y = np.einsum("oc,bnc->bon", sd["proj_weights"][:, :, 0, 0], o)
    if "proj_bias" in sd:
        y = y + sd["proj_bias"][None, :, None]
    return y.reshape(B, -1, nlat_out, nlon_out)


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/sphere")
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20261122)
    with h5py.File(out / "neighborhood_upsample.h5", "w") as f:
        f.attrs["torch_harmonics_version"] = str(torch_harmonics.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        for name, batch, cin, heads, qgrid, kgrid, cutoff, opts in CASES:
            opts = dict(opts)
            scale = opts.pop("scale", None)
            scale_arg = torch.tensor(0.45) if scale == "tensor" else scale
            args = dict(in_shape=kgrid[:2], out_shape=qgrid[:2], grid_in=kgrid[2], grid_out=qgrid[2], num_heads=heads,
                        scale=scale_arg, theta_cutoff=cutoff, **opts)
            mod = NeighborhoodAttentionS2(cin, **args)
            assert mod.upsample, name
            with torch.no_grad():
                for prm in mod.parameters():  # non-zero biases and norm weights, so that every term matters
                    std = 1.0 / math.sqrt(prm.shape[1]) if prm.dim() == 4 else 0.5
                    prm.copy_(std * torch.randn(prm.shape, generator=gen))
            mod.eval()
            ref = NeighborhoodAttentionS2(cin, optimized_kernel=False, **args)
            ref.load_state_dict(mod.state_dict())
            ref.eval()
            xq = torch.randn(batch, cin, qgrid[0], qgrid[1], generator=gen)
            xk = torch.randn(batch, cin, kgrid[0], kgrid[1], generator=gen)
            xv = torch.randn(batch, cin, kgrid[0], kgrid[1], generator=gen)
            with torch.no_grad():
                y = mod(xq, xk, xv)
                y_torch = ref(xq, xk, xv)
            y64 = upsample_f64(mod, xq, xk, xv)
            g = f.create_group(name)
            g.attrs["in_channels"] = cin
            g.attrs["num_heads"] = heads
            g.attrs["nlat_out"], g.attrs["nlon_out"], g.attrs["grid_out"] = qgrid
            g.attrs["nlat_in"], g.attrs["nlon_in"], g.attrs["grid_in"] = kgrid
            g.attrs["bias"] = int(opts.get("bias", True))
            g.attrs["use_qknorm"] = int(opts.get("use_qknorm", False))
            g.attrs["k_channels"] = mod.k_channels
            g.attrs["out_channels"] = mod.out_channels
            g.attrs["self_attention"] = 0
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
            g["roff_idx"] = mod.psi_roff_idx.numpy().astype(np.int64)
            g["col_idx"] = mod.psi_col_idx.numpy().astype(np.int64)
            w = g.create_group("weights")
            for key, value in mod.state_dict().items():
                w[key] = value.float().numpy()
            g["query"] = xq.numpy()
            g["key"] = xk.numpy()
            g["value"] = xv.numpy()
            g["output"] = y.numpy()
            g["output_torch"] = y_torch.numpy()
            g["output_f64"] = y64.astype(np.float32)  # float32 copy: only its distance to "output" matters
            yd = y.double().numpy()
            finite = np.isfinite(y64)
            same_nan = bool(np.array_equal(np.isnan(yd), ~finite))
            err = np.abs(yd[finite] - y64[finite]).max()
            err_t = np.abs(yd[finite] - y_torch.double().numpy()[finite]).max()
            print(f"{name}: out {tuple(y.shape)}, cutoff {float(mod.theta_cutoff):.4f}, {mod.psi_col_idx.numel()} "
                  f"entries, NaN points {int((~finite).sum() // y.shape[1])} (same in both: {same_nan}), "
                  f"|official - float64| max {err:.3g}, |optimized - torch kernel| max {err_t:.3g}")


if __name__ == "__main__":
    main()
