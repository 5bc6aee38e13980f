#!/usr/bin/env python3
"""Erwin forward on a GPU: surrogate's device forward (erwin_gpu_bench) next to PyTorch on the same GPU,
same weights and inputs (the ShapeNet-Car configuration and random data of benchmarks/erwin_cpu_vs_pytorch.py:
one sample of N points in the unit cube, normal features, kNN 8 graph with self loops built once by the
driver and given to both), outputs compared after the timing. Where it has run: share/docs/cuda-results.md
(its PyTorch side also runs on the CPU: --device cpu --skip-surrogate).

    VENV/bin/python benchmarks/gpu/erwin_gpu_vs_pytorch.py --build build --official DIR \\
        [--sizes 16384 65536 262144 1048576] [--repeats 5] [--device cuda]

surrogate columns (milliseconds): `device` = CUDA-event time of a forward on the kept geometry (features
upload, the network, result download); `wall` = its wall time; `full` = wall time of the ball-tree build
(its nodes selected on the device, as a plan built for the device does) + geometry upload + forward, which
is what the official forward does in every call (it builds its trees inside); `tree s` = the host's trees,
`dev tree ms` = the same trees with the device's selections, `geom ms` = wall time of the geometry upload
(the slots' positions and edges uploaded, the geometry computed on the device). PyTorch: wall time of model(x, pos, batch, edge_index) with torch.cuda.synchronize()
around it, TF32 off (FP32 everywhere), best of --repeats after a warm-up. Speed-up = PyTorch / full.
PyTorch side: the official ErwinTransformer when --official names a directory holding erwin_official.py
or erwin.py (torch 2.x with balltree-erwin), else share/python/surrogate_ref/erwin.py (trees built on the
CPU, then moved).
"""
import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "share" / "python"))
sys.path.insert(0, str(HERE.parent))
import erwin_cpu_vs_pytorch as cpu_bench  # noqa: E402  (CONFIG, KNN, write_model)
import side_by_side as sbs  # noqa: E402
from surrogate_ref.erwin import ErwinModel, expected_state_shapes  # noqa: E402


def pytorch_forward(official_dir, state, device):
    state = {k: v.to(device) for k, v in state.items()}
    if official_dir:
        for name in ("erwin_official.py", "erwin.py"):
            path = Path(official_dir) / name
            if path.exists():
                spec = importlib.util.spec_from_file_location("erwin_official_module", path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
                break
        else:
            sys.exit(f"no erwin_official.py / erwin.py in {official_dir}")
        model = module.ErwinTransformer(**cpu_bench.CONFIG).eval().to(device)
        model.load_state_dict(state, strict=False)  # num_batches_tracked buffers are not in `state`
        return lambda x, p, b, e: model(x, p, b, edge_index=e), "official ErwinTransformer"
    from balltree import build_balltree_with_rotations
    model = ErwinModel(dict(cpu_bench.CONFIG, variant="erwin"))
    model.load_official_state_dict({k: v.cpu() for k, v in state.items()})
    model = model.to(device)
    c = cpu_bench.CONFIG

    def run(x, p, b, e):
        idx, mask, rot = build_balltree_with_rotations(p.cpu(), b.cpu(), c["strides"], c["ball_sizes"], c["rotate"])
        return model(x, p, e, idx.to(device), mask.to(device), [r.to(device) for r in rot])
    return run, "surrogate_ref/erwin.py"


def knn_edges(pos, k):
    """kNN graph with self loops (each point and its k - 1 nearest others as sources), 2 x E, receivers
    grouped; only for --skip-surrogate (otherwise the driver's graph is used)."""
    p = torch.from_numpy(pos)
    src, dst = [], []
    for i0 in range(0, len(pos), 4096):
        nearest = torch.cdist(p[i0:i0 + 4096], p).topk(k, largest=False).indices
        src.append(nearest.reshape(-1))
        dst.append(torch.arange(i0, i0 + nearest.shape[0]).repeat_interleave(k))
    return torch.stack([torch.cat(src), torch.cat(dst)]).numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(HERE.parent.parent / "build"))
    ap.add_argument("--sizes", type=int, nargs="+", default=[16384, 65536, 262144])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="PyTorch device (cuda, cuda:N, or cpu to check the script)")
    ap.add_argument("--cuda-device", type=int, default=0, help="surrogate's device index")
    ap.add_argument("--official", help="directory holding the official erwin_official.py / erwin.py")
    ap.add_argument("--skip-surrogate", action="store_true", help="run only the PyTorch side")
    ap.add_argument("--tolerance", type=float, default=1e-3)
    ap.add_argument("--min-agree", type=float, default=1.0)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    bench = Path(args.build) / "benchmarks" / "gpu" / "erwin_gpu_bench"
    if not args.skip_surrogate and not bench.exists():
        sys.exit(f"{bench} not found: a CUDA build with -DSURROGATE_BUILD_BENCHMARKS=ON")
    rng = np.random.default_rng(0)
    state = sbs.random_state(expected_state_shapes(dict(cpu_bench.CONFIG, variant="erwin")), rng)
    forward, label = pytorch_forward(args.official, state, args.device)
    print(sbs.machine.describe(torch) + (f"; GPU {torch.cuda.get_device_name(args.cuda_device)}"
                                         if torch.cuda.is_available() else "; no CUDA device visible to PyTorch"))
    print(f"Erwin forward (ShapeNet-Car config), one sample, kNN {cpu_bench.KNN}; PyTorch: {label} "
          f"(torch {torch.__version__}, {args.device}, TF32 off); best of {args.repeats} after a warm-up")
    print(f"{'N':>8} | {'device ms':>9} {'wall ms':>8} {'full ms':>8} {'tree s':>7} {'dev tree ms':>11} {'geom ms':>8} | {'PyTorch ms':>10} | "
          f"{'speed-up':>8} | {'max|diff|':>9} {'max|y|':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / "erwin.h5"
        cpu_bench.write_model(model_path, state)
        for n in args.sizes:
            data = Path(tmp) / f"n{n}"
            pos = rng.random((n, 3)).astype(np.float32)
            feat = rng.standard_normal((n, 64)).astype(np.float32)
            sbs.write_inputs(data, pos, feat)
            ours = None
            if not args.skip_surrogate:
                ours = sbs.run_json([bench, model_path, data, args.repeats, cpu_bench.KNN, args.cuda_device])
                edges = np.fromfile(data / "edges.i64", dtype=np.int64).reshape(2, -1)
            else:
                edges = knn_edges(pos, cpu_bench.KNN)
            dev = args.device
            x, p = torch.from_numpy(feat).to(dev), torch.from_numpy(pos).to(dev)
            b, e = torch.zeros(n, dtype=torch.long, device=dev), torch.from_numpy(edges).to(dev)
            y, best = sbs.time_on_device(lambda: forward(x, p, b, e), args.repeats, dev)
            y = y.detach().cpu().numpy()
            left = f"{n:>8} | "
            if ours:
                left += (f"{ours['device_ms']:>9.2f} {ours['wall_ms']:>8.2f} {ours['full_wall_ms']:>8.2f} {ours['tree_s']:>7.3f} "
                         f"{ours['device_tree_ms']:>11.2f} {ours['geometry_wall_ms']:>8.2f} | ")
                check = sbs.check_agreement(sbs.read_output(data, y.shape), y, f"N {n}", args.tolerance, args.min_agree)
                diff, scale = check[0], check[1]
                print(left + f"{1e3 * best:>10.2f} | {1e3 * best / ours['full_wall_ms']:>8.2f} | {diff:>9.2e} {scale:>8.3g}",
                      flush=True)
            else:
                print(left + f"{'-':>9} {'-':>8} {'-':>8} {'-':>7} {'-':>11} {'-':>8} | {1e3 * best:>10.2f} | {'-':>8} | {'-':>9} "
                      f"{float(np.abs(y).max()):>8.3g}", flush=True)


if __name__ == "__main__":
    main()
