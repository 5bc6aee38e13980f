#!/usr/bin/env python3
"""Train the spherical surrogate of examples/sphere_fortran: one solver step (dt = 0.05) of the tracer
advected by the tilted solid-body rotation with a little diffusion, on the 33 x 64 equiangular grid.

Needs torch-harmonics 0.9.3 (the official SphericalTransformer), so it runs in a virtual environment VENV of
your own, never in CI:

  OMP_NUM_THREADS=1 VENV/bin/python share/training/sphere_train.py

Data: generated here by the NumPy port of the example's solver (share/training/sphere_solver.py, the same
finite-volume scheme and constants; examples.sphere_fortran.solver_matches_numpy checks that the Fortran
solver and the port agree). Each trajectory starts from a random field (1-4 cosine bells and Gaussian
bumps with random centres on the sphere, radii 0.2-0.6 rad, heights 0.3-1, over a constant background
0-0.2) and is advanced `--steps-per-trajectory` solver steps; a sample is a pair (q^n, q^{n+1}).

Model: torch_harmonics.examples.models.SphericalTransformer with neighbourhood attention, small
(embed_dim 16, 2 layers, 2 heads), input q^n, output the increment dq = q^{n+1} - q^n (the example adds
q^n), each normalised by its own mean and standard deviation over the training set (so the network's
target is O(1), not a few per cent of its input). Loss: mean squared error of the normalised increment;
the reported errors are relative L2 errors over the grid points, of the increment and of the state
q^{n+1} = q^n + dq.

Writes into --out-dir (default share/models/sphere): checkpoint.pt (the state_dict), config.json (the
constructor arguments, for surrogate-export --config), normalization.json, fields.json, training.json
(errors, times, the data set's parameters). Deterministic for a seed and thread count.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import sphere_solver as ss  # noqa: E402

FIELDS = {"inputs": [{"name": "q", "unit": "1"}], "outputs": [{"name": "dq", "unit": "1"}]}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out-dir", default=os.path.join(ROOT, "share", "models", "sphere"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--train-trajectories", type=int, default=160)
    p.add_argument("--test-trajectories", type=int, default=16)
    p.add_argument("--steps-per-trajectory", type=int, default=24)
    p.add_argument("--embed-dim", type=int, default=16)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--num-heads", type=int, default=2)
    p.add_argument("--steps", type=int, default=3000, help="optimiser steps")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3, help="OneCycle peak learning rate")
    p.add_argument("--weight-decay", type=float, default=1e-5)
    p.add_argument("--eval-every", type=int, default=250)
    return p.parse_args(argv)


def model_config(args):
    return {"img_size": [ss.NLAT, ss.NLON], "grid": "equiangular", "grid_internal": "legendre-gauss",
            "scale_factor": 2, "in_chans": 1, "out_chans": 1, "embed_dim": args.embed_dim,
            "num_layers": args.num_layers, "activation_function": "gelu", "encoder_kernel_shape": [5, 4],
            "filter_basis_type": "piecewise linear", "num_heads": args.num_heads, "use_mlp": True,
            "mlp_ratio": 2.0, "normalization_layer": "instance_norm", "residual_prediction": False,
            "pos_embed": "spectral", "attention_mode": "neighborhood", "bias": False}


def random_field(solver, rng):
    x, y, z = solver.unit_vectors()
    q = np.full((solver.nlat, solver.nlon), rng.uniform(0.0, 0.2))
    for _ in range(rng.integers(1, 5)):
        c = rng.normal(size=3)
        c /= np.linalg.norm(c)
        r = np.arccos(np.clip(x * c[0] + y * c[1] + z * c[2], -1.0, 1.0))
        radius, height = rng.uniform(0.2, 0.6), rng.uniform(0.3, 1.0)
        if rng.random() < 0.5:
            q = q + np.where(r < radius, 0.5 * height * (1 + np.cos(math.pi * r / radius)), 0.0)
        else:
            q = q + height * np.exp(-0.5 * (r / (0.5 * radius)) ** 2)
    q[0] = q[0].mean()    # the poles are one cell each
    q[-1] = q[-1].mean()
    return q


def trajectories(solver, count, steps, rng):
    """(count * steps, 2, nlat, nlon) float64 pairs (q^n, q^{n+1})."""
    pairs = np.empty((count, steps, 2, solver.nlat, solver.nlon))
    for t in range(count):
        q = random_field(solver, rng)
        for s in range(steps):
            q_next = solver.step(q)
            pairs[t, s, 0], pairs[t, s, 1] = q, q_next
            q = q_next
    return pairs.reshape(count * steps, 2, solver.nlat, solver.nlon)


def evaluate(torch, model, pairs, norm):
    """Relative L2 errors (over the grid points, physical units) of the increment and of the next state,
    per sample: mean and max; and the previous state as the guess, ||q^{n+1} - q^n|| / ||q^{n+1}||."""
    model.eval()
    e_inc, e_state, e_prev = [], [], []
    with torch.no_grad():
        for start in range(0, pairs.shape[0], 32):
            q0 = pairs[start:start + 32, 0]
            q1 = pairs[start:start + 32, 1]
            x = torch.from_numpy(((q0 - norm["q_mean"]) / norm["q_std"]).astype(np.float32))[:, None]
            p = q0 + (model(x)[:, 0].double().numpy() * norm["dq_std"] + norm["dq_mean"])
            err = np.sqrt(((p - q1) ** 2).sum(axis=(1, 2)))
            inc = np.sqrt(((q1 - q0) ** 2).sum(axis=(1, 2)))
            nrm = np.sqrt((q1 ** 2).sum(axis=(1, 2)))
            e_inc += list(err / inc)
            e_state += list(err / nrm)
            e_prev += list(inc / nrm)
    model.train()
    return {"increment_mean": float(np.mean(e_inc)), "increment_max": float(np.max(e_inc)),
            "state_mean": float(np.mean(e_state)), "state_max": float(np.max(e_state)),
            "previous_state_mean": float(np.mean(e_prev))}


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import torch
    import torch_harmonics
    from torch_harmonics.examples.models import SphericalTransformer

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    t_start = time.time()

    solver = ss.Solver()
    train = trajectories(solver, args.train_trajectories, args.steps_per_trajectory, rng)
    test = trajectories(solver, args.test_trajectories, args.steps_per_trajectory, rng)
    increments = train[:, 1] - train[:, 0]
    norm = {"q_mean": float(train[:, 0].mean()), "q_std": float(train[:, 0].std()),
            "dq_mean": float(increments.mean()), "dq_std": float(increments.std())}
    t_data = time.time() - t_start
    print(f"data: {train.shape[0]} training pairs, {test.shape[0]} held-out pairs on {ss.NLAT} x {ss.NLON}, "
          f"max Courant {solver.max_courant():.3f}, q mean {norm['q_mean']:.4f} std {norm['q_std']:.4f}, dq mean "
          f"{norm['dq_mean']:.2e} std {norm['dq_std']:.4f} ({t_data:.1f} s)", flush=True)

    config = model_config(args)
    model = SphericalTransformer(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in config.items()})
    nparams = sum(p.numel() for p in model.parameters())
    xs = torch.from_numpy(((train[:, 0] - norm["q_mean"]) / norm["q_std"]).astype(np.float32))[:, None]
    ys = torch.from_numpy(((increments - norm["dq_mean"]) / norm["dq_std"]).astype(np.float32))[:, None]
    del increments
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.1)
    print(f"model: SphericalTransformer E {args.embed_dim}, {args.num_layers} layers, {args.num_heads} heads, "
          f"neighbourhood attention, {nparams} parameters; {args.steps} steps of {args.batch_size} samples", flush=True)

    gen = torch.Generator().manual_seed(args.seed)
    history = {"step": [], "train_loss": [], "test": [], "time": []}
    losses = []
    t_train = time.time()
    model.train()
    for step in range(1, args.steps + 1):
        idx = torch.randint(0, xs.shape[0], (args.batch_size,), generator=gen)
        loss = torch.nn.functional.mse_loss(model(xs[idx]), ys[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % args.eval_every == 0 or step == args.steps:
            te = evaluate(torch, model, test, norm)
            history["step"].append(step)
            history["train_loss"].append(float(np.mean(losses)))
            history["test"].append(te)
            history["time"].append(time.time() - t_train)
            print(f"step {step:5d} lr {sched.get_last_lr()[0]:.2e} train mse {np.mean(losses):.3e} | held out: "
                  f"increment {te['increment_mean']:.4f} (max {te['increment_max']:.4f}), state "
                  f"{te['state_mean']:.5f} (max {te['state_max']:.5f}) | {time.time() - t_train:.0f} s", flush=True)
            losses = []
    train_time = time.time() - t_train

    results = {"test": evaluate(torch, model, test, norm),
               "train_subset": evaluate(torch, model, train[::10], norm),
               "train_time_s": train_time, "data_time_s": t_data, "total_time_s": time.time() - t_start,
               "parameters": nparams, "seed": args.seed, "threads": args.threads,
               "torch": torch.__version__, "torch_harmonics": torch_harmonics.__version__,
               "data": {"train_trajectories": args.train_trajectories, "test_trajectories": args.test_trajectories,
                        "steps_per_trajectory": args.steps_per_trajectory, "nlat": ss.NLAT, "nlon": ss.NLON,
                        "alpha": ss.ALPHA, "u0": ss.U0, "kappa": ss.KAPPA, "dt": ss.DT, "substeps": ss.SUBSTEPS},
               "args": vars(args)}
    print(json.dumps({k: results[k] for k in ("test", "train_subset", "train_time_s", "parameters")}, indent=2))

    os.makedirs(args.out_dir, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(args.out_dir, "checkpoint.pt"))
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(args.out_dir, "normalization.json"), "w") as f:
        json.dump({"input_mean": [norm["q_mean"]], "input_std": [norm["q_std"]], "output_mean": [norm["dq_mean"]],
                   "output_std": [norm["dq_std"]]}, f, indent=2)
    with open(os.path.join(args.out_dir, "fields.json"), "w") as f:
        json.dump(FIELDS, f, indent=2)
    with open(os.path.join(args.out_dir, "training.json"), "w") as f:
        json.dump({"results": results, "history": history}, f, indent=2)
    print(f"wrote {args.out_dir}/{{checkpoint.pt,config.json,normalization.json,fields.json,training.json}}; "
          f"training {train_time:.0f} s, total {time.time() - t_start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
