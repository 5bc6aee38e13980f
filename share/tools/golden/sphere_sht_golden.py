#!/usr/bin/env python3
"""Golden data of the real spherical harmonic transforms (torch_harmonics.RealSHT / InverseRealSHT, 0.9.3).

One group per case in <out>/sht.h5 with the grids and the transform sizes as attributes and
    input            (B, C, nlat_in, nlon_in) float32, random
    forward_weights  RealSHT's buffer `weights` (mmax, lmax, nlat_in), float64 (Legendre table * 2 pi w)
    inverse_pct      InverseRealSHT's buffer `pct` (mmax, nlat_out, lmax), float64 (Legendre table)
    coeffs_re/_im    RealSHT(input), float32 module (as SphericalTransformer builds it: .float())
    coeffs64_re/_im  the same module in float64 on the same input
    output           InverseRealSHT(RealSHT(input)) on the output grid, float32 modules
    output_f64       the same in float64
    given_re/_im     random coefficients (B, C, lmax, mmax) float32, zero where l < m
    synthesis        InverseRealSHT(given) float32, synthesis_f64 the same in float64

Run with the virtual environment that has torch-harmonics:
    VENV/bin/python share/tools/golden/sphere_sht_golden.py tests/data/sphere
Only the package's public classes are called (and their buffers read); nothing of it is copied here.
"""
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import torch
import torch_harmonics
from torch_harmonics import InverseRealSHT, RealSHT

# name: (nlat_in, nlon_in, grid_in, nlat_out, nlon_out, grid_out)
CASES = {
    "lg_9x16_same": (9, 16, "legendre-gauss", 9, 16, "legendre-gauss"),
    "eq_17x32_same": (17, 32, "equiangular", 17, 32, "equiangular"),
    "lobatto_10x20_same": (10, 20, "lobatto", 10, 20, "lobatto"),
    "trapezoidal_11x16_same": (11, 16, "equiangular-trapezoidal", 11, 16, "equiangular-trapezoidal"),
    "lg_6x8_nyquist": (6, 8, "legendre-gauss", 6, 8, "legendre-gauss"),
    "eq_9x15_odd_nlon": (9, 15, "equiangular", 9, 15, "equiangular"),
    "decoder_lg_9x16_to_eq_17x32": (9, 16, "legendre-gauss", 17, 32, "equiangular"),
    "decoder_eq_8x12_to_lg_16x24": (8, 12, "equiangular", 16, 24, "legendre-gauss"),
    "decoder_lobatto_7x10_to_trapezoidal_19x30": (7, 10, "lobatto", 19, 30, "equiangular-trapezoidal"),
}
BATCH, CHANNELS = 2, 3


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/sphere") / "sht.h5"
    torch.set_num_threads(1)
    with h5py.File(out, "w") as f, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f.attrs["torch_harmonics_version"] = str(torch_harmonics.__version__)
        f.attrs["torch_version"] = str(torch.__version__)
        for i, (name, (hi, wi, gi, ho, wo, go)) in enumerate(CASES.items()):
            gen = torch.Generator().manual_seed(7000 + i)
            sht64 = RealSHT(hi, wi, grid=gi)
            isht64 = InverseRealSHT(ho, wo, lmax=sht64.lmax, mmax=sht64.mmax, grid=go)
            sht32 = RealSHT(hi, wi, grid=gi).float()
            isht32 = InverseRealSHT(ho, wo, lmax=sht64.lmax, mmax=sht64.mmax, grid=go).float()
            L, M = sht64.lmax, sht64.mmax
            x = torch.randn(BATCH, CHANNELS, hi, wi, generator=gen)
            given = torch.complex(torch.randn(BATCH, CHANNELS, L, M, generator=gen),
                                  torch.randn(BATCH, CHANNELS, L, M, generator=gen))
            given = given * (torch.arange(L)[:, None] >= torch.arange(M)[None, :])
            with torch.no_grad():
                c32 = sht32(x)
                c64 = sht64(x.double())
                y32 = isht32(c32)
                y64 = isht64(c64)
                s32 = isht32(given)
                s64 = isht64(given.to(torch.complex128))
            g = f.create_group(name)
            for k, v in dict(nlat_in=hi, nlon_in=wi, grid_in=gi, nlat_out=ho, nlon_out=wo, grid_out=go,
                             lmax=L, mmax=M).items():
                g.attrs[k] = v
            g["input"] = x.numpy()
            g["forward_weights"] = sht64.weights.numpy()
            g["inverse_pct"] = isht64.pct.numpy()
            g["coeffs_re"], g["coeffs_im"] = c32.real.numpy(), c32.imag.numpy()
            g["coeffs64_re"], g["coeffs64_im"] = c64.real.numpy(), c64.imag.numpy()
            g["output"], g["output_f64"] = y32.numpy(), y64.numpy()
            g["given_re"], g["given_im"] = given.real.numpy().astype(np.float32), given.imag.numpy().astype(np.float32)
            g["synthesis"], g["synthesis_f64"] = s32.numpy(), s64.numpy()
            print(f"{name}: lmax = mmax = {L}, |coeffs f32 - f64| {float((c32.to(torch.complex128) - c64).abs().max()):.3g}, "
                  f"|out f32 - f64| {float((y32.double() - y64).abs().max()):.3g}, "
                  f"|synthesis f32 - f64| {float((s32.double() - s64).abs().max()):.3g}")
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
