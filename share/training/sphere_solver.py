#!/usr/bin/env python3
"""NumPy port of the solver of examples/sphere_fortran: a tracer q advected by a solid-body rotation about a
tilted axis (Williamson et al. 1992, test case 1) with a little diffusion, on the equiangular
latitude-longitude grid of torch-harmonics (both poles included), finite volumes.

The scheme (the same operations as sphere_fortran.f90; see examples/sphere_fortran/README.md):

* rows i = 0 .. nlat-1 at colatitude theta_i = i dtheta, dtheta = pi/(nlat-1) (row 0 = north pole);
  columns j = 0 .. nlon-1 at longitude lambda_j = j dlambda, dlambda = 2 pi/nlon;
* cells: row i spans colatitudes theta_i -+ dtheta/2 and longitudes lambda_j -+ dlambda/2; the two pole
  rows are one polar cap each (colatitude < dtheta/2), whose value every point of the pole row carries;
* velocity v = Omega x r with Omega = u0 (-sin alpha, 0, cos alpha): the volume flux through a face from
  corner a to corner b (to the right of a -> b) is psi(b) - psi(a), psi = Omega . r, so the discrete
  divergence is exactly zero;
* fluxes: first-order upwind advection plus diffusion kappa * (face length / centre distance) * jump;
* time: `substeps` steps of Heun's method (SSP-RK2) per solver step of length `dt`.

Run as a script, it prints the digest that examples/sphere_fortran prints for its solver (the Williamson
cosine bell advanced a number of steps), so the two implementations can be compared:

  /usr/bin/python3 share/training/sphere_solver.py --steps 5
"""

import argparse
import math

import numpy as np

NLAT, NLON = 33, 64
ALPHA = 0.5 * math.pi - 0.05  # Williamson's "nearly over the poles" angle
U0 = 1.0                      # angular speed (unit sphere): one revolution in 2 pi
KAPPA = 1.0e-3                # diffusivity
DT = 0.05                     # solver step = the surrogate's step
SUBSTEPS = 10                 # Heun substeps per solver step
BELL_RADIUS = 1.0 / 3.0       # Williamson's cosine bell: radius, centre (longitude 3 pi/2, latitude 0)
BELL_LON, BELL_LAT = 1.5 * math.pi, 0.0


class Solver:
    """The scheme on the whole grid (rows 0 .. nlat-1); q is an (nlat, nlon) float64 array."""

    def __init__(self, nlat=NLAT, nlon=NLON, alpha=ALPHA, u0=U0, kappa=KAPPA, dt=DT, substeps=SUBSTEPS):
        self.nlat, self.nlon, self.dt, self.substeps = nlat, nlon, dt, substeps
        dth, dla = math.pi / (nlat - 1), 2 * math.pi / nlon
        theta = np.arange(nlat) * dth
        theta_face = (np.arange(nlat - 1) + 0.5) * dth             # face i between rows i and i+1
        lam_east = (np.arange(nlon) + 0.5) * dla                   # east edge of column j
        lam_west = (np.arange(nlon) - 0.5) * dla
        sa, ca = math.sin(alpha), math.cos(alpha)

        def psi(th, la):
            return u0 * (-sa * np.sin(th) * np.cos(la) + ca * np.cos(th))

        # Southward volume flux through the face below row i, column j: (nlat-1, nlon).
        self.g = psi(theta_face[:, None], lam_east[None, :]) - psi(theta_face[:, None], lam_west[None, :])
        # Eastward flux through the east face of cell (i, j), rows 1 .. nlat-2: (nlat-2, nlon).
        th_n, th_s = theta_face[:-1], theta_face[1:]
        self.f = psi(th_n[:, None], lam_east[None, :]) - psi(th_s[:, None], lam_east[None, :])
        # Diffusion coefficients: kappa * face length / distance of the centres.
        self.d_merid = kappa * np.sin(theta_face) * dla / dth      # (nlat-1)
        self.d_zonal = kappa * dth / (np.sin(theta[1:-1]) * dla)  # (nlat-2)
        area = dla * (np.cos(theta_face[:-1]) - np.cos(theta_face[1:]))
        cap = 2 * math.pi * (1 - math.cos(0.5 * dth))
        self.area = np.concatenate([[cap], area, [cap]])
        self.theta = theta
        self.lam = np.arange(nlon) * dla

    def tendency(self, q):
        g, f = self.g, self.f
        # Southward total flux through the faces below rows 0 .. nlat-2.
        fs = np.maximum(g, 0) * q[:-1] + np.minimum(g, 0) * q[1:] - self.d_merid[:, None] * (q[1:] - q[:-1])
        qi = q[1:-1]
        qe = np.roll(qi, -1, axis=1)
        fe = np.maximum(f, 0) * qi + np.minimum(f, 0) * qe - self.d_zonal[:, None] * (qe - qi)
        dq = np.empty_like(q)
        dq[1:-1] = (fs[:-1] - fs[1:] + np.roll(fe, 1, axis=1) - fe) / self.area[1:-1, None]
        dq[0] = -fs[0].sum() / self.area[0]
        dq[-1] = fs[-1].sum() / self.area[-1]
        return dq

    def step(self, q):
        """One solver step (dt): `substeps` Heun steps."""
        h = self.dt / self.substeps
        for _ in range(self.substeps):
            q1 = q + h * self.tendency(q)
            q = 0.5 * q + 0.5 * (q1 + h * self.tendency(q1))
        return q

    def max_courant(self):
        """max over cells of h * (outgoing advective flux + diffusion coefficients) / area: the forward-Euler
        stage is positive (and the scheme monotone) when this is <= 1."""
        h = self.dt / self.substeps
        out = np.zeros((self.nlat, self.nlon))
        g, f = self.g, self.f
        out[:-1] += np.maximum(g, 0) + self.d_merid[:, None]
        out[1:] += np.maximum(-g, 0) + self.d_merid[:, None]
        out[1:-1] += np.maximum(f, 0) + np.maximum(-np.roll(f, 1, axis=1), 0) + 2 * self.d_zonal[:, None]
        out[0] = out[0].sum()
        out[-1] = out[-1].sum()
        return float((h * out / self.area[:, None]).max())

    def unit_vectors(self):
        st, ct = np.sin(self.theta)[:, None], np.cos(self.theta)[:, None]
        return st * np.cos(self.lam)[None, :], st * np.sin(self.lam)[None, :], np.broadcast_to(ct, (self.nlat, self.nlon))


def cosine_bell(solver, lon_c=BELL_LON, lat_c=BELL_LAT, radius=BELL_RADIUS, height=1.0):
    """Williamson's cosine bell h/2 (1 + cos(pi r / R)) for great-circle distance r < R, else 0."""
    x, y, z = solver.unit_vectors()
    cx, cy, cz = math.cos(lat_c) * math.cos(lon_c), math.cos(lat_c) * math.sin(lon_c), math.sin(lat_c)
    r = np.arccos(np.clip(x * cx + y * cy + z * cz, -1.0, 1.0))
    return np.where(r < radius, 0.5 * height * (1 + np.cos(math.pi * r / radius)), 0.0)


def digest(q, solver):
    """(sum of q, sum of q^2) over the grid points, and the cell-area integral of q (the mass)."""
    mass = float((q[1:-1] * solver.area[1:-1, None]).sum() + q[0, 0] * solver.area[0] + q[-1, 0] * solver.area[-1])
    return float(q.sum()), float((q * q).sum()), mass


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=5, help="solver steps from the cosine bell")
    p.add_argument("--compare", nargs="+", metavar="VALUE",
                   help="the Fortran run's digest (sum of q, sum of q^2, then anything): exit status 1 unless both "
                        "agree with this run's to 1e-12 relative")
    args = p.parse_args()
    s = Solver()
    q = cosine_bell(s)
    mass0 = digest(q, s)[2]
    for _ in range(args.steps):
        q = s.step(q)
    total, squares, mass = digest(q, s)
    print(f"max Courant number (forward-Euler stage) {s.max_courant():.4f}")
    print(f"initial mass {mass0:.16e}")
    print(f"solver digest (sum of q, sum of q^2 at step {args.steps}): {total:.16e} {squares:.16e}")
    print(f"mass {mass:.16e}")
    if args.compare:
        fortran = [float(v) for v in args.compare[:2]]
        ours = [total, squares]
        worst = max(abs(a - b) / abs(b) for a, b in zip(fortran, ours))
        print(f"Fortran digest {fortran[0]:.16e} {fortran[1]:.16e}: largest relative difference {worst:.2e} "
              f"({'within' if worst <= 1e-12 else 'NOT within'} 1e-12)")
        return 0 if worst <= 1e-12 else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
