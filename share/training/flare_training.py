"""Pieces shared by the training scripts of the shipped FLARE models (train_potential_flow.py,
heat_train.py, nonlinear_train.py): the initialisation, loss, optimiser and schedule, the EMA of the
weights, the training loop over random point subsets of whole-mesh samples, the flat
2026-style FLARE.py Config dict and the trainer's output files. The scripts write what the official
FLARE.py trainer writes, so the shipped models go through the real export path
(share/tools/surrogate-export)."""

import copy
import json
import os
import time
from collections import OrderedDict

import numpy as np

import torch
import yaml

PREFIX = "_orig_mod."  # keys of a torch.compile'd model, as in the official trainer's snapshots


def init_latent_queries(model, generator):
    """Our initialisation on top of PyTorch's default Linear initialisation (done by the constructor
    under the global seed): latent queries ~ N(0, 1/head_dim) (the reference model creates them as
    zeros)."""
    head_dim = model.config["channel_dim"] // model.config["num_heads"]
    with torch.no_grad():
        for block in model.blocks:
            q = block.att.latent_q
            q.copy_(torch.randn(q.shape, generator=generator) * head_dim ** -0.5)


def rel_l2(pred, target):
    """Mean over the samples of ||pred - target|| / ||target|| (all points and channels of a sample)."""
    return ((pred - target).flatten(1).norm(dim=1) / target.flatten(1).norm(dim=1).clamp_min(1e-12)).mean()


def optimizer_and_schedule(model, lr, weight_decay, total_steps, pct_start):
    """AdamW with a OneCycle schedule (cosine, div factors 1e4), the trainer's defaults."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total_steps, pct_start=pct_start,
                                                anneal_strategy="cos", div_factor=1e4, final_div_factor=1e4)
    return opt, sched


class EMA:
    """Exponential moving average of every trainable parameter (the trainer's ``ema_shadow``)."""

    def __init__(self, model, decay):
        self.decay = decay
        self.shadow = OrderedDict((n, p.detach().clone()) for n, p in model.named_parameters() if p.requires_grad)

    @torch.no_grad()
    def update(self, model):
        for n, p in model.named_parameters():
            if n in self.shadow:
                self.shadow[n].mul_(self.decay).add_(p.detach(), alpha=1.0 - self.decay)

    def model(self, model):
        """A copy of `model` carrying the averaged weights."""
        ema = copy.deepcopy(model)
        state = ema.state_dict()
        state.update(self.shadow)
        ema.load_state_dict(state)
        return ema


def trainer_config(args, extra):
    """The flat Config dict a 2026 FLARE.py experiment writes: the model fields (from args.channel_dim,
    num_blocks, num_heads, num_latents, mlp_layers if the script has it (else the default depth 3); GELU,
    scale 1), the optimiser and
    schedule fields (args.lr, weight_decay, pct_start, clip_grad_norm, ema_decay, seed, batch_size),
    then `extra` (an iterable of (key, value): the experiment's name, data set and sizes)."""
    depth = getattr(args, "mlp_layers", 3)
    return OrderedDict([
        ("model_type", "flare"),
        ("channel_dim", args.channel_dim), ("num_blocks", args.num_blocks), ("num_heads", args.num_heads),
        ("num_latents", args.num_latents), ("act", "gelu"), ("attn_scale", "one"),
        ("num_layers_in_out_proj", 2), ("num_layers_k_proj", depth), ("num_layers_v_proj", depth),
        ("num_layers_ffn", depth),
        ("k_proj_mlp_ratio", 1.0), ("v_proj_mlp_ratio", 1.0), ("ffn_mlp_ratio", 1.0),
        ("qk_norm", False), ("rmsnorm", False), ("out_proj_norm", True),
        ("train", True), ("batch_size", args.batch_size),
        ("learning_rate", args.lr), ("weight_decay", args.weight_decay), ("optimizer", "adamw"),
        ("opt_beta1", 0.9), ("opt_beta2", 0.999), ("opt_eps", 1e-8), ("schedule", "OneCycleLR"),
        ("one_cycle_pct_start", args.pct_start), ("one_cycle_div_factor", 1e4),
        ("one_cycle_final_div_factor", 1e4), ("one_cycle_anneal_strategy", "cos"),
        ("clip_grad_norm", args.clip_grad_norm), ("ema", True), ("ema_decay", args.ema_decay),
        ("mixed_precision", False), ("compile_model", True), ("seed", args.seed),
    ] + list(extra))


def write_trainer_outputs(out_dir, model, ema, snapshot_extra, config, normalization, fields, extra_json=()):
    """Writes OUT_DIR/checkpoint.pt (model_state and ema_shadow with the torch.compile prefix, plus
    `snapshot_extra`: step, epoch, loss history; no optimizer state), config.yaml (`config`),
    normalization.json, fields.json and any (name, object) of `extra_json` as JSON files."""
    os.makedirs(out_dir, exist_ok=True)
    snapshot = {
        "model_state": OrderedDict((PREFIX + k, v.detach().clone()) for k, v in model.state_dict().items()),
        "ema_shadow": OrderedDict((PREFIX + k, v.clone()) for k, v in ema.shadow.items()),
    }
    snapshot.update(snapshot_extra)
    torch.save(snapshot, os.path.join(out_dir, "checkpoint.pt"))
    with open(os.path.join(out_dir, "config.yaml"), "w") as f:
        yaml.safe_dump(dict(config), f, sort_keys=True)
    for name, obj in (("normalization.json", normalization), ("fields.json", fields)) + tuple(extra_json):
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")


def train_on_point_subsets(model, gen, args, xn, yn, evaluate, report):
    """The training loop of heat_train.py and nonlinear_train.py: args.steps AdamW/OneCycle steps of
    args.batch_size samples of the normalised inputs xn (S, N, C_in) and targets yn (S, N, C_out), each
    step on a random subset of args.min_points..args.max_points of the N points (all drawn from `gen`, so
    a run is deterministic for a seed), relative L2 loss, gradient clipping, EMA of the weights. Every
    args.eval_every steps and at the end, evaluate(model) for the raw and the EMA weights goes into the
    history and report(step, lr, train_loss, raw, ema, seconds) is printed. Returns (ema, history, seconds)."""
    opt, sched = optimizer_and_schedule(model, args.lr, args.weight_decay, args.steps, args.pct_start)
    ema = EMA(model, args.ema_decay)
    samples, points = xn.shape[0], xn.shape[1]
    history = {"step": [], "train_loss": [], "test": [], "test_ema": [], "time": []}
    order = torch.randperm(samples, generator=gen)
    cursor, losses = 0, []
    t_train = time.time()
    model.train()
    for step in range(1, args.steps + 1):
        if cursor + args.batch_size > samples:
            order, cursor = torch.randperm(samples, generator=gen), 0
        idx = order[cursor:cursor + args.batch_size]
        cursor += args.batch_size
        n = int(torch.randint(args.min_points, args.max_points + 1, (1,), generator=gen))
        sub = torch.randperm(points, generator=gen)[:n]
        xb, yb = xn[idx][:, sub], yn[idx][:, sub]
        loss = rel_l2(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
        opt.step()
        sched.step()
        ema.update(model)
        losses.append(float(loss))
        if step % args.eval_every == 0 or step == args.steps:
            raw, smoothed = evaluate(model), evaluate(ema.model(model))
            history["step"].append(step)
            history["train_loss"].append(float(np.mean(losses)))
            history["test"].append(raw)
            history["test_ema"].append(smoothed)
            history["time"].append(time.time() - t_train)
            print(report(step, sched.get_last_lr()[0], float(np.mean(losses)), raw, smoothed, time.time() - t_train), flush=True)
            losses = []
    return ema, history, time.time() - t_train
