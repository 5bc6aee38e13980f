#!/usr/bin/env python3
"""Train the two small Sequoia models of examples/sequoia_shapes on a family of generated bodies.

The problem (closed form, also implemented in C++ by the example, examples/sequoia_shapes/shapes.hpp):

* body: the ellipsoid (x/a)² + (y/b)² + (z/c)² = 1 with one Gaussian bump, the zero set of
  F(x) = q(x) - 1 - h exp(-|x - x_b|² / W²), q(x) = (x/a)² + (y/b)² + (z/c)², bump centre
  x_b = ω_b / sqrt(q(ω_b)) on the ellipsoid, width W = BUMP_WIDTH;
* points: a Fibonacci spiral on the unit sphere (index i of N: ω_x = 1 - 2(i+½)/N, azimuth i · golden
  angle) projected radially onto the body: t ω with F(t ω) = 0 by bisection on [0, 2] (64 halvings);
  normal n = ∇F / |∇F|; the point's area weight w = (4π/N) t² / (n·ω) (the solid angle of a spiral point
  times the area per solid angle of a radial map), so Σ w f approximates the surface integral of f;
* stream: unit direction d = (cos α, 0, sin α) (angle of attack α in the x-z plane);
* field: with s = n·d (s < 0 on the windward side), cp = -5/4 + 9/4 s² windward (the sphere's potential
  flow 1 - 9/4 sin²θ) and cp = -5/4 + 0.85 s² leeward (a separated wake recovering to -0.4 at the rear);
  continuous with a continuous slope at s = 0;
* integrated quantity: the drag area D = -∮ cp (n·d) dA (the pressure force along the stream per unit
  dynamic pressure, m²), by the spiral quadrature with REFERENCE_POINTS points; a sphere of radius R
  gives D = 0.35 · 2πR² (C_D = 0.7), checked.

Models (the official classes of HySonLab/HierAttention, imported at run time from a checkout given with
--official: the repository has no licence, nothing of it is copied here), dim 8, 2 heads, depth 3,
divide 3, 2 blocks:

* TreeTransformerSeg: point features = the normal n (c = 3), per-sample vector = (cos α, sin α)
  (n_class = 2), one output channel (n_part = 1) trained by MSE against cp;
* TreeTransformerCls with selection "leaf" (the head reads the mean of the point features): point
  features = (n·d, w N / 4π) (c = 2: the windward cosine and the point's area per steradian); its head is
  40 wide (fixed in the official code): channel 0 is trained by MSE against D, the other 39 channels are
  not trained and carry no meaning.

Training: 192 shapes in batches of 8, the batches alternately of 256 and 512 points per shape (--points);
Adam with a one-cycle schedule; the network learns the standardised target and the affine map is folded
into channel 0 of its last Linear afterwards (fold()). Both models run in eval mode during training
(BatchNorm = a fixed affine map, weight and bias trained): training and inference compute the same
function. The running statistics are set once, before training, to those of each BatchNorm's input over
the training set (calibrate()): with the initial 0 / 1 the activations fade through the blocks and the
drag model learns nothing. The sibling kNN is replaced by the library's rule (exact squared distance,
ties by ascending index; share/docs/sequoia.md "Neighbour order"), so that the library computes the
trained function (the official float32 rule orders voxel-level ties differently). PyG's compiled
extensions are replaced as in share/tools/golden/sequoia_golden.py. One thread by default (more threads
were slower for these small tensors on the shared development machine).

Writes to --out-dir: seg_checkpoint.pt ({"model_state_dict": ...}, as the segmentation script saves),
cls_checkpoint.pt (a bare state_dict), seg_config.json / cls_config.json (the constructor arguments and
divide), then runs share/tools/surrogate-export --family sequoia to write seg.h5 and cls.h5, and prints the
errors on held-out shapes. share/models/sequoia/README.md has the published command and its figures.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "share", "tools", "golden"))

import sequoia_golden as official_io  # noqa: E402  (stand-ins and the loader of the official modules)

GOLDEN_ANGLE = math.pi * (3.0 - math.sqrt(5.0))
OFFICIAL_COMMIT = "ec41d291a7070d8ef0231287c68c611824793828"  # tests/data/sequoia/README.md (checkout without .git)
BUMP_WIDTH = 0.3
REFERENCE_POINTS = 1 << 13
DIVIDE, DEPTH = 3, 3
SEG_CONFIG = dict(c=3, dim=8, heads=2, depth=DEPTH, layers=2, n_class=2, n_part=1, divide=DIVIDE)
CLS_CONFIG = dict(c=2, dim=8, heads=2, depth=DEPTH, layers=2, selection="leaf", dim_cls=8, divide=DIVIDE)


# ---------------------------------------------------------------------------------------------------------
# The shape family and its closed form
# ---------------------------------------------------------------------------------------------------------

def random_shape(rng):
    """Semi-axes, bump height and direction, angle of attack (degrees): the family's ranges."""
    omega = rng.standard_normal(3)
    return dict(axes=(rng.uniform(0.45, 0.9), rng.uniform(0.25, 0.55), rng.uniform(0.2, 0.5)),
                bump=rng.uniform(0.0, 0.35), bump_dir=tuple(omega / np.linalg.norm(omega)),
                attack_deg=rng.uniform(-20.0, 20.0))


def stream(shape):
    a = math.radians(shape["attack_deg"])
    return np.array([math.cos(a), 0.0, math.sin(a)])


def spiral(n):
    i = np.arange(n, dtype=np.float64)
    u = 1.0 - 2.0 * (i + 0.5) / n
    r = np.sqrt(np.maximum(0.0, 1.0 - u * u))
    phi = i * GOLDEN_ANGLE
    return np.stack([u, r * np.cos(phi), r * np.sin(phi)], axis=1)


def surface(shape, n):
    """Positions, unit normals and area weights of the n spiral points on the body (float64)."""
    inv2 = 1.0 / np.square(np.array(shape["axes"]))
    wb = np.array(shape["bump_dir"])
    xb = wb / math.sqrt(float((wb * wb * inv2).sum()))
    h, w2 = shape["bump"], BUMP_WIDTH ** 2

    def field(x):
        return (x * x * inv2).sum(-1) - 1.0 - h * np.exp(-np.square(x - xb).sum(-1) / w2)

    om = spiral(n)
    lo, hi = np.zeros(n), np.full(n, 2.0)
    if np.any(field(hi[:, None] * om) <= 0):
        raise SystemExit("a body reaches radius 2")
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        inside = field(mid[:, None] * om) < 0
        lo = np.where(inside, mid, lo)
        hi = np.where(inside, hi, mid)
    t = 0.5 * (lo + hi)
    x = t[:, None] * om
    e = np.exp(-np.square(x - xb).sum(-1) / w2)
    g = 2.0 * x * inv2 + (2.0 * h / w2) * e[:, None] * (x - xb)
    normal = g / np.linalg.norm(g, axis=1, keepdims=True)
    cosine = (normal * om).sum(1)
    if cosine.min() <= 0.0:
        raise SystemExit("a body is not star-shaped from its centre")
    weight = (4.0 * math.pi / n) * t * t / cosine
    return x, normal, weight


def pressure(normal, d):
    s = normal @ d
    return np.where(s < 0.0, -1.25 + 2.25 * s * s, -1.25 + 0.85 * s * s)


def drag_area(shape, n=None):
    x, normal, weight = surface(shape, n or REFERENCE_POINTS)
    d = stream(shape)
    return float(-(weight * pressure(normal, d) * (normal @ d)).sum())


def check_closed_form():
    """The sphere: cp = 1 - 9/4 sin²θ windward, area 4πR², D = 0.35 · 2πR²; the quadrature converges."""
    for radius in (0.5, 0.8):
        sphere = dict(axes=(radius,) * 3, bump=0.0, bump_dir=(1.0, 0.0, 0.0), attack_deg=12.0)
        x, normal, weight = surface(sphere, 4096)
        d = stream(sphere)
        ok = np.abs(np.linalg.norm(x, axis=1) - radius).max() < 1e-12
        ok &= np.abs(normal - x / radius).max() < 1e-12
        s = normal @ d
        wind = s < 0
        ok &= np.abs(pressure(normal, d)[wind] - (1.0 - 2.25 * (1.0 - s[wind] ** 2))).max() < 1e-12
        ok &= abs(weight.sum() - 4.0 * math.pi * radius ** 2) < 1e-9
        ok &= abs(drag_area(sphere) / (0.35 * 2.0 * math.pi * radius ** 2) - 1.0) < 1e-4
        if not ok:
            raise SystemExit("the closed form fails its sphere checks")
    body = random_shape(np.random.default_rng(7))
    fine, coarse = drag_area(body, 1 << 17), drag_area(body, REFERENCE_POINTS)
    print(f"closed form checked (sphere); quadrature of D: {coarse:.7f} ({REFERENCE_POINTS} points), "
          f"{fine:.7f} ({1 << 17})")


# ---------------------------------------------------------------------------------------------------------
# Data: hierarchies (official builder), collated batches
# ---------------------------------------------------------------------------------------------------------

def example_shape(seed, index):
    """Shape `index` of the C++ example's `--seed` (examples/sequoia_shapes/shapes.hpp, make_shape:
    splitmix64 draws in the same order as random_shape's)."""
    mask = (1 << 64) - 1
    state = [(seed * 0x9E3779B97F4A7C15 + index * 0xD1B54A32D192ED03 + 1) & mask]

    def uniform(lo, hi):
        state[0] = (state[0] + 0x9E3779B97F4A7C15) & mask
        z = state[0]
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return lo + (hi - lo) * ((z ^ (z >> 31)) >> 11) * 2.0 ** -53

    axes = (uniform(0.45, 0.9), uniform(0.25, 0.55), uniform(0.2, 0.5))
    bump = uniform(0.0, 0.35)
    u, phi = uniform(-1.0, 1.0), uniform(0.0, 2.0 * math.pi)
    r = math.sqrt(1.0 - u * u)
    return dict(axes=axes, bump=bump, bump_dir=(u, r * math.cos(phi), r * math.sin(phi)),
                attack_deg=uniform(-20.0, 20.0))


def check_example(off, out_dir, seed, shapes, n):
    """The saved checkpoints (PyTorch, official classes) on the C++ example's bodies: the figures the
    example prints (D model, D from the predicted field, cp errors), to compare with its output."""
    samples = []
    for k in range(shapes):
        shape = example_shape(seed, k)
        x, normal, weight = surface(shape, n)
        d = stream(shape)
        samples.append(dict(shape=shape, positions=x.astype(np.float32), normals=normal, weights=weight,
                            cp=pressure(normal, d), drag=drag_area(shape), d=d))
    batch = collate(off, samples)
    seg, _ = build(off, "seg", 0, n)
    seg.load_state_dict(torch.load(os.path.join(out_dir, "seg_checkpoint.pt"))["model_state_dict"])
    cls, _ = build(off, "cls", 0, n)
    cls.load_state_dict(torch.load(os.path.join(out_dir, "cls_checkpoint.pt")))
    with torch.no_grad():
        cp = forward(seg, "seg", batch).double().numpy()
        drag = forward(cls, "cls", batch).double().numpy()
    for k, s in enumerate(samples):
        nd = s["normals"] @ s["d"]
        field = -(s["weights"] * cp[k * n:(k + 1) * n] * nd).sum()
        print(f"{k:4d}  D exact {s['drag']:.5f}  D model {drag[k]:.5f}  D from field {field:.5f}")
    err = cp - np.concatenate([s["cp"] for s in samples])
    print(f"cp error vs closed form: rms {np.sqrt(np.mean(err ** 2)):.5f} max {np.abs(err).max():.5f}")


def make_samples(rng, count, n):
    out = []
    for _ in range(count):
        shape = random_shape(rng)
        x, normal, weight = surface(shape, n)
        d = stream(shape)
        out.append(dict(shape=shape, positions=x.astype(np.float32), normals=normal, weights=weight,
                        cp=pressure(normal, d), drag=drag_area(shape), d=d))
    return out


def collate(off, samples):
    """The training scripts' collate_fn: node positions (float32), features on the point rows (0 on voxel
    rows), mappings with node ids shifted by the nodes of the samples before, cumulative offsets."""
    coords, seg_x, cls_x, maps, offset = [], [], [], [], []
    count = 0
    for s in samples:
        mapping, c = official_io.official_hierarchy(off, s["positions"], DIVIDE, DEPTH)
        c32 = c.astype(np.float32)
        n = len(s["positions"])
        fs = np.zeros((len(c32), 3), np.float32)
        fs[:n] = s["normals"]
        fc = np.zeros((len(c32), 2), np.float32)
        fc[:n, 0] = s["normals"] @ s["d"]
        fc[:n, 1] = s["weights"] * n / (4.0 * math.pi)
        m = mapping.copy()
        m[:, :2] += count
        coords.append(c32), seg_x.append(fs), cls_x.append(fc), maps.append(m)
        count += len(c32)
        offset.append(count)
    a = np.radians([s["shape"]["attack_deg"] for s in samples])
    return dict(p=torch.from_numpy(np.concatenate(coords)), seg_x=torch.from_numpy(np.concatenate(seg_x)),
                cls_x=torch.from_numpy(np.concatenate(cls_x)), m=np.concatenate(maps).astype(np.float32),
                o=torch.tensor(offset, dtype=torch.int32),
                vec=torch.from_numpy(np.stack([np.cos(a), np.sin(a)], 1).astype(np.float32))[:, None, :],
                cp=torch.from_numpy(np.concatenate([s["cp"] for s in samples]).astype(np.float32)),
                drag=torch.tensor([s["drag"] for s in samples], dtype=torch.float32))


def forward(model, kind, batch):
    m = torch.from_numpy(batch["m"].copy())  # the models overwrite their mapping
    if kind == "seg":
        return model([batch["p"], batch["seg_x"], batch["o"], m, batch["vec"]])[:, 0]
    return model([batch["p"], batch["cls_x"], batch["o"], m])[:, 0]


_KNN_CACHE = {}


def exact_rule_knn(k, xyz, new_xyz, cuda=False):
    """query_knn_point by the library's rule: squared distance of the float32 positions in float64,
    nearest first, equal distances by ascending index. Cached: a batch's positions never change."""
    key = (k, xyz.detach().numpy().tobytes(), new_xyz.detach().numpy().tobytes())
    if key not in _KNN_CACHE:
        d = (new_xyz.double()[:, :, None, :] - xyz.double()[:, None, :, :]).square().sum(-1)
        _KNN_CACHE[key] = torch.sort(d, dim=-1, stable=True)[1][:, :, :k]
    return _KNN_CACHE[key]


# ---------------------------------------------------------------------------------------------------------
# Training, export, evaluation
# ---------------------------------------------------------------------------------------------------------

def build(off, kind, seed, n):
    torch.manual_seed(seed)
    cfg = dict(SEG_CONFIG if kind == "seg" else CLS_CONFIG)
    args = types.SimpleNamespace(**cfg, n_point=n, num_point=n)
    model = off.seg.TreeTransformerSeg(args) if kind == "seg" else off.cls.TreeTransformerCls(args)
    return model.eval(), cfg


def standardised(kind, batches):
    """Mean and standard deviation of the training target: the network is trained to output the
    standardised target, and fold() puts the affine map into channel 0 of its last Linear afterwards."""
    t = torch.cat([b["cp"] if kind == "seg" else b["drag"] for b in batches]).double()
    return float(t.mean()), float(t.std())


def fold(model, mean, std):
    """Channel 0 of the head's last Linear (cls.3) outputs std * y + mean instead of y."""
    with torch.no_grad():
        last = model.cls[3]
        last.weight[0] *= std
        last.bias[0] = std * last.bias[0] + mean


def calibrate(model, kind, batches):
    """Sets every BatchNorm's running statistics to the mean and variance of its input over the training
    batches (forwards in train mode, cumulative averages), then back to eval mode. Without it the eval-mode
    BatchNorms (running statistics 0 / 1) let the activations fade through the blocks."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for b in batches:
            forward(model, kind, b)
    model.eval()
    for m in norms:
        m.momentum = 0.1


def train(model, kind, batches, steps, lr, log_every):
    calibrate(model, kind, batches)
    mean, std = standardised(kind, batches)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    order = np.random.default_rng(1).permutation(steps) % len(batches)
    recent = []
    for step in range(steps):
        batch = batches[order[step]]
        target = batch["cp"] if kind == "seg" else batch["drag"]
        loss = torch.nn.functional.mse_loss(forward(model, kind, batch), (target - mean) / std)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        recent = (recent + [loss.item()])[-20:]
        if (step + 1) % log_every == 0 or step + 1 == steps:
            print(f"  {kind} step {step + 1:4d}  mse (last 20 steps) {np.mean(recent) * std ** 2:.3e}", flush=True)
    fold(model, mean, std)
    print(f"  {kind} target mean {mean:.4f} std {std:.4f} (folded into cls.3 row 0)")


def evaluate(seg, cls, batches, n):
    err, ref, drag_rows = [], [], []
    with torch.no_grad():
        for b in batches:
            cp = forward(seg, "seg", b).double()
            err.append((cp - b["cp"].double()).numpy())
            ref.append(b["cp"].double().numpy())
            drag_rows.append(np.stack([forward(cls, "cls", b).double().numpy(), b["drag"].double().numpy()], 1))
    err, ref, drag = np.concatenate(err), np.concatenate(ref), np.concatenate(drag_rows)
    rel = np.abs(drag[:, 0] - drag[:, 1]) / np.abs(drag[:, 1])
    print(f"held-out, {n} points: cp rms {np.sqrt(np.mean(err ** 2)):.4f} max {np.abs(err).max():.4f} relative L2 "
          f"{np.linalg.norm(err) / np.linalg.norm(ref):.4f}; drag area D {drag[:, 1].min():.3f} .. "
          f"{drag[:, 1].max():.3f} m², error rms {np.sqrt(np.mean((drag[:, 0] - drag[:, 1]) ** 2)):.4f} m², "
          f"relative mean {rel.mean():.4f} max {rel.max():.4f}")


def export(out_dir, kind, source):
    cmd = [sys.executable, os.path.join(ROOT, "share", "tools", "surrogate-export"), "--family", "sequoia",
           "--checkpoint", os.path.join(out_dir, f"{kind}_checkpoint.pt"),
           "--config", os.path.join(out_dir, f"{kind}_config.json"),
           "--source", source, "-o", os.path.join(out_dir, f"{kind}.h5")]
    print(" ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd))
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--official", required=True, help="checkout of HySonLab/HierAttention (has point_cloud/)")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "share", "models", "sequoia"))
    ap.add_argument("--shapes", type=int, default=192, help="training shapes")
    ap.add_argument("--points", default="256,512", help="points per shape, one size per batch in turn")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seg-steps", type=int, default=600)
    ap.add_argument("--cls-steps", type=int, default=400)
    ap.add_argument("--seg-layers", type=int, default=SEG_CONFIG["layers"], help="TreeBlocks of the field model")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--check-example", nargs=3, type=int, metavar=("SEED", "SHAPES", "POINTS"),
                    help="do not train: run the checkpoints of --out-dir on the C++ example's bodies")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    SEG_CONFIG["layers"] = args.seg_layers
    check_closed_form()
    off = official_io.load_official(args.official)
    off.seg.query_knn_point = exact_rule_knn
    off.cls.query_knn_point = exact_rule_knn
    commit = OFFICIAL_COMMIT if off.commit == "unknown" else off.commit
    if args.check_example:
        check_example(off, args.out_dir, *args.check_example)
        return
    print(f"official code {off.commit} (files sha256/16: {'; '.join(f'{k} {v}' for k, v in off.files.items())}), "
          f"stand-ins: {', '.join(off.stand_ins) or 'none'}")

    t0 = time.time()
    rng = np.random.default_rng(args.seed)
    sizes = [int(v) for v in args.points.split(",")]
    # batch j: args.batch shapes of sizes[j % len(sizes)] points (the field model needs equal sizes in a batch)
    train_batches, test_batches, drags = [], {}, []
    for j in range(args.shapes // args.batch):
        samples = make_samples(rng, args.batch, sizes[j % len(sizes)])
        drags += [s["drag"] for s in samples]
        train_batches.append(collate(off, samples))
    for n in sizes:
        test_batches[n] = [collate(off, make_samples(rng, args.batch, n)) for _ in range(32 // args.batch)]
    print(f"{len(drags)} training shapes of {'/'.join(map(str, sizes))} points (D {min(drags):.3f} .. "
          f"{max(drags):.3f} m²), 32 held out per size; data {time.time() - t0:.1f} s", flush=True)

    seg, seg_cfg = build(off, "seg", args.seed + 1, sizes[0])
    cls, cls_cfg = build(off, "cls", args.seed + 2, sizes[0])
    print(f"parameters: seg {sum(p.numel() for p in seg.parameters())}, "
          f"cls {sum(p.numel() for p in cls.parameters())}")
    t0 = time.time()
    train(seg, "seg", train_batches, args.seg_steps, args.lr, 50)
    t1 = time.time()
    train(cls, "cls", train_batches, args.cls_steps, args.lr, 50)
    t2 = time.time()
    print(f"training: seg {t1 - t0:.0f} s, cls {t2 - t1:.0f} s ({args.threads} threads)")
    for n, batches in test_batches.items():
        evaluate(seg, cls, batches, n)

    os.makedirs(args.out_dir, exist_ok=True)
    torch.save({"model_state_dict": seg.state_dict()}, os.path.join(args.out_dir, "seg_checkpoint.pt"))
    torch.save(cls.state_dict(), os.path.join(args.out_dir, "cls_checkpoint.pt"))
    for kind, cfg in (("seg", seg_cfg), ("cls", cls_cfg)):
        with open(os.path.join(args.out_dir, f"{kind}_config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
            f.write("\n")
    if not args.no_export:
        for kind in ("seg", "cls"):
            export(args.out_dir, kind, f"HySonLab/HierAttention@{commit}")


if __name__ == "__main__":
    main()
