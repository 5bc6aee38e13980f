"""Potential flow past a circular cylinder: the problem behind the README demo model.

A uniform stream of speed U (along +x) flows past a circular cylinder of radius R centred at (cx, cy).
The flow is steady, inviscid and irrotational, so it has the closed form (relative to the centre, polar
coordinates r, theta)

    u_r     =  U (1 - R^2 / r^2) cos(theta)
    u_theta = -U (1 + R^2 / r^2) sin(theta)

or, in Cartesian components with dx = x - cx, dy = y - cy, r^2 = dx^2 + dy^2 (the complex velocity
u - i v = U (1 - R^2 / z^2), z = dx + i dy):

    u  = U (1 - R^2 (dx^2 - dy^2) / r^4)
    v  = -2 U R^2 dx dy / r^4
    Cp = 1 - (u^2 + v^2) / U^2        (pressure coefficient, Bernoulli)

Each sample is a point cloud in the window [-2, 2] x [-1, 1] (metres) around the cylinder. The window
is a *view* of the unbounded flow, not a walled channel: no boundary condition is imposed on its edges
(a walled channel would change the solution). The geometry varies from sample to sample (R in
[0.15, 0.35] m, centre anywhere that keeps the cylinder at least MARGIN inside the window), U is fixed
at 1 m/s, so the only thing that tells the model where the cylinder is, is the point cloud itself: it
has a hole where the cylinder is and a denser band of points around it (like the FLARE elasticity
benchmark, where the geometry is implicit in the point cloud). Inputs: (x, y). Outputs: (u, v, Cp).

Everything here is NumPy (float64); ``make_dataset`` returns float32 arrays ready for training.
"""

import numpy as np

__all__ = [
    "X_RANGE",
    "Y_RANGE",
    "U_INF",
    "R_RANGE",
    "MARGIN",
    "BAND_FRACTION",
    "BAND_WIDTH",
    "INPUT_FIELDS",
    "OUTPUT_FIELDS",
    "sample_geometry",
    "sample_points",
    "velocity",
    "analytic_fields",
    "make_sample",
    "make_dataset",
    "check_closed_form",
]

X_RANGE = (-2.0, 2.0)  # window, m
Y_RANGE = (-1.0, 1.0)
U_INF = 1.0  # free-stream speed, m/s (along +x)
R_RANGE = (0.15, 0.35)  # cylinder radius, m
MARGIN = 0.15  # minimum gap between the cylinder surface and the window edge, m
CX_LIMIT = 1.2  # |cx| <= CX_LIMIT: keep some flow upstream and downstream of the cylinder
BAND_FRACTION = 1.0 / 3.0  # share of the points in the band around the cylinder
BAND_WIDTH = 0.4  # the band is R <= r <= (1 + BAND_WIDTH) R (stays inside the window: 0.4 R <= MARGIN)

INPUT_FIELDS = [{"name": "x", "unit": "m"}, {"name": "y", "unit": "m"}]
OUTPUT_FIELDS = [{"name": "u", "unit": "m/s"}, {"name": "v", "unit": "m/s"}, {"name": "Cp", "unit": "1"}]


def sample_geometry(rng):
    """Random cylinder: returns (cx, cy, R) with the cylinder at least MARGIN inside the window."""
    R = rng.uniform(*R_RANGE)
    cx_max = min(CX_LIMIT, X_RANGE[1] - R - MARGIN)
    cy_max = Y_RANGE[1] - R - MARGIN
    cx = rng.uniform(-cx_max, cx_max)
    cy = rng.uniform(-cy_max, cy_max)
    return float(cx), float(cy), float(R)


def sample_points(rng, geometry, n):
    """``n`` points in the fluid (outside the cylinder, inside the window), in random order.

    round(n * BAND_FRACTION) points lie in the band R <= r <= (1 + BAND_WIDTH) R (uniform in angle and
    in radius, hence denser near the surface); the rest are uniform over the fluid part of the window.
    Any prefix of the returned array is a representative subsample (the order is shuffled).
    """
    cx, cy, R = geometry
    n_band = int(round(n * BAND_FRACTION))
    n_bulk = n - n_band
    theta = rng.uniform(0.0, 2.0 * np.pi, n_band)
    r = R * (1.0 + BAND_WIDTH * rng.uniform(0.0, 1.0, n_band))
    band = np.stack([cx + r * np.cos(theta), cy + r * np.sin(theta)], axis=1)
    bulk = np.empty((0, 2))
    while bulk.shape[0] < n_bulk:
        m = 2 * (n_bulk - bulk.shape[0]) + 16
        cand = np.stack([rng.uniform(*X_RANGE, m), rng.uniform(*Y_RANGE, m)], axis=1)
        keep = (cand[:, 0] - cx) ** 2 + (cand[:, 1] - cy) ** 2 > R * R
        bulk = np.concatenate([bulk, cand[keep]], axis=0)
    pts = np.concatenate([band, bulk[:n_bulk]], axis=0)
    return pts[rng.permutation(n)]


def velocity(points, geometry, U=U_INF):
    """Closed-form velocity (u, v) at ``points`` (n x 2), float64."""
    cx, cy, R = geometry
    dx = points[:, 0] - cx
    dy = points[:, 1] - cy
    r2 = dx * dx + dy * dy
    r4 = r2 * r2
    u = U * (1.0 - R * R * (dx * dx - dy * dy) / r4)
    v = -2.0 * U * R * R * dx * dy / r4
    return u, v


def analytic_fields(points, geometry, U=U_INF):
    """(u, v, Cp) at ``points`` as an (n x 3) float64 array."""
    u, v = velocity(points, geometry, U)
    cp = 1.0 - (u * u + v * v) / (U * U)
    return np.stack([u, v, cp], axis=1)


def make_sample(rng, n):
    """One sample: (points n x 2, fields n x 3, geometry (cx, cy, R)), float64."""
    geometry = sample_geometry(rng)
    pts = sample_points(rng, geometry, n)
    return pts, analytic_fields(pts, geometry), geometry


def make_dataset(seed, num_samples, n):
    """``num_samples`` samples of ``n`` points each from one seeded generator.

    Returns float32 arrays x (S, n, 2), y (S, n, 3) and the float64 geometry (S, 3) = (cx, cy, R).
    """
    rng = np.random.default_rng(seed)
    xs, ys, geo = [], [], []
    for _ in range(num_samples):
        pts, fields, g = make_sample(rng, n)
        xs.append(pts)
        ys.append(fields)
        geo.append(g)
    return (np.asarray(xs, dtype=np.float32), np.asarray(ys, dtype=np.float32), np.asarray(geo, dtype=np.float64))


def check_closed_form(seed=0, n=1000, tol=1e-12):
    """Self-check of the closed form: Cartesian vs polar formula, divergence and curl (finite
    differences), no flow through the surface, free stream far away, Cp = 1 at the stagnation points
    and -3 at the shoulders. Returns a dict of the worst errors; raises AssertionError on failure."""
    rng = np.random.default_rng(seed)
    geometry = sample_geometry(rng)
    cx, cy, R = geometry
    pts = sample_points(rng, geometry, n)
    u, v = velocity(pts, geometry)
    dx, dy = pts[:, 0] - cx, pts[:, 1] - cy
    r, th = np.hypot(dx, dy), np.arctan2(dy, dx)
    ur = U_INF * (1 - R * R / r ** 2) * np.cos(th)
    ut = -U_INF * (1 + R * R / r ** 2) * np.sin(th)
    up = ur * np.cos(th) - ut * np.sin(th)
    vp = ur * np.sin(th) + ut * np.cos(th)
    out = {"polar_vs_cartesian": float(max(np.abs(up - u).max(), np.abs(vp - v).max()))}
    h = 1e-5
    ex, ey = np.array([h, 0.0]), np.array([0.0, h])
    uxp, vxp = velocity(pts + ex, geometry)
    uxm, vxm = velocity(pts - ex, geometry)
    uyp, vyp = velocity(pts + ey, geometry)
    uym, vym = velocity(pts - ey, geometry)
    div = (uxp - uxm) / (2 * h) + (vyp - vym) / (2 * h)
    curl = (vxp - vxm) / (2 * h) - (uyp - uym) / (2 * h)
    out["divergence"] = float(np.abs(div).max())
    out["curl"] = float(np.abs(curl).max())
    phi = np.linspace(0, 2 * np.pi, 73)
    surf = np.stack([cx + R * np.cos(phi), cy + R * np.sin(phi)], axis=1)
    us, vs = velocity(surf, geometry)
    out["normal_velocity_on_surface"] = float(np.abs(us * np.cos(phi) + vs * np.sin(phi)).max())
    f = analytic_fields(np.array([[cx - R, cy], [cx + R, cy], [cx, cy + R], [cx, cy - R]]), geometry)
    out["cp_stagnation_shoulder"] = float(max(abs(f[0, 2] - 1), abs(f[1, 2] - 1), abs(f[2, 2] + 3), abs(f[3, 2] + 3)))
    far = analytic_fields(np.array([[cx + 1e4, cy + 1e4]]), geometry)
    out["far_field"] = float(np.abs(far[0] - [U_INF, 0.0, 0.0]).max())
    assert out["polar_vs_cartesian"] < tol, out
    assert out["normal_velocity_on_surface"] < tol, out
    assert out["cp_stagnation_shoulder"] < tol, out
    assert out["far_field"] < 1e-6, out
    assert out["divergence"] < 1e-4 and out["curl"] < 1e-4, out
    inside = (dx ** 2 + dy ** 2 > R * R) & (pts[:, 0] >= X_RANGE[0]) & (pts[:, 0] <= X_RANGE[1]) \
        & (pts[:, 1] >= Y_RANGE[0]) & (pts[:, 1] <= Y_RANGE[1])
    assert inside.all(), "points outside the fluid part of the window"
    return out


if __name__ == "__main__":
    print(check_closed_form())
