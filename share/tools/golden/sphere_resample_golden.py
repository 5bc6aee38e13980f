#!/usr/bin/env python3
"""Golden data for ResampleS2 (tests/sphere/test_resample.cpp), from the official torch-harmonics package.

Writes tests/data/sphere/resample.h5: one group per torch_harmonics.ResampleS2 construction with the
constructor arguments as attributes (nlat_in, nlon_in, grid_in, nlat_out, nlon_out, grid_out, mode), the
module's non-persistent tables (lat_idx, lat_weights, lon_idx_left, lon_idx_right, lon_weights; int64 /
float32), expand_poles and skip_resampling (0/1), an input (batch, channels, nlat_in, nlon_in) float32 and
the module's float32 output (batch, channels, nlat_out, nlon_out).

Needs torch-harmonics (pip, in a virtual environment outside the repository), torch, numpy and h5py:
    VENV/bin/python share/tools/golden/sphere_resample_golden.py tests/data/sphere
Only the package's public module is called; nothing of it is copied here.
"""
import math
import sys
from pathlib import Path

import h5py
import numpy as np
import torch
import torch_harmonics
from torch_harmonics import ResampleS2

# name: (nlat_in, nlon_in, grid_in, nlat_out, nlon_out, grid_out, mode, batch, channels)
CASES = {
    # the SphericalTransformer decoder: internal Legendre-Gauss grid -> equiangular image with both poles
    "lg_to_eq_poles": (9, 16, "legendre-gauss", 17, 32, "equiangular", "bilinear", 2, 3),
    # equiangular -> equiangular, downsampling (no pole expansion: both grids hold the poles)
    "eq_to_eq_down": (17, 32, "equiangular", 9, 16, "equiangular", "bilinear", 1, 4),
    # equiangular -> equiangular, upsampling with a non-integer longitude ratio (12 -> 20)
    "eq_to_eq_up_ratio": (7, 12, "equiangular", 13, 20, "equiangular", "bilinear", 2, 2),
    # Lobatto -> Legendre-Gauss, longitude ratio 3 upwards
    "lobatto_to_lg_lon3": (10, 12, "lobatto", 7, 36, "legendre-gauss", "bilinear", 1, 5),
    # trapezoidal -> Legendre-Gauss, longitudes 16 -> 10 (non-integer, downwards)
    "trapezoidal_to_lg_lon_down": (11, 16, "equiangular-trapezoidal", 8, 10, "legendre-gauss", "bilinear", 1, 3),
    # Legendre-Gauss -> Lobatto (pole expansion) with a single input longitude (the full-period span)
    "lg_to_lobatto_one_lon": (6, 1, "legendre-gauss", 9, 4, "lobatto", "bilinear", 1, 2),
    # identical grids: the module skips the resampling
    "identity_lg": (8, 16, "legendre-gauss", 8, 16, "legendre-gauss", "bilinear", 2, 3),
    # same sizes, different grid types: not the identity
    "eq_to_lg_same_size": (8, 16, "equiangular", 8, 16, "legendre-gauss", "bilinear", 1, 3),
    # angle-valued fields: shortest-arc interpolation, circular means at the poles
    "spherical_lg_to_eq": (6, 12, "legendre-gauss", 11, 20, "equiangular", "bilinear-spherical", 2, 3),
}


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/sphere")
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20250517)
    with h5py.File(out / "resample.h5", "w") as f:
        f.attrs["torch_harmonics_version"] = str(torch_harmonics.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        for name, (hi, wi, gi, ho, wo, go, mode, batch, chans) in CASES.items():
            m = ResampleS2(hi, wi, ho, wo, grid_in=gi, grid_out=go, mode=mode)
            if mode == "bilinear-spherical":  # angles in (-pi, pi], many neighbours across the branch cut
                x = (torch.rand(batch, chans, hi, wi, generator=gen) * 2.0 - 1.0) * math.pi
            else:
                x = torch.randn(batch, chans, hi, wi, generator=gen) + 0.5
            with torch.no_grad():
                y = m(x)
            g = f.create_group(name)
            for key, value in (("nlat_in", hi), ("nlon_in", wi), ("nlat_out", ho), ("nlon_out", wo)):
                g.attrs[key] = np.int64(value)
            g.attrs["grid_in"], g.attrs["grid_out"], g.attrs["mode"] = gi, go, mode
            g.attrs["expand_poles"] = np.int64(bool(m.expand_poles))
            g.attrs["skip_resampling"] = np.int64(bool(m.skip_resampling))
            g["lat_idx"] = m.lat_idx.numpy().astype(np.int64)
            g["lat_weights"] = m.lat_weights.reshape(-1).numpy().astype(np.float32)
            g["lon_idx_left"] = m.lon_idx_left.numpy().astype(np.int64)
            g["lon_idx_right"] = m.lon_idx_right.numpy().astype(np.int64)
            g["lon_weights"] = m.lon_weights.numpy().astype(np.float32)
            g["input"] = x.numpy().astype(np.float32)
            g["output"] = y.numpy().astype(np.float32)
            print(f"{name}: expand_poles {bool(m.expand_poles)}, skip {m.skip_resampling}, output {tuple(y.shape)}")


if __name__ == "__main__":
    main()
