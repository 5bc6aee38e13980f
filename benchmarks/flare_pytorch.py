#!/usr/bin/env python3
"""FLARE forward in PyTorch eager on the CPU, given a fair chance: the reference model of
share/python/surrogate_ref run in chunks of points (the encode softmax streamed with a running maximum,
as our library does), no autograd, glibc's allocator kept from unmapping large blocks (set by
flare_cpu_vs_pytorch.py); ATen picks its kernels for the CPU it runs on. One configuration per process;
prints one JSON line.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 \\
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 benchmarks/flare_pytorch.py --points 262144
"""
import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "share" / "python"))
from surrogate_ref.flare import FLAREModel  # noqa: E402


def elasticity_config(latents, channels, heads, blocks):
    return dict(in_dim=2, out_dim=1, channel_dim=channels, num_blocks=blocks, num_heads=heads, num_latents=latents,
                act="gelu", rmsnorm=0, out_proj_norm=1, qk_norm=0, attn_scale=1.0, num_layers_in_out_proj=2,
                in_proj_hidden_dim=channels, out_proj_hidden_dim=channels, num_layers_k_proj=3,
                k_proj_hidden_dim=channels, num_layers_v_proj=3, v_proj_hidden_dim=channels, num_layers_ffn=3,
                ffn_hidden_dim=channels, key_layout="current")


def randomize(model, seed=42):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "latent_q" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.7)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 1.2 / p.shape[1] ** 0.5)
            else:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))


def chunked_forward(model, x, chunk):
    """x: (N, in_dim) of one sample. Same result as model(x[None])[0], streamed over chunks of points."""
    cfg = model.config
    H, M, C = cfg["num_heads"], cfg["num_latents"], cfg["channel_dim"]
    E = C // H
    N = x.shape[0]
    chunks = [(s, min(s + chunk, N)) for s in range(0, N, chunk)]
    h = torch.empty(N, C)
    for s, e in chunks:
        h[s:e] = model.in_proj(x[s:e])
    keys = torch.empty(N, C)
    for block in model.blocks:
        att = block.att
        norm1, norm2 = getattr(block, block._n1), getattr(block, block._n2)
        q = att.latent_q.reshape(H, M, E)
        if att.qk_norm:
            q = att.q_norm(q)
        # pass 1: keys (kept) and the streamed encode softmax over all points
        run_max = torch.full((H, M, 1), -float("inf"))
        total = torch.zeros(H, M, 1)
        acc = torch.zeros(H, M, E)
        for s, e in chunks:
            t = norm1(h[s:e])
            k = att.k_proj(t)
            keys[s:e] = k
            k = k.reshape(e - s, H, E).transpose(0, 1)
            if att.qk_norm:
                k = att.k_norm(k)
            v = att.v_proj(t).reshape(e - s, H, E).transpose(0, 1)
            logits = torch.matmul(q, k.transpose(1, 2)) * att.attn_scale  # (H, M, n)
            new_max = torch.maximum(run_max, logits.amax(dim=2, keepdim=True))
            scale = torch.exp(run_max - new_max)
            w = torch.exp(logits - new_max)
            total = total * scale + w.sum(dim=2, keepdim=True)
            acc = acc * scale + torch.matmul(w, v)
            run_max = new_max
        z = acc / total
        # pass 2: decode, out_proj, feed-forward
        for s, e in chunks:
            k = keys[s:e].reshape(e - s, H, E).transpose(0, 1)
            if att.qk_norm:
                k = att.k_norm(k)
            w = torch.softmax(torch.matmul(k, q.transpose(1, 2)) * att.attn_scale, dim=2)  # (H, n, M)
            y = torch.matmul(w, z).transpose(0, 1).reshape(e - s, C)
            hc = h[s:e] + att.out_proj(y)
            h[s:e] = hc + block.mlp(norm2(hc))
    out = torch.empty(N, cfg["out_dim"])
    for s, e in chunks:
        out[s:e] = model.out_proj(h[s:e])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=262144)
    ap.add_argument("--latents", type=int, default=64)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="compare the chunked forward with model(x) on 4096 points")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = FLAREModel(elasticity_config(args.latents, args.channels, args.heads, args.blocks)).eval()
    randomize(model)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        if args.check:
            xs = torch.rand(4096, 2, generator=gen)
            diff = (chunked_forward(model, xs, 1000) - model(xs[None])[0]).abs().max().item()
            print(json.dumps({"check_max_abs_diff": diff}))
        x = torch.rand(args.points, 2, generator=gen)
        times = []
        for r in range(args.repeats + 1):
            t0 = time.perf_counter()
            chunked_forward(model, x, args.chunk)
            if r > 0:
                times.append(time.perf_counter() - t0)
    times.sort()
    print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "points": args.points, "latents": args.latents,
                      "threads": args.threads, "median_s": times[len(times) // 2], "min_s": times[0],
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))


if __name__ == "__main__":
    main()
