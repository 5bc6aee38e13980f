#!/usr/bin/env python3
"""Train the FLARE heat surrogate of examples/heat_petsc: one backward-Euler step of the heat equation.

The data come from the example's own solver (heat_generate: P1 FEM on the DMPlex mesh, KSP to rtol 1e-10),
see share/models/heat/README.md:

  build/examples/heat_petsc/heat_generate -o /tmp/heat/train.h5 -trajectories 192 -steps 40 -seed 1
  build/examples/heat_petsc/heat_generate -o /tmp/heat/test.h5  -trajectories 16  -steps 40 -seed 2
  /usr/bin/python3 share/training/heat_train.py --train /tmp/heat/train.h5 --test /tmp/heat/test.h5

Per mesh vertex the model sees (x, y, u^n, f^{n+1}, kappa, rate) and predicts du = u^{n+1} - u^n (the example
adds u^n); rate = M^-1 (b - A u^n) is the residual of the step's linear system at the current state per unit
mass, which the solver gets with one MatMult (it carries the discrete Laplacian of u^n, which a model that sees
points one by one cannot form). One sample is one time step of one trajectory on the whole mesh; each training
step uses a random subset of 1024-1536 of its 4225 vertices. Writes, in the official FLARE.py trainer's
layout (so the model goes through the real export path):

  OUT_DIR/checkpoint.pt        model_state + ema_shadow (keys with the ``_orig_mod.`` prefix of a
                               torch.compile'd model), step, epoch, loss history; no optimizer state
  OUT_DIR/config.yaml          flat 2026-style Config dict (model_type flare, model and training fields)
  OUT_DIR/normalization.json   per-channel mean / std (+1e-8: the exact divisor) over the training set
  OUT_DIR/fields.json          channel names and units
  OUT_DIR/training.json        the run's measured errors and times

Deterministic for a given seed and thread count (seeded generators for initialisation, batches and
point subsets). Debian's torch 1.13 on the CPU; torch.set_num_threads(--threads, default 1: on a 2-core
machine shared with other jobs, 2 OpenMP threads spend most of their time waiting for each other),
OPENBLAS_NUM_THREADS=1.
"""

import argparse
import json
import os
import sys
import time

# Debian's torch links the pthread OpenBLAS, whose threads fight torch's OpenMP threads on 2 cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "share", "python"))

from surrogate_ref.flare import FLAREModel  # noqa: E402

sys.path.insert(0, HERE)
import flare_training as ft  # noqa: E402

UNITS = {"x": "m", "y": "m", "u": "K", "f": "K/s", "kappa": "m^2/s", "rate": "K/s"}
OUTPUT_FIELDS = [{"name": "du", "unit": "K"}]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train", default="/tmp/heat/train.h5", help="heat_generate output (training)")
    p.add_argument("--test", default="/tmp/heat/test.h5", help="heat_generate output (held out)")
    p.add_argument("--out-dir", default=os.path.join(ROOT, "share", "models", "heat"))
    p.add_argument("--inputs", default="x,y,u,f,kappa,rate",
                   help="input channels, a subset of " + ",".join(UNITS) + " (rate = M^-1 (b - A u^n) of the step)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: with other jobs on the 2 cores, 2 threads spin in OpenMP barriers)")
    p.add_argument("--min-points", type=int, default=1024, help="each step uses N random vertices, N in [min, max]")
    p.add_argument("--max-points", type=int, default=1536)
    p.add_argument("--channel-dim", type=int, default=32)
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--num-latents", type=int, default=32)
    p.add_argument("--num-blocks", type=int, default=4)
    p.add_argument("--steps", type=int, default=5500, help="optimiser steps")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=2e-3, help="OneCycle peak learning rate")
    p.add_argument("--weight-decay", type=float, default=1e-5)
    p.add_argument("--pct-start", type=float, default=0.1)
    p.add_argument("--clip-grad-norm", type=float, default=1.0)
    p.add_argument("--ema-decay", type=float, default=0.998)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--eval-samples", type=int, default=160, help="held-out samples used by the periodic evaluations")
    return p.parse_args(argv)


def load(path, channels):
    """Per-sample inputs and targets of a heat_generate file: returns (inputs (S, N, C), du (S, N, 1), info)."""
    with h5py.File(path, "r") as f:
        xy = f["coords"][...].astype(np.float32)  # (N, 2)
        u = f["u"][...]                            # (T, steps + 1, N) float32
        src = f["f"][...]                          # (T, steps, N)
        kappa = f["kappa"][...]                    # (T, N)
        rate = f["rate"][...] if "rate" in channels else None  # (T, steps, N)
        info = {k: (v.decode() if isinstance(v, bytes) else float(v)) for k, v in f.attrs.items()}
        info["params"] = f["params"][...]
    T, S1, N = u.shape
    S = S1 - 1
    inputs = np.empty((T, S, N, len(channels)), np.float32)
    for c, name in enumerate(channels):
        inputs[..., c] = {"x": lambda: xy[:, 0], "y": lambda: xy[:, 1], "u": lambda: u[:, :-1], "f": lambda: src,
                          "kappa": lambda: kappa[:, None, :], "rate": lambda: rate}[name]()
    du = (u[:, 1:].astype(np.float64) - u[:, :-1].astype(np.float64)).astype(np.float32)[..., None]
    info.update(trajectories=T, steps=S, vertices=N)
    return inputs.reshape(T * S, N, len(channels)), du.reshape(T * S, N, 1), info


def model_config(args):
    return {"in_dim": len(args.inputs.split(",")), "out_dim": 1, "channel_dim": args.channel_dim, "num_blocks": args.num_blocks,
            "num_heads": args.num_heads, "num_latents": args.num_latents, "act": "gelu", "attn_scale": 1.0}


def trainer_config_yaml(args, info):
    """The flat Config dict a 2026 FLARE.py experiment writes (model fields + training fields)."""
    return ft.trainer_config(args, [
        ("exp_name", "heat"), ("dataset", "heat_petsc_backward_euler"), ("epochs", 0), ("steps", args.steps),
        ("train_samples", int(info["trajectories"] * info["steps"])), ("min_points", args.min_points),
        ("max_points", args.max_points), ("dt", info["dt"]),
    ])


@torch.no_grad()
def evaluate(model, inputs, du, norm, indices):
    """Full-mesh errors in physical units on the given samples: per sample, the relative L2 error of the
    increment du and of the next state u^n + du (what the example reports, there with the lumped-mass
    norm; the mesh is uniform, so the two agree closely), and for comparison the error of the previous
    state as a guess, ||du|| / ||u^{n+1}||. Returns means and maxima."""
    model.eval()
    e_du, e_u, e_prev = [], [], []
    for i in indices:
        x = (torch.from_numpy(inputs[i]).double() - norm["in_mean"]) / norm["in_std"]
        p = model(x.float()[None])[0].double() * norm["out_std"] + norm["out_mean"]
        t = torch.from_numpy(du[i]).double()
        u_next = torch.from_numpy(inputs[i][:, norm["u_channel"]]).double() + t[:, 0]
        err = (p - t).norm()
        e_du.append(float(err / t.norm().clamp_min(1e-12)))
        e_u.append(float(err / u_next.norm().clamp_min(1e-12)))
        e_prev.append(float(t.norm() / u_next.norm().clamp_min(1e-12)))  # the previous state as the guess
    model.train()
    return {"du_mean": float(np.mean(e_du)), "du_max": float(np.max(e_du)), "u_next_mean": float(np.mean(e_u)),
            "u_next_max": float(np.max(e_u)), "previous_state_mean": float(np.mean(e_prev))}


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_start = time.time()

    channels = args.inputs.split(",")
    unknown = [c for c in channels if c not in UNITS]
    if unknown or "u" not in channels:
        raise SystemExit(f"--inputs: unknown channels {unknown} (the set must contain u)")
    x_tr, y_tr, info = load(args.train, channels)
    x_te, y_te, info_te = load(args.test, channels)
    S_tr, N, C_in = x_tr.shape
    in_mean = x_tr.reshape(-1, C_in).mean(0, dtype=np.float64)
    in_std = x_tr.reshape(-1, C_in).std(0, dtype=np.float64) + 1e-8
    out_mean = y_tr.reshape(-1, 1).mean(0, dtype=np.float64)
    out_std = y_tr.reshape(-1, 1).std(0, dtype=np.float64) + 1e-8
    normalization = {"input_mean": in_mean.tolist(), "input_std": in_std.tolist(),
                     "output_mean": out_mean.tolist(), "output_std": out_std.tolist()}
    norm = {k: torch.tensor(v) for k, v in
            {"in_mean": in_mean, "in_std": in_std, "out_mean": out_mean, "out_std": out_std}.items()}
    norm["u_channel"] = channels.index("u")
    xn_tr = torch.from_numpy(((x_tr - in_mean) / in_std).astype(np.float32))
    yn_tr = torch.from_numpy(((y_tr - out_mean) / out_std).astype(np.float32))
    print(f"data: {S_tr} training samples ({info['trajectories']} trajectories x {info['steps']} steps), "
          f"{x_te.shape[0]} held-out samples, {N} vertices, dt {info['dt']} s ({time.time() - t_start:.1f} s)", flush=True)

    gen = torch.Generator().manual_seed(args.seed)
    model = FLAREModel(model_config(args))
    ft.init_latent_queries(model, gen)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"model: FLARE C {args.channel_dim}, {args.num_blocks} blocks, H {args.num_heads}, M {args.num_latents}, "
          f"{nparams} parameters; {args.steps} steps of {args.batch_size} samples x {args.min_points}-{args.max_points} points",
          flush=True)

    eval_idx = np.linspace(0, x_te.shape[0] - 1, min(args.eval_samples, x_te.shape[0])).astype(int)
    ema, history, train_time = ft.train_on_point_subsets(
        model, gen, args, xn_tr, yn_tr, lambda m: evaluate(m, x_te, y_te, norm, eval_idx),
        lambda step, lr, loss, te, te_ema, seconds: (
            f"step {step:6d} lr {lr:.2e} train {loss:.4f} | held out, full mesh: du {te['du_mean']:.4f} "
            f"(ema {te_ema['du_mean']:.4f}), u_next {te['u_next_mean']:.5f} (ema {te_ema['u_next_mean']:.5f}) | {seconds:.0f} s"))

    ema_model = ema.model(model)
    all_te = np.arange(x_te.shape[0])
    results = {"test_raw": evaluate(model, x_te, y_te, norm, all_te),
               "test_ema": evaluate(ema_model, x_te, y_te, norm, all_te),
               "train_time_s": train_time, "total_time_s": time.time() - t_start, "steps": args.steps,
               "parameters": nparams, "seed": args.seed, "threads": args.threads, "inputs": channels,
               "train_data": {k: info[k] for k in ("trajectories", "steps", "vertices", "dt", "seed")},
               "test_data": {k: info_te[k] for k in ("trajectories", "steps", "vertices", "dt", "seed")}}
    print(json.dumps(results, indent=2), flush=True)

    ft.write_trainer_outputs(
        args.out_dir, model, ema,
        {"step": args.steps, "epoch": args.steps * args.batch_size // S_tr,
         "train_loss_fullbatch": history["train_loss"],
         "test_loss_fullbatch": [h["du_mean"] for h in history["test"]],
         "test_loss_fullbatch_ema": [h["du_mean"] for h in history["test_ema"]],
         "num_steps_fullbatch": history["step"]},
        trainer_config_yaml(args, info), normalization,
        {"inputs": [{"name": c, "unit": UNITS[c]} for c in channels], "outputs": OUTPUT_FIELDS},
        extra_json=(("training.json", {"results": results, "history": history}),))
    print(f"wrote {args.out_dir}/{{checkpoint.pt,config.yaml,normalization.json,fields.json,training.json}}; "
          f"training {train_time:.0f} s, total {time.time() - t_start:.0f} s", flush=True)
    return results


if __name__ == "__main__":
    main()
