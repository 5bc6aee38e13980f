#!/usr/bin/env python3
"""FLARE forward in PyTorch on a GPU, written as the official FLARE.py does it: two
scaled_dot_product_attention calls per block (encode: latent queries over the points; decode: the points'
keys over the latents, both with scale=attn_scale), with the configuration of bench_flare_gpu (the
elasticity layout, C = 64, tanh-GELU residual MLPs; random weights, not the same draw). One configuration per process;
prints one JSON line to put next to `bench_flare_gpu --json`.

    python3 benchmarks/gpu/flare_pytorch_gpu.py --points 1048576 --latents 256 --dtype float32
    python3 benchmarks/gpu/flare_pytorch_gpu.py --points 1048576 --latents 256 --dtype bfloat16 --compile
    python3 benchmarks/gpu/flare_pytorch_gpu.py --points 1048576 --latents 256 --tf32 --compile
    python3 benchmarks/gpu/flare_pytorch_gpu.py --device cpu --points 4096 --check   # formulation check

`--compile` times `torch.compile` of the forward (mode `--compile-mode`, default "default": the one line a
PyTorch user adds), compiled during the warm-up runs (at least two); the JSON then has "compiled": true and
the compile time. torch.compile in bf16, and in fp32 with TF32, is the peer surrogate's device forward is
measured against (flare_gpu_vs_pytorch.py).

Needs torch >= 2.1 (SDPA with `scale`; --compile: Triton on the GPU). Without SDPA (Debian's torch 1.13)
the attention falls back to explicit softmaxes and the JSON says "sdpa": false (only for --check, not a
benchmark).
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))                                   # flare_pytorch.py (config, weights)
sys.path.insert(0, str(HERE.parent.parent / "share" / "python"))      # surrogate_ref
from flare_pytorch import elasticity_config, randomize  # noqa: E402
from surrogate_ref.flare import FLAREModel  # noqa: E402

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def sdpa(q, k, v, scale):
    if HAVE_SDPA:
        return F.scaled_dot_product_attention(q, k, v, scale=scale)
    return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * scale, dim=-1), v)


def official_attention(att, x):
    """FLARE.py's forward of one attention layer on x (B, N, C) after norm1."""
    B, N, C = x.shape
    H, M, E = att.num_heads, att.num_latents, att.head_dim
    q = att.latent_q.reshape(H, M, E)
    k = att.k_proj(x).reshape(B, N, H, E).permute(0, 2, 1, 3)
    v = att.v_proj(x).reshape(B, N, H, E).permute(0, 2, 1, 3)
    if att.qk_norm:
        q, k = att.q_norm(q), att.k_norm(k)
    q = q.unsqueeze(0).expand(B, H, M, E)
    z = sdpa(q, k, v, att.attn_scale)        # encode: softmax over the N points
    y = sdpa(k, q, z, att.attn_scale)        # decode: softmax over the M latents
    return att.out_proj(y.permute(0, 2, 1, 3).reshape(B, N, C))


def forward(model, x):
    h = model.in_proj(x)
    for block in model.blocks:
        h = h + official_attention(block.att, getattr(block, block._n1)(h))
        h = h + block.mlp(getattr(block, block._n2)(h))
    return model.out_proj(h)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=1048576)
    ap.add_argument("--latents", type=int, default=256)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (off by default: plain FP32)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--check", action="store_true", help="compare with the reference model's explicit softmaxes")
    ap.add_argument("--compile", action="store_true", help="time torch.compile of the forward")
    ap.add_argument("--compile-mode", default="default", help="torch.compile mode (default, max-autotune, ...)")
    args = ap.parse_args()
    if args.compile and not hasattr(torch, "compile"):
        sys.exit(f"flare_pytorch_gpu.py: --compile needs torch >= 2.0 (this is {torch.__version__})")
    dev = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
    model = FLAREModel(elasticity_config(args.latents, args.channels, args.heads, args.blocks)).eval()
    randomize(model)
    model = model.to(device=dev, dtype=dtype)
    gen = torch.Generator().manual_seed(7)
    x = torch.rand(1, args.points, 2, generator=gen).to(device=dev, dtype=dtype)
    result = {"impl": "pytorch-sdpa" if HAVE_SDPA else "pytorch-explicit-softmax", "sdpa": HAVE_SDPA,
              "torch": torch.__version__, "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
              "dtype": args.dtype, "tf32": args.tf32, "points": args.points, "latents": args.latents,
              "channels": args.channels, "heads": args.heads, "blocks": args.blocks, "compiled": args.compile}
    run = lambda inputs: forward(model, inputs)  # noqa: E731
    warmup = args.warmup
    if args.compile:
        run = torch.compile(run, mode=args.compile_mode)
        result["compile_mode"] = args.compile_mode
        warmup = max(warmup, 2)
    with torch.inference_mode():
        if args.check:
            diff = (forward(model, x) - model(x)).abs().max().item()
            result["check_max_abs_diff_vs_reference"] = diff
        times = []
        for r in range(warmup + args.repeats):
            if dev.type == "cuda":
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run(x)
                stop.record()
                torch.cuda.synchronize(dev)
                ms = start.elapsed_time(stop)
            else:
                t0 = time.perf_counter()
                run(x)
                ms = (time.perf_counter() - t0) * 1e3
            if r == 0 and args.compile:
                result["first_call_ms"] = ms  # includes the compilation
            if r >= warmup:
                times.append(ms)
    times.sort()
    result["median_ms"] = times[len(times) // 2]
    result["min_ms"] = times[0]
    if dev.type == "cuda":
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
    print(json.dumps(result))


if __name__ == "__main__":
    main()
