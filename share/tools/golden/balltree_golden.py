#!/usr/bin/env python3
"""Golden data for the ball tree (tests/data/balltree/balltree.h5) from the OFFICIAL balltree-erwin.

Runs the official package (pip install balltree-erwin, in a virtual environment outside the repository;
it needs torch, numpy and h5py) on small inputs and stores its outputs. Usage:

    python balltree_golden.py tests/data/balltree/balltree.h5

Layout of the file (every group holds its inputs and the official outputs):
  /build/<case>      points (N x d, float32 or float64 as given to the official code), sample_sizes
                     (the batch_idx given to the official code is 0,0,..,1,1,.. with these counts),
                     tree_idx, tree_mask (uint8)                    <- balltree.build_balltree
  /partition/<case>  points, sample_sizes, attribute target_level, perm
                                                                    <- balltree.partition_balltree
  /rotations/<case>  points (float32), sample_sizes, strides, ball_sizes, attribute angle;
                     rot_0 .. rot_{L-1} (absent when angle <= 0; the main tree is the one of /build)
                                                                    <- balltree.build_balltree_with_rotations
  /rotation_matrix/<case>  attributes angle, dim; matrix (dim x dim float32) <- generate_rotation_matrix
  /matmul/<case>     x (N x d float32), attribute angle, y = x @ R (float32, torch CPU)
  /mean_pool/<case>  x (N x d float32), attribute stride, y = x.view(-1, stride, d).mean(1) (torch CPU)
Index arrays are stored as int32 (read back as int64). Root attributes: package versions, the command, and the refusal of a 1-point sample by the official code.
"""
import math
import platform
import sys

import h5py
import numpy as np
import torch

import balltree
from balltree import (build_balltree, build_balltree_with_rotations, generate_rotation_matrix,
                      partition_balltree)

torch.set_num_threads(1)


def batch_of(sizes):
    return np.concatenate([np.full(n, b, dtype=np.int64) for b, n in enumerate(sizes)])


def uniform(rng, n, d, dtype=np.float32):
    return rng.random((n, d)).astype(dtype)


def quantized(rng, n, d, bits=12):
    """Uniform points on a grid of spacing 2^-bits (smaller files; some equal coordinates, i.e. ties)."""
    return (np.floor(rng.random((n, d)) * 2.0**bits) / 2.0**bits).astype(np.float32)


def with_duplicates(rng, n, d, distinct):
    base = rng.random((distinct, d)).astype(np.float32)
    return base[rng.integers(0, distinct, size=n)]


def grid(k, d):
    axes = np.meshgrid(*[np.arange(k, dtype=np.float32)] * d, indexing="ij")
    return np.stack([a.ravel() for a in axes], axis=1)


def put(group, name, array, compress=False):
    array = np.ascontiguousarray(array)
    if array.dtype == np.int64:  # indices are small: int32 on disk (read back as int64)
        assert np.abs(array).max(initial=0) < 2**31
        array = array.astype(np.int32)
    kw = {"compression": "gzip", "compression_opts": 9, "shuffle": True} if compress and array.size > 2048 else {}
    group.create_dataset(name, data=array, **kw)


def build_case(root, name, points, sizes):
    bidx = batch_of(sizes)
    idx, mask = build_balltree(torch.from_numpy(points), torch.from_numpy(bidx))
    g = root.create_group(name)
    put(g, "points", points, compress=True)
    put(g, "sample_sizes", np.asarray(sizes, dtype=np.int64))
    put(g, "tree_idx", idx.numpy().astype(np.int64), compress=True)
    put(g, "tree_mask", mask.numpy().astype(np.uint8), compress=True)


def partition_case(root, name, points, sizes, target_level):
    bidx = batch_of(sizes)
    perm = partition_balltree(torch.from_numpy(points), torch.from_numpy(bidx), target_level)
    g = root.create_group(name)
    g.attrs["target_level"] = target_level
    put(g, "points", points, compress=True)
    put(g, "sample_sizes", np.asarray(sizes, dtype=np.int64))
    put(g, "perm", perm.numpy().astype(np.int64), compress=True)


def rotations_case(root, name, points, sizes, strides, ball_sizes, angle):
    bidx = batch_of(sizes)
    _, _, rot = build_balltree_with_rotations(torch.from_numpy(points), torch.from_numpy(bidx),
                                                   list(strides), list(ball_sizes), angle)
    g = root.create_group(name)
    g.attrs["angle"] = float(angle)
    put(g, "points", points, compress=True)
    put(g, "sample_sizes", np.asarray(sizes, dtype=np.int64))
    put(g, "strides", np.asarray(strides, dtype=np.int64))
    put(g, "ball_sizes", np.asarray(ball_sizes, dtype=np.int64))
    for i, r in enumerate(rot):
        if r is not None:
            put(g, f"rot_{i}", r.numpy().astype(np.int64), compress=True)


def main(out):
    rng = np.random.default_rng(20261121)
    with h5py.File(out, "w", libver=("v108", "v110")) as f:  # readable by HDF5 1.10 (Debian 12)
        f.attrs["balltree_erwin_version"] = balltree.__version__
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["numpy_version"] = np.__version__
        f.attrs["python"] = platform.python_version()
        f.attrs["command"] = "python share/tools/golden/balltree_golden.py " + " ".join(sys.argv[1:])
        try:
            build_balltree(torch.rand(1, 3), torch.zeros(1, dtype=torch.long))
            f.attrs["official_one_point_sample"] = "accepted"
        except Exception as e:  # the official code fails on a 1-point sample (1 << -1)
            f.attrs["official_one_point_sample"] = f"{type(e).__name__}: {e}"

        b = f.create_group("build")
        # Worked examples of reference-models.md §1.2.2 (points on a line: a < b < c ...).
        build_case(b, "worked_n3", np.array([[0, 0], [1, 0], [2, 0]], np.float32), [3])
        build_case(b, "worked_n5", np.array([[4, 0], [0, 0], [3, 0], [1, 0], [2, 0]], np.float32), [5])
        build_case(b, "shapenet_n3586_grid12", quantized(rng, 3586, 3), [3586])
        for n in (2, 3, 7, 100):
            for d in (2, 3):
                build_case(b, f"random_n{n}_d{d}", uniform(rng, n, d), [n])
        for d in (2, 3):
            build_case(b, f"random_n1000_d{d}_grid16", quantized(rng, 1000, d, 16), [1000])
        for n in (255, 256, 257):
            build_case(b, f"random_n{n}_d3", uniform(rng, n, 3), [n])
        build_case(b, "random_n200_d3_float64", uniform(rng, 200, 3, np.float64), [200])
        build_case(b, "random_n37_d1", uniform(rng, 37, 1), [37])
        build_case(b, "random_n50_d4", uniform(rng, 50, 4), [50])
        build_case(b, "duplicates_n100_d3", with_duplicates(rng, 100, 3, 10), [100])
        build_case(b, "duplicates_n300_d2", with_duplicates(rng, 300, 2, 7), [300])
        build_case(b, "identical_n50_d3", np.tile(np.array([[0.25, -1.5, 3.0]], np.float32), (50, 1)), [50])
        build_case(b, "grid_8x8_d2", grid(8, 2), [64])
        build_case(b, "grid_5x5x5_d3", grid(5, 3), [125])
        build_case(b, "batch_3_7_100_2_d3", uniform(rng, 112, 3), [3, 7, 100, 2])
        build_case(b, "batch_256_256_d2", uniform(rng, 512, 2), [256, 256])
        build_case(b, "batch_duplicates_d3", with_duplicates(rng, 190, 3, 12), [90, 100])

        p = f.create_group("partition")
        x64 = uniform(rng, 64, 3)
        for t in (0, 1, 3, 6, 10):
            partition_case(p, f"random_n64_d3_t{t}", x64, [64], t)
        partition_case(p, "random_n37_d2_t3", uniform(rng, 37, 2), [37], 3)
        partition_case(p, "batch_16_32_d3_t2", uniform(rng, 48, 3), [16, 32], 2)
        partition_case(p, "duplicates_n128_d3_t5", with_duplicates(rng, 128, 3, 9), [128], 5)
        partition_case(p, "float64_n64_d2_t4", uniform(rng, 64, 2, np.float64), [64], 4)

        r = f.create_group("rotations")
        rotations_case(r, "n600_d3_b16x3_s2x2_a45", quantized(rng, 600, 3, 16), [600], [2, 2], [16, 16, 16], 45.0)
        rotations_case(r, "n300_d2_b8x2_s4_a30", uniform(rng, 300, 2), [300], [4], [8, 8], 30.0)
        rotations_case(r, "batch_100_60_300_d3_b8x2_s2_a45", uniform(rng, 460, 3), [100, 60, 300], [2], [8, 8], 45.0)
        rotations_case(r, "n500_d3_b64x2_s8_a60", uniform(rng, 500, 3), [500], [8], [64, 64], 60.0)
        rotations_case(r, "n1000_d2_b4x2_s64_a90", quantized(rng, 1000, 2, 12), [1000], [64], [4, 4], 90.0)
        rotations_case(r, "n200_d3_b8x3_s1x2_a45", uniform(rng, 200, 3), [200], [1, 2], [8, 8, 8], 45.0)
        rotations_case(r, "duplicates_n256_d3_b16x2_s2_a45", with_duplicates(rng, 256, 3, 20), [256], [2], [16, 16], 45.0)
        rotations_case(r, "ball_larger_than_tree_n7_d3_a45", uniform(rng, 7, 3), [7], [], [64], 45.0)
        rotations_case(r, "angle0_n100_d3", uniform(rng, 100, 3), [100], [2], [8, 8], 0.0)

        m = f.create_group("rotation_matrix")
        for d in (2, 3):
            for angle in (30.0, 45.0, 60.0, 90.0, 17.5):
                g = m.create_group(f"d{d}_a{angle}")
                g.attrs["angle"] = angle
                g.attrs["dim"] = d
                put(g, "matrix", generate_rotation_matrix(angle, d, "cpu").numpy())

        mm = f.create_group("matmul")
        for d in (2, 3):
            x = (rng.random((256, d)) * 4 - 2).astype(np.float32)
            y = torch.matmul(torch.from_numpy(x), generate_rotation_matrix(45.0, d, "cpu")).numpy()
            g = mm.create_group(f"d{d}_a45")
            g.attrs["angle"] = 45.0
            put(g, "x", x, compress=True)
            put(g, "y", y, compress=True)

        mp = f.create_group("mean_pool")
        for d in (2, 3):
            for s in (1, 2, 3, 4, 5, 8, 16, 64, 100) if d == 3 else (1, 2, 3, 4, 5, 8):
                x = (rng.random((4 * s if s > 8 else 16 * s, d)) * 4 - 2).astype(np.float32)
                y = torch.from_numpy(x).view(-1, s, d).mean(axis=1).numpy()
                g = mp.create_group(f"d{d}_s{s}")
                g.attrs["stride"] = s
                put(g, "x", x, compress=True)
                put(g, "y", y, compress=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
