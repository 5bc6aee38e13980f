#!/usr/bin/env python3
"""Golden data for the DISCO transpose convolution and the "fourier-bessel" filter basis
(tests/sphere/test_disco_transpose.cpp), from the official torch-harmonics (needs scipy for the basis).

Writes tests/data/sphere/disco_transpose.h5:
  * /bessel_zeros: scipy.special.jn_zeros(m, 8) for m = 0 .. 5 (float64, 6 x 8);
  * one group per case: DiscreteContinuousConvS2 (attribute transpose = 0) with the fourier-bessel basis, or
    DiscreteContinuousConvTransposeS2 (transpose = 1) with any basis. Attributes and datasets as in
    disco.h5 (sphere_disco_golden.py): the constructor arguments, the module's non-persistent buffers
    psi_ker_idx, psi_row_idx, psi_col_idx (int64) and psi_vals (float64) in the module's order, weight,
    bias, a random input, the float32 output and the same module evaluated in float64 (the psi datasets
    gzip-compressed).

    VENV/bin/pip install scipy   # torch-harmonics' optional dependency of the basis
    VENV/bin/python share/tools/golden/sphere_disco_transpose_golden.py \
        tests/data/sphere/disco_transpose.h5

Only the package's public modules (and scipy's jn_zeros) are called; nothing of them is copied here.
"""
import sys
import warnings

import h5py
import numpy as np
import scipy
import scipy.special
import torch
import torch_harmonics
from torch_harmonics import DiscreteContinuousConvS2, DiscreteContinuousConvTransposeS2

# name, transpose, in_shape, grid_in, out_shape, grid_out, kernel_shape, basis, norm, cin, cout, groups, bias,
# cutoff (None: the module's default)
CASES = [
    ("fb3_nodal_eq", 0, (9, 16), "equiangular", (9, 16), "equiangular", (3,), "fourier-bessel", "nodal",
     3, 4, 1, False, None),
    ("fb32_modal_down_lg", 0, (17, 32), "equiangular", (9, 16), "legendre-gauss", (3, 2), "fourier-bessel",
     "modal", 3, 5, 1, False, 0.45),
    ("fb4_mean_lobatto", 0, (9, 16), "lobatto", (9, 16), "lobatto", (4, 4), "fourier-bessel", "mean", 2, 3, 1,
     False, None),
    ("fb21_support_groups", 0, (12, 24), "equiangular-trapezoidal", (6, 12), "equiangular-trapezoidal", (2, 1),
     "fourier-bessel", "support", 4, 6, 2, True, None),
    ("fb23_geometric", 0, (9, 16), "legendre-gauss", (9, 8), "equiangular", (2, 3), "fourier-bessel",
     "geometric", 2, 3, 1, False, 0.6),
    ("fb5_none", 0, (9, 16), "equiangular", (9, 16), "equiangular", (5, 2), "fourier-bessel", "none", 2, 2, 1,
     False, 0.5),
    ("tr_pl34_up2", 1, (9, 16), "equiangular", (17, 32), "equiangular", (3, 4), "piecewise linear", "nodal",
     3, 4, 1, False, None),
    ("tr_zernike3_mean_lg_eq", 1, (8, 16), "legendre-gauss", (16, 32), "equiangular", (3,), "zernike", "mean",
     3, 2, 1, False, None),
    ("tr_harmonic23_groups_bias", 1, (9, 16), "equiangular", (9, 32), "lobatto", (2, 3), "harmonic",
     "geometric", 4, 6, 2, True, None),
    ("tr_pl3_same_support", 1, (9, 16), "equiangular", (9, 16), "equiangular", (3,), "piecewise linear",
     "support", 2, 3, 1, True, None),
    ("tr_pl43_even_modal_p3", 1, (7, 8), "equiangular-trapezoidal", (13, 24), "equiangular-trapezoidal",
     (4, 3), "piecewise linear", "modal", 3, 4, 1, False, None),
    ("tr_fb32_none_cutoff", 1, (9, 16), "equiangular", (17, 32), "legendre-gauss", (3, 2), "fourier-bessel",
     "none", 2, 3, 1, False, 0.5),
    ("tr_morlet33_individual", 1, (6, 12), "lobatto", (11, 24), "equiangular", (3, 3), "morlet", "individual",
     3, 3, 1, False, None),
    ("tr_pl54_decoder_like", 1, (9, 16), "legendre-gauss", (17, 32), "equiangular", (5, 4), "piecewise linear",
     "nodal", 6, 3, 1, False, 6 * 0.5 * np.pi / 8.0),
]
BATCH = 2


def main(path):
    torch.set_num_threads(1)
    torch.manual_seed(20261122)
    with h5py.File(path, "w") as f:
        f.attrs["torch_harmonics_version"] = str(torch_harmonics.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["scipy_version"] = str(scipy.__version__)
        f["bessel_zeros"] = np.stack([scipy.special.jn_zeros(m, 8) for m in range(6)]).astype(np.float64)
        for (name, transpose, in_shape, grid_in, out_shape, grid_out, kshape, basis, norm, cin, cout, groups, bias,
             cutoff) in CASES:
            cls = DiscreteContinuousConvTransposeS2 if transpose else DiscreteContinuousConvS2
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                conv = cls(cin, cout, in_shape=in_shape, out_shape=out_shape, kernel_shape=kshape, basis_type=basis,
                           basis_norm_mode=norm, groups=groups, grid_in=grid_in, grid_out=grid_out, bias=bias,
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
            g.attrs.update(dict(transpose=int(transpose), in_channels=cin, out_channels=cout, nlat_in=in_shape[0],
                                nlon_in=in_shape[1], grid_in=grid_in, nlat_out=out_shape[0], nlon_out=out_shape[1],
                                grid_out=grid_out, basis_type=basis, basis_norm_mode=norm, groups=groups,
                                bias=int(bias), theta_cutoff=float(conv.theta_cutoff),
                                default_cutoff=int(cutoff is None), kernel_size=int(conv.kernel_size),
                                optimized_kernel=int(conv.optimized_kernel), batch=BATCH))
            g["kernel_shape"] = np.array(kshape, dtype=np.int64)
            packed = dict(compression="gzip", compression_opts=9, shuffle=True)  # keeps the file small
            g.create_dataset("psi_ker_idx", data=conv.psi_ker_idx.numpy(), **packed)
            g.create_dataset("psi_row_idx", data=conv.psi_row_idx.numpy(), **packed)
            g.create_dataset("psi_col_idx", data=conv.psi_col_idx.numpy(), **packed)
            g.create_dataset("psi_vals", data=conv.psi_vals.double().numpy(), **packed)
            g["weight"] = conv.weight.detach().float().numpy()
            if bias:
                g["bias"] = conv.bias.detach().float().numpy()
            g["input"] = x.numpy()
            g["output"] = y.numpy()
            g["output_f64"] = y64.numpy()
            ker = conv.psi_ker_idx.numpy()
            print(f"{name}: K={conv.kernel_size} nnz={conv.psi_vals.numel()} cutoff={conv.theta_cutoff:.6f} "
                  f"ker sorted={bool(np.all(np.diff(ker) >= 0))} "
                  f"|out-out64|max={float((y.double() - y64).abs().max()):.3e} max|out|={float(y.abs().max()):.3g}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/sphere/disco_transpose.h5")
