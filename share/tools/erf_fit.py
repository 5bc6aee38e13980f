#!/usr/bin/env python3
"""Fits the two polynomials of the CPU kernels' float32 erf (kernels/src/cpu/simd.hpp, simd::erf) and prints
their float32 coefficients (highest degree first, as the Horner code lists them).

    /usr/bin/python3 share/tools/erf_fit.py        # Debian python3-numpy and python3-mpmath

|x| < 1:  erf(x) = x (2/sqrt(pi) + t Q(t)), t = x^2, Q of degree 5, weighted for relative error.
1 <= a <= 4:  log(erfc(a)) + a^2 = R(a - 2.5), R of degree 10, absolute error.
Least squares on Chebyshev nodes, then Lawson reweighting towards the minimax error. The references
are evaluated with mpmath at 40 digits. The achieved float32 accuracy is measured by the kernel test
(tests/unit/test_kernels.cpp, ErfIsAccurateOverTheWholeFloatRange), not here.
"""
import numpy as np
from mpmath import mp

mp.dps = 40
TWO_OVER_SQRT_PI = 2 / mp.sqrt(mp.pi)


def chebyshev_nodes(lo, hi, n):
    k = np.arange(n)
    return 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos(np.pi * (k + 0.5) / n)


def lawson_fit(variable, target, weight, degree, iterations=30):
    """Weighted least squares, reweighted by the error so the fit approaches equioscillation."""
    basis = np.vander(variable, degree + 1, increasing=True)
    w = weight.copy()
    for _ in range(iterations):
        coef, *_ = np.linalg.lstsq(basis * w[:, None], target * w, rcond=None)
        err = np.abs(basis @ coef - target) * weight
        w = w * np.sqrt(err / err.max() + 1e-3)
    coef, *_ = np.linalg.lstsq(basis * w[:, None], target * w, rcond=None)
    return coef, np.max(np.abs(basis @ coef - target) * weight)


def main():
    x = chebyshev_nodes(1e-4, 1.0, 600)
    ratio = np.array([float(mp.erf(mp.mpf(v)) / mp.mpf(v)) for v in x])
    tail = np.array([float((mp.erf(mp.mpf(v)) / mp.mpf(v) - TWO_OVER_SQRT_PI) / mp.mpf(v) ** 2) for v in x])
    # relative error of erf(x)/x: the error of t Q(t) divided by erf(x)/x
    q, q_err = lawson_fit(x * x, tail, x * x / ratio, 5)
    a = chebyshev_nodes(1.0, 4.0, 800)
    log_erfc = np.array([float(mp.log(mp.erfc(mp.mpf(v))) + mp.mpf(v) ** 2) for v in a])
    r, r_err = lawson_fit(a - 2.5, log_erfc, np.ones_like(a), 10)
    c0 = np.float32(float(TWO_OVER_SQRT_PI))
    print(f"2/sqrt(pi) = {np.format_float_scientific(c0, precision=8)}f "
          f"+ {np.format_float_scientific(np.float32(float(TWO_OVER_SQRT_PI) - np.float64(c0)), precision=8)}f")
    print(f"Q (relative error {q_err:.2g}):", ", ".join(
        np.format_float_scientific(np.float32(c), precision=8) + "f" for c in q[::-1]))
    print(f"R (absolute error {r_err:.2g}):", ", ".join(
        np.format_float_scientific(np.float32(c), precision=8) + "f" for c in r[::-1]))


if __name__ == "__main__":
    main()
