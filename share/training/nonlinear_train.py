#!/usr/bin/env python3
"""Train the FLARE surrogate of examples/nonlinear_petsc: the steady temperature of a strongly nonlinear
heat-conduction problem (conductivity k_base (1 + (u/u_ref)^3), tripled where the material melts around
650 K; convection and radiation at the boundary) from the case's source, materials and ambient temperature.

The data come from the example's own solver (nonlinear_generate: P1 FEM on the DMPlex mesh, Newton to
||F|| <= 1e-9), see share/models/nonlinear/README.md:

  mpirun -np 2 build/examples/nonlinear_petsc/nonlinear_generate -o /tmp/nonlinear/train.h5 -cases 1024 -seed 1
  mpirun -np 2 build/examples/nonlinear_petsc/nonlinear_generate -o /tmp/nonlinear/test.h5  -cases 128  -seed 2
  /usr/bin/python3 share/training/nonlinear_train.py --train /tmp/nonlinear/train.h5 --test /tmp/nonlinear/test.h5

Per mesh vertex the model sees (x, y, q, k, u_ambient) and predicts the temperature u. One sample is one
case on the whole mesh; each training step uses a random subset of the vertices. Writes, in the official
FLARE.py trainer's layout (so the model goes through the real export path), checkpoint.pt, config.yaml,
normalization.json, fields.json and training.json to OUT_DIR (as share/training/heat_train.py does).

Deterministic for a given seed and thread count. Debian's torch 1.13 on the CPU.
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

UNITS = {"x": "m", "y": "m", "q": "W/m^3", "k": "W/(m K)", "u_ambient": "K"}
OUTPUT_FIELDS = [{"name": "u", "unit": "K"}]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train", default="/tmp/nonlinear/train.h5", help="nonlinear_generate output (training)")
    p.add_argument("--test", default="/tmp/nonlinear/test.h5", help="nonlinear_generate output (held out)")
    p.add_argument("--out-dir", default=os.path.join(ROOT, "share", "models", "nonlinear"))
    p.add_argument("--inputs", default="x,y,q,k,u_ambient", help="input channels, a subset of " + ",".join(UNITS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: with other jobs on the 2 cores, 2 threads spin in OpenMP barriers)")
    p.add_argument("--min-points", type=int, default=1024, help="each step uses N random vertices, N in [min, max]")
    p.add_argument("--max-points", type=int, default=1536)
    p.add_argument("--channel-dim", type=int, default=32)
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--num-latents", type=int, default=32)
    p.add_argument("--num-blocks", type=int, default=2)
    p.add_argument("--mlp-layers", type=int, default=3, help="layers of each block's key, value and feed-forward MLPs")
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
    """Per-case inputs and targets of a nonlinear_generate file: returns (inputs (S, N, C), u (S, N, 1), info)."""
    with h5py.File(path, "r") as f:
        xy = f["coords"][...].astype(np.float32)  # (N, 2)
        u = f["u"][...]                            # (S, N) float32
        q, k = f["q"][...], f["k"][...]            # (S, N)
        names = f.attrs["param_names"]
        names = (names.decode() if isinstance(names, bytes) else names).split(",")
        params = f["params"][...]
        info = {key: (v.decode() if isinstance(v, bytes) else float(v)) for key, v in f.attrs.items()}
        info["newton_its"] = f["newton_its"][...]
    S, N = u.shape
    u_amb = params[:, names.index("u_ambient")].astype(np.float32)
    inputs = np.empty((S, N, len(channels)), np.float32)
    for c, name in enumerate(channels):
        inputs[..., c] = {"x": lambda: xy[None, :, 0], "y": lambda: xy[None, :, 1], "q": lambda: q, "k": lambda: k,
                          "u_ambient": lambda: u_amb[:, None]}[name]()
    info.update(cases=S, vertices=N, params=params, param_names=names)
    return inputs, u[..., None].astype(np.float32), info


def model_config(args):
    return {"in_dim": len(args.inputs.split(",")), "out_dim": 1, "channel_dim": args.channel_dim, "num_blocks": args.num_blocks,
            "num_heads": args.num_heads, "num_latents": args.num_latents, "act": "gelu", "attn_scale": 1.0,
            "num_layers_k_proj": args.mlp_layers, "num_layers_v_proj": args.mlp_layers, "num_layers_ffn": args.mlp_layers}


def trainer_config_yaml(args, info):
    """The flat Config dict a 2026 FLARE.py experiment writes (model fields + training fields)."""
    return ft.trainer_config(args, [
        ("exp_name", "nonlinear"), ("dataset", "nonlinear_petsc_steady"), ("epochs", 0), ("steps", args.steps),
        ("train_samples", int(info["cases"])), ("min_points", args.min_points), ("max_points", args.max_points),
    ])


@torch.no_grad()
def evaluate(model, inputs, u, norm, indices):
    """Full-mesh errors in physical units on the given cases: per case the relative L2 error of u, of its
    rise above the ambient temperature u - u_ambient (the part the physics sets), and the largest pointwise
    error in K. Returns means and maxima."""
    model.eval()
    e_u, e_rise, e_max = [], [], []
    for i in indices:
        x = (torch.from_numpy(inputs[i]).double() - norm["in_mean"]) / norm["in_std"]
        p = model(x.float()[None])[0].double() * norm["out_std"] + norm["out_mean"]
        t = torch.from_numpy(u[i]).double()
        rise = t - float(inputs[i][0, norm["ambient_channel"]])
        err = p - t
        e_u.append(float(err.norm() / t.norm()))
        e_rise.append(float(err.norm() / rise.norm().clamp_min(1e-12)))
        e_max.append(float(err.abs().max()))
    model.train()
    return {"u_mean": float(np.mean(e_u)), "u_max": float(np.max(e_u)), "rise_mean": float(np.mean(e_rise)),
            "rise_max": float(np.max(e_rise)), "max_abs_K_mean": float(np.mean(e_max)), "max_abs_K_max": float(np.max(e_max))}


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t_start = time.time()

    channels = args.inputs.split(",")
    unknown = [c for c in channels if c not in UNITS]
    if unknown or "u_ambient" not in channels:
        raise SystemExit(f"--inputs: unknown channels {unknown} (the set must contain u_ambient)")
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
    norm["ambient_channel"] = channels.index("u_ambient")
    xn_tr = torch.from_numpy(((x_tr - in_mean) / in_std).astype(np.float32))
    yn_tr = torch.from_numpy(((y_tr - out_mean) / out_std).astype(np.float32))
    print(f"data: {S_tr} training cases, {x_te.shape[0]} held-out cases, {N} vertices ({time.time() - t_start:.1f} s)", flush=True)

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
            f"step {step:6d} lr {lr:.2e} train {loss:.4f} | held out, full mesh: u {te['u_mean']:.5f} "
            f"(ema {te_ema['u_mean']:.5f}), rise {te['rise_mean']:.4f} (ema {te_ema['rise_mean']:.4f}), "
            f"max {te_ema['max_abs_K_mean']:.2f} K | {seconds:.0f} s"))

    ema_model = ema.model(model)
    all_te = np.arange(x_te.shape[0])
    results = {"test_raw": evaluate(model, x_te, y_te, norm, all_te),
               "test_ema": evaluate(ema_model, x_te, y_te, norm, all_te),
               "train_time_s": train_time, "total_time_s": time.time() - t_start, "steps": args.steps,
               "parameters": nparams, "seed": args.seed, "threads": args.threads, "inputs": channels,
               "train_data": {k: info[k] for k in ("cases", "vertices", "seed")},
               "test_data": {k: info_te[k] for k in ("cases", "vertices", "seed")}}
    print(json.dumps(results, indent=2), flush=True)

    ft.write_trainer_outputs(
        args.out_dir, model, ema,
        {"step": args.steps, "epoch": args.steps * args.batch_size // S_tr,
         "train_loss_fullbatch": history["train_loss"],
         "test_loss_fullbatch": [h["u_mean"] for h in history["test"]],
         "test_loss_fullbatch_ema": [h["u_mean"] for h in history["test_ema"]],
         "num_steps_fullbatch": history["step"]},
        trainer_config_yaml(args, info), normalization,
        {"inputs": [{"name": c, "unit": UNITS[c]} for c in channels], "outputs": OUTPUT_FIELDS},
        extra_json=(("training.json", {"results": results, "history": history}),))
    print(f"wrote {args.out_dir}/{{checkpoint.pt,config.yaml,normalization.json,fields.json,training.json}}; "
          f"training {train_time:.0f} s, total {time.time() - t_start:.0f} s", flush=True)
    return results


if __name__ == "__main__":
    main()
