#!/usr/bin/env python3
"""Golden data for the DISCO convolution (tests/sphere/test_disco.cpp), from the official torch-harmonics.

Writes tests/data/sphere/disco.h5: one group per DiscreteContinuousConvS2 case with the constructor
arguments as attributes (kernel_shape as a dataset), the module's filter tensor as it keeps it after construction (non-persistent
buffers psi_ker_idx, psi_row_idx, psi_col_idx int64 and psi_vals float64, in the module's order), its
weight (and bias), a random input, the module's float32 output and the same module evaluated in float64
(for the tolerance of the float32 comparison).

    VENV/bin/python share/tools/golden/sphere_disco_golden.py tests/data/sphere/disco.h5

Only the package's public module is called; nothing of it is copied here.
"""
import math
import sys
import warnings

import h5py
import numpy as np
import torch
import torch_harmonics
from torch_harmonics import DiscreteContinuousConvS2


def transformer_cutoff(nlat, kernel_shape, basis_type):
    """The SphericalTransformer's encoder/decoder cutoff (examples/models/s2transformer.py), Python float."""
    factor = {"piecewise linear": 0.5, "morlet": 0.5, "zernike": math.sqrt(2.0)}[basis_type]
    return (kernel_shape[0] + 1) * factor * math.pi / float(nlat - 1)


# name, in_shape, grid_in, out_shape, grid_out, kernel_shape, basis, norm, cin, cout, groups, bias, cutoff
CASES = [
    ("encoder_pl54", (17, 32), "equiangular", (9, 16), "legendre-gauss", (5, 4), "piecewise linear", "nodal",
     3, 8, 1, False, transformer_cutoff(17, (5, 4), "piecewise linear")),
    ("decoder_pl54", (17, 32), "equiangular", (17, 32), "equiangular", (5, 4), "piecewise linear", "nodal",
     8, 3, 1, False, transformer_cutoff(9, (5, 4), "piecewise linear")),
    ("encoder_pl54_9x16", (9, 16), "equiangular", (9, 16), "legendre-gauss", (5, 4), "piecewise linear", "nodal",
     3, 5, 1, False, None),
    ("morlet33", (9, 16), "equiangular", (9, 16), "equiangular", (3, 3), "morlet", "nodal", 4, 5, 1, False, None),
    ("morlet33_mean_lg", (9, 16), "legendre-gauss", (9, 8), "legendre-gauss", (3, 3), "morlet", "mean", 3, 4, 1,
     False, transformer_cutoff(9, (3, 3), "morlet")),
    ("harmonic23_groups", (9, 16), "legendre-gauss", (9, 8), "legendre-gauss", (2, 3), "harmonic", "geometric",
     4, 6, 2, True, None),
    ("zernike3_lobatto", (9, 16), "lobatto", (9, 16), "lobatto", (3,), "zernike", "mean", 3, 4, 1, False, None),
    ("zernike4_modal", (9, 16), "legendre-gauss", (9, 16), "legendre-gauss", (4,), "zernike", "modal", 3, 4, 1,
     False, transformer_cutoff(9, (4,), "zernike")),
    ("pl43_even_trapezoidal", (12, 24), "equiangular-trapezoidal", (6, 12), "equiangular-trapezoidal", (4, 3),
     "piecewise linear", "modal", 3, 4, 1, False, None),
    ("pl3_isotropic_support", (9, 16), "equiangular", (9, 16), "equiangular", (3,), "piecewise linear", "support",
     2, 3, 1, True, None),
    ("pl2_isotropic_none", (9, 16), "equiangular", (5, 8), "equiangular", (2,), "piecewise linear", "none", 2, 3,
     1, False, 0.6),
    ("pl54_none_explicit", (17, 32), "equiangular", (9, 16), "equiangular", (5, 4), "piecewise linear", "none", 3,
     4, 1, False, 0.3),
    ("pl34_individual_lobatto", (9, 16), "lobatto", (9, 16), "equiangular", (3, 4), "piecewise linear",
     "individual", 3, 4, 1, False, None),
    ("pl22_even_groups", (9, 16), "equiangular", (9, 16), "equiangular", (2, 2), "piecewise linear", "nodal", 6,
     9, 3, True, None),
]
BATCH = 2


def main(path):
    torch.set_num_threads(1)
    torch.manual_seed(20260501)
    with h5py.File(path, "w") as f:
        f.attrs["torch_harmonics_version"] = str(torch_harmonics.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        for (name, in_shape, grid_in, out_shape, grid_out, kshape, basis, norm, cin, cout, groups, bias,
             cutoff) in CASES:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                conv = DiscreteContinuousConvS2(cin, cout, in_shape=in_shape, out_shape=out_shape,
                                                kernel_shape=kshape, basis_type=basis, basis_norm_mode=norm,
                                                groups=groups, grid_in=grid_in, grid_out=grid_out, bias=bias,
                                                theta_cutoff=cutoff)
            conv.eval()
            if bias:
                with torch.no_grad():
                    conv.bias.copy_(0.1 * torch.randn(cout))
            x = torch.randn(BATCH, cin, *in_shape, dtype=torch.float32)
            with torch.no_grad():
                y = conv(x)
                y64 = conv.double()(x.double())
            g = f.create_group(name)
            g.attrs.update(dict(in_channels=cin, out_channels=cout, nlat_in=in_shape[0], nlon_in=in_shape[1],
                                grid_in=grid_in, nlat_out=out_shape[0], nlon_out=out_shape[1], grid_out=grid_out,
                                basis_type=basis,
                                basis_norm_mode=norm, groups=groups, bias=int(bias),
                                theta_cutoff=float(conv.theta_cutoff), default_cutoff=int(cutoff is None),
                                kernel_size=int(conv.kernel_size), optimized_kernel=int(conv.optimized_kernel),
                                batch=BATCH))
            g["kernel_shape"] = np.array(kshape, dtype=np.int64)
            g["psi_ker_idx"] = conv.psi_ker_idx.numpy()
            g["psi_row_idx"] = conv.psi_row_idx.numpy()
            g["psi_col_idx"] = conv.psi_col_idx.numpy()
            g["psi_vals"] = conv.psi_vals.double().numpy()
            g["weight"] = conv.weight.detach().float().numpy()
            if bias:
                g["bias"] = conv.bias.detach().float().numpy()
            g["input"] = x.numpy()
            g["output"] = y.numpy()
            g["output_f64"] = y64.numpy()
            print(f"{name}: K={conv.kernel_size} nnz={conv.psi_vals.numel()} cutoff={conv.theta_cutoff:.6f} "
                  f"psi dtype={conv.psi_vals.dtype} |out-out64|max={float((y.double() - y64).abs().max()):.3e}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/sphere/disco.h5")
